"""The Python examples of README.md, checked with `mypy --strict` and run by
test_readme.py."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from typing import Callable

import leafid


def segment_example(url: str) -> list[int]:
    with leafid.SegmentGenerator(url, create_table=True) as gen:
        gen.create_tag("order", start=1, step=1000, description="order ids", exist_ok=True)
        order = gen.tag("order")  # a handle: no lookup per call
        first: int = next(order)
        batch: list[int] = gen.next_ids("order", 100)
        try:
            gen.next_id("no-such-tag")
        except KeyError as e:  # leafid.TagNotFound is also a KeyError
            print(e)
        return [first, *batch]


def snowflake_example(lock_dir: str) -> int:
    with leafid.SnowflakeGenerator(f"local://{lock_dir}") as sf:
        id_: int = sf.next_id()
        parts = leafid.decode(id_)
        print(parts.worker_id, parts.sequence, parts.datetime.isoformat())
        return id_


async def async_example(url: str, cache_dir: str) -> list[int]:
    async with await leafid.SegmentGenerator.connect(url, tags=["order"]) as gen:
        await gen.create_tag_async("invoice", start=1, step=1000, exist_ok=True)
        order_id: int = await gen.next_id_async("order")
        handle_id: int = await gen.tag("invoice").next_id_async()
    async with await leafid.SnowflakeGenerator.connect(f"local://{cache_dir}/async-workers", cache_dir=cache_dir) as sf:
        ids: list[int] = await sf.next_ids_async(10)
    return [order_id, handle_id, *ids]


def metrics_wsgi(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")])
    return [leafid.metrics_text().encode()]


if __name__ == "__main__":
    tmp = tempfile.mkdtemp()
    url = os.environ.get("LEAFID_EXAMPLE_URL", f"sqlite://{tmp}/ids.db")
    print(segment_example(url)[:3], snowflake_example(os.path.join(tmp, "workers")))
    print(asyncio.run(async_example(url, tmp))[:3])
    assert metrics_wsgi({}, lambda status, headers: None)[0].endswith(b"# EOF\n")
    sys.exit(0)
