//! [`SegmentGenerator`]: the public calls of segment mode — connect, issue by tag name,
//! make a [`TagHandle`], create tags, refresh, stats, close.
//!
//! The generator's state and its jobs live in this folder, each file naming only the
//! ones listed before it:
//! - `inner.rs`: the shared state ([`Inner`]) and the tag map;
//! - `refresh.rs`: keeping the tag map in step with the table;
//! - `lifecycle.rs`: the refresh task, following a fork, close;
//! - `find.rs`: looking up a tag missing from the cache;
//! - `handle.rs`: [`TagHandle`], the calls for one tag;
//! - `tests.rs`: unit tests on stores built for them (one that hangs, one that holds
//!   its listing).
//!
//! Each tag's own work (the ring, its slow path, refills) is `tag_buffer.rs` and its
//! folder, below all of these.

mod find;
mod handle;
mod inner;
mod lifecycle;
mod refresh;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;

pub use handle::TagHandle;
use inner::{Inner, TagMap, SEGMENT};

use super::loader::Loader;
use super::lookup::LookupState;
use super::refill_error::settled_now;
use super::store::{self, validate_start, validate_step, validate_tag, SegmentStore, TagRow};
use super::{SegmentOptions, TagStats};
use crate::error::{counted, Error, Result};
use crate::runtime;

/// Issues ids for the tags of one `leaf_alloc` table.
///
/// Cheap to clone: clones share the tags, segments and background tasks.
#[derive(Clone, Debug)]
pub struct SegmentGenerator {
    inner: Arc<Inner>,
}

impl SegmentGenerator {
    /// Opens the store a URL names (`mysql://…`, `sqlite://path`, `memory:`), creates the
    /// table when asked (always for SQLite, the embedded default), loads the tag list,
    /// loads the first segments of [`SegmentOptions::tags`] and starts the refresh task.
    pub async fn connect(url: &str, opts: SegmentOptions) -> Result<SegmentGenerator> {
        let create = opts.create_table || url.starts_with("sqlite:");
        let store = store::open(url)?;
        Self::with_store_inner(store, opts, create).await
    }

    /// [`connect`](Self::connect) for callers outside async code (the bindings).
    pub fn connect_blocking(url: &str, opts: SegmentOptions) -> Result<SegmentGenerator> {
        let url = url.to_string();
        runtime::block_on(async move { Self::connect(&url, opts).await })
    }

    /// Builds a generator on a store you made yourself (a [`MemoryStore`] in tests).
    ///
    /// [`MemoryStore`]: super::store::memory::MemoryStore
    pub async fn with_store(
        store: Arc<dyn SegmentStore>,
        opts: SegmentOptions,
    ) -> Result<SegmentGenerator> {
        let create = opts.create_table;
        Self::with_store_inner(store, opts, create).await
    }

    async fn with_store_inner(
        store: Arc<dyn SegmentStore>,
        opts: SegmentOptions,
        create_table: bool,
    ) -> Result<SegmentGenerator> {
        opts.validate()?;
        for tag in &opts.tags {
            validate_tag(tag)?;
        }
        runtime::watch_forks();
        let epoch = runtime::fork_epoch();
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| Inner {
            loader: Arc::new(Loader::new(opts, store, epoch, me.clone())),
            tags: ArcSwap::from_pointee(TagMap::default()),
            ticket: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            epoch: AtomicU64::new(epoch),
            refresher: Mutex::new(None),
            lookups: Mutex::new(LookupState::new(epoch)),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        runtime::register_fork_lock(1, weak);
        let setup = inner.clone();
        runtime::run(async move {
            if create_table {
                setup.loader.store()?.create_table().await?;
            }
            setup.refresh().await?;
            setup.load_listed_tags().await
        })
        .await?;
        inner.start_refresher();
        #[cfg(feature = "metrics")]
        crate::metrics::track_arc(&inner);
        Ok(SegmentGenerator { inner })
    }

    /// The next id of `tag`. When no id is at hand (first use, both segments spent)
    /// it waits up to [`SegmentOptions::wait_timeout`] for a refill; a tag missing from
    /// the cache is first looked up in the store (also within that time): a lookup the
    /// store has not answered by then is [`Error::StoreUnavailable`], not
    /// [`Error::TagNotFound`].
    #[inline]
    pub fn next_id(&self, tag: &str) -> Result<i64> {
        // The buffer counts its own errors, off the path that took an id.
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id(&self.inner.loader),
            None => counted(self.inner.find(tag), SEGMENT)?.next_id(&self.inner.loader),
        }
    }

