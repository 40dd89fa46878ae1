//! One error type for the whole crate.
//!
//! Every failure a user can see has its own variant, named for what the user sees.
//! Messages say what happened, then what to do. Bindings map this enum in one place
//! each: [`Error::code`] is the stable string Node exposes as `err.code`, and
//! [`Error::kind`] groups variants the way Python's exception classes do.
//!
//! An error that comes from a driver (sqlx, `std::io`, ZooKeeper) keeps it: the
//! underlying error is the error's [`source()`](std::error::Error::source), and
//! [`Error::cause_kind`] says what kind of failure it was (refused, timed out, login
//! refused, not found), classified once where the driver's error is converted
//! ([`cause`]). Errors returned by issuing calls are counted per mode and code
//! ([`counts`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

pub mod cause;
mod count;

pub use cause::{Cause, CauseKind};
pub(crate) use count::counted;
use count::COUNTS;
pub use count::{counts, Mode};

/// Shorthand for `std::result::Result<T, leafid::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in leafid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- bad input, rejected before any I/O ----
    /// A tag that is empty, too long for Leaf's `varchar(128)` column, or otherwise unusable.
    #[error("invalid tag {tag:?}: {reason}; use a non-empty tag of at most 128 bytes")]
    InvalidTag {
        /// The tag as given.
        tag: String,
        /// Why it was refused.
        reason: String,
    },
    /// A store or registry URL that cannot be understood.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given (password removed).
        url: String,
        /// What is wrong and what a correct one looks like.
        reason: String,
    },
    /// A configuration value out of range (a step of 0, bits that do not sum to 63, …).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    // ---- segment mode ----
    /// The tag is not in the store: not in the cache, and the store lookup made on a
    /// miss (at most once a second per name) did not find it.
    #[error("tag {tag:?} not found; create it with create_tag({tag:?}, …) or insert a row into leaf_alloc. \
             A tag made elsewhere is found on its first use (looked up at most once a second) or at once by refresh()")]
    TagNotFound {
        /// The tag asked for.
        tag: String,
    },
    /// `create_tag` on a tag that exists already.
    #[error("tag {tag:?} already exists; it is usable as it is (this generator now issues its ids), or pick another name")]
    TagExists {
        /// The tag.
        tag: String,
    },
    /// The table the store needs is missing.
    #[error("table {table} does not exist; create it with create_table() or run Leaf's DDL")]
    TableMissing {
        /// The missing table.
        table: String,
    },
    /// The database (or the worker registry) could not be reached or failed a statement.
    #[error(
        "store unavailable: {cause}; ids already buffered keep flowing, retry once it is back"
    )]
    StoreUnavailable {
        /// The underlying error, as text.
        cause: String,
        /// The underlying error itself, when a driver gave one: this error's
        /// `source()`, classified by [`Error::cause_kind`].
        #[source]
        source: Option<Cause>,
    },
    /// Both segments of a tag were spent and the next one did not arrive in time (or,
    /// for a call that never waits, was not there yet).
    #[error(
        "tag {tag:?}: both segments spent and {} (last store error: {cause}); {}",
        exhausted_wait(waited),
        exhausted_advice(waited)
    )]
    SegmentsExhausted {
        /// The tag.
        tag: String,
        /// How long the caller waited.
        waited: Duration,
        /// The last refill error, or, when the refill was merely slow, "none yet: the
        /// store has not answered within …" (or "none" when no refill was running).
        cause: String,
        /// The last refill error's underlying error (an `io::Error` of kind `TimedOut`
        /// when the store has not answered yet): this error's `source()`.
        #[source]
        source: Option<Cause>,
    },
    /// A call on a generator after `close()`.
    #[error("generator is closed; create a new one")]
    Closed,

    // ---- snowflake mode ----
    /// The clock went back further than the generator may wait out.
    #[error("clock moved backwards by {offset_ms} ms; ids resume once the clock passes the last issued timestamp (check NTP)")]
    ClockMovedBackwards {
        /// How far behind the last issued timestamp the clock is.
        offset_ms: i64,
    },
    /// The clock is behind a timestamp this worker id may already have issued
    /// (found at start-up in the registry or the cache file).
    #[error("clock is {behind_ms} ms behind the last timestamp worker {worker_id} may have issued ({last_ms}); refusing to start (fix the clock or wait)")]
    ClockBehindRegistry {
        /// The worker id in question.
        worker_id: u32,
        /// The highest timestamp it may have issued (ms since the Unix epoch).
        last_ms: i64,
        /// How far behind the clock is.
        behind_ms: i64,
    },
    /// The timestamp no longer fits the layout's timestamp bits.
    #[error("timestamp past the layout's range (max {max_ms} ms since the Unix epoch); choose a later epoch or more timestamp bits")]
    TimestampOverflow {
        /// The last representable timestamp.
        max_ms: i64,
    },
    /// A worker id that does not fit the layout.
    #[error(
        "worker id {worker_id} out of range 0..={max}; pick one that fits the layout's worker bits"
    )]
    WorkerIdOutOfRange {
        /// The id.
        worker_id: i64,
        /// The largest valid id.
        max: u32,
    },
    /// Every worker id of the pool is held.
    #[error("no free worker id in {pool} (all {size} held); release some or add worker bits")]
    WorkerIdExhausted {
        /// Where the pool lives.
        pool: String,
        /// How many ids it has.
        size: u32,
    },
    /// The worker id this generator's identity maps to is held by another live process or
    /// generator (another leafid, or a Java Leaf server on the same ip:port).
    #[error("{identity} is in use by {holder}; {advice}")]
    WorkerIdInUse {
        /// The identity claimed (`ZooKeeper 127.0.0.1:2181 /snowflake/order/forever/ip:port`,
        /// `fixed:7`, …).
        identity: String,
        /// The worker id that identity maps to, when known.
        worker_id: Option<u32>,
        /// Who holds it, as far as known (host, pid, since when, or "a Java Leaf server…").
        holder: String,
        /// What to do about it.
        advice: String,
    },
    /// The local clock differs from the registry's clock by more than the allowed skew.
    #[error("local clock is {skew_ms} ms {direction} the registry's clock ({source_desc}), more than the allowed {max_skew_ms} ms; fix NTP on this host (or raise max_skew)")]
    ClockSkew {
        /// Local minus registry time, in ms (positive: local clock ahead).
        skew_ms: i64,
        /// "ahead of" or "behind".
        direction: &'static str,
        /// The allowed skew in ms.
        max_skew_ms: i64,
        /// Where the registry's time came from (`ZooKeeper mtime of …`, `MySQL NOW(3)`).
        source_desc: String,
    },
    /// The worker registry (ZooKeeper, MySQL, lock directory) cannot be reached.
    #[error("worker registry unavailable: {cause}; retry once it is back")]
    RegistryUnavailable {
        /// The underlying error, as text.
        cause: String,
        /// The underlying error itself, when a driver gave one: this error's
        /// `source()`, classified by [`Error::cause_kind`].
        #[source]
        source: Option<Cause>,
    },
    /// The lease on the worker id was lost; issuing stops until a new one is held.
    #[error("lease on worker id {worker_id} lost: {cause}; issuing resumes once a worker id is held again")]
    LeaseLost {
        /// The worker id that was held.
        worker_id: u32,
        /// Why it was lost.
        cause: String,
    },
    /// A registry node or cache file that cannot be parsed.
    #[error("malformed {what} at {path}: {reason}; fix or remove it")]
    Malformed {
        /// "ZooKeeper node", "cache file", …
        what: &'static str,
        /// Where it lives.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A local file (cache, lock) could not be read or written.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The database or ZooKeeper answered and refused this client: a wrong user or
    /// password, missing grants, or a database that does not exist (MySQL reports a
    /// database the user may not see as access denied too, so the two are one case).
    ///
    /// Its own variant, not `InvalidConfig` (a bad option, found before any I/O) nor
    /// `StoreUnavailable` (an outage, worth retrying): the server is up, and retrying
    /// cannot help until the URL or the server's accounts change. [`Error::kind`] is
    /// `Config`; [`Error::cause_kind`] is `LoginRefused` (or `NotFound` for an unknown
    /// database).
    #[error("access denied: {cause}")]
    AccessDenied {
        /// What refused what, and what to fix (password removed).
        cause: String,
        /// The driver's error: this error's `source()`.
        #[source]
        source: Option<Cause>,
    },
}

