"""Issue 11: no argument crashes the interpreter or escapes as a PanicException.

Every public function is fed wrong types and extreme numbers; each must raise an
ordinary exception (TypeError, OverflowError, or a leafid error that is also a
ValueError) with the limits the core defines, the same as in Rust and Node.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

import leafid

EXTREME_FLOATS = [-1.0, float("nan"), float("inf"), -float("inf"), 1e19, 1e308]
EXTREME_INTS = [-1, 2**31, 2**62, 2**63, 2**64, -(2**63) - 1]
WRONG_TYPES: list[Any] = [None, "1", b"1", [], {}, object(), 1.5]


def ordinary(fn: Callable[[], Any]) -> BaseException | None:
    """Runs `fn`; returns the exception it raised, which must be an Exception."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the point: nothing beyond Exception
        assert type(e).__name__ != "PanicException", repr(e)
        return e
    return None


def test_segment_options_refuse_bad_numbers_and_treat_huge_waits_as_no_limit(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/ids.db"
    for v in [-1.0, float("nan"), -float("inf")]:
        e = ordinary(lambda: leafid.SegmentGenerator(url, wait_timeout=v))
        assert isinstance(e, leafid.InvalidConfig) and isinstance(e, ValueError), (v, e)
        e = ordinary(lambda: leafid.SegmentGenerator(url, refresh_interval=v))
        assert isinstance(e, leafid.InvalidConfig), (v, e)
    # "Wait forever" is a natural thing to ask for: accepted, no panic at the first wait.
    for v in [float("inf"), 1e19, 1e308]:
        with leafid.SegmentGenerator(url, wait_timeout=v, create_table=True) as gen:
            try:
                gen.create_tag("t", start=1, step=10, description="")
            except leafid.TagExists:
                pass
            gen.refresh()
            assert gen.next_id("t") > 0
    for v in [float("inf"), 1e19]:
        e = ordinary(lambda: leafid.SegmentGenerator(url, refresh_interval=v))
        assert isinstance(e, leafid.InvalidConfig), (v, e)


def test_segment_calls_refuse_wrong_types_and_huge_batches(tmp_path: Path) -> None:
    with leafid.SegmentGenerator(f"sqlite://{tmp_path}/ids.db", create_table=True) as gen:
        gen.create_tag("t", start=1, step=10, description="")
        gen.refresh()
        handle = gen.tag("t")
        for bad in WRONG_TYPES:
            if not isinstance(bad, str):
                assert isinstance(ordinary(lambda: gen.next_id(bad)), TypeError), bad
            if not isinstance(bad, float):
                e = ordinary(lambda: gen.next_ids("t", bad))
                assert isinstance(e, TypeError), (bad, e)
        for n in EXTREME_INTS:
            for call in (lambda: gen.next_ids("t", n), lambda: handle.next_ids(n), lambda: handle.next_ids_array(n)):
                e = ordinary(call)
                assert isinstance(e, (OverflowError, leafid.InvalidConfig)), (n, e)
        for start, step in [(2**63 - 6, 10), (1, 0), (1, -5), (2**64, 10)]:
            e = ordinary(lambda: gen.create_tag("u", start=start, step=step, description=""))
            assert isinstance(e, (OverflowError, ValueError)), (start, step, e)


def test_snowflake_options_refuse_bad_numbers(tmp_path: Path) -> None:
    registry = "fixed:33"
    for key in ["heartbeat", "lookahead", "max_backward", "max_skew"]:
        for v in EXTREME_FLOATS:
            e = ordinary(lambda: leafid.SnowflakeGenerator(registry, cache_dir=tmp_path, **{key: v}))
            assert isinstance(e, leafid.InvalidConfig), (key, v, e)
    for bad in [None, b"1", [], object()]:
        e = ordinary(lambda: leafid.SnowflakeGenerator(bad, cache_dir=tmp_path))
        assert isinstance(e, TypeError), (bad, e)
    for bad in ["fixed:-1", "fixed:99999999999", "fixed:1024", "zookeeper://127.0.0.1:1/a?port=1-2", "nope"]:
        e = ordinary(lambda: leafid.SnowflakeGenerator(bad, cache_dir=tmp_path))
        assert isinstance(e, ValueError), (bad, e)


def test_snowflake_calls_and_decode_refuse_wrong_types_and_huge_batches(tmp_path: Path) -> None:
    with leafid.SnowflakeGenerator("fixed:34", cache_dir=tmp_path) as gen:
        for n in EXTREME_INTS:
            for call in (lambda: gen.next_ids(n), lambda: gen.next_ids_array(n)):
                e = ordinary(call)
                assert isinstance(e, (OverflowError, leafid.InvalidConfig)), (n, e)
        for bad in WRONG_TYPES:
            if not isinstance(bad, float):
                assert isinstance(ordinary(lambda: gen.next_ids(bad)), TypeError), bad
    for bad in [-1, 2**63, 2**64]:
        e = ordinary(lambda: leafid.decode(bad))
        assert isinstance(e, (OverflowError, ValueError)), (bad, e)
        assert str(e), "an error message says something"
    for bad in WRONG_TYPES:
        assert isinstance(ordinary(lambda: leafid.decode(bad)), TypeError), bad


def test_layout_cipher_and_base62_refuse_bad_input() -> None:
    for bits in [(0, 0, 0), (41, 10, 11), (64, 0, 0), (-1, 10, 12), (2**40, 10, 12)]:
        e = ordinary(lambda: leafid.Layout(*bits))
        assert isinstance(e, (OverflowError, ValueError)), (bits, e)
    for key in [b"", b"x" * 15, b"x" * 33, os.urandom(17)]:
        assert isinstance(ordinary(lambda: leafid.IdCipher(key)), ValueError), key
    c = leafid.IdCipher(b"k" * 16)
    for bad in [0, -1, 2**63, 2**64]:
        assert isinstance(ordinary(lambda: c.encrypt(bad)), (OverflowError, ValueError)), bad
    for s in ["", "0" * 12, "!" * 11, "zzzzzzzzzzz"]:
        assert isinstance(ordinary(lambda: leafid.decode_base62(s)), ValueError), s
    for bad in WRONG_TYPES:
        if not isinstance(bad, str):
            assert isinstance(ordinary(lambda: leafid.decode_base62(bad)), TypeError), bad


@pytest.mark.parametrize("n", [leafid.MAX_BATCH if hasattr(leafid, "MAX_BATCH") else 1 << 20])
def test_the_batch_limit_is_the_cores(tmp_path: Path, n: int) -> None:
    with leafid.SnowflakeGenerator("fixed:35", cache_dir=tmp_path) as gen:
        assert len(gen.next_ids(n)) == n
        e = ordinary(lambda: gen.next_ids(n + 1))
        assert isinstance(e, leafid.InvalidConfig), e


def test_js_safe_segment_tags_stop_below_two_to_the_53() -> None:
    with leafid.SegmentGenerator("memory:", js_safe=True) as gen:
        gen.create_tag("big", start=2**53 - 2, step=10, description="")
        assert [gen.next_id("big"), gen.next_id("big")] == [2**53 - 2, 2**53 - 1]
        with pytest.raises(leafid.InvalidConfig, match="2\\^53"):
            gen.next_id("big")
