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

pub use generator::{SegmentGenerator, TagHandle};
pub use high_water::MAX_MARKS;
pub use options::{SegmentOptions, JS_SAFE_LIMIT, MAX_REFRESH_INTERVAL};
pub use store::{Allocation, SegmentStore, TagRow};
// Plain data, kept below both modes so that `metrics` can read it without importing a mode.
pub use crate::stats::segment::{RefillLatency, SegmentStats, TagStats, REFILL_LATENCY_BOUNDS};
pub use thread_chunk::MAX_THREAD_CHUNK;
