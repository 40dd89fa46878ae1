"""Type stubs of leafid (the native classes live in ``leafid._leafid``).

The async twins return an ``asyncio.Future`` of the running loop (``RuntimeError``
without one): await it, cancel it, or pass it to ``asyncio.wait``. When the ids are at
hand the future is already done when the call returns (no thread, no trip through the
loop), so cancelling it does nothing; every 64th such future in a row is instead set at
the loop's next turn (still no thread), so that a loop of ``await``s lets the loop run
its other tasks, timers and cancellation. ``connect`` returns a ``Connecting``, such a future
that is also an async context manager."""

import array
import asyncio
import datetime
from os import PathLike
from types import TracebackType
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence, Union, final

from ._aio import Connecting as Connecting
from ._errors import (
    ClockBehindRegistry as ClockBehindRegistry,
    ClockError as ClockError,
    ClockMovedBackwards as ClockMovedBackwards,
    ClockSkew as ClockSkew,
    Closed as Closed,
    ConfigError as ConfigError,
    InvalidConfig as InvalidConfig,
    InvalidTag as InvalidTag,
    InvalidUrl as InvalidUrl,
    Io as Io,
    LeafError as LeafError,
    LeaseLost as LeaseLost,
    Malformed as Malformed,
    RegistryUnavailable as RegistryUnavailable,
    SegmentsExhausted as SegmentsExhausted,
    StoreUnavailable as StoreUnavailable,
    AccessDenied as AccessDenied,
    TableMissing as TableMissing,
    TagExists as TagExists,
    TagNotFound as TagNotFound,
    TimestampOverflow as TimestampOverflow,
    UnavailableError as UnavailableError,
    WorkerIdExhausted as WorkerIdExhausted,
    WorkerIdInUse as WorkerIdInUse,
    WorkerIdOutOfRange as WorkerIdOutOfRange,
)

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

__version__: str
"""The package's version (`"0.1.0"`), the same as its distribution metadata."""

LEAF_EPOCH_MS: int
"""Leaf's default epoch, 2010-11-04T01:42:54.657Z, in ms since the Unix epoch."""

@final
class TagStats:
    """One tag's state, as Leaf's /cache page shows it, plus refill figures."""

    @property
    def tag(self) -> str:
        """The tag."""
    @property
    def initialized(self) -> bool:
        """Whether its first segment was loaded."""
    @property
    def current(self) -> int:
        """Index (0 or 1) of the current segment in ``segments``."""
    @property
    def next_ready(self) -> bool:
        """Whether the next segment is loaded and waiting."""
    @property
    def segments(self) -> list[tuple[int, int, int]]:
        """``(value, max, step)`` of both segments."""
    @property
    def step(self) -> int:
        """The step of the latest load (dynamic)."""
    @property
    def min_step(self) -> int:
        """The table's step (the floor of the dynamic step)."""
    @property
    def refills(self) -> int:
        """Successful loads so far."""
    @property
    def last_refill(self) -> Optional[float]:
        """Seconds the latest refill took."""
    @property
    def last_error(self) -> Optional[str]:
        """The latest load's error, cleared by the next success."""

@final
class TagHandle:
    """The fast way to issue ids for one tag (``SegmentGenerator.tag``); also an endless
    iterator."""

    @property
    def tag(self) -> str:
        """The tag."""
    def next_id(self) -> int:
        """The next id; when none is at hand, waits up to ``wait_timeout`` with the GIL
        released (Ctrl-C interrupts)."""
    def next_ids(self, n: int) -> list[int]:
        """``n`` ids, ascending; waits as ``next_id`` does."""
    def next_ids_array(self, n: int) -> "array.array[int]":
        """``n`` ids as an ``array.array('q')``: no Python int per id, for bulk work."""
    def next_id_async(self) -> "asyncio.Future[int]":
        """``next_id`` that waits (up to ``wait_timeout``) on the core's runtime, never on
        the event loop's thread."""
    def next_ids_async(self, n: int) -> "asyncio.Future[list[int]]":
        """``next_ids`` that waits on the core's runtime, never on the loop's thread."""
    def __iter__(self) -> Iterator[int]: ...
    def __next__(self) -> int: ...

