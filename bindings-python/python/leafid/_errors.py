"""The exception hierarchy: one class per ``leafid::Error`` variant of the core.

The native module raises these by name (``bindings-python/src/error.rs``); every
instance carries the core's message and a stable ``code`` (the same string Node's
errors carry, e.g. ``"LEAF_TAG_NOT_FOUND"``).
"""

from __future__ import annotations


class LeafError(Exception):
    """Base class of every leafid error."""

    code: str = "LEAF_ERROR"

    def __str__(self) -> str:
        # KeyError would print its argument with quotes; keep the core's message as is.
        return str(self.args[0]) if self.args else ""


class ConfigError(LeafError, ValueError):
    """Bad input or configuration, refused before any I/O."""


class InvalidTag(ConfigError):
    """An empty, over-long or otherwise unusable tag."""


class InvalidUrl(ConfigError):
    """A store or registry URL that cannot be understood."""


class InvalidConfig(ConfigError):
    """A configuration value out of range."""


class WorkerIdOutOfRange(ConfigError):
    """A worker id that does not fit the layout."""


class TagNotFound(LeafError, KeyError):
    """The tag is not in the store (or was not at the last refresh)."""


class UnavailableError(LeafError):
    """A server or file the generator depends on failed."""


class TableMissing(UnavailableError):
    """The table the store needs does not exist."""


class StoreUnavailable(UnavailableError):
    """The database could not be reached or failed a statement."""


class SegmentsExhausted(UnavailableError):
    """Both segments of a tag were spent and no refill came in time."""


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
    """``create_tag`` on a tag that exists already."""


class Closed(LeafError):
    """A call on a generator after ``close()``."""


class Malformed(LeafError):
    """A registry node or cache file that cannot be parsed."""
