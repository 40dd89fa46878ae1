//! How a failed refill reads to the callers it leaves without an id: the stored error
//! replayed for each caller, the cause a `SegmentsExhausted` reports, and whether an
//! error is one that waiting may cure.
//!
//! Separate from the refill itself (`tag_buffer/refill.rs`) because every layer uses
//! these — the store's holder (`loader.rs`), a tag's slow path and the public calls —
//! and the refill sits above the first of them.

use std::time::Duration;

use crate::error::{Error, Result};

/// A fresh copy of a stored refill error for one more caller: configuration and data
/// errors stay what they are (permanent), only transient ones say "unavailable".
pub(super) fn replay(e: Option<&Error>, tag: &str) -> Error {
    match e {
        Some(Error::TagNotFound { .. }) => Error::TagNotFound { tag: tag.into() },
        Some(e) => copy_error(e),
        None => Error::store(format!("refill of tag {tag:?} failed")),
    }
}

/// `Error` is not `Clone` (it may hold an `io::Error`); this copies what the slow path
/// keeps, and keeps each variant's kind and source (see `Error::copy`).
pub(crate) fn copy_error(e: &Error) -> Error {
    e.copy()
}

/// The cause a `SegmentsExhausted` reports: the last refill error (text and source);
/// with none yet and a refill still `loading` after the caller's `waited`, "the store
/// has not answered within …" (kind `TimedOut`), so an outage shows as one even when
/// the caller's wait ends before the first attempt does; "none" when nothing runs.
pub(super) fn exhausted_cause(
    last: Option<&Error>,
    loading: bool,
    waited: Duration,
) -> (String, Option<crate::error::Cause>) {
    match last {
        Some(e) => (e.to_string(), e.cause().cloned()),
        None if loading && !waited.is_zero() => {
            let text = format!("none yet: the store has not answered within {waited:?}");
            let cause = crate::error::Cause::timed_out(text.clone());
            (text, Some(cause))
        }
        None => ("none".to_string(), None),
    }
}

/// The outcome of a never-waiting attempt if it is final: an id, or an error waiting
/// cannot cure. `None` when waiting may help (no segment at hand yet, a store that may
/// come back, or a tag not in the cache yet while a lookup runs): the waiting path
/// decides.
pub(super) fn settled_now(attempt: Result<i64>) -> Option<Result<i64>> {
    match attempt {
        Err(
            Error::SegmentsExhausted { .. }
            | Error::StoreUnavailable { .. }
            | Error::TagNotFound { .. },
        ) => None,
        settled => Some(settled),
    }
}
