"""The exception hierarchy: one class per ``leafid::Error`` variant of the core.

The native module raises these by name (``bindings-python/src/error.rs``); every
instance carries the core's message, a stable ``code`` (the same string Node's errors
carry, e.g. ``"LEAF_TAG_NOT_FOUND"``) and, where the core has one, the underlying
``cause`` (text), with the underlying exception itself as ``__cause__`` where the core
keeps it (an ``OSError`` for ``Io``).

The groups say what a caller can do: ``ConfigError`` (fix the input or the deployment;
retrying never helps), ``UnavailableError`` (retry once the server is back),
``ClockError`` (wait, or fix the clock). Every class shows as ``leafid.X`` in tracebacks.
"""

from __future__ import annotations

from typing import Optional


class LeafError(Exception):
    """Base class of every leafid error.

    ``code``: the core's stable code (``"LEAF_TAG_NOT_FOUND"``, the same string Node
    shows). ``cause``: the underlying error as text (``"Connection refused (os error
    111)"``), or ``None`` when there is none."""

    code: str = "LEAF_ERROR"
    cause: Optional[str] = None
    cause_kind: Optional[str] = None

    def __str__(self) -> str:
        # KeyError would print its argument with quotes; keep the core's message as is.
        return str(self.args[0]) if self.args else ""


class ConfigError(LeafError, ValueError):
    """Bad input or configuration: retrying the same call never helps."""


class InvalidTag(ConfigError):
    """An empty, over-long or otherwise unusable tag; ``tag`` is the tag as given."""

    tag: Optional[str] = None


class InvalidUrl(ConfigError):
    """A store or registry URL that cannot be understood."""


class InvalidConfig(ConfigError):
    """A configuration value out of range."""


class WorkerIdOutOfRange(ConfigError):
    """A worker id that does not fit the layout."""


class TableMissing(ConfigError):
    """The table the store needs does not exist (``table`` names it): create it with
    ``create_table()`` or Leaf's DDL. A configuration error, not an outage: waiting
    never brings the table."""

    table: Optional[str] = None


class AccessDenied(ConfigError):
    """The database or ZooKeeper refused the credentials, or the database does not exist
    or is not visible to this user: the server answered, so retrying never helps; fix the
    user, password or database name in the URL."""


class TagNotFound(LeafError, KeyError):
    """The tag is not in the store (or was not at the last refresh); ``tag`` names it."""

    tag: Optional[str] = None


class UnavailableError(LeafError):
    """A server or file the generator depends on failed."""


class StoreUnavailable(UnavailableError):
    """The database could not be reached or failed a statement."""


class SegmentsExhausted(UnavailableError):
    """Both segments of a tag were spent and no refill came in time; ``tag`` names it,
    ``cause`` is the last refill error (``None`` when the refill was merely slow)."""

    tag: Optional[str] = None


class RegistryUnavailable(UnavailableError):
    """The worker registry could not be reached."""


class LeaseLost(UnavailableError):
    """The lease on the worker id was lost; issuing resumes once one is held again."""


class WorkerIdExhausted(UnavailableError):
    """Every worker id of the pool is held."""


class WorkerIdInUse(UnavailableError):
    """The worker id this generator's identity maps to has a live holder already
    (another process or generator started from the same configuration, or a Java Leaf
    server on the same ip:port). The message names the identity, the holder and what to
    do: ``zookeeper-recycle://`` or ``local://`` for multi-process servers, or one
    identity per process."""


class Io(UnavailableError):
    """A local file (cache, lock) could not be read or written."""


class ClockError(LeafError):
    """Time does not allow issuing now."""


class ClockMovedBackwards(ClockError):
    """The clock went back further than the generator waits out."""


class ClockBehindRegistry(ClockError):
    """The clock is behind a timestamp this worker id may already have issued."""


class TimestampOverflow(ClockError):
    """The timestamp no longer fits the layout."""


class ClockSkew(ClockError):
    """The local clock differs from the registry's clock (ZooKeeper's, the database's)
    by more than ``max_skew``; fix NTP on this host or raise ``max_skew``."""


class TagExists(LeafError):
    """``create_tag`` on a tag that exists already; ``tag`` names it."""

    tag: Optional[str] = None


class Closed(LeafError):
    """A call on a generator after ``close()``."""


class Malformed(LeafError):
    """A registry node or cache file that cannot be parsed."""


# Tracebacks and reprs name the public path (``leafid.TagNotFound``), where users import
# the classes from; pickling finds them there too.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, LeafError):
        _cls.__module__ = "leafid"
del _cls