@final
class SegmentGenerator:
    """Issues ids for the tags of one ``leaf_alloc`` table (``mysql://…``,
    ``sqlite://path`` or ``memory:``).

    The constructor connects and loads the tag list; ``tags``: tags whose first
    segments are loaded before it returns. Waits with the GIL released; Ctrl-C
    interrupts. ``connect`` does the same as a coroutine. ``thread_chunk``: up to that
    many ids (at most 4096) reserved per thread at a time, so threads issuing from one
    tag do not contend; ids then increase per thread, and across threads as a trend
    only (0, the default: in call order across threads)."""

    def __new__(
        cls,
        url: str,
        *,
        wait_timeout: float = 1.0,
        refresh_interval: float = 60.0,
        create_table: bool = False,
        double_buffer: bool = True,
        max_step: int = 1_000_000,
        js_safe: bool = False,
        thread_chunk: int = 0,
        tags: Optional[Sequence[str]] = None,
    ) -> "SegmentGenerator": ...
    @staticmethod
    def connect(
        url: str,
        *,
        wait_timeout: float = 1.0,
        refresh_interval: float = 60.0,
        create_table: bool = False,
        double_buffer: bool = True,
        max_step: int = 1_000_000,
        js_safe: bool = False,
        thread_chunk: int = 0,
        tags: Optional[Sequence[str]] = None,
    ) -> Connecting["SegmentGenerator"]:
        """The constructor as a coroutine: the I/O runs on the core's runtime and the event
        loop goes on meanwhile. ``gen = await SegmentGenerator.connect(url)``, or
        ``async with SegmentGenerator.connect(url) as gen:`` (closed at the block's end)."""
    def next_id(self, tag: str) -> int:
        """The next id of ``tag``; when none is at hand, waits up to ``wait_timeout``
        with the GIL released (Ctrl-C interrupts)."""
    def next_ids(self, tag: str, n: int) -> list[int]:
        """``n`` ids of ``tag``, ascending; waits as ``next_id`` does."""
    def next_id_async(self, tag: str) -> "asyncio.Future[int]":
        """``next_id`` that waits on the core's runtime, never on the loop's thread."""
    def next_ids_async(self, tag: str, n: int) -> "asyncio.Future[list[int]]":
        """``next_ids`` that waits on the core's runtime, never on the loop's thread."""
    def tag(self, tag: str) -> TagHandle:
        """A handle on ``tag``: the fast way to issue its ids. Raises ``TagNotFound``
        when the store does not have it."""
    def tags(self) -> list[str]:
        """The tags known at the last refresh."""
    def create_tag(
        self,
        tag: str,
        start: int = 1,
        step: int = 1000,
        description: str = "",
        *,
        exist_ok: bool = False,
    ) -> None:
        """Adds ``tag`` to the table, its first id ``start``; raises ``TagExists`` if it
        is there already, unless ``exist_ok`` (then the existing row is kept as it is)."""
    def create_tag_async(
        self,
        tag: str,
        start: int = 1,
        step: int = 1000,
        description: str = "",
        *,
        exist_ok: bool = False,
    ) -> "asyncio.Future[None]":
        """``create_tag`` as an awaitable."""
    def create_table(self) -> None:
        """Creates the ``leaf_alloc`` table (Leaf's schema) if it does not exist."""
    def create_table_async(self) -> "asyncio.Future[None]":
        """``create_table`` as an awaitable."""
    def refresh(self) -> None:
        """Reloads the tag list from the store now (it is also reloaded every
        ``refresh_interval`` seconds)."""
    def refresh_async(self) -> "asyncio.Future[None]":
        """``refresh`` as an awaitable."""
    def stats(self) -> list[TagStats]:
        """The state of every tag this generator has loaded, as Leaf's ``/cache`` page
        shows it. Never waits on I/O."""
    def close(self) -> None:
        """Stops issuing: later calls raise ``Closed``. Does no I/O."""
    def aclose(self) -> "asyncio.Future[None]":
        """``close()`` as an awaitable (closing a segment generator does no I/O)."""
    def __enter__(self) -> "SegmentGenerator": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def __aenter__(self) -> "asyncio.Future[SegmentGenerator]": ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> "asyncio.Future[None]": ...

