//! Leaf's dynamic step: size segments so that one lasts about 15 minutes.

use std::time::Duration;

/// Leaf's cap on a grown step (`MAX_STEP`).
pub const MAX_STEP: i64 = 1_000_000;

/// How long Leaf wants one segment to last (`SEGMENT_DURATION`).
pub const SEGMENT_DURATION: Duration = Duration::from_secs(15 * 60);

/// The step for the next load, from the current one, the table's step (the floor) and
/// how long the previous segment lasted: double when it lasted under 15 minutes (up
/// to `max_step`, Leaf's [`MAX_STEP`] by default), keep it for 15–30 minutes, halve it
/// (not below the table's step) from 30 minutes on.
pub fn next_step(step: i64, min_step: i64, lasted: Duration, max_step: i64) -> i64 {
    if lasted < SEGMENT_DURATION {
        if step * 2 > max_step {
            step
        } else {
            step * 2
        }
    } else if lasted < SEGMENT_DURATION * 2 {
        step
    } else if step / 2 >= min_step {
        step / 2
    } else {
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn doubles_when_segments_last_under_fifteen_minutes() {
        assert_eq!(next_step(1000, 1000, 5 * MIN, MAX_STEP), 2000);
    }

    #[test]
    fn never_grows_past_max_step() {
        assert_eq!(next_step(600_000, 1000, MIN, MAX_STEP), 600_000);
        assert_eq!(next_step(500_000, 1000, MIN, MAX_STEP), 1_000_000);
    }

    #[test]
    fn keeps_step_between_fifteen_and_thirty_minutes() {
        assert_eq!(next_step(4000, 1000, 20 * MIN, MAX_STEP), 4000);
    }

    #[test]
    fn halves_after_thirty_minutes_but_not_below_the_table_step() {
        assert_eq!(next_step(4000, 1000, 31 * MIN, MAX_STEP), 2000);
        assert_eq!(next_step(1500, 1000, 31 * MIN, MAX_STEP), 1500);
    }
}
