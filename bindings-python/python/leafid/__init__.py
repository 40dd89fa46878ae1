"""leafid: Meituan Leaf's segment and snowflake ids, issued in-process.

>>> import leafid
>>> gen = leafid.SegmentGenerator("sqlite:///tmp/ids.db")   # doctest: +SKIP
>>> order = gen.tag("order")                                # doctest: +SKIP
>>> next(order)                                             # doctest: +SKIP
1
"""

from __future__ import annotations

import atexit as _atexit
import datetime as _dt
import os as _os

# Imported here, in the importing thread, and not first by the core's log-forwarding
# thread: `threading` takes whichever thread first imports it for the main thread, and
# waits for that thread at exit.
import logging as _logging  # noqa: F401
import threading as _threading  # noqa: F401
# Under private names: `dir(leafid)` holds only leafid's own names (`__all__`).
from typing import Any as _Any
from typing import NamedTuple as _NamedTuple
from typing import Optional as _Optional

from ._errors import (
    ClockBehindRegistry,
    ClockError,
    ClockMovedBackwards,
    ClockSkew,
    Closed,
    ConfigError,
    InvalidConfig,
    InvalidTag,
    InvalidUrl,
    Io,
    LeafError,
    LeaseLost,
    Malformed,
    RegistryUnavailable,
    SegmentsExhausted,
    StoreUnavailable,
    AccessDenied,
    TableMissing,
    TagExists,
    TagNotFound,
    TimestampOverflow,
    UnavailableError,
    WorkerIdExhausted,
    WorkerIdInUse,
    WorkerIdOutOfRange,
)
from ._leafid import (
    LEAF_EPOCH_MS,
    IdCipher,
    Layout,
    SegmentGenerator,
    SnowflakeGenerator,
    TagHandle,
    TagStats,
    decode_base62,
    encode_base62,
    metrics_text,
)
from ._leafid import __version__ as __version__
from ._leafid import _after_fork_in_child, _at_exit
from ._leafid import decode as _decode

# The core logs and settles async calls from its own threads: none may enter Python
# once the interpreter finalizes (bindings-python/src/exit.rs).
_atexit.register(_at_exit)
# A forked child does not wait at exit for its parent's threads (no fork on Windows).
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)


def __getattr__(name: str) -> _Any:
    # `Connecting` lives with the asyncio glue, imported on first use: `import leafid`
    # does not pay for importing asyncio.
    if name == "Connecting":
        from ._aio import Connecting

        return Connecting
    raise AttributeError(f"module 'leafid' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The module's names and `Connecting`, which `__getattr__` imports on first use.
    return sorted({*globals(), "Connecting"})


class DecodedId(_NamedTuple):
    """The parts of a snowflake id."""

    timestamp_ms: int
    worker_id: int
    sequence: int

    @property
    def datetime(self) -> _dt.datetime:
        """The timestamp as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.timestamp_ms / 1000, tz=_dt.timezone.utc)


def decode(id: int, layout: _Optional[Layout] = None) -> DecodedId:
    """Splits a snowflake id into timestamp, worker id and sequence (Leaf's layout by
    default)."""
    return DecodedId(*_decode(id, layout))


__all__ = [
    "LEAF_EPOCH_MS",
    "ClockBehindRegistry",
    "ClockError",
    "ClockMovedBackwards",
    "ClockSkew",
    "Closed",
    "ConfigError",
    "Connecting",
    "DecodedId",
    "IdCipher",
    "InvalidConfig",
    "InvalidTag",
    "InvalidUrl",
    "Io",
    "Layout",
    "LeafError",
    "LeaseLost",
    "Malformed",
    "RegistryUnavailable",
    "SegmentGenerator",
    "SegmentsExhausted",
    "SnowflakeGenerator",
    "StoreUnavailable",
    "AccessDenied",
    "TableMissing",
    "TagExists",
    "TagHandle",
    "TagNotFound",
    "TagStats",
    "TimestampOverflow",
    "UnavailableError",
    "WorkerIdExhausted",
    "WorkerIdInUse",
    "WorkerIdOutOfRange",
    "decode",
    "decode_base62",
    "encode_base62",
    "metrics_text",
]

# `from __future__ import annotations` binds the name `annotations` here; the
# compiler flag it set stays.
del annotations