@final
class Layout:
    """How the 63 bits of a snowflake id are split, and the epoch (default: Leaf's,
    ``LEAF_EPOCH_MS``). Bits must sum to 63, or to 53 for ids below 2^53; raises
    ``InvalidConfig``."""

    def __new__(
        cls,
        timestamp_bits: int = 41,
        worker_bits: int = 10,
        sequence_bits: int = 12,
        epoch_ms: int = ...,
    ) -> "Layout": ...
    @staticmethod
    def js_safe() -> "Layout":
        """Ids below 2^53 (exact in a JavaScript number): 41 timestamp bits (until
        2080-07-10), 3 worker bits (ids 0..7), 9 sequence bits (512 ids per ms per
        worker), Leaf's epoch."""
    @property
    def max_id(self) -> int:
        """The largest id the layout can produce (2^63 - 1, or 2^53 - 1 for ``js_safe``)."""
    @property
    def timestamp_bits(self) -> int:
        """Bits of the timestamp (ms since ``epoch_ms``)."""
    @property
    def worker_bits(self) -> int:
        """Bits of the worker id."""
    @property
    def sequence_bits(self) -> int:
        """Bits of the sequence within a millisecond."""
    @property
    def epoch_ms(self) -> int:
        """The epoch, in ms since the Unix epoch."""
    @property
    def max_worker_id(self) -> int:
        """The largest worker id the layout holds."""

@final
class SnowflakeGenerator:
    """Issues snowflake ids with a worker id from a registry: ``fixed:7``,
    ``local:///dir``, ``zookeeper://host:port/name?port=P``,
    ``zookeeper-recycle://host:port/name``, ``mysql://user:pass@host/db?port=P``.

    Acquires a worker id from ``registry``. Durations are in seconds:
    ``heartbeat`` (how often the time bound is persisted), ``lookahead`` (how far
    ahead of the clock each persisted bound reaches: ids keep coming through a
    registry outage this long, less at most one heartbeat; ``None``: the core's
    default, 65 s), ``max_backward`` (largest backward clock step waited out),
    ``startup_wait`` (how far the clock may be behind the worker's recorded floor
    beyond ``lookahead`` and ``max_skew`` before start-up raises
    ``ClockBehindRegistry``; start-up never waits for the clock: ids start above the
    floor at once), ``max_skew`` (largest difference allowed between the local clock
    and the registry's clock; ``None``: the core's default, 5 s; ``fixed:`` and
    ``local:`` have no clock to compare with). Ranges are the core's
    (``SnowflakeBuilder``); a value outside raises ``InvalidConfig``.

    Raises ``WorkerIdInUse`` when the identity's worker id has another live holder
    and the registry cannot give a distinct one, ``ClockSkew`` beyond ``max_skew``,
    ``InvalidUrl`` before any I/O for an identity Java Leaf cannot read (a ``-`` in
    ``ip``, ``port`` or a ``zookeeper://`` name)."""

    def __new__(
        cls,
        registry: str,
        *,
        layout: Optional[Layout] = None,
        cache_dir: Union[str, PathLike[str], None] = None,
        heartbeat: float = 3.0,
        lookahead: Optional[float] = None,
        max_backward: float = 0.005,
        startup_wait: float = 10.0,
        max_skew: Optional[float] = None,
    ) -> "SnowflakeGenerator": ...
    @staticmethod
    def connect(
        registry: str,
        *,
        layout: Optional[Layout] = None,
        cache_dir: Union[str, PathLike[str], None] = None,
        heartbeat: float = 3.0,
        lookahead: Optional[float] = None,
        max_backward: float = 0.005,
        startup_wait: float = 10.0,
        max_skew: Optional[float] = None,
    ) -> Connecting["SnowflakeGenerator"]:
        """The constructor as a coroutine: the registry's I/O runs on the core's runtime
        and the event loop goes on meanwhile. ``sf = await SnowflakeGenerator.connect(r)``,
        or ``async with SnowflakeGenerator.connect(r) as sf:`` (closed at the block's end)."""
    def next_id(self) -> int:
        """The next id, greater than every id this generator issued before. Raises
        ``ClockMovedBackwards``, ``LeaseLost`` when the registry took the worker id away,
        ``ClockSkew`` when a heartbeat found the clocks more than ``max_skew`` apart
        (issuing resumes once they agree), ``Closed`` after ``close()``. A registry out of
        reach for less than ``lookahead`` is not needed: ids keep coming from memory; past
        it the call waits up to 10 s (the core's ``MAX_ASYNC_WAIT``) for a bound to be
        persisted, then raises ``RegistryUnavailable``."""
    def next_ids(self, n: int) -> list[int]:
        """``n`` ids (at most 2**20), ascending; Ctrl-C interrupts a big batch within a
        few milliseconds. A batch takes at most three quarters of each millisecond's
        sequence (the rest is kept for single ids), so 2**20 ids take about 370 ms in
        Leaf's layout. The GIL is released while the sequence paces the batch (taken in
        chunks of at most 8192 ids and 8 ms of sequence, each spent millisecond slept
        out, not spun: the thread waits without using a CPU), so other threads run
        meanwhile: unlike Node's synchronous ``nextIds``, this call has no lower limit."""
    def next_ids_array(self, n: int) -> "array.array[int]":
        """``n`` ids as an ``array.array('q')``: no Python int per id, for bulk work."""
    def next_id_async(self) -> "asyncio.Future[int]":
        """``next_id`` that waits on the core's runtime, never on the loop's thread."""
    def next_ids_async(self, n: int) -> "asyncio.Future[list[int]]":
        """``next_ids`` that waits on the core's runtime, never on the loop's thread."""
    def __iter__(self) -> Iterator[int]: ...
    def __next__(self) -> int: ...
    @property
    def worker_id(self) -> int:
        """The worker id this generator holds."""
    @property
    def layout(self) -> Layout:
        """The layout of its ids."""
    def close(self, timeout: Optional[float] = None) -> bool:
        """Stops issuing and releases the worker id, waiting at most ``timeout``
        seconds (``None``: 3 s, the core's ``DEFAULT_CLOSE_WAIT``) for the registry.
        ``True`` when it was released in time; after the timeout the release goes on in
        the background and, if the registry stays unreachable, the lease expires on its
        side. Later calls raise ``Closed``. Ctrl-C interrupts the wait."""
    def aclose(self) -> "asyncio.Future[bool]":
        """``close()`` as an awaitable, with the default wait; resolves to ``True`` when
        the worker id was released in time."""
    def __enter__(self) -> "SnowflakeGenerator": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def __aenter__(self) -> "asyncio.Future[SnowflakeGenerator]": ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> "asyncio.Future[None]": ...

