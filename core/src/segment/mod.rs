//! Segment mode (Leaf-segment): ids from ranges reserved in a database table.
//!
//! Each tag (`biz_tag`) is a row of `leaf_alloc`. A generator reserves `step` ids at a
//! time by raising the row's `max_id`, and hands them out from memory. Like Leaf it keeps
//! two segments per tag: once 10% of the current one is used, a background task loads
//! the next, so a caller meets the database only when both are spent (or on a tag's
//! first use). Then `next_id` blocks up to [`SegmentOptions::wait_timeout`],
//! `next_id_now` never waits (it fails at once while the refill runs in the
//! background), and `next_id_async` waits up to the timeout on a notification, holding
//! no thread. The step grows and shrinks so a segment lasts about 15 minutes ([`step`]).
//!
//! Tags are usable at once: a handle starts loading its tag's first segment when made,
//! `create_tag` returns with it loaded, [`SegmentOptions::tags`] are loaded at connect,
//! and a tag missing from the cache is looked up in the store (at most once a second per
//! name) before `TagNotFound`.
//!
//! Ids never go backwards in one generator: every segment loaded must start at or
//! above the tag's high-water mark (the end of the highest segment of that tag this
//! generator loaded), kept for the generator's life through refresh, drop and
//! re-create of the tag ([`MAX_MARKS`] tags at most). A row lowered, deleted and
//! re-created lower, or restored from a backup is refused with `Malformed` until it is
//! above the mark again.
//!
//! ```
//! # fn main() -> leafid::Result<()> {
//! use leafid::{SegmentGenerator, SegmentOptions};
//! let dir = tempfile::tempdir().unwrap();
//! let url = format!("sqlite://{}/ids.db", dir.path().display());
//! let generator = SegmentGenerator::connect_blocking(&url, SegmentOptions::default())?;
//! let g = generator.clone();
//! leafid::runtime::block_on(async move { g.create_tag("order", 1, 1000, "orders").await })?;
//! let order = generator.tag("order")?;
//! assert_eq!(order.next_id()?, 1);
//! assert_eq!(generator.next_ids("order", 3)?, vec![2, 3, 4]);
//! generator.close();
//! # Ok(()) }
//! ```

mod atomics;
mod buffer;
mod generator;
mod high_water;
mod loader;
mod lookup;
mod options;
mod refill_error;
pub mod step;
pub mod store;
mod tag_buffer;
mod thread_chunk;

use std::time::Duration;

pub use generator::{SegmentGenerator, TagHandle};
pub use high_water::MAX_MARKS;
pub use options::{SegmentOptions, JS_SAFE_LIMIT, MAX_REFRESH_INTERVAL};
pub use store::{Allocation, SegmentStore, TagRow};
pub use thread_chunk::MAX_THREAD_CHUNK;

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
    /// the chunked form ([`SegmentOptions::thread_chunk`]) ids held in threads' chunks
    /// count as issued.
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
