"""Issue 21: ``async with X.connect(…) as gen:`` without a second ``await`` (as asyncpg
and httpx read), while ``gen = await X.connect(…)`` keeps working; the generator is
closed at the end of the block, on success and on an exception."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

import leafid

HUNG = 60.0  # a bound for "it returns", never a speed measurement


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(coro(), HUNG))


def test_segment_connect_is_an_async_context_manager(tmp_path: Path) -> None:
    async def main() -> leafid.SegmentGenerator:
        async with leafid.SegmentGenerator.connect(f"sqlite://{tmp_path}/ids.db") as gen:
            assert isinstance(gen, leafid.SegmentGenerator)
            await gen.create_tag_async("a", start=7)
            assert await gen.next_id_async("a") == 7
        return gen

    gen = run(main)
    with pytest.raises(leafid.Closed):
        gen.next_id("a")


def test_snowflake_connect_is_an_async_context_manager(tmp_path: Path) -> None:
    async def main() -> leafid.SnowflakeGenerator:
        async with leafid.SnowflakeGenerator.connect(
                f"local://{tmp_path}/workers", cache_dir=tmp_path) as sf:
            assert isinstance(sf, leafid.SnowflakeGenerator)
            assert await sf.next_id_async() > 0
        return sf

    sf = run(main)
    with pytest.raises(leafid.Closed):
        sf.next_id()


def test_the_block_closes_the_generator_when_it_raises(tmp_path: Path) -> None:
    held: list[leafid.SegmentGenerator] = []

    async def main() -> None:
        async with leafid.SegmentGenerator.connect("memory:") as gen:
            held.append(gen)
            raise LookupError("from the block")

    with pytest.raises(LookupError, match="from the block"):  # not swallowed
        run(main)
    with pytest.raises(leafid.Closed):
        held[0].next_id("a")


def test_await_connect_still_gives_the_generator_and_it_is_a_future(tmp_path: Path) -> None:
    async def main() -> None:
        connecting = leafid.SegmentGenerator.connect("memory:")
        assert isinstance(connecting, asyncio.Future) and isinstance(connecting, leafid.Connecting)
        gen = await connecting
        assert isinstance(gen, leafid.SegmentGenerator)
        async with await leafid.SegmentGenerator.connect("memory:") as again:  # the old form
            assert isinstance(again, leafid.SegmentGenerator)
        gen.close()

    run(main)


def test_a_failed_connect_raises_from_async_with() -> None:
    async def main() -> None:
        async with leafid.SegmentGenerator.connect("mysql://root:x@127.0.0.1:1/leafid"):
            pytest.fail("entered the block without a generator")

    with pytest.raises(leafid.StoreUnavailable):
        run(main)
