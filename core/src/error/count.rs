//! Errors returned by issuing calls, counted per mode and code ([`counts`]).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Error, Result};

/// Which generator's issuing calls an error came from, for [`counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A [`SegmentGenerator`](crate::SegmentGenerator) (or one of its tag handles).
    Segment,
    /// A [`SnowflakeGenerator`](crate::SnowflakeGenerator).
    Snowflake,
}

impl Mode {
    /// Both modes.
    pub const ALL: [Mode; 2] = [Mode::Segment, Mode::Snowflake];

    /// `"segment"` or `"snowflake"`, as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Segment => "segment",
            Mode::Snowflake => "snowflake",
        }
    }
}

/// Errors returned by issuing calls in this process, per mode and variant (indexed as
/// [`Error::NAMES`]). Process-wide statics, so counting needs no generator, no lock and
/// no allocation; bumped only where an error is returned, never on success.
pub(super) static COUNTS: [[AtomicU64; Error::NAMES.len()]; 2] =
    [const { [const { AtomicU64::new(0) }; Error::NAMES.len()] }; 2];

/// How many errors issuing calls (`next_id` in all its forms, batches, tag handles and
/// lookups) returned in this process so far: `(mode, code, count)` for every mode and
/// every [`Error::code`] seen at least once.
pub fn counts() -> Vec<(Mode, &'static str, u64)> {
    let mut out = Vec::new();
    for mode in Mode::ALL {
        for (i, count) in COUNTS[mode as usize].iter().enumerate() {
            // Relaxed: a statistic, ordered with nothing.
            let n = count.load(Ordering::Relaxed);
            if n > 0 {
                out.push((mode, CODES[i], n));
            }
        }
    }
    out
}

/// [`Error::code`] of each entry of [`Error::NAMES`], in the same order.
const CODES: [&str; Error::NAMES.len()] = [
    "LEAF_INVALID_TAG",
    "LEAF_INVALID_URL",
    "LEAF_INVALID_CONFIG",
    "LEAF_TAG_NOT_FOUND",
    "LEAF_TAG_EXISTS",
    "LEAF_TABLE_MISSING",
    "LEAF_STORE_UNAVAILABLE",
    "LEAF_SEGMENTS_EXHAUSTED",
    "LEAF_CLOSED",
    "LEAF_CLOCK_MOVED_BACKWARDS",
    "LEAF_CLOCK_BEHIND_REGISTRY",
    "LEAF_TIMESTAMP_OVERFLOW",
    "LEAF_WORKER_ID_OUT_OF_RANGE",
    "LEAF_WORKER_ID_EXHAUSTED",
    "LEAF_WORKER_ID_IN_USE",
    "LEAF_CLOCK_SKEW",
    "LEAF_REGISTRY_UNAVAILABLE",
    "LEAF_LEASE_LOST",
    "LEAF_MALFORMED",
    "LEAF_IO",
    "LEAF_ACCESS_DENIED",
];

/// `r`, with its error (if any) counted as returned by an issuing call of `mode`. The
/// success branch is the match alone: no atomic.
#[inline(always)]
pub(crate) fn counted<T>(r: Result<T>, mode: Mode) -> Result<T> {
    match r {
        Ok(v) => Ok(v),
        Err(e) => Err(e.counted(mode)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CODES` follows `NAMES` (the code is the name in upper snake case after `LEAF_`),
    /// so `counts` reports each error under its own `code()`.
    #[test]
    fn codes_follow_names() {
        for (name, code) in Error::NAMES.iter().zip(CODES) {
            let mut snake = String::from("LEAF");
            for c in name.chars() {
                if c.is_ascii_uppercase() {
                    snake.push('_');
                }
                snake.push(c.to_ascii_uppercase());
            }
            assert_eq!(snake, code, "{name}");
        }
        let samples = [
            Error::Closed,
            Error::TagNotFound { tag: "t".into() },
            Error::ClockMovedBackwards { offset_ms: 1 },
            Error::registry("down"),
        ];
        for e in samples {
            let i = Error::NAMES.iter().position(|&n| n == e.name()).unwrap();
            assert_eq!(CODES[i], e.code());
        }
    }

    #[test]
    fn counted_errors_show_in_counts_by_mode_and_code() {
        let before = |mode| {
            counts()
                .into_iter()
                .find(|&(m, c, _)| m == mode && c == "LEAF_TIMESTAMP_OVERFLOW")
                .map_or(0, |(_, _, n)| n)
        };
        let (seg, sf) = (before(Mode::Segment), before(Mode::Snowflake));
        let e = Error::TimestampOverflow { max_ms: 1 }.counted(Mode::Snowflake);
        assert_eq!(e.code(), "LEAF_TIMESTAMP_OVERFLOW");
        assert_eq!(before(Mode::Snowflake), sf + 1);
        assert_eq!(before(Mode::Segment), seg);
    }
}
