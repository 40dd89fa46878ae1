//! `SegmentGenerator`: tags, refills, the slow path, refresh and close.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
// Tags are looked up on every `next_id(tag)`; FxHash is several times cheaper than
// SipHash on short keys, and the keys come from the table, not from an attacker.
use rustc_hash::FxHashMap as HashMap;

use super::buffer::{Ring, Taken, CLOSED_GEN, NEXT_LOADING, NEXT_NONE, NEXT_READY};
use super::step::next_step;
use super::store::{self, validate_step, validate_tag, SegmentStore, TagRow};
use super::{SegmentOptions, SegmentStats, TagStats};
use crate::error::{Error, Result};
use crate::runtime;

/// Longest pause between refill attempts while the store keeps failing.
const MAX_BACKOFF_MS: i64 = 1_000;
const FIRST_BACKOFF_MS: i64 = 50;

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
struct Inner {
    opts: SegmentOptions,
    store: Mutex<(u64, Arc<dyn SegmentStore>)>,
    tags: ArcSwap<HashMap<String, Arc<TagBuffer>>>,
    closed: AtomicBool,
    /// The fork epoch the background tasks run under.
    epoch: AtomicU64,
    refresher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// One tag: the lock-free ring plus the state only the slow path touches.
#[derive(Debug)]
struct TagBuffer {
    tag: String,
    ring: Ring,
    /// Fork epoch this buffer's segments were loaded under.
    epoch: AtomicU64,
    /// While the store fails: no refill before this time (ms); 0 when healthy.
    retry_at: AtomicI64,
    state: Mutex<SlowState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct SlowState {
    /// Mirror of the cursor's generation.
    gen: u64,
    initialized: bool,
    step: i64,
    min_step: i64,
    /// When the last dynamic-step load ran (ms); 0 before the second load, as Leaf.
    update_ts: i64,
    last_error: Option<Error>,
    /// Bumped by each failed refill, so a waiter can tell a failure during its wait.
    failures: u64,
    backoff_ms: i64,
    refills: u64,
    last_refill: Option<Duration>,
    closed: bool,
}

impl SegmentGenerator {
    /// Opens the store a URL names (`mysql://…`, `sqlite://path`, `memory:`), creates the
    /// table when asked (always for SQLite, the embedded default), loads the tag list and
    /// starts the refresh task.
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
        runtime::watch_forks();
        let epoch = runtime::fork_epoch();
        let inner = Arc::new(Inner {
            opts,
            store: Mutex::new((epoch, store)),
            tags: ArcSwap::from_pointee(HashMap::default()),
            closed: AtomicBool::new(false),
            epoch: AtomicU64::new(epoch),
            refresher: Mutex::new(None),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        runtime::register_fork_lock(1, weak);
        let setup = inner.clone();
        runtime::run(async move {
            if create_table {
                setup.store().create_table().await?;
            }
            setup.refresh().await
        })
        .await?;
        inner.start_refresher();
        Ok(SegmentGenerator { inner })
    }

    /// The next id of `tag`.
    #[inline]
    pub fn next_id(&self, tag: &str) -> Result<i64> {
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.next_id(&self.inner),
            None => Err(self.inner.missing(tag)),
        }
    }

    /// The next id of `tag` if it can be had without waiting; `None` otherwise (unknown
    /// tag included: [`next_id`](Self::next_id) then says what is wrong).
    #[inline]
    pub fn try_next_id(&self, tag: &str) -> Option<i64> {
        self.inner.tags.load().get(tag)?.try_next_id(&self.inner)
    }

