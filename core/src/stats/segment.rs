//! What a segment generator shows of itself: each tag's segments and refill figures.
//! Plain data, apart from the generator that fills it, so that `metrics` (which renders
//! it) and the segment mode (which fills it) both depend on this file and not on each
//! other.

use std::time::Duration;

/// One segment's state: ids `value..max` remain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentStats {
    /// The next id it would hand out.
    pub value: i64,
    /// Its exclusive end.
    pub max: i64,
    /// The step it was loaded with.
    pub step: i64,
}

/// One tag's state, as Leaf's `/cache` page shows it, plus refill figures.
#[derive(Debug, Clone)]
pub struct TagStats {
    /// The tag.
    pub tag: String,
    /// Whether its first segment was loaded.
    pub initialized: bool,
    /// Index (0 or 1) of the current segment in `segments`.
    pub current: usize,
    /// Whether the next segment is loaded and waiting.
    pub next_ready: bool,
    /// Both segments.
    pub segments: [SegmentStats; 2],
    /// The step of the latest load (dynamic).
    pub step: i64,
    /// The table's step (the floor of the dynamic step).
    pub min_step: i64,
    /// Successful loads so far.
    pub refills: u64,
    /// How long the latest load took.
    pub last_refill: Option<Duration>,
    /// How long every successful load took, bucketed.
    pub refill_latency: RefillLatency,
    /// Ids issued for the tag by this generator in this process (a forked child counts
    /// from zero). Derived from the segments' state, so issuing pays nothing for it; in
    /// the chunked form ([`SegmentOptions::thread_chunk`](crate::SegmentOptions::thread_chunk))
    /// ids held in threads' chunks count as issued.
    pub issued: u64,
    /// The latest load's error, cleared by the next success.
    pub last_error: Option<String>,
}

/// The upper bounds (seconds) of [`RefillLatency`]'s buckets: 1 ms to 30 s, the
/// refill's own timeout, roughly tripling.
pub const REFILL_LATENCY_BOUNDS: [f64; 11] = [
    0.001,
    0.003,
    0.01,
    0.03,
    0.1,
    0.3,
    1.0,
    3.0,
    10.0,
    30.0,
    f64::INFINITY,
];

/// Durations of a tag's successful segment loads, as a histogram: counts per bucket of
/// [`REFILL_LATENCY_BOUNDS`] (not cumulative), their sum and count. Kept under the tag's
/// slow-path lock by the refill task, never touched by issuing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefillLatency {
    /// Loads per bucket: `buckets[i]` counts durations in
    /// `(REFILL_LATENCY_BOUNDS[i - 1], REFILL_LATENCY_BOUNDS[i]]`.
    pub buckets: [u64; REFILL_LATENCY_BOUNDS.len()],
    /// The sum of all durations, in seconds.
    pub sum_seconds: f64,
    /// How many loads.
    pub count: u64,
}

impl RefillLatency {
    /// Adds one load that took `took`.
    pub fn observe(&mut self, took: Duration) {
        let secs = took.as_secs_f64();
        // The last bound is infinite, so a bucket is always found.
        let i = REFILL_LATENCY_BOUNDS
            .iter()
            .position(|&bound| secs <= bound)
            .unwrap_or(REFILL_LATENCY_BOUNDS.len() - 1);
        self.buckets[i] += 1;
        self.sum_seconds += secs;
        self.count += 1;
    }
}
