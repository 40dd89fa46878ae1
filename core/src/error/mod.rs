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
//!
//! The enum and what every error keeps (its cause) are here; how bindings and counters
//! name and group an error is in `names.rs`, and the constructors the crate makes errors
//! with (every `InvalidUrl` redacted, every driver error kept as a source) in `make.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

pub mod cause;
mod count;
mod make;
mod names;

pub use cause::{Cause, CauseKind};
pub(crate) use count::counted;
use count::COUNTS;
pub use count::{counts, Mode};
pub use names::ErrorKind;

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
    /// The table the store needs is missing. Its message names the Rust way to create
    /// it; a binding or the server names its own with [`table_missing_message`].
    #[error("{}", table_missing_message(table, RUST_CREATE_TABLE))]
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
    #[error("clock is {behind_ms} ms behind the last timestamp worker {worker_id} may have issued ({last_ms}); refusing to start: if the clock was set back, fix it; if that bound was written by a run with a longer lookahead or heartbeat than this one, start again once the clock has passed it (in {behind_ms} ms), or allow a longer startup_wait")]
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

/// How a Rust caller creates a missing table: the option that makes it when missing.
const RUST_CREATE_TABLE: &str =
    "SegmentOptions::create_table(true) (or SegmentGenerator::create_table())";

/// The message of a [`Error::TableMissing`] of `table`, with `fix` the caller's own way
/// to create it: the core's message names the Rust option, a binding its keyword or
/// option (`create_table=True`, `createTable: true`), the server its command. One
/// wording, each language's name.
pub fn table_missing_message(table: &str, fix: &str) -> String {
    format!(
        "table {table} does not exist; create it with {fix}, or run Leaf's DDL (docs/segment.md)"
    )
}

/// What a `SegmentsExhausted` caller waited for: nothing (a never-waiting call) or a time.
fn exhausted_wait(waited: &Duration) -> String {
    if *waited < Duration::from_millis(1) {
        "the next segment is not loaded yet".into()
    } else {
        format!("no refill within {waited:?}")
    }
}

/// The calls that wait for a refill, as a `SegmentsExhausted` of a never-waiting call
/// names them (Rust's and Python's names). A binding whose waiting calls differ
/// replaces this text with its own: Node's `nextId` never waits, only `nextIdAsync` does.
pub const WAITING_CALLS: &str = "next_id, or next_id_async";

/// What to do about a `SegmentsExhausted`.
fn exhausted_advice(waited: &Duration) -> String {
    if *waited < Duration::from_millis(1) {
        format!(
            "it is loading in the background: retry shortly, or use the waiting call \
             ({WAITING_CALLS}); before a burst of calls that must not wait (a bulk insert \
             through a synchronous default), take its ids with next_ids_async (docs/faq.md)"
        )
    } else {
        "raise the step or the timeout, or check the database".into()
    }
}

impl Error {
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
}
