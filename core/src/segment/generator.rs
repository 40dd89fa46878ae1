//! `SegmentGenerator` and `TagHandle`: the tag map, lookups of missing tags, refresh
//! and close. Each tag's slow path lives in `tag_buffer.rs`, refills in `refill.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
// Tags are looked up on every `next_id(tag)`; FxHash is several times cheaper than
// SipHash on short keys, and the keys come from the table, not from an attacker.
use rustc_hash::FxHashMap as HashMap;

use super::high_water::HighWater;
use super::lookup::{Answer, Ask, Lookups, Outcome};
use super::refill::copy_error;
use super::store::{self, validate_start, validate_step, validate_tag, SegmentStore, TagRow};
use super::tag_buffer::{TagBuffer, REFILL_TIMEOUT};
use super::{SegmentOptions, TagStats};
use crate::error::{counted, Error, Mode, Result};
use crate::runtime;

/// The mode segment errors are counted under.
const SEGMENT: Mode = Mode::Segment;

/// The outcome of a never-waiting attempt if it is final: an id, or an error waiting
/// cannot cure. `None` when waiting may help (no segment at hand yet, a store that may
/// come back, or a tag not in the cache yet while a lookup runs): the waiting path
/// decides.
fn settled_now(attempt: Result<i64>) -> Option<Result<i64>> {
    match attempt {
        Err(
            Error::SegmentsExhausted { .. }
            | Error::StoreUnavailable { .. }
            | Error::TagNotFound { .. },
        ) => None,
        settled => Some(settled),
    }
}

/// How many lookups of missing tags may query the store at once.
const MAX_CONCURRENT_LOOKUPS: usize = 2;

/// Issues ids for the tags of one `leaf_alloc` table.
///
/// Cheap to clone: clones share the tags, segments and background tasks.
#[derive(Clone, Debug)]
pub struct SegmentGenerator {
    inner: Arc<Inner>,
}

/// The fast way to issue ids for one tag: no lookup of the tag per call.
#[derive(Clone, Debug)]
pub struct TagHandle {
    buf: Arc<TagBuffer>,
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) opts: SegmentOptions,
    store: Mutex<StoreSlot>,
    tags: ArcSwap<TagMap>,
    /// Orders tag-map updates against refreshes: a refresh drops a tag only if it was
    /// added before the refresh read its listing (see [`Inner::refresh`]).
    ticket: AtomicU64,
    closed: AtomicBool,
    /// The fork epoch the background tasks run under.
    epoch: AtomicU64,
    refresher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Store lookups of tags missing from the cache, rate-limited per name.
    /// With the fork epoch they were made under.
    lookups: Mutex<LookupState>,
    /// Each tag's high-water mark, kept through refresh, drop and re-create of the tag:
    /// the one guard every segment passes (see `high_water.rs`).
    pub(super) high_water: HighWater,
}

/// The store, and the fork epoch it was opened under.
#[derive(Debug)]
struct StoreSlot {
    epoch: u64,
    store: Arc<dyn SegmentStore>,
    /// In a forked child whose store cannot follow the fork (`memory:`): why, returned
    /// by every later use instead of the parent's store.
    refused: Option<Error>,
}

/// The tags of a generator. Replaced whole (copy on write, `ArcSwap::rcu`), so that
/// concurrent updates never lose one another.
#[derive(Debug, Default, Clone)]
struct TagMap {
    /// The tags `next_id(tag)` finds.
    live: HashMap<String, Entry>,
    /// Tags a refresh dropped whose buffers handles may still hold: a tag that comes
    /// back gets the same buffer (one buffer per tag), and `close()` ends them too. A
    /// buffer nobody holds is forgotten; the tag's high-water mark is not
    /// ([`Inner::high_water`]), so ids never go backwards either way.
    dropped: HashMap<String, Weak<TagBuffer>>,
}

#[derive(Debug, Clone)]
struct Entry {
    buf: Arc<TagBuffer>,
    /// The [`Inner::ticket`] taken when the tag was added.
    born: u64,
}

impl TagMap {
    fn get(&self, tag: &str) -> Option<&Arc<TagBuffer>> {
        self.live.get(tag).map(|e| &e.buf)
    }

    /// The buffer for `tag`: the live one, one a handle still holds, or a new one.
    fn buffer_for(&self, tag: &str, epoch: u64) -> Arc<TagBuffer> {
        self.get(tag)
            .cloned()
            .or_else(|| self.dropped.get(tag).and_then(Weak::upgrade))
            .unwrap_or_else(|| TagBuffer::shared(tag.to_string(), epoch))
    }

