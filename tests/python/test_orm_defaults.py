"""Ids as ORM defaults and in JSON (issue 31): a synchronous default through a bulk
insert, and ids as strings for JS clients in pydantic / FastAPI (docs/faq.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Annotated

import pydantic

import leafid


def test_a_100_000_row_bulk_insert_through_a_synchronous_default_never_throws(
    sqlite_url: str, tmp_path: Path
) -> None:
    # The recipe: `default=ids.next_id` (SQLAlchemy `Column(default=…)`, Django
    # `default=`). Python's next_id waits for a refill (GIL released), so a burst
    # that outruns the background preload waits instead of failing. Segments of 10
    # ids, on a tag never used before: the burst outruns the first loads.
    with leafid.SegmentGenerator(sqlite_url) as segments:
        segments.create_tag("order", start=1, step=10)
        ids = segments.tag("order")
        db = sqlite3.connect(tmp_path / "app.db")
        db.execute("create table orders (id integer primary key, total integer)")
        # What the ORM does per row: calls the default, then inserts.
        db.executemany(
            "insert into orders (id, total) values (?, ?)",
            ((ids.next_id(), total) for total in range(100_000)),
        )
        db.commit()
        ((count, distinct),) = db.execute("select count(*), count(distinct id) from orders")
        assert count == distinct == 100_000
        rows = [row[0] for row in db.execute("select id from orders order by total")]
        assert rows == sorted(rows)


def test_pydantic_serializes_ids_as_strings_in_json_and_ints_in_python(sqlite_url: str) -> None:
    # The recipe of docs/faq.md, as pasted.
    Id = Annotated[int, pydantic.PlainSerializer(str, when_used="json")]

    class Order(pydantic.BaseModel):
        id: Id
        total: int

    with leafid.SegmentGenerator(sqlite_url) as segments:
        segments.create_tag("order", start=2**62, step=10)
        order = Order(id=segments.next_id("order"), total=3)
    assert order.model_dump_json() == f'{{"id":"{2**62}","total":3}}'
    assert order.model_dump() == {"id": 2**62, "total": 3}
    # A client's string comes back as the int.
    assert Order.model_validate_json(f'{{"id":"{2**62}","total":3}}').id == 2**62
