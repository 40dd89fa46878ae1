"""The Python examples of README.md, checked with `mypy --strict` and run by
test_readme.py."""

from __future__ import annotations

import os
import sys
import tempfile

import leafid


def segment_example(url: str) -> list[int]:
    with leafid.SegmentGenerator(url, create_table=True) as gen:
        try:
            gen.create_tag("order", start=1, step=1000, description="order ids")
        except leafid.TagExists:
            pass
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


if __name__ == "__main__":
    tmp = tempfile.mkdtemp()
    url = os.environ.get("LEAFID_EXAMPLE_URL", f"sqlite://{tmp}/ids.db")
    print(segment_example(url)[:3], snowflake_example(os.path.join(tmp, "workers")))
    sys.exit(0)
