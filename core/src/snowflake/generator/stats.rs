//! What a snowflake generator can tell about itself ([`SnowflakeStats`]), and how it
//! counts the ids it issued without touching the hot path.
//!
//! Counting: the state word already holds the last id issued, and within one
//! millisecond ids are consecutive from that millisecond's first. So the count is the
//! sum, over past milliseconds, of `last - first + 1`, plus the millisecond in progress.
//! Only the caller whose swap starts a new millisecond (once per millisecond, on the
//! issuing path's rarest branch) adds the finished millisecond to a counter and records
//! the new one's first id; every other call adds nothing. A thread preempted between
//! its swap and that record may make one millisecond go uncounted: the count can fall
//! short, never run over.

use std::sync::atomic::Ordering;

use super::super::word::{Shape, CLOSED_STATE, LOST_LIMIT, OPENING_LIMIT};
use super::state::{Core, NO_SKEW};
use crate::runtime;

// Plain data, kept below both modes so that `metrics` can read it without importing a mode.
pub use crate::stats::snowflake::{LeaseStatus, SnowflakeStats};

/// Ids of one millisecond from `first` (its first id) to `last` (its last id so far);
/// 0 unless both are real ids of one millisecond and worker id (`last` may be a marker,
/// the closed word, or the empty word 0).
fn run_len(shape: &Shape, first: u64, last: u64) -> u64 {
    let same_ms_and_worker = (first ^ last) >> shape.seq_bits == 0;
    if last != 0 && last != CLOSED_STATE && last >= first && same_ms_and_worker {
        last - first + 1
    } else {
        0
    }
}

impl Core {
    /// After a successful swap from `prev` whose first id is `first`: counts the
    /// finished millisecond when the swap started a new one. One comparison otherwise.
    #[inline(always)]
    pub(super) fn note_issued(&self, prev: u64, first: u64) {
        if self.shape.timestamp(prev) != self.shape.timestamp(first) {
            self.rolled_over(prev, first);
        }
    }

    /// Adds the millisecond `prev` ended to the count and makes `next` the first id of
    /// the millisecond in progress. Also called at install (a marker follows, which is
    /// no id) and at close.
    #[cold]
    #[inline(never)]
    pub(super) fn rolled_over(&self, prev: u64, next: u64) {
        // Relaxed throughout: statistics, ordered with nothing; the word's own swaps
        // decide which ids exist. `fetch_max`: a late record of an older millisecond
        // never replaces a newer one (words only grow).
        let first = self.ms_first.load(Ordering::Relaxed);
        let n = run_len(&self.shape, first, prev);
        if n > 0 {
            self.issued.fetch_add(n, Ordering::Relaxed);
        }
        self.ms_first.fetch_max(next, Ordering::Relaxed);
    }

    /// Records a backward clock step of `offset_ms` a caller met.
    pub(super) fn note_backward(&self, offset_ms: i64) {
        // Relaxed: a statistic.
        self.max_backward_ms.fetch_max(offset_ms, Ordering::Relaxed);
    }

    /// Records the skew of a registry clock reading.
    pub(super) fn note_skew(&self, skew_ms: i64) {
        // Relaxed: a statistic.
        self.skew_ms.store(skew_ms, Ordering::Relaxed);
    }

    pub(super) fn stats(&self) -> SnowflakeStats {
        let now = self.clock.now_millis();
        let limit = self.limit.get();
        let lease = if self.closed.load(Ordering::Acquire) {
            LeaseStatus::Closed
        } else if self.epoch.load(Ordering::Acquire) != runtime::fork_epoch() {
            LeaseStatus::Forked
        } else if limit == LOST_LIMIT {
            LeaseStatus::Lost
        } else if limit == OPENING_LIMIT {
            LeaseStatus::Acquiring
        } else if limit < now {
            LeaseStatus::Late
        } else {
            LeaseStatus::Held
        };
        let held = matches!(lease, LeaseStatus::Held | LeaseStatus::Late);
        // Relaxed: statistics (see `rolled_over`).
        let first = self.ms_first.load(Ordering::Relaxed);
        let counted =
            self.issued.load(Ordering::Relaxed) + run_len(&self.shape, first, self.state.load());
        // A scrape between a new millisecond's swap and its count would read less than
        // the one before; a counter must never go down.
        let issued = self
            .reported
            .fetch_max(counted, Ordering::Relaxed)
            .max(counted);
        let skew = self.skew_ms.load(Ordering::Relaxed);
        SnowflakeStats {
            // Relaxed: as `SnowflakeGenerator::worker_id`.
            worker_id: self.worker.load(Ordering::Relaxed),
            issued,
            lease,
            bound_lead_ms: held.then(|| limit.saturating_sub(now)),
            clock_skew_ms: (skew != NO_SKEW).then_some(skew),
            max_backward_ms: self.max_backward_ms.load(Ordering::Relaxed),
            persist_failures: self.persist_failures.load(Ordering::Relaxed),
        }
    }
}

#[cfg(feature = "metrics")]
impl crate::metrics::Observed for Core {
    fn snapshot(&self) -> Option<crate::metrics::Snapshot> {
        let stats = self.stats();
        (stats.lease != LeaseStatus::Closed).then_some(crate::metrics::Snapshot::Snowflake(stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape::new(41, 10, 12, 0);

    #[test]
    fn run_len_counts_one_millisecond_of_one_worker() {
        let first = SHAPE.compose(100, 3, 17);
        assert_eq!(run_len(&SHAPE, first, first), 1);
        assert_eq!(run_len(&SHAPE, first, first + 9), 10);
        // Another millisecond, another worker, the empty and the closed word: no run.
        assert_eq!(run_len(&SHAPE, first, SHAPE.compose(101, 3, 17)), 0);
        assert_eq!(run_len(&SHAPE, first, SHAPE.compose(100, 4, 17)), 0);
        assert_eq!(run_len(&SHAPE, first, 0), 0);
        assert_eq!(run_len(&SHAPE, first, CLOSED_STATE), 0);
        assert_eq!(run_len(&SHAPE, 0, 0), 0);
    }
}
