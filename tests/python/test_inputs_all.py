"""Issue 11, Python: every argument of every public function and method, fed wrong types
and extreme numbers, raises the documented exception (``TypeError``, ``OverflowError``,
or the leafid error, a ``ValueError``, the core's limits define) and never a
``PanicException``. Table-driven; a completeness test fails when a public name has no
row, so a new function cannot skip the sweep."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import pytest

import leafid

NAN, INF = float("nan"), float("inf")
NOT_STR: list[Any] = [None, b"t", 1, 1.5, {}, [], object()]
NOT_INT: list[Any] = [None, "1", b"1", 1.5, NAN, {}, [], object()]
NOT_FLOAT: list[Any] = [None, "1", b"1", {}, [], object()]
NOT_BOOL: list[Any] = [None, "1", 1.5, [], object()]
HUGE_INTS = [2**63, 2**64, -(2**63) - 1]


class Kind(NamedTuple):
    """What one parameter refuses, and how."""

    bad: list[tuple[Any, tuple[type[BaseException], ...]]]


def kind(*groups: tuple[list[Any], tuple[type[BaseException], ...]]) -> Kind:
    return Kind([(v, exc) for values, exc in groups for v in values])


TYPE = (TypeError,)
OVER = (OverflowError,)
CONFIG = (leafid.InvalidConfig,)
STR = kind((NOT_STR, TYPE))
COUNT = kind((NOT_INT, TYPE), ([-1, 2**64, -(2**63) - 1], OVER), ([2**63], OVER + CONFIG), ([2**20 + 1, 2**40], CONFIG))
# Ids per thread chunk: 0..=4096, the core's limit.
CHUNK = kind((NOT_INT, TYPE), ([-1, 2**64], OVER), ([4097, 2**63], CONFIG))
I64 = kind((NOT_INT, TYPE), (HUGE_INTS, OVER))
STEP = kind((NOT_INT, TYPE), (HUGE_INTS, OVER), ([0, -5], CONFIG))
SECONDS = kind((NOT_FLOAT, TYPE), ([NAN, -1.0, -INF, -1e-9], CONFIG))
OPT_SECONDS = kind(([b"1", "1", {}, object()], TYPE), ([NAN, -1.0, -INF], CONFIG))
BOUNDED_SECONDS = kind((NOT_FLOAT, TYPE), ([NAN, -1.0, INF, 1e19], CONFIG))
OPT_BOUNDED_SECONDS = kind(([b"1", "1", {}, object()], TYPE), ([NAN, -1.0, INF, 1e19], CONFIG))
BOOL = kind((NOT_BOOL, TYPE))
BITS = kind((NOT_INT, TYPE), ([-1, 256, 2**64], OVER), ([64, 200], (ValueError,)))
ID = kind(([None, "1", b"1", 1.5, [], object()], TYPE), ([-1], (ValueError,)), ([2**63, 2**64], (OverflowError, ValueError)))
CIPHER_ID = kind(([None, "1", 1.5, object()], TYPE), ([0, -1, 2**63, 2**64, -(2**63) - 1], (ValueError,)))
IDS = kind(([None, 1, object()], TYPE), ([[1, "x"]], TYPE), ([[0], [2**64]], (ValueError,)))
KEY = kind(([None, 1, "k" * 16, object()], TYPE), ([b"", b"k" * 15, b"k" * 33], (ValueError,)))
TAGS = kind((["abc", [1], 1, object()], TYPE))
PATH = kind(([1, 1.5, object()], TYPE))
LAYOUT = kind((["x", 1, object()], TYPE))
REGISTRY = kind((NOT_STR, TYPE), (["nope", "fixed:-1", "fixed:99999999999", "fixed:1024"], (ValueError,)))
URL = kind((NOT_STR, TYPE), (["nope://x", "mysql://h:99999/db", ""], (ValueError,)))
BASE62 = kind((NOT_STR, TYPE), (["", "0" * 12, "!" * 11, "zzzzzzzzzzz"], (ValueError,)))
# No parameter: an unexpected argument is a TypeError.
NONE = kind(([1], TYPE))


class Row(NamedTuple):
    name: str  # as users spell it: "SegmentGenerator.next_ids"
    param: str
    kind: Kind
    call: Callable[[dict[str, Any], Any], Any]  # (objects, bad value) -> result


def ctor(cls: type, name: str) -> Callable[..., Any]:
    """The constructor (the class itself) or a named static method."""
    return cls if name == "__new__" else getattr(cls, name)


def rows() -> list[Row]:
    S, H, F = "seg", "handle", "sf"
    return [
        # SegmentGenerator: constructor and connect share the keyword set.
        *[
            Row(f"SegmentGenerator.{c_name}", p, k, (lambda c, p: lambda o, v: ctor(leafid.SegmentGenerator, c)(o["url"], **{p: v}) if p != "url" else ctor(leafid.SegmentGenerator, c)(v))(c_name, p))
            for c_name in ("__new__", "connect")
            for p, k in [("url", URL), ("wait_timeout", SECONDS), ("refresh_interval", BOUNDED_SECONDS),
                         ("create_table", BOOL), ("double_buffer", BOOL), ("max_step", kind((NOT_INT, TYPE), (HUGE_INTS, OVER), ([0, -1, 2**31], CONFIG))),
                         ("js_safe", BOOL), ("thread_chunk", CHUNK), ("tags", TAGS)]
        ],
        Row("SegmentGenerator.next_id", "tag", STR, lambda o, v: o[S].next_id(v)),
        Row("SegmentGenerator.next_id_async", "tag", STR, lambda o, v: o[S].next_id_async(v)),
        Row("SegmentGenerator.next_ids", "tag", STR, lambda o, v: o[S].next_ids(v, 1)),
        Row("SegmentGenerator.next_ids", "n", COUNT, lambda o, v: o[S].next_ids("t", v)),
        Row("SegmentGenerator.next_ids_async", "tag", STR, lambda o, v: o[S].next_ids_async(v, 1)),
        Row("SegmentGenerator.next_ids_async", "n", COUNT, lambda o, v: o[S].next_ids_async("t", v)),
        Row("SegmentGenerator.tag", "tag", STR, lambda o, v: o[S].tag(v)),
        *[
            Row(f"SegmentGenerator.{m}", p, k, (lambda m, p: lambda o, v: getattr(o[S], m)("new", **{p: v}) if p != "tag" else getattr(o[S], m)(v))(m, p))
            for m in ("create_tag", "create_tag_async")
            for p, k in [("tag", STR), ("start", I64), ("step", STEP), ("description", STR)]
        ],
        *[
            Row(f"SegmentGenerator.{m}", "-", NONE, (lambda m: lambda o, v: getattr(o[S], m)(v))(m))
            for m in ("tags", "stats", "create_table", "create_table_async", "refresh", "refresh_async", "close", "aclose")
        ],
        # TagHandle (made by SegmentGenerator.tag only)
        Row("TagHandle.__new__", "-", NONE, lambda o, v: leafid.TagHandle(v)),  # type: ignore[call-arg]
        Row("TagHandle.next_id", "-", NONE, lambda o, v: o[H].next_id(v)),
        Row("TagHandle.next_id_async", "-", NONE, lambda o, v: o[H].next_id_async(v)),
        Row("TagHandle.next_ids", "n", COUNT, lambda o, v: o[H].next_ids(v)),
        Row("TagHandle.next_ids_array", "n", COUNT, lambda o, v: o[H].next_ids_array(v)),
        Row("TagHandle.next_ids_async", "n", COUNT, lambda o, v: o[H].next_ids_async(v)),
        # SnowflakeGenerator
        *[
            Row(f"SnowflakeGenerator.{c_name}", p, k, (lambda c, p: lambda o, v: ctor(leafid.SnowflakeGenerator, c)("fixed:643", cache_dir=o["dir"], **{p: v}) if p != "registry" else ctor(leafid.SnowflakeGenerator, c)(v, cache_dir=o["dir"]))(c_name, p))
            for c_name in ("__new__", "connect")
            for p, k in [("registry", REGISTRY), ("layout", LAYOUT), ("cache_dir", PATH), ("heartbeat", BOUNDED_SECONDS),
                         ("lookahead", OPT_BOUNDED_SECONDS),
                         ("max_backward", BOUNDED_SECONDS), ("startup_wait", SECONDS), ("max_skew", OPT_SECONDS)]
        ],
        Row("SnowflakeGenerator.next_id", "-", NONE, lambda o, v: o[F].next_id(v)),
        Row("SnowflakeGenerator.next_id_async", "-", NONE, lambda o, v: o[F].next_id_async(v)),
        Row("SnowflakeGenerator.next_ids", "n", COUNT, lambda o, v: o[F].next_ids(v)),
        Row("SnowflakeGenerator.next_ids_array", "n", COUNT, lambda o, v: o[F].next_ids_array(v)),
        Row("SnowflakeGenerator.next_ids_async", "n", COUNT, lambda o, v: o[F].next_ids_async(v)),
        Row("SnowflakeGenerator.close", "timeout", OPT_SECONDS, lambda o, v: o[F].close(timeout=v)),
        Row("SnowflakeGenerator.aclose", "-", NONE, lambda o, v: o[F].aclose(v)),
        # Layout, decode, cipher, base62
        *[
            Row("Layout.__new__", p, BITS, (lambda p: lambda o, v: leafid.Layout(**{p: v}))(p))
            for p in ("timestamp_bits", "worker_bits", "sequence_bits")
        ],
        Row("Layout.__new__", "epoch_ms", I64, lambda o, v: leafid.Layout(epoch_ms=v)),
        Row("Layout.js_safe", "-", NONE, lambda o, v: leafid.Layout.js_safe(v)),  # type: ignore[call-arg]
        Row("decode", "id", ID, lambda o, v: leafid.decode(v)),
        Row("decode", "layout", LAYOUT, lambda o, v: leafid.decode(1, v)),
        Row("IdCipher.__new__", "key", KEY, lambda o, v: leafid.IdCipher(v)),
        Row("IdCipher.encrypt", "id", CIPHER_ID, lambda o, v: o["cipher"].encrypt(v)),
        Row("IdCipher.decrypt", "id", CIPHER_ID, lambda o, v: o["cipher"].decrypt(v)),
        Row("IdCipher.encrypt_many", "ids", IDS, lambda o, v: o["cipher"].encrypt_many(v)),
        Row("IdCipher.decrypt_many", "ids", IDS, lambda o, v: o["cipher"].decrypt_many(v)),
        Row("encode_base62", "id", kind(([None, "1", 1.5], TYPE), ([-1, 2**63, 2**64], (ValueError,))), lambda o, v: leafid.encode_base62(v)),
        Row("decode_base62", "s", BASE62, lambda o, v: leafid.decode_base62(v)),
        Row("metrics_text", "-", NONE, lambda o, v: leafid.metrics_text(v)),  # type: ignore[call-arg]
    ]


# Public names that take no input a caller controls, or that are plain Python.
# `Connecting` is made by `connect` only (its rows cover the input).
NO_INPUT = {"LEAF_EPOCH_MS", "DecodedId", "TagStats", "Connecting"}


def public_callables() -> Iterator[str]:
    """Every public function, constructor and method of the module, as users name them."""
    for name in leafid.__all__:
        obj = getattr(leafid, name)
        if name in NO_INPUT or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        if not isinstance(obj, type):
            yield name
            continue
        yield f"{name}.__new__"
        for attr, value in vars(obj).items():
            if not attr.startswith("_") and callable(getattr(obj, attr)) and not isinstance(value, property):
                yield f"{name}.{attr}"


def test_every_public_callable_has_a_row() -> None:
    covered = {r.name for r in rows()}
    missing = sorted(set(public_callables()) - covered)
    assert not missing, f"add rows for: {missing}"


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[dict[str, Any]]:
    url = f"sqlite://{tmp_path}/ids.db"
    with leafid.SegmentGenerator(url) as seg, leafid.SnowflakeGenerator("fixed:642", cache_dir=tmp_path) as sf:
        seg.create_tag("t", start=1, step=10)
        yield {"url": url, "dir": tmp_path, "seg": seg, "handle": seg.tag("t"), "sf": sf, "cipher": leafid.IdCipher(b"k" * 16)}


def test_every_argument_refuses_bad_values_with_the_documented_exception(objects: dict[str, Any]) -> None:
    failures: list[str] = []

    async def check(row: Row, bad: Any, expected: tuple[type[BaseException], ...]) -> None:
        try:
            result = row.call(objects, bad)
            if inspect.isawaitable(result):
                result = await result
        except Exception as e:  # noqa: BLE001 - the point: an ordinary exception
            if not isinstance(e, expected):
                failures.append(f"{row.name}({row.param}={bad!r}): {type(e).__name__}: {e}")
            return
        except BaseException as e:  # PanicException is a BaseException
            failures.append(f"{row.name}({row.param}={bad!r}): {type(e).__name__} (not an Exception): {e}")
            return
        failures.append(f"{row.name}({row.param}={bad!r}) returned {result!r}")

    async def sweep() -> None:
        for row in rows():
            for bad, expected in row.kind.bad:
                await check(row, bad, expected)

    asyncio.run(sweep())
    assert not failures, "\n".join(failures)


def test_huge_waits_mean_no_limit_not_a_crash(objects: dict[str, Any]) -> None:
    for v in [INF, 1e19, 1e308, float(2**64)]:
        with leafid.SegmentGenerator(objects["url"], wait_timeout=v) as gen:
            assert gen.next_id("t") > 0
    with leafid.SnowflakeGenerator("fixed:644", cache_dir=objects["dir"], startup_wait=INF) as sf:
        assert sf.next_id() > 0
        assert sf.close(timeout=1e308) is True