    /// The next id of `tag` if it can be had without waiting; `None` otherwise (unknown
    /// tag included: [`next_id`](Self::next_id) then says what is wrong).
    #[inline]
    pub fn try_next_id(&self, tag: &str) -> Option<i64> {
        let tags = self.inner.tags.load();
        tags.get(tag)?.try_next_id(&self.inner.loader)
    }

    /// The id of `tag` [`next_id_async`](Self::next_id_async) would take at call time,
    /// if the core has it without waiting; see [`TagHandle::next_id_at_hand`] (`None`
    /// for a tag not in the cache too, while its lookup starts).
    #[inline]
    pub fn next_id_at_hand(&self, tag: &str) -> Option<i64> {
        self.next_id_now_quiet(tag).ok()
    }

    /// `n` ids of `tag` if they can be had without waiting; see
    /// [`TagHandle::next_ids_at_hand`] (`None` for a tag not in the cache too).
    pub fn next_ids_at_hand(&self, tag: &str, n: usize) -> Option<Vec<i64>> {
        let n = crate::limits::batch(n as u64).ok()?;
        let buf = self.inner.tags.load().get(tag)?.clone();
        buf.batch_at_hand(&self.inner.loader, n)
    }

    /// The next id of `tag` without ever waiting; see [`TagHandle::next_id_now`]. A tag
    /// missing from the cache fails with [`Error::TagNotFound`] at once while a store
    /// lookup runs in the background: if the tag exists, a later call finds it.
    #[inline]
    pub fn next_id_now(&self, tag: &str) -> Result<i64> {
        // As `next_id`: the buffer counts its own errors.
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id_now(&self.inner.loader),
            None => counted(self.inner.find_now(tag), SEGMENT)?.next_id_now(&self.inner.loader),
        }
    }

    /// [`next_id_now`](Self::next_id_now) for the async calls' first attempt, whose
    /// error is not final (they wait on and count only what they return).
    fn next_id_now_quiet(&self, tag: &str) -> Result<i64> {
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id_now_quiet(&self.inner.loader),
            None => self
                .inner
                .find_now(tag)?
                .next_id_now_quiet(&self.inner.loader),
        }
    }

    /// `n` ids of `tag` without ever waiting; see [`next_id_now`](Self::next_id_now).
    pub fn next_ids_now(&self, tag: &str, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; crate::limits::batch(n as u64)?];
        self.fill_now(tag, &mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids of `tag` without ever waiting (see
    /// [`TagHandle::next_id_now`]); for bindings that write into memory they own.
    pub fn fill_now(&self, tag: &str, out: &mut [i64]) -> Result<()> {
        let tags = self.inner.tags.load();
        let buf = match tags.get(tag) {
            Some(buf) => Ok(buf.clone()),
            None => self.inner.find_now(tag),
        };
        counted(
            buf.and_then(|buf| buf.fill(&self.inner.loader, out, Duration::ZERO)),
            SEGMENT,
        )
    }

    /// The next id of `tag`, waiting without blocking any thread; see
    /// [`TagHandle::next_id_async`]. A tag missing from the cache is looked up in the
    /// store first, as [`next_id`](Self::next_id) does.
    pub fn next_id_async(
        &self,
        tag: &str,
    ) -> impl std::future::Future<Output = Result<i64>> + Send + 'static {
        // Take at call time, without waiting: an id at hand (or a segment switch) needs
        // no task and ids follow call order; an error waiting cannot cure is final.
        let now = settled_now(self.next_id_now_quiet(tag));
        let inner = self.inner.clone();
        let tag = tag.to_string();
        async move {
            if let Some(now) = now {
                return counted(now, SEGMENT);
            }
            let id = runtime::run(async move {
                let buf = inner.find_async(&tag).await?;
                buf.next_id_async(inner.loader.clone()).await
            })
            .await;
            counted(id, SEGMENT)
        }
    }

    /// `n` ids of `tag`, waiting as [`next_id_async`](Self::next_id_async) does. When
    /// the current segment holds all `n`, they are taken at call time (no task, and
    /// the batch precedes any id asked for after the call); otherwise the whole batch
    /// is taken when the future is first polled, never split around other ids.
    pub fn next_ids_async(
        &self,
        tag: &str,
        n: usize,
    ) -> impl std::future::Future<Output = Result<Vec<i64>>> + Send + 'static {
        let inner = self.inner.clone();
        let at_hand = crate::limits::batch(n as u64).map(|n| {
            let buf = self.inner.tags.load().get(tag).cloned();
            (n, buf.and_then(|buf| buf.batch_at_hand(&inner.loader, n)))
        });
        let tag = tag.to_string();
        async move {
            let (n, at_hand) = at_hand?;
            if let Some(ids) = at_hand {
                return Ok(ids);
            }
            let ids = runtime::run(async move {
                let buf = inner.find_async(&tag).await?;
                buf.fill_async(inner.loader.clone(), n).await
            })
            .await;
            counted(ids, SEGMENT)
        }
    }

    /// `n` ids of `tag` from the tag's shared cursor, never from a thread's chunk (the
    /// chunked form, [`SegmentOptions::thread_chunk`](crate::SegmentOptions::thread_chunk)):
    /// every id is above every id issued before the call, on any thread. For one answer
    /// taken in several calls on whichever thread polls it (`leafid serve`'s streamed
    /// batch): [`next_ids_async`](Self::next_ids_async) serves a call from the calling
    /// thread's chunk when it holds all `n`, which may lie below an earlier call's ids.
    /// Waits as [`next_ids_async`](Self::next_ids_async) does; without chunks the two
    /// are the same.
    pub fn next_ids_ordered_async(
        &self,
        tag: &str,
        n: usize,
    ) -> impl std::future::Future<Output = Result<Vec<i64>>> + Send + 'static {
        let inner = self.inner.clone();
        let at_hand = crate::limits::batch(n as u64).map(|n| {
            let buf = self.inner.tags.load().get(tag).cloned();
            (
                n,
                buf.and_then(|buf| buf.batch_from_cursor(&inner.loader, n)),
            )
        });
        let tag = tag.to_string();
        async move {
            let (n, at_hand) = at_hand?;
            if let Some(ids) = at_hand {
                return Ok(ids);
            }
            // `fill_async` takes from the shared cursor only (see its tag buffer call).
            let ids = runtime::run(async move {
                let buf = inner.find_async(&tag).await?;
                buf.fill_async(inner.loader.clone(), n).await
            })
            .await;
            counted(ids, SEGMENT)
        }
    }

    /// `n` ids of `tag`, ascending within each segment; waits as
    /// [`next_id`](Self::next_id) does.
    pub fn next_ids(&self, tag: &str, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; crate::limits::batch(n as u64)?];
        self.fill(tag, &mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids of `tag`, reserving whole runs at a time; waits as
    /// [`next_id`](Self::next_id) does.
    pub fn fill(&self, tag: &str, out: &mut [i64]) -> Result<()> {
        let tags = self.inner.tags.load();
        let wait = self.inner.loader.opts.wait_timeout;
        let filled = match tags.get(tag) {
            Some(buf) => buf.fill(&self.inner.loader, out, wait),
            None => (self.inner.find(tag)).and_then(|buf| buf.fill(&self.inner.loader, out, wait)),
        };
        counted(filled, SEGMENT)
    }

    /// A handle on `tag` for the hot path. Making it starts loading the tag's first
    /// segment in the background, so the handle's first call rarely waits. A tag
    /// missing from the cache is looked up in the store (waiting up to `wait_timeout`)
    /// before [`Error::TagNotFound`] (or [`Error::StoreUnavailable`] if it has not answered).
    pub fn tag(&self, tag: &str) -> Result<TagHandle> {
        let cached = self.inner.tags.load().get(tag).cloned();
        let buf = match cached {
            Some(buf) => buf,
            None => counted(self.inner.find(tag), SEGMENT)?,
        };
        buf.load_first(&self.inner.loader);
        Ok(TagHandle {
            buf,
            inner: self.inner.clone(),
        })
    }

    /// [`tag`](Self::tag) that never waits (for callers that must never block, such
    /// as Node's synchronous calls): a tag missing from the cache fails at once with
    /// [`Error::TagNotFound`] while its store lookup runs in the background, so a later
    /// call finds a tag that exists.
    pub fn tag_now(&self, tag: &str) -> Result<TagHandle> {
        let cached = self.inner.tags.load().get(tag).cloned();
        let buf = match cached {
            Some(buf) => buf,
            None => counted(self.inner.find_now(tag), SEGMENT)?,
        };
        buf.load_first(&self.inner.loader);
        Ok(TagHandle {
            buf,
            inner: self.inner.clone(),
        })
    }

    /// The tags known since the last refresh (or found by a lookup), sorted.
    pub fn tags(&self) -> Vec<String> {
        let mut tags: Vec<String> = self.inner.tags.load().live.keys().cloned().collect();
        tags.sort();
        tags
    }

    /// Inserts a tag whose first id is `start`, with a step of `step` ids per segment.
    /// Returns once the tag is usable here with its first segment loaded (or that
    /// load failed: the tag then serves ids once the store is back), so even a
    /// `wait_timeout` of zero serves its first call. [`Error::TagExists`] when the tag
    /// is already in the store: it is then usable here as it is.
    pub async fn create_tag(
        &self,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
    ) -> Result<()> {
        validate_tag(tag)?;
        validate_step(step)?;
        validate_start(tag, start, step)?;
        self.inner.check_open()?;
        let inner = self.inner.clone();
        let (tag, description) = (tag.to_string(), description.to_string());
        runtime::run(async move {
            let created = inner
                .loader
                .store()?
                .create_tag(&tag, start, step, &description)
                .await;
            match created {
                Ok(()) => {
                    let buf = inner.add_tag(tag);
                    // A failed first load is the store's trouble, not the creation's:
                    // the tag is made and serves ids once the store is back.
                    let _ = buf.first_loaded(&inner.loader).await;
                    Ok(())
                }
                Err(Error::TagExists { tag }) => {
                    // Only a row spelt exactly so makes the tag usable: a MySQL table's
                    // collation also refuses `ORDER` when `order` exists, and caching
                    // both spellings would give one row two buffers.
                    match inner.loader.store()?.has_tag(&tag).await {
                        Ok(true) => {
                            // As for a new tag: usable at once, first segment loaded (a
                            // failed load is the store's trouble, reported on use).
                            let buf = inner.add_tag(tag.clone());
                            let _ = buf.first_loaded(&inner.loader).await;
                            Err(Error::TagExists { tag })
                        }
                        Ok(false) => Err(Error::InvalidTag {
                            tag,
                            reason: "the table already holds a tag equal to it under its collation \
                                     (a different case or trailing spaces); use that tag's exact spelling"
                                .into(),
                        }),
                        Err(_) => Err(Error::TagExists { tag }),
                    }
                }
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// [`create_tag`](Self::create_tag) for code that runs more than once (a start-up
    /// script, a quick start pasted twice): a tag already in the store is not an error
    /// and is left as it is (its start and step are not compared). Returns whether this
    /// call created the tag. The bindings' `exist_ok` / `existOk` options call this.
    pub async fn ensure_tag(
        &self,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
    ) -> Result<bool> {
        match self.create_tag(tag, start, step, description).await {
            Ok(()) => Ok(true),
            Err(Error::TagExists { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates `leaf_alloc` if it does not exist.
    pub async fn create_table(&self) -> Result<()> {
        let inner = self.inner.clone();
        runtime::run(async move { inner.loader.store()?.create_table().await }).await
    }

    /// Reloads the tag list now instead of waiting for the periodic refresh.
    pub async fn refresh(&self) -> Result<()> {
        self.inner.check_open()?;
        let inner = self.inner.clone();
        runtime::run(async move { inner.refresh().await }).await
    }

    /// Every row of the table (Leaf's `/db` page).
    pub async fn rows(&self) -> Result<Vec<TagRow>> {
        let inner = self.inner.clone();
        runtime::run(async move { inner.loader.store()?.rows().await }).await
    }

    /// Per-tag state (Leaf's `/cache` page, plus refill count, latency and last error).
    pub fn stats(&self) -> Vec<TagStats> {
        self.inner.stats()
    }

    /// Stops background work; later calls fail with [`Error::Closed`]. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }
}
