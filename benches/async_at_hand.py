"""What an `await` of an async twin costs when the id is at hand (issue 31), against the
synchronous call and a bare `await` of a done future, in one coroutine and one run:

    pip install .
    python benches/async_at_hand.py

Each figure: ns per call over a loop of N calls, best of 5 repeats. Markdown to stdout.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable

import leafid

N = 100_000
REPEATS = 5


async def per_await(make: Callable[[], Awaitable[Any]]) -> float:
    """ns per `await make()`, best of REPEATS loops of N."""
    best = float("inf")
    for _ in range(REPEATS):
        t = time.perf_counter_ns()
        for _ in range(N):
            await make()
        best = min(best, (time.perf_counter_ns() - t) / N)
    return best


def per_call(fn: Callable[[], Any]) -> float:
    """ns per `fn()`, best of REPEATS loops of N."""
    best = float("inf")
    for _ in range(REPEATS):
        t = time.perf_counter_ns()
        for _ in range(N):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / N)
    return best


async def main(tmp: str) -> list[tuple[str, float]]:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    done.set_result(1)

    def fresh_done() -> "asyncio.Future[int]":
        f = loop.create_future()
        f.set_result(1)
        return f

    rows = [
        ("floor: `await` of one done future", await per_await(lambda: done)),
        ("`create_future()` + `set_result` + `await`", await per_await(fresh_done)),
    ]
    with leafid.SegmentGenerator("memory:") as gen:
        gen.create_tag("bench", step=10_000_000)
        handle = gen.tag("bench")
        handle.next_id()
        rows += [
            ("segment `handle.next_id()` (sync)", per_call(handle.next_id)),
            ("segment `await handle.next_id_async()`", await per_await(handle.next_id_async)),
            ("segment `await gen.next_id_async(tag)`", await per_await(lambda: gen.next_id_async("bench"))),
        ]
    with leafid.SnowflakeGenerator("fixed:733", cache_dir=tmp) as sf:
        sf.next_id()
        rows += [
            ("snowflake `sf.next_id()` (sync)", per_call(sf.next_id)),
            ("snowflake `await sf.next_id_async()`", await per_await(sf.next_id_async)),
        ]
    return rows


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(main(tmp))
    floor = rows[0][1]
    print(f"CPython {sys.version.split()[0]}, N = {N}, best of {REPEATS}\n")
    print("| what | per call | vs floor |\n|---|---|---|")
    for name, ns in rows:
        print(f"| {name} | {ns / 1000:.3f} µs | {ns / floor:.1f}× |")
