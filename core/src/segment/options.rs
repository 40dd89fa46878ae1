//! [`SegmentOptions`]: how a segment generator behaves, with a setter per option.

use std::sync::Arc;
use std::time::Duration;

use super::step;
use super::thread_chunk::MAX_THREAD_CHUNK;
use crate::clock::{self, Clock};
use crate::error::{Error, Result};

/// How a [`SegmentGenerator`](super::SegmentGenerator) behaves. `Default` gives
/// Leaf's values; a setter of each field's name changes one:
///
/// ```
/// use std::time::Duration;
/// let opts = leafid::SegmentOptions::default()
///     .wait_timeout(Duration::from_millis(200))
///     .create_table(true);
/// assert!(opts.create_table);
/// ```
///
/// `#[non_exhaustive]`: built from `default()` and the setters (not a struct literal),
/// so a new option is not a breaking change. The fields stay public to read.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SegmentOptions {
    /// How long `next_id` (blocking) and `next_id_async` wait for a refill when no id is
    /// at hand, and how long the blocking calls wait for the store lookup of a tag
    /// missing from the cache (1 s). Zero means "never wait": such calls then fail at
    /// once, as `next_id_now` always does, and work once a segment is there.
    pub wait_timeout: Duration,
    /// How often the tag list is reloaded from the table (60 s, as Leaf).
    pub refresh_interval: Duration,
    /// Create `leaf_alloc` at connect if missing (false; SQLite URLs always do).
    pub create_table: bool,
    /// Preload the next segment at 10% (true, as Leaf). False loads only when a
    /// segment is spent: a single buffer, for comparisons.
    pub double_buffer: bool,
    /// The largest step the dynamic step grows to (Leaf's `MAX_STEP`, 1 000 000).
    pub max_step: i64,
    /// Never issue an id at or above 2^53 (false). For tags whose ids travel as JSON
    /// numbers: every id below 2^53 is exact in a JavaScript `number`. A segment that
    /// crosses the limit is cut short there; once the tag reaches it, calls fail with
    /// `InvalidConfig` naming the tag.
    pub js_safe: bool,
    /// Tags whose first segments `connect` loads before it returns (none): the first
    /// `next_id` of each then never waits, even with a `wait_timeout` of zero. A tag
    /// missing from the table, or whose first load fails, fails the connect with an
    /// error naming it.
    pub tags: Vec<String>,
    /// Where time comes from for the dynamic step and retry back-off.
    pub clock: Arc<dyn Clock>,
    /// The chunked form: how many ids a thread reserves for itself at a time, per tag
    /// (0, off: the strictly ordered form). With chunks, threads meet on the tag's
    /// shared cursor once per chunk instead of once per id, so single-id calls
    /// (`next_id`, `try_next_id`, `next_id_now`, the first attempt of `next_id_async`)
    /// scale with threads; each thread's ids still increase, but ids of different
    /// threads are no longer in call order: a later call on another thread may get a
    /// smaller id, by less than this size × the threads issuing from the tag (a chunk
    /// the tag's cursor has moved further past is given up). A thread that exits (or the
    /// thread that forks, in the child), and a chunk given up, leave the rest of the
    /// chunk unused: a gap, never a reuse. A thread's chunk grows from 1 id, doubling per chunk, up to this size;
    /// at most [`MAX_THREAD_CHUNK`](crate::segment::MAX_THREAD_CHUNK). See `docs/segment.md`,
    /// "Order", for what each form guarantees.
    pub thread_chunk: u64,
}

/// The longest `refresh_interval` accepted: a day (tags created elsewhere must show up).
pub const MAX_REFRESH_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// The first id a `js_safe` generator refuses: 2^53.
pub const JS_SAFE_LIMIT: i64 = 1 << 53;

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            wait_timeout: Duration::from_secs(1),
            refresh_interval: Duration::from_secs(60),
            create_table: false,
            double_buffer: true,
            max_step: step::MAX_STEP,
            js_safe: false,
            tags: Vec::new(),
            clock: clock::system(),
            thread_chunk: 0,
        }
    }
}

impl SegmentOptions {
    /// Sets [`wait_timeout`](Self::wait_timeout).
    pub fn wait_timeout(mut self, wait: Duration) -> Self {
        self.wait_timeout = wait;
        self
    }

    /// Sets [`refresh_interval`](Self::refresh_interval).
    pub fn refresh_interval(mut self, every: Duration) -> Self {
        self.refresh_interval = every;
        self
    }

    /// Sets [`create_table`](Self::create_table).
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// Sets [`double_buffer`](Self::double_buffer).
    pub fn double_buffer(mut self, double: bool) -> Self {
        self.double_buffer = double;
        self
    }

    /// Sets [`max_step`](Self::max_step).
    pub fn max_step(mut self, max: i64) -> Self {
        self.max_step = max;
        self
    }

    /// Sets [`js_safe`](Self::js_safe).
    pub fn js_safe(mut self, on: bool) -> Self {
        self.js_safe = on;
        self
    }

    /// Sets [`tags`](Self::tags).
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`clock`](Self::clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`thread_chunk`](Self::thread_chunk).
    pub fn thread_chunk(mut self, ids: u64) -> Self {
        self.thread_chunk = ids;
        self
    }
}

impl SegmentOptions {
    /// Refuses options no generator can run with (checked at connect).
    pub(super) fn validate(&self) -> Result<()> {
        crate::limits::tag_count(self.tags.len() as u64)?;
        if self.max_step <= 0 || self.max_step > i32::MAX as i64 {
            return Err(Error::InvalidConfig(format!(
                "max_step {} out of range; use 1..=2147483647 (Leaf's default is 1000000)",
                self.max_step
            )));
        }
        if self.refresh_interval.is_zero() || self.refresh_interval > MAX_REFRESH_INTERVAL {
            return Err(Error::InvalidConfig(format!(
                "refresh_interval {:?} out of range; use above zero and at most {:?} (Leaf refreshes every 60 s)",
                self.refresh_interval,
                MAX_REFRESH_INTERVAL
            )));
        }
        if self.thread_chunk > MAX_THREAD_CHUNK {
            return Err(Error::InvalidConfig(format!(
                "thread_chunk {} out of range; use 0 (strictly ordered) to {MAX_THREAD_CHUNK}",
                self.thread_chunk
            )));
        }
        Ok(())
    }
}