    /// `n` ids of `tag`, ascending within each segment.
    pub fn next_ids(&self, tag: &str, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; n];
        self.fill(tag, &mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids of `tag`, reserving whole runs at a time.
    pub fn fill(&self, tag: &str, out: &mut [i64]) -> Result<()> {
        let tags = self.inner.tags.load();
        match tags.get(tag) {
            Some(buf) => buf.fill(&self.inner, out),
            None => Err(self.inner.missing(tag)),
        }
    }

    /// A handle on `tag` for the hot path; [`Error::TagNotFound`] if the tag is unknown.
    pub fn tag(&self, tag: &str) -> Result<TagHandle> {
        let tags = self.inner.tags.load();
        let buf = tags.get(tag).ok_or_else(|| self.inner.missing(tag))?;
        Ok(TagHandle {
            buf: buf.clone(),
            inner: self.inner.clone(),
        })
    }

    /// The tags known since the last refresh, sorted.
    pub fn tags(&self) -> Vec<String> {
        let mut tags: Vec<String> = self.inner.tags.load().keys().cloned().collect();
        tags.sort();
        tags
    }

    /// Inserts a tag whose first id is `start`, with a step of `step` ids per segment,
    /// and makes it usable at once.
    pub async fn create_tag(
        &self,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
    ) -> Result<()> {
        validate_tag(tag)?;
        validate_step(step)?;
        if start < 0 {
            return Err(Error::InvalidConfig(format!(
                "start {start} is negative; ids start at 0 or above"
            )));
        }
        self.inner.check_open()?;
        let inner = self.inner.clone();
        let (tag, description) = (tag.to_string(), description.to_string());
        runtime::run(async move {
            inner
                .store()
                .create_tag(&tag, start, step, &description)
                .await?;
            inner.add_tags(std::iter::once(tag));
            Ok(())
        })
        .await
    }

    /// Creates `leaf_alloc` if it does not exist.
    pub async fn create_table(&self) -> Result<()> {
        let inner = self.inner.clone();
        runtime::run(async move { inner.store().create_table().await }).await
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
        runtime::run(async move { inner.store().rows().await }).await
    }

    /// Per-tag state (Leaf's `/cache` page, plus refill count, latency and last error).
    pub fn stats(&self) -> Vec<TagStats> {
        let tags = self.inner.tags.load();
        let mut stats: Vec<TagStats> = tags.values().map(|b| b.stats()).collect();
        stats.sort_by(|a, b| a.tag.cmp(&b.tag));
        stats
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

    /// The next id: an atomic add on the current segment in the common case.
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

    /// `n` ids, ascending within each segment.
    pub fn next_ids(&self, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; n];
        self.fill(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids, reserving whole runs at a time.
    pub fn fill(&self, out: &mut [i64]) -> Result<()> {
        self.buf.fill(&self.inner, out)
    }
}

impl TagBuffer {
    fn shared(tag: String, epoch: u64) -> Arc<TagBuffer> {
        let buf = Arc::new(TagBuffer {
            tag,
            ring: Ring::new(),
            epoch: AtomicU64::new(epoch),
            retry_at: AtomicI64::new(0),
            state: Mutex::new(SlowState::default()),
            changed: Condvar::new(),
        });
        // Rank 0: the slow path may take the generator's locks (rank 1) while holding this.
        let weak: Weak<TagBuffer> = Arc::downgrade(&buf);
        runtime::register_fork_lock(0, weak);
        buf
    }

    #[inline(always)]
    fn next_id(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<i64> {
        match self.try_next_id(inner) {
            Some(id) => Ok(id),
            None => self.slow(inner, 1).map(|t| t.first),
        }
    }

    #[inline(always)]
    fn try_next_id(self: &Arc<Self>, inner: &Arc<Inner>) -> Option<i64> {
        // Relaxed: a fork epoch is written by the child's only thread before it runs us.
        if self.epoch.load(Ordering::Relaxed) != runtime::fork_epoch() {
            return None;
        }
        let t = self.ring.take_one()?;
        if t.wants_preload {
            self.maybe_preload(inner);
        }
        Some(t.first)
    }

    fn fill(self: &Arc<Self>, inner: &Arc<Inner>, out: &mut [i64]) -> Result<()> {
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done) as u64;
            let fresh = self.epoch.load(Ordering::Relaxed) == runtime::fork_epoch();
            let taken = match self.ring.take_many(want).filter(|_| fresh) {
                Some(t) => {
                    if t.wants_preload {
                        self.maybe_preload(inner);
                    }
                    t
                }
                None => self.slow(inner, want)?,
            };
            for (k, slot) in out[done..done + taken.count as usize]
                .iter_mut()
                .enumerate()
            {
                *slot = taken.first + k as i64;
            }
            done += taken.count as usize;
        }
        Ok(())
    }

    /// Starts loading the next segment if nobody has (the 10% preload).
    #[cold]
    fn maybe_preload(self: &Arc<Self>, inner: &Arc<Inner>) {
        if self.ring.next.load(Ordering::Acquire) != NEXT_NONE {
            return;
        }
        let retry_at = self.retry_at.load(Ordering::Relaxed);
        if retry_at != 0 && inner.opts.clock.now_millis() < retry_at {
            return;
        }
        let st = self.lock();
        self.start_load(inner, &st);
    }

    /// Spawns a refill of the next generation unless one runs or is ready. Caller holds
    /// the state lock, so the generation cannot move under the load.
    fn start_load(self: &Arc<Self>, inner: &Arc<Inner>, st: &SlowState) {
        if st.closed || self.ring.next.load(Ordering::Acquire) != NEXT_NONE {
            return;
        }
        self.ring.next.store(NEXT_LOADING, Ordering::Release);
        runtime::spawn(refill(inner.clone(), self.clone()));
    }

    fn lock(&self) -> MutexGuard<'_, SlowState> {
        // A refill task never panics while holding the lock; recover the state if one did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Everything that is not an atomic add: first load, switch, waiting for a refill,
    /// fork and close.
    #[cold]
    fn slow(self: &Arc<Self>, inner: &Arc<Inner>, want: u64) -> Result<Taken> {
        let started = Instant::now();
        let deadline = started + inner.opts.wait_timeout;
        let mut st = self.lock();
        if self.epoch.load(Ordering::Relaxed) != runtime::fork_epoch() {
            inner.restart_after_fork();
            self.forget_parent(&mut st);
        }
        let failures_at_start = st.failures;
        loop {
            if st.closed {
                return Err(Error::Closed);
            }
            if let Some(t) = self.ring.take_many(want) {
                if t.wants_preload {
                    self.start_load(inner, &st);
                }
                return Ok(t);
            }
            // The current segment is spent (or none was loaded yet).
            match self.ring.next.load(Ordering::Acquire) {
                NEXT_READY => {
                    st.gen += 1;
                    self.ring.next.store(NEXT_NONE, Ordering::Release);
                    self.ring.point_at(st.gen);
                    continue;
                }
                NEXT_NONE => {
                    if st.failures != failures_at_start {
                        return Err(replay(st.last_error.as_ref(), &self.tag));
                    }
                    let retry_at = self.retry_at.load(Ordering::Relaxed);
                    if retry_at != 0 && inner.opts.clock.now_millis() < retry_at {
                        return Err(replay(st.last_error.as_ref(), &self.tag));
                    }
                    self.start_load(inner, &st);
                }
                _ => {}
            }
            self.ring.clamp();
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::SegmentsExhausted {
                    tag: self.tag.clone(),
                    waited: now - started,
                    cause: st
                        .last_error
                        .as_ref()
                        .map_or_else(|| "none".to_string(), |e| e.to_string()),
                });
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// In a forked child: the segments belong to the parent, which keeps issuing them.
    fn forget_parent(&self, st: &mut SlowState) {
        self.ring.forget();
        // A fresh generation with no slot: the next take goes to a new load.
        st.gen += 2;
        self.ring.point_at(st.gen);
        st.initialized = false;
        st.update_ts = 0;
        st.last_error = None;
        self.retry_at.store(0, Ordering::Relaxed);
        self.epoch.store(runtime::fork_epoch(), Ordering::Relaxed);
    }

    fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        self.ring.point_at(CLOSED_GEN);
        self.changed.notify_all();
    }

    fn stats(&self) -> TagStats {
        let st = self.lock();
        let (views, gen, offset) = self.ring.views();
        let current = (gen & 1) as usize;
        let segments = views.map(|v| SegmentStats {
            value: v.base
                + if v.gen == Some(gen) {
                    offset.min(v.len) as i64
                } else {
                    0
                },
            max: v.base + v.len as i64,
            step: v.step,
        });
        TagStats {
            tag: self.tag.clone(),
            initialized: st.initialized,
            current,
            next_ready: self.ring.next.load(Ordering::Acquire) == NEXT_READY,
            segments,
            step: st.step,
            min_step: st.min_step,
            refills: st.refills,
            last_refill: st.last_refill,
            last_error: st.last_error.as_ref().map(|e| e.to_string()),
        }
    }
}

/// Loads the generation after the current one into its slot (runs on the runtime).
async fn refill(inner: Arc<Inner>, buf: Arc<TagBuffer>) {
    let now = inner.opts.clock.now_millis();
    let request = {
        let st = buf.lock();
        if !st.initialized || st.update_ts == 0 {
            // Leaf's first two loads use the table's step.
            None
        } else {
            let lasted = Duration::from_millis((now - st.update_ts).max(0) as u64);
            Some(next_step(st.step, st.min_step, lasted, inner.opts.max_step))
        }
    };
    let started = Instant::now();
    let result = inner.store().allocate(&buf.tag, request).await;
    let elapsed = started.elapsed();
    let mut st = buf.lock();
    if st.closed {
        return;
    }
    match result {
        Ok(alloc) => {
            let step = request.unwrap_or(alloc.step);
            if st.initialized {
                st.update_ts = now;
            }
            st.initialized = true;
            st.step = step;
            st.min_step = alloc.step;
            let len = step.max(0) as u64;
            // Leaf preloads once more than 10% of a segment is used.
            let preload_at = if inner.opts.double_buffer {
                len / 10
            } else {
                u64::MAX
            };
            buf.ring
                .publish(st.gen + 1, alloc.max_id - step, len, preload_at, step);
            buf.ring.next.store(NEXT_READY, Ordering::Release);
            st.refills += 1;
            st.last_refill = Some(elapsed);
            st.last_error = None;
            st.backoff_ms = 0;
            buf.retry_at.store(0, Ordering::Relaxed);
            tracing::debug!(tag = %buf.tag, max_id = alloc.max_id, step, ?elapsed, "segment loaded");
        }
        Err(e) => {
            tracing::warn!(tag = %buf.tag, error = %e, "segment refill failed");
            st.backoff_ms = (st.backoff_ms * 2).clamp(FIRST_BACKOFF_MS, MAX_BACKOFF_MS);
            buf.retry_at.store(
                inner.opts.clock.now_millis() + st.backoff_ms,
                Ordering::Relaxed,
            );
            st.last_error = Some(e);
            st.failures += 1;
            buf.ring.next.store(NEXT_NONE, Ordering::Release);
        }
    }
    buf.changed.notify_all();
}

/// A fresh copy of a stored refill error for one more caller.
fn replay(e: Option<&Error>, tag: &str) -> Error {
    match e {
        Some(Error::TagNotFound { .. }) => Error::TagNotFound { tag: tag.into() },
        Some(Error::TableMissing { table }) => Error::TableMissing {
            table: table.clone(),
        },
        Some(e) => Error::StoreUnavailable {
            cause: e.to_string(),
        },
        None => Error::store("refill failed"),
    }
}

impl runtime::ForkLock for TagBuffer {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        Box::new(self.lock())
    }
}

impl runtime::ForkLock for Inner {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        let store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let refresher = self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Box::new((store, refresher))
    }
}

impl Inner {
    /// The store, reopened with fresh connections in a forked child.
    fn store(&self) -> Arc<dyn SegmentStore> {
        let mut guard = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = runtime::fork_epoch();
        if guard.0 != epoch {
            if let Ok(fresh) = guard.1.reopen() {
                // Leaked, never dropped: the parent's sockets are registered with the
                // parent's epoll instance, which the child shares; dropping them here
                // would deregister them from it and stall the parent's pool.
                std::mem::forget(std::mem::replace(&mut guard.1, fresh));
            }
            guard.0 = epoch;
        }
        guard.1.clone()
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// The error for a tag not in the cache: bad input first, then closed, then unknown.
    #[cold]
    fn missing(self: &Arc<Self>, tag: &str) -> Error {
        if let Err(e) = validate_tag(tag) {
            return e;
        }
        if self.closed.load(Ordering::Acquire) {
            return Error::Closed;
        }
        self.restart_after_fork();
        Error::TagNotFound { tag: tag.into() }
    }

    async fn refresh(&self) -> Result<()> {
        let tags = self.store().tags().await?;
        let epoch = runtime::fork_epoch();
        let old = self.tags.load();
        let fresh: HashMap<String, Arc<TagBuffer>> = tags
            .into_iter()
            .map(|t| {
                let buf = old
                    .get(&t)
                    .cloned()
                    .unwrap_or_else(|| TagBuffer::shared(t.clone(), epoch));
                (t, buf)
            })
            .collect();
        let (added, removed) = (
            fresh.keys().filter(|t| !old.contains_key(*t)).count(),
            old.keys().filter(|t| !fresh.contains_key(*t)).count(),
        );
        if added + removed > 0 {
            tracing::info!(added, removed, "tag list refreshed");
        }
        // Handles on removed tags keep their buffer, as in Leaf; a tag added back later
        // starts from a fresh one.
        self.tags.store(Arc::new(fresh));
        Ok(())
    }

    fn add_tags(&self, tags: impl Iterator<Item = String>) {
        let epoch = runtime::fork_epoch();
        let tags: Vec<String> = tags.collect();
        self.tags.rcu(|old| {
            let mut map = HashMap::clone(old);
            for t in &tags {
                map.entry(t.clone())
                    .or_insert_with(|| TagBuffer::shared(t.clone(), epoch));
            }
            map
        });
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
    fn restart_after_fork(self: &Arc<Self>) {
        let epoch = runtime::fork_epoch();
        if self.epoch.swap(epoch, Ordering::AcqRel) != epoch {
            // The parent's JoinHandle refers to a runtime that is gone here; forget it.
            std::mem::forget(
                self.refresher
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
            self.start_refresher();
        }
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
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
        for buf in self.tags.load().values() {
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
        if self.max_step <= 0 || self.max_step > i32::MAX as i64 {
            return Err(Error::InvalidConfig(format!(
                "max_step {} out of range; use 1..=2147483647 (Leaf's default is 1000000)",
                self.max_step
            )));
        }
        if self.refresh_interval.is_zero() {
            return Err(Error::InvalidConfig(
                "refresh_interval must be above zero (Leaf refreshes every 60 s)".into(),
            ));
        }
        Ok(())
    }
}