    /// Every buffer that may still issue: live ones and dropped ones still held.
    fn all(&self) -> Vec<Arc<TagBuffer>> {
        let live = self.live.values().map(|e| e.buf.clone());
        live.chain(self.dropped.values().filter_map(Weak::upgrade))
            .collect()
    }
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
        let inner = Arc::new(Inner {
            opts,
            store: Mutex::new(StoreSlot {
                epoch,
                store,
                refused: None,
            }),
            tags: ArcSwap::from_pointee(TagMap::default()),
            ticket: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            epoch: AtomicU64::new(epoch),
            refresher: Mutex::new(None),
            lookups: Mutex::new(LookupState::new(epoch)),
            high_water: HighWater::default(),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        runtime::register_fork_lock(1, weak);
        let setup = inner.clone();
        runtime::run(async move {
            if create_table {
                setup.store()?.create_table().await?;
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
    /// the cache is first looked up in the store (also within that time).
    #[inline]
    pub fn next_id(&self, tag: &str) -> Result<i64> {
        // The buffer counts its own errors, off the path that took an id.
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id(&self.inner),
            None => counted(self.inner.find(tag), SEGMENT)?.next_id(&self.inner),
        }
    }

    /// The next id of `tag` if it can be had without waiting; `None` otherwise (unknown
    /// tag included: [`next_id`](Self::next_id) then says what is wrong).
    #[inline]
    pub fn try_next_id(&self, tag: &str) -> Option<i64> {
        let tags = self.inner.tags.load();
        tags.get(tag)?.try_next_id(&self.inner)
    }

    /// The next id of `tag` without ever waiting; see [`TagHandle::next_id_now`]. A tag
    /// missing from the cache fails with [`Error::TagNotFound`] at once while a store
    /// lookup runs in the background: if the tag exists, a later call finds it.
    #[inline]
    pub fn next_id_now(&self, tag: &str) -> Result<i64> {
        // As `next_id`: the buffer counts its own errors.
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id_now(&self.inner),
            None => counted(self.inner.find_now(tag), SEGMENT)?.next_id_now(&self.inner),
        }
    }

    /// [`next_id_now`](Self::next_id_now) for the async calls' first attempt, whose
    /// error is not final (they wait on and count only what they return).
    fn next_id_now_quiet(&self, tag: &str) -> Result<i64> {
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id_now_quiet(&self.inner),
            None => self.inner.find_now(tag)?.next_id_now_quiet(&self.inner),
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
            buf.and_then(|buf| buf.fill(&self.inner, out, Duration::ZERO)),
            SEGMENT,
        )
    }

    /// The next id of `tag`, waiting without blocking any thread; see
    /// [`TagHandle::next_id_async`]. A tag missing from the cache is looked up in the
    /// store first.
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
                buf.next_id_async(inner).await
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
            (n, buf.and_then(|buf| buf.batch_at_hand(&inner, n)))
        });
        let tag = tag.to_string();
        async move {
            let (n, at_hand) = at_hand?;
            if let Some(ids) = at_hand {
                return Ok(ids);
            }
            let ids = runtime::run(async move {
                let buf = inner.find_async(&tag).await?;
                buf.fill_async(inner, n).await
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
        let wait = self.inner.opts.wait_timeout;
        let filled = match tags.get(tag) {
            Some(buf) => buf.fill(&self.inner, out, wait),
            None => (self.inner.find(tag)).and_then(|buf| buf.fill(&self.inner, out, wait)),
        };
        counted(filled, SEGMENT)
    }

    /// A handle on `tag` for the hot path. Making it starts loading the tag's first
    /// segment in the background, so the handle's first call rarely waits. A tag
    /// missing from the cache is looked up in the store (waiting up to `wait_timeout`)
    /// before [`Error::TagNotFound`].
    pub fn tag(&self, tag: &str) -> Result<TagHandle> {
        let cached = self.inner.tags.load().get(tag).cloned();
        let buf = match cached {
            Some(buf) => buf,
            None => counted(self.inner.find(tag), SEGMENT)?,
        };
        buf.load_first(&self.inner);
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
        buf.load_first(&self.inner);
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
                .store()?
                .create_tag(&tag, start, step, &description)
                .await;
            match created {
                Ok(()) => {
                    let buf = inner.add_tag(tag);
                    // A failed first load is the store's trouble, not the creation's:
                    // the tag is made and serves ids once the store is back.
                    let _ = buf.first_loaded(&inner).await;
                    Ok(())
                }
                Err(Error::TagExists { tag }) => {
                    // Only a row spelt exactly so makes the tag usable: a MySQL table's
                    // collation also refuses `ORDER` when `order` exists, and caching
                    // both spellings would give one row two buffers.
                    match inner.store()?.has_tag(&tag).await {
                        Ok(true) => {
                            // As for a new tag: usable at once, first segment loaded (a
                            // failed load is the store's trouble, reported on use).
                            let buf = inner.add_tag(tag.clone());
                            let _ = buf.first_loaded(&inner).await;
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
        runtime::run(async move { inner.store()?.create_table().await }).await
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
        runtime::run(async move { inner.store()?.rows().await }).await
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

impl TagHandle {
    /// The tag this handle issues for.
    pub fn tag(&self) -> &str {
        &self.buf.tag
    }

    /// The next id: an atomic add on the current segment in the common case. When no
    /// id is at hand it waits up to the generator's `wait_timeout` for a refill.
    #[inline]
    pub fn next_id(&self) -> Result<i64> {
        self.buf.next_id(&self.inner)
    }

    /// The next id if it can be had without waiting (the common case), `None` when the
    /// slow path is needed (segment spent, first load, fork, close). Bindings call this
    /// while holding their interpreter lock and fall back to [`next_id`](Self::next_id)
    /// after releasing it.
    #[inline]
    pub fn try_next_id(&self) -> Option<i64> {
        self.buf.try_next_id(&self.inner)
    }

    /// `n` ids, ascending within each segment; waits as [`next_id`](Self::next_id) does.
    pub fn next_ids(&self, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; crate::limits::batch(n as u64)?];
        self.fill(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids, reserving whole runs at a time.
    pub fn fill(&self, out: &mut [i64]) -> Result<()> {
        let filled = self
            .buf
            .fill(&self.inner, out, self.inner.opts.wait_timeout);
        counted(filled, SEGMENT)
    }

    /// The next id without ever waiting: when none is at hand (segment spent and the
    /// next not loaded, first load pending, store down) it fails at once with
    /// [`Error::SegmentsExhausted`] (or the refill's permanent error) and a refill runs
    /// in the background. No I/O and no wait on the caller's thread, on any path. For
    /// callers that must never block (Node's synchronous calls).
    #[inline]
    pub fn next_id_now(&self) -> Result<i64> {
        self.buf.next_id_now(&self.inner)
    }

    /// `n` ids without ever waiting (see [`next_id_now`](Self::next_id_now)).
    pub fn next_ids_now(&self, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; crate::limits::batch(n as u64)?];
        self.fill_now(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids without ever waiting (see [`next_id_now`](Self::next_id_now)).
    pub fn fill_now(&self, out: &mut [i64]) -> Result<()> {
        counted(self.buf.fill(&self.inner, out, Duration::ZERO), SEGMENT)
    }

    /// The next id, waiting up to the generator's `wait_timeout` for a refill without
    /// blocking any thread: the wait is a notification on the core's runtime, so
    /// thousands of callers waiting out an outage cost no threads, and any executor (a
    /// binding's event loop included) can await it. Same errors as
    /// [`next_id`](Self::next_id).
    pub fn next_id_async(&self) -> impl std::future::Future<Output = Result<i64>> + Send + 'static {
        // As `SegmentGenerator::next_id_async`: take at call time when it can.
        let now = settled_now(self.buf.next_id_now_quiet(&self.inner));
        let (buf, inner) = (self.buf.clone(), self.inner.clone());
        async move {
            let id = match now {
                Some(now) => now,
                None => runtime::run(buf.next_id_async(inner)).await,
            };
            counted(id, SEGMENT)
        }
    }

    /// `n` ids, waiting as [`next_id_async`](Self::next_id_async) does.
    pub fn next_ids_async(
        &self,
        n: usize,
    ) -> impl std::future::Future<Output = Result<Vec<i64>>> + Send + 'static {
        // As `SegmentGenerator::next_ids_async`: at call time when all are at hand.
        let (buf, inner) = (self.buf.clone(), self.inner.clone());
        let at_hand = crate::limits::batch(n as u64).map(|n| (n, buf.batch_at_hand(&inner, n)));
        async move {
            let (n, at_hand) = at_hand?;
            if let Some(ids) = at_hand {
                return Ok(ids);
            }
            counted(runtime::run(buf.fill_async(inner, n)).await, SEGMENT)
        }
    }
}

/// Waits up to `wait` for a lookup's answer (the tag is then in the cache if found).
async fn answered(mut answer: Answer, wait: Duration) {
    // An error means the lookup task is gone (its runtime shut down): nothing to wait for.
    let _ = tokio::time::timeout(wait, answer.wait_for(Option::is_some)).await;
}

/// The lookups of missing tags in one process.
#[derive(Debug)]
struct LookupState {
    /// The fork epoch they belong to.
    epoch: u64,
    lookups: Lookups,
    /// At most [`MAX_CONCURRENT_LOOKUPS`] query the store at once.
    slots: Arc<tokio::sync::Semaphore>,
}

impl LookupState {
    fn new(epoch: u64) -> LookupState {
        LookupState {
            epoch,
            lookups: Lookups::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_LOOKUPS)),
        }
    }
}

impl runtime::ForkLock for Inner {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        let store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let refresher = self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let lookups = self.lookups.lock().unwrap_or_else(PoisonError::into_inner);
        // Taken by refills under a tag's lock (rank 0), never with the three above.
        let marks = self.high_water.lock();
        Box::new((store, refresher, lookups, marks))
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
    fn stats(&self) -> Vec<TagStats> {
        let tags = self.tags.load();
        let mut stats: Vec<TagStats> = tags.live.values().map(|e| e.buf.stats()).collect();
        stats.sort_by(|a, b| a.tag.cmp(&b.tag));
        stats
    }

    /// The store, reopened with fresh connections in a forked child. A store that
    /// cannot follow a fork (`memory:`) makes every use in the child fail with the
    /// reason: the parent's copy must never hand out ranges in two processes.
    pub(super) fn store(&self) -> Result<Arc<dyn SegmentStore>> {
        let mut guard = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = runtime::fork_epoch();
        if guard.epoch != epoch {
            match guard.store.reopen() {
                Ok(fresh) => {
                    // Leaked, never dropped: the parent's sockets are registered with the
                    // parent's epoll instance, which the child shares; dropping them here
                    // would deregister them from it and stall the parent's pool.
                    std::mem::forget(std::mem::replace(&mut guard.store, fresh));
                    guard.refused = None;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the segment store cannot be used in this forked child");
                    guard.refused = Some(e);
                }
            }
            guard.epoch = epoch;
        }
        match &guard.refused {
            Some(e) => Err(copy_error(e)),
            None => Ok(guard.store.clone()),
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Why a tag missing from the cache cannot be looked up: bad input first, then
    /// closed. `Ok` when a lookup may run.
    fn may_look_up(self: &Arc<Self>, tag: &str) -> Result<()> {
        validate_tag(tag)?;
        self.check_open()?;
        self.restart_after_fork();
        Ok(())
    }

    /// The buffer of `tag` once a lookup answered, or `TagNotFound`.
    fn found(&self, tag: &str, answer: &Answer) -> Result<Arc<TagBuffer>> {
        self.check_open()?;
        match self.tags.load().get(tag) {
            Some(buf) => Ok(buf.clone()),
            // The store could not say: its error, not a "no such tag" a caller may take
            // for final.
            None => match &*answer.borrow() {
                // The store's own error (an outage, a refused login, …), source kept.
                Some(Err(e)) => Err(e.copy()),
                _ => Err(Error::TagNotFound { tag: tag.into() }),
            },
        }
    }

    /// The shared lookup of `tag` in the store, started (in the background) unless one
    /// ran within the rate-limit window.
    fn lookup(self: &Arc<Self>, tag: &str) -> Answer {
        let now = self.opts.clock.now_millis();
        let (ask, slots) = {
            let mut state = self.lookups.lock().unwrap_or_else(PoisonError::into_inner);
            // In a forked child, the parent's lookups are answered (and its slots held)
            // by tasks that do not exist here: start afresh rather than wait on them.
            let epoch = runtime::fork_epoch();
            if state.epoch != epoch {
                *state = LookupState::new(epoch);
            }
            (state.lookups.ask(tag, now), state.slots.clone())
        };
        match ask {
            Ask::Join(answer) => answer,
            Ask::Start(reply, answer) => {
                let (inner, tag) = (self.clone(), tag.to_string());
                // On the runtime, not in the caller's future: a caller that stops
                // waiting does not cancel the lookup others share.
                drop(runtime::spawn(async move {
                    let found = inner.look_up(tag, slots).await;
                    let _ = reply.send(Some(found));
                }));
                answer
            }
        }
    }

    /// Asks the store whether `tag` exists; if it does, adds it to the cache and starts
    /// loading its first segment. A failed lookup gives the store's cause.
    async fn look_up(self: Arc<Self>, tag: String, slots: Arc<tokio::sync::Semaphore>) -> Outcome {
        let asked = match self.store() {
            Ok(store) => tokio::time::timeout(REFILL_TIMEOUT, async {
                // A flood of unknown names must not take the store's connections from
                // refills (nor open connections of its own): a few lookups at a time,
                // the rest queue (each name at most once per second, see `lookup.rs`).
                let _permit = slots.acquire().await;
                store.has_tag(&tag).await
            })
            .await
            .unwrap_or_else(|_| {
                Err(Error::store(format!(
                    "lookup did not finish within {REFILL_TIMEOUT:?}"
                )))
            }),
            Err(e) => Err(e),
        };
        match asked {
            Ok(true) => {
                self.add_tag(tag).load_first(&self);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                tracing::warn!(tag = %tag, error = %e, "looking up a tag missing from the cache failed");
                // A missing tag is `Ok(false)`; any error here is the store's, and a
                // caller must not take it for a final "no such tag".
                Err(match e {
                    e @ (Error::StoreUnavailable { .. } | Error::AccessDenied { .. }) => e,
                    other => Error::StoreUnavailable {
                        cause: other.to_string(),
                        source: other.cause().cloned(),
                    },
                })
            }
        }
    }

    /// The buffer of a tag missing from the cache, after a store lookup that waits up
    /// to `wait_timeout` (the blocking calls). A zero timeout never waits.
    #[cold]
    fn find(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        self.may_look_up(tag)?;
        let answer = self.lookup(tag);
        let wait = self.opts.wait_timeout;
        // On one of the runtime's own threads, waiting would starve the lookup (and the
        // timer that ends the wait): answer as a zero wait does.
        if answer.borrow().is_some() || wait.is_zero() || runtime::on_runtime_thread() {
            return self.found(tag, &answer);
        }
        runtime::block_on(answered(answer.clone(), wait));
        self.found(tag, &answer)
    }

    /// The buffer of a tag missing from the cache without waiting: a lookup starts in
    /// the background and this fails with `TagNotFound` unless an earlier one found it.
    #[cold]
    fn find_now(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        self.may_look_up(tag)?;
        let answer = self.lookup(tag);
        self.found(tag, &answer)
    }

    /// [`find`](Self::find) for async callers (on the core's runtime).
    async fn find_async(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        if let Some(buf) = self.tags.load().get(tag) {
            return Ok(buf.clone());
        }
        self.may_look_up(tag)?;
        let answer = self.lookup(tag);
        answered(answer.clone(), self.opts.wait_timeout).await;
        self.found(tag, &answer)
    }

    /// Loads the first segments of [`SegmentOptions::tags`] (at connect), failing with
    /// an error that names the first tag that is missing or whose load failed.
    async fn load_listed_tags(self: &Arc<Self>) -> Result<()> {
        let mut bufs = Vec::with_capacity(self.opts.tags.len());
        for tag in &self.opts.tags {
            let buf = self.tags.load().get(tag).cloned();
            let buf = buf.ok_or_else(|| Error::TagNotFound { tag: tag.clone() })?;
            // All loads first, so they run together.
            buf.load_first(self);
            bufs.push(buf);
        }
        for buf in bufs {
            buf.first_loaded(self).await.map_err(|e| match e {
                Error::StoreUnavailable { cause, source } => Error::StoreUnavailable {
                    cause: format!("loading the first segment of tag {:?}: {cause}", buf.tag),
                    source,
                },
                other => other,
            })?;
        }
        Ok(())
    }

    /// Reloads the tag list. The map is updated atomically (`rcu`): buffers of tags
    /// that stay are kept, a tag added by `create_tag` after the listing was read is
    /// kept even though the listing misses it, and a dropped tag's buffer is found
    /// again if the tag comes back while a handle holds it.
    async fn refresh(&self) -> Result<()> {
        // Tickets are taken with one RMW each, so they are totally ordered: a tag that
        // `add_tag` ticketed below this one was inserted before this listing is read.
        // (SeqCst is more than that needs, and this runs once a minute.)
        let ticket = self.ticket.fetch_add(1, Ordering::SeqCst);
        let listed = self.store()?.tags().await?;
        let epoch = runtime::fork_epoch();
        let listed: std::collections::HashSet<String> = listed.into_iter().collect();
        let (mut added, mut removed) = (0, 0);
        self.tags.rcu(|old| {
            let mut map = TagMap::default();
            (added, removed) = (0, 0);
            for (tag, e) in &old.live {
                if listed.contains(tag) || e.born >= ticket {
                    map.live.insert(tag.clone(), e.clone());
                } else {
                    // Handles on removed tags keep their buffer, as in Leaf.
                    map.dropped.insert(tag.clone(), Arc::downgrade(&e.buf));
                    removed += 1;
                }
            }
            for (tag, weak) in &old.dropped {
                if !map.live.contains_key(tag) && !listed.contains(tag) && weak.strong_count() > 0 {
                    map.dropped.insert(tag.clone(), weak.clone());
                }
            }
            for tag in &listed {
                if !map.live.contains_key(tag) {
                    let buf = old.buffer_for(tag, epoch);
                    map.live.insert(tag.clone(), Entry { buf, born: ticket });
                    added += 1;
                }
            }
            map
        });
        if added + removed > 0 {
            tracing::info!(added, removed, "tag list refreshed");
        }
        self.close_if_closed();
        Ok(())
    }

    /// Adds `tag` to the cache (keeping its buffer if it has one) and returns its buffer.
    fn add_tag(&self, tag: String) -> Arc<TagBuffer> {
        let epoch = runtime::fork_epoch();
        // SeqCst: see `refresh`.
        let born = self.ticket.fetch_add(1, Ordering::SeqCst);
        self.tags.rcu(|old| {
            let mut map = TagMap::clone(old);
            match map.live.get_mut(&tag) {
                // Already cached (the row was deleted and made again elsewhere): keep the
                // buffer, but a refresh that read its listing before now must keep it.
                Some(e) => e.born = e.born.max(born),
                None => {
                    let buf = old.buffer_for(&tag, epoch);
                    map.dropped.remove(&tag);
                    map.live.insert(tag.clone(), Entry { buf, born });
                }
            }
            map
        });
        self.close_if_closed();
        self.tags
            .load()
            .get(&tag)
            .cloned()
            // A refresh can have dropped it since; its buffer is the dropped one then.
            .unwrap_or_else(|| self.tags.load().buffer_for(&tag, epoch))
    }

    /// After a map update: if `close()` ran meanwhile, it may have missed a buffer the
    /// update added, so end them all (closing twice is harmless).
    fn close_if_closed(&self) {
        // SeqCst, with the swap in `close`: one of the two sees the other's write.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            for buf in self.tags.load().all() {
                buf.close();
            }
        }
    }

    fn start_refresher(self: &Arc<Self>) {
        let weak: Weak<Inner> = Arc::downgrade(self);
        let every = self.opts.refresh_interval;
        let task = runtime::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.closed.load(Ordering::Acquire) {
                    return;
                }
                if let Err(e) = inner.refresh().await {
                    tracing::warn!(error = %e, "tag list refresh failed; keeping the cached list");
                }
            }
        });
        *self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
    }

    /// In a forked child the refresh task did not come along; start it again.
    pub(super) fn restart_after_fork(self: &Arc<Self>) {
        let epoch = runtime::fork_epoch();
        if self.epoch.swap(epoch, Ordering::AcqRel) != epoch {
            // The parent's JoinHandle refers to a runtime that is gone here; forget it.
            std::mem::forget(
                self.refresher
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
            if !self.closed.load(Ordering::Acquire) {
                self.start_refresher();
            }
        }
    }

    fn close(&self) {
        // SeqCst: see `close_if_closed`.
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let task = self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            if self.epoch.load(Ordering::Acquire) == runtime::fork_epoch() {
                task.abort();
            } else {
                std::mem::forget(task);
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        // Live tags and dropped ones that handles still hold.
        for buf in self.tags.load().all() {
            buf.close();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl SegmentOptions {
    fn validate(&self) -> Result<()> {
        crate::limits::tag_count(self.tags.len() as u64)?;
        if self.max_step <= 0 || self.max_step > i32::MAX as i64 {
            return Err(Error::InvalidConfig(format!(
                "max_step {} out of range; use 1..=2147483647 (Leaf's default is 1000000)",
                self.max_step
            )));
        }
        if self.refresh_interval.is_zero() || self.refresh_interval > super::MAX_REFRESH_INTERVAL {
            return Err(Error::InvalidConfig(format!(
                "refresh_interval {:?} out of range; use above zero and at most {:?} (Leaf refreshes every 60 s)",
                self.refresh_interval,
                super::MAX_REFRESH_INTERVAL
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::mpsc;

    use std::sync::atomic::AtomicBool;

    use super::super::buffer::OFFSET_BITS;
    use super::super::store::memory::MemoryStore;
    use super::super::store::Allocation;
    use super::*;

    fn generator(store: Arc<dyn SegmentStore>, opts: SegmentOptions) -> SegmentGenerator {
        runtime::block_on(SegmentGenerator::with_store(store, opts)).unwrap()
    }

    /// Issue 11, "a whole segment reissued": each `try_next_id` on a spent segment
    /// used to add 1 to the cursor, and after `2^OFFSET_BITS` of them (2^32 in
    /// production, 2^16 in tests) the offset carried into the next generation; once
    /// that generation loaded, its first ids were handed out twice.
    #[test]
    fn polling_during_an_outage_never_carries_into_the_next_generation() {
        let store = Arc::new(MemoryStore::new());
        let s = store.clone();
        runtime::block_on(async move { s.create_tag("t", 1, 100, "").await }).unwrap();
        let opts = SegmentOptions {
            double_buffer: false,
            wait_timeout: Duration::from_secs(10),
            ..SegmentOptions::default()
        };
        let gen = generator(store.clone(), opts);
        let h = gen.tag("t").unwrap();
        let mut seen: HashSet<i64> = (0..100).map(|_| h.next_id().unwrap()).collect();
        assert_eq!(seen.len(), 100);
        store.set_available(false);
        // Land 50 past the carry point: on the old code, offset 50 of the next
        // generation, which the refill below then published.
        let polls = (1u64 << OFFSET_BITS) - 100 + 50;
        for k in 0..polls {
            let id = if k % 2 == 0 {
                h.try_next_id()
            } else {
                gen.try_next_id("t")
            };
            assert_eq!(
                id, None,
                "an id while the segment is spent and the store down"
            );
        }
        store.set_available(true);
        for _ in 0..300 {
            let id = h.next_id().unwrap();
            assert!(seen.insert(id), "id {id} issued twice");
        }
    }

    /// A store whose allocations never finish while `hang` is set (a statement stuck
    /// on a lock, a connection that went silent).
    #[derive(Debug)]
    struct Hanging {
        inner: Arc<MemoryStore>,
        hang: AtomicBool,
    }

    impl SegmentStore for Hanging {
        fn allocate<'a>(
            &'a self,
            tag: &'a str,
            step: Option<i64>,
        ) -> runtime::BoxFuture<'a, Result<Allocation>> {
            if self.hang.load(Ordering::SeqCst) {
                Box::pin(std::future::pending())
            } else {
                self.inner.allocate(tag, step)
            }
        }
        fn tags(&self) -> runtime::BoxFuture<'_, Result<Vec<String>>> {
            self.inner.tags()
        }
        fn rows(&self) -> runtime::BoxFuture<'_, Result<Vec<TagRow>>> {
            self.inner.rows()
        }
        fn create_table(&self) -> runtime::BoxFuture<'_, Result<()>> {
            self.inner.create_table()
        }
        fn create_tag<'a>(
            &'a self,
            tag: &'a str,
            start: i64,
            step: i64,
            description: &'a str,
        ) -> runtime::BoxFuture<'a, Result<()>> {
            self.inner.create_tag(tag, start, step, description)
        }
        fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
            self.inner.reopen()
        }
    }

    /// Issue 11: a refill that never finished left the tag "loading" forever: every
    /// caller waited out its timeout with no cause, and no new refill could start.
    #[test]
    fn a_refill_that_never_finishes_is_abandoned_reported_and_retried() {
        let store = Arc::new(Hanging {
            inner: Arc::new(MemoryStore::new()),
            hang: AtomicBool::new(true),
        });
        let s = store.inner.clone();
        runtime::block_on(async move { s.create_tag("t", 1, 10, "").await }).unwrap();
        let opts = SegmentOptions {
            // Far longer than the refill timeout: the caller must hear of the abandoned
            // refill, not wait this out.
            wait_timeout: Duration::from_secs(600),
            ..SegmentOptions::default()
        };
        let gen = generator(store.clone(), opts);
        let err = gen.next_id("t").unwrap_err();
        assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
        assert!(err.to_string().contains("abandoned"), "{err}");
        let stats = &gen.stats()[0];
        assert!(stats.last_error.is_some(), "{stats:?}");
        store.hang.store(false, Ordering::SeqCst);
        let ids: Vec<i64> = loop {
            // The back-off after the failure (at most a second) may refuse a few calls.
            match gen.next_ids("t", 3) {
                Ok(ids) => break ids,
                Err(Error::StoreUnavailable { .. }) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("{e:?}"),
            }
        };
        assert_eq!(ids, vec![1, 2, 3]);
    }

    /// Issue 12: `next_id_now` never waits, on any branch of the slow path: a first
    /// load that never finishes, an unknown tag, a closed generator. (With a 600 s
    /// timeout, a call that waited would hang the test.) The async call waits and then
    /// hears of the abandoned refill.
    #[test]
    fn next_id_now_never_waits_and_next_id_async_reports_the_abandoned_refill() {
        let store = Arc::new(Hanging {
            inner: Arc::new(MemoryStore::new()),
            hang: AtomicBool::new(true),
        });
        let s = store.inner.clone();
        runtime::block_on(async move { s.create_tag("t", 1, 10, "").await }).unwrap();
        let opts = SegmentOptions {
            wait_timeout: Duration::from_secs(600),
            ..SegmentOptions::default()
        };
        let gen = generator(store.clone(), opts);
        let h = gen.tag("t").unwrap(); // starts the first load, which hangs
        for _ in 0..3 {
            let err = h.next_id_now().unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::SegmentsExhausted { .. } | Error::StoreUnavailable { .. }
                ),
                "{err:?}"
            );
            assert!(gen.next_id_now("t").is_err());
            assert!(gen.next_ids_now("t", 3).is_err());
        }
        let err = gen.next_id_now("nope").unwrap_err();
        assert!(matches!(err, Error::TagNotFound { .. }), "{err:?}");
        let err = runtime::block_on(h.next_id_async()).unwrap_err();
        assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
        gen.close();
        assert!(matches!(h.next_id_now(), Err(Error::Closed)));
        assert!(matches!(gen.next_id_now("nope"), Err(Error::Closed)));
    }

    /// A store whose `tags()` waits for a signal after reading the listing, so a test
    /// can run `create_tag` while a refresh holds a listing that misses the new tag.
    #[derive(Debug)]
    struct HeldListing {
        inner: Arc<MemoryStore>,
        hold: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
    }

    impl SegmentStore for HeldListing {
        fn allocate<'a>(
            &'a self,
            tag: &'a str,
            step: Option<i64>,
        ) -> runtime::BoxFuture<'a, Result<Allocation>> {
            self.inner.allocate(tag, step)
        }
        fn tags(&self) -> runtime::BoxFuture<'_, Result<Vec<String>>> {
            Box::pin(async move {
                let listed = self.inner.tags().await?;
                let hold = self.hold.lock().unwrap().take();
                if let Some((read, go_on)) = hold {
                    read.send(()).unwrap();
                    tokio::task::spawn_blocking(move || go_on.recv().unwrap())
                        .await
                        .unwrap();
                }
                Ok(listed)
            })
        }
        fn rows(&self) -> runtime::BoxFuture<'_, Result<Vec<TagRow>>> {
            self.inner.rows()
        }
        fn create_table(&self) -> runtime::BoxFuture<'_, Result<()>> {
            self.inner.create_table()
        }
        fn create_tag<'a>(
            &'a self,
            tag: &'a str,
            start: i64,
            step: i64,
            description: &'a str,
        ) -> runtime::BoxFuture<'a, Result<()>> {
            self.inner.create_tag(tag, start, step, description)
        }
        fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
            self.inner.reopen()
        }
    }

    /// Issue 11, "tag map races": a refresh replaced the whole map with the one it
    /// computed from its listing, losing a tag `create_tag` added meanwhile.
    #[test]
    fn refresh_keeps_a_tag_created_while_it_read_the_listing() {
        let (read_tx, read_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        let store = Arc::new(HeldListing {
            inner: Arc::new(MemoryStore::new()),
            hold: Mutex::new(None),
        });
        let gen = generator(store.clone(), SegmentOptions::default());
        *store.hold.lock().unwrap() = Some((read_tx, go_rx));
        let g = gen.clone();
        let refresh =
            std::thread::spawn(move || runtime::block_on(async move { g.refresh().await }));
        read_rx.recv().unwrap(); // the refresh holds a listing without "new"
        let g = gen.clone();
        runtime::block_on(async move { g.create_tag("new", 1, 10, "").await }).unwrap();
        assert_eq!(gen.next_id("new").unwrap(), 1);
        go_tx.send(()).unwrap();
        refresh.join().unwrap().unwrap();
        assert_eq!(gen.tags(), vec!["new".to_string()]);
        assert_eq!(gen.next_id("new").unwrap(), 2);
    }
}
