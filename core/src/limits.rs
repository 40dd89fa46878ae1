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

/// The most ids one batch call (`next_ids`, `fill`, the async forms; segment mode's
/// synchronous forms too) returns: 1 Mi ids, 8 MiB. Segment mode hands them out of
/// memory; snowflake mode is paced by the sequence (batches take three quarters of each
/// millisecond's, 3 072 ids in Leaf's layout), so a maximal snowflake batch takes about
/// 370 ms (measured, see benches/README.md), sleeping between milliseconds (the async
/// form on a timer, without a thread). A snowflake batch that holds its caller's thread
/// instead has the lower limit below.
pub const MAX_BATCH: usize = 1 << 20;

/// How many milliseconds of sequence one snowflake batch that never waits on I/O
/// (`next_ids_now`, `fill_now`; Node's synchronous `nextIds`) may span. Such a batch
/// spins on its caller's thread (Node's event loop) until the sequence has given it
/// every id, so it holds the caller about this long (8–9 ms measured for the maximal
/// one, see benches/README.md); the async form (`next_ids_async`) takes up to
/// [`MAX_BATCH`] without holding a thread. In ids: [`max_sync_batch`].
pub const SYNC_BATCH_MS: u64 = 8;

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

/// The most ids a never-waiting snowflake batch takes when a layout gives batches
/// `batch_ids_per_ms` ids per millisecond: [`SYNC_BATCH_MS`] milliseconds' worth
/// (24 576 in Leaf's layout, 3 072 in the JS-safe one), never above [`MAX_BATCH`].
pub fn max_sync_batch(batch_ids_per_ms: u64) -> usize {
    SYNC_BATCH_MS
        .saturating_mul(batch_ids_per_ms)
        .min(MAX_BATCH as u64) as usize
}

/// Checks the size of a never-waiting snowflake batch (see [`max_sync_batch`]).
pub fn sync_batch(n: u64, batch_ids_per_ms: u64) -> Result<usize> {
    let max = max_sync_batch(batch_ids_per_ms);
    if n > max as u64 {
        return Err(Error::InvalidConfig(format!(
            "next_ids_now takes at most {max} ids with this layout ({SYNC_BATCH_MS} ms of its \
             sequence, which the call waits out holding its thread); use next_ids_async for \
             up to {MAX_BATCH}, or several smaller batches"
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
        assert_eq!(max_sync_batch(3072), 24_576);
        assert!(sync_batch(24_576, 3072).is_ok());
        let e = sync_batch(24_577, 3072).unwrap_err().to_string();
        assert!(e.contains("next_ids_async"), "{e}");
        assert_eq!(max_sync_batch(u64::MAX / 16), MAX_BATCH);
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
