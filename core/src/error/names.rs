//! How an [`Error`] is named and grouped outside Rust: the stable code Node exposes as
//! `err.code`, the variant name Python uses as the exception class, the coarse
//! [`ErrorKind`] Python's class hierarchy follows, and the list of every name. One
//! table per question, each a match over every variant, so a new variant cannot be
//! left out (the compiler says so; a unit test checks [`Error::NAMES`]).

use super::Error;

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
}