/// Coarse groups of errors, the way the Python binding builds its class hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input or configuration (Python: also a `ValueError`).
    Config,
    /// A tag that does not exist (Python: also a `KeyError`).
    NotFound,
    /// A server or file the generator depends on failed.
    Unavailable,
    /// Time does not allow issuing now.
    Clock,
    /// Anything else.
    Other,
}

/// What a `SegmentsExhausted` caller waited for: nothing (a never-waiting call) or a time.
fn exhausted_wait(waited: &Duration) -> String {
    if *waited < Duration::from_millis(1) {
        "the next segment is not loaded yet".into()
    } else {
        format!("no refill within {waited:?}")
    }
}

/// What to do about a `SegmentsExhausted`.
fn exhausted_advice(waited: &Duration) -> &'static str {
    if *waited < Duration::from_millis(1) {
        "it is loading in the background: retry shortly, or use the waiting call \
         (next_id, or next_id_async)"
    } else {
        "raise the step or the timeout, or check the database"
    }
}

impl Error {
    /// The stable code Node exposes as `err.code`, one per variant.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidTag { .. } => "LEAF_INVALID_TAG",
            Error::InvalidUrl { .. } => "LEAF_INVALID_URL",
            Error::InvalidConfig(_) => "LEAF_INVALID_CONFIG",
            Error::TagNotFound { .. } => "LEAF_TAG_NOT_FOUND",
            Error::TagExists { .. } => "LEAF_TAG_EXISTS",
            Error::TableMissing { .. } => "LEAF_TABLE_MISSING",
            Error::StoreUnavailable { .. } => "LEAF_STORE_UNAVAILABLE",
            Error::SegmentsExhausted { .. } => "LEAF_SEGMENTS_EXHAUSTED",
            Error::Closed => "LEAF_CLOSED",
            Error::ClockMovedBackwards { .. } => "LEAF_CLOCK_MOVED_BACKWARDS",
            Error::ClockBehindRegistry { .. } => "LEAF_CLOCK_BEHIND_REGISTRY",
            Error::TimestampOverflow { .. } => "LEAF_TIMESTAMP_OVERFLOW",
            Error::WorkerIdOutOfRange { .. } => "LEAF_WORKER_ID_OUT_OF_RANGE",
            Error::WorkerIdExhausted { .. } => "LEAF_WORKER_ID_EXHAUSTED",
            Error::WorkerIdInUse { .. } => "LEAF_WORKER_ID_IN_USE",
            Error::ClockSkew { .. } => "LEAF_CLOCK_SKEW",
            Error::RegistryUnavailable { .. } => "LEAF_REGISTRY_UNAVAILABLE",
            Error::LeaseLost { .. } => "LEAF_LEASE_LOST",
            Error::Malformed { .. } => "LEAF_MALFORMED",
            Error::Io { .. } => "LEAF_IO",
            Error::AccessDenied { .. } => "LEAF_ACCESS_DENIED",
        }
    }

    /// The variant's name (`"TagNotFound"`), which the Python binding uses as the
    /// exception class name.
    pub fn name(&self) -> &'static str {
        match self {
            Error::InvalidTag { .. } => "InvalidTag",
            Error::InvalidUrl { .. } => "InvalidUrl",
            Error::InvalidConfig(_) => "InvalidConfig",
            Error::TagNotFound { .. } => "TagNotFound",
            Error::TagExists { .. } => "TagExists",
            Error::TableMissing { .. } => "TableMissing",
            Error::StoreUnavailable { .. } => "StoreUnavailable",
            Error::SegmentsExhausted { .. } => "SegmentsExhausted",
            Error::Closed => "Closed",
            Error::ClockMovedBackwards { .. } => "ClockMovedBackwards",
            Error::ClockBehindRegistry { .. } => "ClockBehindRegistry",
            Error::TimestampOverflow { .. } => "TimestampOverflow",
            Error::WorkerIdOutOfRange { .. } => "WorkerIdOutOfRange",
            Error::WorkerIdExhausted { .. } => "WorkerIdExhausted",
            Error::WorkerIdInUse { .. } => "WorkerIdInUse",
            Error::ClockSkew { .. } => "ClockSkew",
            Error::RegistryUnavailable { .. } => "RegistryUnavailable",
            Error::LeaseLost { .. } => "LeaseLost",
            Error::Malformed { .. } => "Malformed",
            Error::Io { .. } => "Io",
            Error::AccessDenied { .. } => "AccessDenied",
        }
    }

    /// The group this error belongs to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidTag { .. }
            | Error::InvalidUrl { .. }
            | Error::InvalidConfig(_)
            | Error::AccessDenied { .. }
            // Waiting never brings a table: a retry-while-unavailable loop must not spin.
            | Error::TableMissing { .. }
            | Error::WorkerIdOutOfRange { .. } => ErrorKind::Config,
            Error::TagNotFound { .. } => ErrorKind::NotFound,
            Error::StoreUnavailable { .. }
            | Error::SegmentsExhausted { .. }
            | Error::RegistryUnavailable { .. }
            | Error::LeaseLost { .. }
            | Error::WorkerIdExhausted { .. }
            | Error::WorkerIdInUse { .. }
            | Error::Io { .. } => ErrorKind::Unavailable,
            Error::ClockMovedBackwards { .. }
            | Error::ClockBehindRegistry { .. }
            | Error::ClockSkew { .. }
            | Error::TimestampOverflow { .. } => ErrorKind::Clock,
            Error::TagExists { .. } | Error::Closed | Error::Malformed { .. } => ErrorKind::Other,
        }
    }

    /// Every variant name, for bindings that declare one class per variant up front.
    pub const NAMES: &'static [&'static str] = &[
        "InvalidTag",
        "InvalidUrl",
        "InvalidConfig",
        "TagNotFound",
        "TagExists",
        "TableMissing",
        "StoreUnavailable",
        "SegmentsExhausted",
        "Closed",
        "ClockMovedBackwards",
        "ClockBehindRegistry",
        "TimestampOverflow",
        "WorkerIdOutOfRange",
        "WorkerIdExhausted",
        "WorkerIdInUse",
        "ClockSkew",
        "RegistryUnavailable",
        "LeaseLost",
        "Malformed",
        "Io",
        "AccessDenied",
    ];

    /// The underlying error kept by this error, with its kind: the same error as
    /// [`source()`](std::error::Error::source) returns (except for `Io`, whose source
    /// is the `io::Error` itself; see [`cause_kind`](Self::cause_kind)).
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            Error::StoreUnavailable { source, .. }
            | Error::RegistryUnavailable { source, .. }
            | Error::SegmentsExhausted { source, .. }
            | Error::AccessDenied { source, .. } => source.as_ref(),
            _ => None,
        }
    }

    /// What kind of failure lies under this error (refused, timed out, login refused,
    /// not found, other), when it came from a driver; `None` for errors leafid found
    /// itself (bad input, a clock, a held worker id, …).
    pub fn cause_kind(&self) -> Option<CauseKind> {
        match self {
            Error::Io { source, .. } => Some(cause::io_kind(source)),
            other => other.cause().map(Cause::kind),
        }
    }

    /// Counts this error as returned by an issuing call of `mode` (see [`counts`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn counted(self, mode: Mode) -> Error {
        // A variant missing from NAMES (a unit test checks there is none) goes
        // uncounted: the error path never panics for a statistic.
        if let Some(i) = Error::NAMES.iter().position(|&n| n == self.name()) {
            // Relaxed: a statistic, ordered with nothing.
            COUNTS[mode as usize][i].fetch_add(1, Ordering::Relaxed);
        }
        self
    }

    /// `InvalidUrl` for `url`, with its password hidden in the URL and in the reason
    /// (which may quote a piece of it). Every `InvalidUrl` is made here.
    pub(crate) fn invalid_url(url: &str, reason: impl std::fmt::Display) -> Error {
        Error::InvalidUrl {
            url: crate::redact::url(url),
            reason: crate::redact::scrub(&reason.to_string(), url),
        }
    }

    /// `InvalidUrl` for a URL whose scheme lives behind a Cargo feature this build of
    /// leafid leaves out: names the feature to enable.
    #[allow(dead_code)] // unused when every feature is on
    pub(crate) fn feature_left_out(url: &str, feature: &str) -> Error {
        Error::invalid_url(
            url,
            format_args!(
                "this build of leafid leaves out the `{feature}` Cargo feature that this scheme \
                 needs; enable it (leafid = {{ version = \"…\", features = [\"{feature}\"] }}) \
                 or use another URL"
            ),
        )
    }

    /// `StoreUnavailable` with a text cause only (leafid found it, no driver error).
    pub(crate) fn store(e: impl std::fmt::Display) -> Error {
        Error::StoreUnavailable {
            cause: e.to_string(),
            source: None,
        }
    }

    /// `StoreUnavailable` saying `text`, keeping the driver's error as its source.
    #[allow(dead_code)] // unused when no driver feature (mysql, sqlite, zookeeper) is on
    pub(crate) fn store_with(text: impl std::fmt::Display, cause: Cause) -> Error {
        Error::StoreUnavailable {
            cause: text.to_string(),
            source: Some(cause),
        }
    }

    /// `RegistryUnavailable` with a text cause only.
    pub(crate) fn registry(e: impl std::fmt::Display) -> Error {
        Error::RegistryUnavailable {
            cause: e.to_string(),
            source: None,
        }
    }

    /// `RegistryUnavailable` saying `text`, keeping the driver's error as its source.
    #[allow(dead_code)] // unused when no driver feature (mysql, sqlite, zookeeper) is on
    pub(crate) fn registry_with(text: impl std::fmt::Display, cause: Cause) -> Error {
        Error::RegistryUnavailable {
            cause: text.to_string(),
            source: Some(cause),
        }
    }

    /// `AccessDenied` saying `text`, keeping the driver's error as its source.
    #[allow(dead_code)] // unused when no driver feature (mysql, sqlite, zookeeper) is on
    pub(crate) fn access_denied(text: impl std::fmt::Display, cause: Cause) -> Error {
        Error::AccessDenied {
            cause: text.to_string(),
            source: Some(cause),
        }
    }

    /// A copy of this error for one more caller (`Error` is not `Clone`: `Io` holds an
    /// `io::Error`). Every variant a refill, lookup or registry call can store is kept
    /// as it is, source included; any other becomes `StoreUnavailable` with its text
    /// (and its cause, if any).
    pub(crate) fn copy(&self) -> Error {
        match self {
            Error::InvalidConfig(s) => Error::InvalidConfig(s.clone()),
            Error::InvalidTag { tag, reason } => Error::InvalidTag {
                tag: tag.clone(),
                reason: reason.clone(),
            },
            Error::InvalidUrl { url, reason } => Error::InvalidUrl {
                url: url.clone(),
                reason: reason.clone(),
            },
            Error::Malformed { what, path, reason } => Error::Malformed {
                what,
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::TagNotFound { tag } => Error::TagNotFound { tag: tag.clone() },
            Error::TableMissing { table } => Error::TableMissing {
                table: table.clone(),
            },
            Error::StoreUnavailable { cause, source } => Error::StoreUnavailable {
                cause: cause.clone(),
                source: source.clone(),
            },
            Error::RegistryUnavailable { cause, source } => Error::RegistryUnavailable {
                cause: cause.clone(),
                source: source.clone(),
            },
            Error::AccessDenied { cause, source } => Error::AccessDenied {
                cause: cause.clone(),
                source: source.clone(),
            },
            Error::Closed => Error::Closed,
            Error::Io { path, source } => Error::StoreUnavailable {
                cause: format!("I/O error on {path}: {source}"),
                source: Some(Cause::new(
                    cause::io_kind(source),
                    std::io::Error::new(source.kind(), source.to_string()),
                )),
            },
            other => Error::StoreUnavailable {
                cause: other.to_string(),
                source: other.cause().cloned(),
            },
        }
    }

    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}
