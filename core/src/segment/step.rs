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
///
/// Total over all inputs: the arithmetic saturates, and the result is at least 1 even
/// for a step or floor below 1 (a row written by hand), so a refill never asks the
/// store for a step that would lower `max_id`.
pub fn next_step(step: i64, min_step: i64, lasted: Duration, max_step: i64) -> i64 {
    let floor = min_step.max(1);
    let step = step.max(floor);
    let next = if lasted < SEGMENT_DURATION {
        let doubled = step.saturating_mul(2);
        if doubled > max_step {
            step
        } else {
            doubled
        }
    } else if lasted < SEGMENT_DURATION * 2 {
        step
    } else if step / 2 >= floor {
        step / 2
    } else {
        step
    };
    next.max(1)
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

    #[test]
    fn a_step_below_one_becomes_the_floor_not_a_negative_request() {
        assert_eq!(next_step(0, 0, MIN, MAX_STEP), 2);
        assert_eq!(next_step(-8, -8, MIN, MAX_STEP), 2);
        assert_eq!(next_step(-8, 100, 31 * MIN, MAX_STEP), 100);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn any_duration() -> impl Strategy<Value = Duration> {
            prop_oneof![
                (0u64..7200).prop_map(Duration::from_secs),
                any::<u64>().prop_map(Duration::from_millis),
                Just(Duration::MAX),
            ]
        }

        fn near_bounds() -> impl Strategy<Value = i64> {
            prop_oneof![
                any::<i64>(),
                (0i64..64).prop_map(|d| i64::MAX - d),
                (0i64..64).prop_map(|d| i64::MIN + d),
                (-64i64..64),
                (0i64..64).prop_map(|d| i64::MAX / 2 + d - 32),
            ]
        }

        proptest! {
            /// Issue 11: any step, floor and cap, near the i64 bounds included, gives a
            /// step of at least 1 without overflowing (a debug build panics on overflow).
            #[test]
            fn next_step_is_total_and_positive(
                step in near_bounds(),
                min_step in near_bounds(),
                max_step in near_bounds(),
                lasted in any_duration(),
            ) {
                let next = next_step(step, min_step, lasted, max_step);
                prop_assert!(next >= 1);
            }

            /// With a valid row (1 <= floor <= step), the step moves only by Leaf's
            /// rules: it never passes the cap by growing, never drops below the floor,
            /// and changes by a factor of two at most (a doubling past `i64::MAX`
            /// saturates there, under a cap of `i64::MAX`).
            #[test]
            fn next_step_stays_within_floor_and_cap(
                min_step in 1i64..=i64::MAX,
                extra in 0i64..=i64::MAX,
                max_step in near_bounds(),
                lasted in any_duration(),
            ) {
                let step = min_step.saturating_add(extra);
                let next = next_step(step, min_step, lasted, max_step);
                prop_assert!(next >= min_step);
                prop_assert!(next <= step || next <= max_step);
                prop_assert!(next == step || next == step / 2 || next == step.saturating_mul(2));
            }
        }
    }
}
