//! The limits every binding applies to the numbers callers pass, defined once here so
//! Rust, Python and Node accept and refuse exactly the same values.
//!
//! ```
//! use leafid::limits;
//! assert!(limits::batch(10).is_ok());
//! assert!(limits::batch(limits::MAX_BATCH as u64 + 1).is_err());
//! assert_eq!(limits::seconds("heartbeat", 1.5).unwrap().as_millis(), 1500);
//! assert!(limits::seconds("heartbeat", f64::NAN).is_err());
//! assert!(limits::seconds("wait_timeout", 1e19).unwrap() == limits::NO_LIMIT);
//! ```

use std::time::Duration;

use crate::error::{Error, Result};

/// The most ids one batch call (`next_ids`, `fill`, Node `nextIds`) returns: 1 M ids
/// (8 MiB) is produced in a few milliseconds; larger batches would hold the caller (and
/// in Node the event loop) for a visible time.
pub const MAX_BATCH: usize = 1 << 20;

/// The most tags [`SegmentOptions::tags`](crate::SegmentOptions::tags) may list (their
/// first segments load at connect). Bindings check it before reading a list, so a
/// list that claims a huge length costs nothing.
pub const MAX_TAGS: usize = 10_000;

/// Checks the length of a tag list (see [`MAX_TAGS`]).
pub fn tag_count(n: u64) -> Result<usize> {
    if n > MAX_TAGS as u64 {
        return Err(Error::InvalidConfig(format!(
            "{n} tags listed to load at connect; at most {MAX_TAGS}"
        )));
    }
    Ok(n as usize)
}

/// The duration that stands for "no limit" (a timeout the caller wants never to end).
/// About 31 years: far beyond any process's life, yet `Instant + NO_LIMIT` cannot overflow.
pub const NO_LIMIT: Duration = Duration::from_secs(1_000_000_000);

/// Checks a batch size.
pub fn batch(n: u64) -> Result<usize> {
    if n > MAX_BATCH as u64 {
        return Err(Error::InvalidConfig(format!(
            "batch of {n} ids is above the limit of {MAX_BATCH}; ask in several batches"
        )));
    }
    Ok(n as usize)
}

/// A duration given in seconds (Python's habit): finite and non-negative; anything past
/// [`NO_LIMIT`] (or infinite) is [`NO_LIMIT`]. Each option's own upper bound (a heartbeat
/// of at most a minute, …) is checked where the option is validated, in the core.
pub fn seconds(what: &str, secs: f64) -> Result<Duration> {
    from_f64(what, secs, 1.0, "seconds")
}

/// A duration given in milliseconds (Node's habit), as [`seconds`].
pub fn millis(what: &str, ms: f64) -> Result<Duration> {
    from_f64(what, ms, 1e-3, "milliseconds")
}

fn from_f64(what: &str, v: f64, to_secs: f64, unit: &str) -> Result<Duration> {
    if v.is_nan() || v < 0.0 {
        return Err(Error::InvalidConfig(format!(
            "{what} must be a non-negative number of {unit}, not {v}"
        )));
    }
    let secs = v * to_secs;
    if !secs.is_finite() || secs > NO_LIMIT.as_secs_f64() {
        return Ok(NO_LIMIT);
    }
    // In range by the checks above, so this cannot panic.
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn edges() {
        assert!(seconds("x", -0.0).is_ok());
        assert!(seconds("x", -1e-9).is_err());
        assert_eq!(seconds("x", f64::INFINITY).unwrap(), NO_LIMIT);
        assert_eq!(seconds("x", 1e19).unwrap(), NO_LIMIT);
        assert!(millis("x", f64::NAN).is_err());
        assert_eq!(millis("x", 1.0).unwrap(), Duration::from_millis(1));
        assert_eq!(batch(MAX_BATCH as u64).unwrap(), MAX_BATCH);
    }

    proptest! {
        /// No f64 panics, and every accepted value can be added to an `Instant`.
        #[test]
        fn no_number_panics(v in proptest::num::f64::ANY) {
            for d in [seconds("x", v), millis("x", v)].into_iter().flatten() {
                prop_assert!(std::time::Instant::now().checked_add(d).is_some());
            }
        }
    }
}