class DecodedId(NamedTuple):
    """The parts of a snowflake id."""

    timestamp_ms: int
    worker_id: int
    sequence: int
    @property
    def datetime(self) -> datetime.datetime:
        """The timestamp as an aware UTC datetime."""

def decode(id: int, layout: Optional[Layout] = None) -> DecodedId:
    """Splits a snowflake id into timestamp, worker id and sequence (Leaf's layout by
    default)."""

@final
class IdCipher:
    """A keyed, reversible permutation of the positive ids ``1..2**63-1`` (NIST SP
    800-38G FF1 with AES): public ids that reveal no count and no time.

    ``key`` is 16, 24 or 32 secret bytes (AES-128/192/256); keep it forever. Encrypted
    ids are positive 64-bit ints but not ordered: store the plain id, show the
    encrypted one. Wrong key length, and ids that are 0, negative or past 2**63-1,
    raise ``InvalidConfig`` (a ``ValueError``); a non-int raises ``TypeError``."""

    def __new__(cls, key: bytes) -> "IdCipher": ...
    def encrypt(self, id: int) -> int:
        """The opaque form of ``id``."""
    def decrypt(self, id: int) -> int:
        """The id whose opaque form is ``id``."""
    def encrypt_many(self, ids: Iterable[int]) -> list[int]:
        """``encrypt`` over a sequence of ids (the GIL released for the work); fails
        whole on the first invalid id."""
    def decrypt_many(self, ids: Iterable[int]) -> list[int]:
        """``decrypt`` over a sequence of ids; fails whole on the first invalid id."""

def encode_base62(id: int) -> str:
    """``id`` (0..2**63-1) as 11 characters of ``0-9A-Za-z`` whose string order is the
    ids' order; raises ``InvalidConfig`` for a negative id. An encoding, not encryption."""

def metrics_text() -> str:
    """The Prometheus metrics of every live generator in this process, as OpenMetrics
    text (families ``leafid_…``; ends with ``# EOF``). Serve it from your own
    ``/metrics`` with the content type
    ``application/openmetrics-text; version=1.0.0; charset=utf-8``. Never waits on I/O."""

def decode_base62(s: str) -> int:
    """The id an 11-character base-62 string encodes; raises ``InvalidConfig`` for a
    wrong length, a character outside ``0-9A-Za-z`` or a value past 2**63-1."""
