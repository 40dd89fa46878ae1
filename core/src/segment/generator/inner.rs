//! [`Inner`], the state a generator's clones and handles share — its [`Loader`]
//! (options, store, marks), the tag map, the refresh task and the lookups of missing
//! tags — and the tag map itself. The work on it is split by job: `refresh.rs` keeps
//! the tag map in step with the table, `find.rs` looks up tags missing from it,
//! `lifecycle.rs` runs the refresh task, follows forks and closes.
//!
//! Separate so that each of those files names the state without naming the others,
//! and the public calls (`generator.rs`, `handle.rs`) sit above them all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;
// Tags are looked up on every `next_id(tag)`; FxHash is several times cheaper than
// SipHash on short keys, and the keys come from the table, not from an attacker.
use rustc_hash::FxHashMap as HashMap;

use crate::error::{Error, Mode, Result};
use crate::segment::loader::Loader;
use crate::segment::lookup::LookupState;
use crate::segment::tag_buffer::TagBuffer;
use crate::segment::TagStats;

/// The mode segment errors are counted under.
pub(super) const SEGMENT: Mode = Mode::Segment;

#[derive(Debug)]
pub(in crate::segment) struct Inner {
    /// The options, store and high-water marks, shared with the tags' refill tasks.
    pub(super) loader: Arc<Loader>,
    pub(super) tags: ArcSwap<TagMap>,
    /// Orders tag-map updates against refreshes: a refresh drops a tag only if it was
    /// added before the refresh read its listing (see [`Inner::refresh`]).
    pub(super) ticket: AtomicU64,
    pub(super) closed: AtomicBool,
    /// The fork epoch the background tasks run under.
    pub(super) epoch: AtomicU64,
    pub(super) refresher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Store lookups of tags missing from the cache, rate-limited per name.
    /// With the fork epoch they were made under.
    pub(super) lookups: Mutex<LookupState>,
}

/// The tags of a generator. Replaced whole (copy on write, `ArcSwap::rcu`), so that
/// concurrent updates never lose one another.
#[derive(Debug, Default, Clone)]
pub(super) struct TagMap {
    /// The tags `next_id(tag)` finds.
    pub(super) live: HashMap<String, Entry>,
    /// Tags a refresh dropped whose buffers handles may still hold: a tag that comes
    /// back gets the same buffer (one buffer per tag), and `close()` ends them too. A
    /// buffer nobody holds is forgotten; the tag's high-water mark is not
    /// ([`Loader::high_water`]), so ids never go backwards either way.
    pub(super) dropped: HashMap<String, Weak<TagBuffer>>,
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) buf: Arc<TagBuffer>,
    /// The [`Inner::ticket`] taken when the tag was added.
    pub(super) born: u64,
}

impl TagMap {
    pub(super) fn get(&self, tag: &str) -> Option<&Arc<TagBuffer>> {
        self.live.get(tag).map(|e| &e.buf)
    }

    /// The buffer for `tag`: the live one, one a handle still holds, or a new one (with
    /// thread chunks of up to `chunk` ids).
    pub(super) fn buffer_for(&self, tag: &str, epoch: u64, chunk: u64) -> Arc<TagBuffer> {
        self.get(tag)
            .cloned()
            .or_else(|| self.dropped.get(tag).and_then(Weak::upgrade))
            .unwrap_or_else(|| TagBuffer::shared(tag.to_string(), epoch, chunk))
    }

    /// Every buffer that may still issue: live ones and dropped ones still held.
    pub(super) fn all(&self) -> Vec<Arc<TagBuffer>> {
        let live = self.live.values().map(|e| e.buf.clone());
        live.chain(self.dropped.values().filter_map(Weak::upgrade))
            .collect()
    }
}

#[cfg(feature = "metrics")]
impl crate::metrics::Observed for Inner {
    fn snapshot(&self) -> Option<crate::metrics::Snapshot> {
        let open = self.check_open().is_ok();
        open.then(|| crate::metrics::Snapshot::Segment(self.stats()))
    }
}

impl Inner {
    pub(super) fn stats(&self) -> Vec<TagStats> {
        let tags = self.tags.load();
        let mut stats: Vec<TagStats> = tags.live.values().map(|e| e.buf.stats()).collect();
        stats.sort_by(|a, b| a.tag.cmp(&b.tag));
        stats
    }

    pub(super) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }
}
