//! The generator's clock: the real clock, or ahead of it while a worker id's floor is.
//!
//! A new holder must issue above every timestamp an earlier holder of its worker id may
//! have issued: its floor (a recorded bound up to the lookahead ahead of the clock, or,
//! with no record, the registry's clock plus the fence's reach). It does not wait for the
//! real clock to pass the floor. From the floor on, this clock runs at half speed until
//! the real clock catches up (after twice the floor's lead), then it is the real clock:
//! ids stay unique and increasing, their time part runs ahead of the wall clock by at
//! most the floor's lead and for at most twice that, and a spent millisecond waits at
//! most 2 ms. Baidu's uid-generator borrows future seconds the same way; others call it a
//! logical timestamp.
//!
//! One atomic holds the whole state: `catch_up = 2 × floor − real at the raise`, so the
//! clock reads `max(real, (catch_up + real) / 2)`, which is the floor at the raise, grows
//! by half the real time since, and meets the real clock when it reaches `catch_up`. A
//! raise only ever moves `catch_up` up, so the clock never steps back. Registry clock
//! checks (skew, jumped clocks) read the real clock, never this one.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::clock::Clock;

/// The real clock, or ahead of it until it catches up with the last floor raised.
#[derive(Debug)]
pub(super) struct LeadClock {
    real: Arc<dyn Clock>,
    /// `2 × floor − real` at the last raise; `i64::MIN` when nothing was raised.
    catch_up: AtomicI64,
}

impl LeadClock {
    pub(super) fn new(real: Arc<dyn Clock>) -> LeadClock {
        LeadClock {
            real,
            catch_up: AtomicI64::new(i64::MIN),
        }
    }

    /// The real clock, without the lead.
    pub(super) fn real_millis(&self) -> i64 {
        self.real.now_millis()
    }

    /// Moves the clock to at least `floor_ms` now, then at half speed until the real
    /// clock passes it. Never moves the clock back.
    pub(super) fn raise_to(&self, floor_ms: i64) {
        let real = self.real.now_millis();
        if floor_ms <= real {
            return;
        }
        let catch_up = floor_ms.saturating_mul(2).saturating_sub(real);
        // Relaxed: the state word's install and the issue limit (both ordered) publish
        // the raise; a caller that still reads the old value sees a clock behind the
        // word, re-reads it (`slow.rs`) and finds this one.
        self.catch_up.fetch_max(catch_up, Ordering::Relaxed);
    }

    /// The generator's time now (ms since 1970): the real clock, or the floor carried
    /// forward at half speed while that is ahead.
    #[inline]
    pub(super) fn now_millis(&self) -> i64 {
        let real = self.real.now_millis();
        // Relaxed: see `raise_to`.
        let catch_up = self.catch_up.load(Ordering::Relaxed);
        if real >= catch_up {
            real
        } else {
            // Both are far below i64::MAX / 2 (timestamps near 2^41 to 2^43 ms).
            (catch_up + real) / 2
        }
    }

    /// The real clock, to sleep on from another thread.
    pub(super) fn real_handle(&self) -> Arc<dyn Clock> {
        self.real.clone()
    }

    /// Sleeps `ms` on the real clock (a manual clock in tests advances instead).
    pub(super) fn sleep_millis(&self, ms: u64) {
        self.real.sleep_millis(ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn the_clock_starts_at_the_floor_runs_at_half_speed_and_meets_the_real_one() {
        let real = ManualClock::new(1_000_000);
        let clock = LeadClock::new(real.clone());
        assert_eq!(clock.now_millis(), 1_000_000);
        clock.raise_to(1_010_000);
        assert_eq!(clock.now_millis(), 1_010_000);
        real.advance(2_000);
        assert_eq!(clock.now_millis(), 1_011_000);
        real.advance(18_000);
        assert_eq!(clock.now_millis(), 1_020_000);
        real.advance(5);
        assert_eq!(clock.now_millis(), 1_020_005);
    }

    #[test]
    fn a_lower_floor_never_moves_the_clock_back() {
        let real = ManualClock::new(1_000_000);
        let clock = LeadClock::new(real.clone());
        clock.raise_to(1_010_000);
        real.advance(100);
        let before = clock.now_millis();
        clock.raise_to(1_000_050);
        clock.raise_to(999_000);
        assert_eq!(clock.now_millis(), before);
        let mut last = before;
        for _ in 0..30_000 {
            real.advance(1);
            let now = clock.now_millis();
            assert!(now >= last);
            last = now;
        }
    }
}
