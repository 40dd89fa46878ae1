//! One tag's buffer: the lock-free ring plus the slow path (first load, switching
//! segments, waiting for a refill, blocking or async), fork and close.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::buffer::{
    Ring, Taken, CLOSED_GEN, EPOCH_OBSERVE, EPOCH_PUBLISH, LAST_GEN, NEXT_LOADING, NEXT_NONE,
    NEXT_READY,
};
use super::generator::Inner;
use super::refill::{refill, replay};
use super::{RefillLatency, SegmentStats, TagStats};
use crate::error::{counted, Error, Mode, Result};
use crate::runtime;

/// Longest pause between refill attempts while the store keeps failing.
pub(super) const MAX_BACKOFF_MS: i64 = 1_000;
pub(super) const FIRST_BACKOFF_MS: i64 = 50;
/// A refill that has not finished after this long is abandoned and reported as a
/// failure, so the "loading" flag cannot stay set forever (a statement stuck on a lock,
/// a dead connection). Longer than any store's own timeouts (SQLite waits up to 10 s for
/// a busy file and retries for 10 s more). Short in unit tests.
#[cfg(not(test))]
pub(super) const REFILL_TIMEOUT: Duration = Duration::from_secs(30);
#[cfg(test)]
pub(super) const REFILL_TIMEOUT: Duration = Duration::from_millis(200);

/// One tag: the lock-free ring plus the state only the slow path touches.
#[derive(Debug)]
pub(super) struct TagBuffer {
    pub(super) tag: String,
    pub(super) ring: Ring,
    /// Fork epoch this buffer's segments were loaded under.
    pub(super) epoch: AtomicU64,
    /// While the store fails: no refill before this time (ms); 0 when healthy.
    pub(super) retry_at: AtomicI64,
    pub(super) state: Mutex<SlowState>,
    /// Wakes blocking waiters on every change of `state` (refill done or failed, close).
    pub(super) changed: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct SlowState {
    /// Mirror of the cursor's generation.
    pub(super) gen: u64,
    pub(super) initialized: bool,
    pub(super) step: i64,
    pub(super) min_step: i64,
    /// When the last dynamic-step load ran (ms); 0 before the second load, as Leaf.
    pub(super) update_ts: i64,
    pub(super) last_error: Option<Error>,
    /// Bumped by each failed refill, so a waiter can tell a failure during its wait.
    pub(super) failures: u64,
    pub(super) backoff_ms: i64,
    pub(super) refills: u64,
    pub(super) last_refill: Option<Duration>,
    /// Every successful load's duration, bucketed (for the refill latency histogram).
    pub(super) refill_latency: RefillLatency,
    /// Ids issued from segments this process switched away from (or closed): with the
    /// current segment's offset, every id issued, derived from state the hot path keeps
    /// anyway instead of a counter it would have to bump.
    pub(super) spent: u64,
    pub(super) closed: bool,
    /// Wakes async waiters on every change, as `changed` wakes blocking ones. Under the
    /// lock so a forked child can swap it for a fresh one: the parent's waiters (tasks
    /// of a runtime the child does not have) must never be woken there.
    pub(super) woken: Arc<tokio::sync::Notify>,
}

impl TagBuffer {
    pub(super) fn shared(tag: String, epoch: u64) -> Arc<TagBuffer> {
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
    pub(super) fn next_id(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<i64> {
        match self.try_next_id(inner) {
            Some(id) => Ok(id),
            // Errors are counted here, off the path that took an id.
            None => counted(
                self.slow(inner, 1, inner.opts.wait_timeout)
                    .map(|t| t.first),
                Mode::Segment,
            ),
        }
    }

    /// Whether the segments were loaded in this process (not inherited through fork).
    #[inline(always)]
    pub(super) fn fresh(&self) -> bool {
        // Acquire (EPOCH_OBSERVE) pairs with the Release in `forget_parent`: a thread of
        // a forked child that sees the child's epoch here also sees the parent's
        // segments forgotten and the cursor moved past them, so it cannot take from
        // them. (Relaxed would let a second thread on a weakly ordered CPU see the new
        // epoch with the old cursor; loom-checked in buffer.rs.) `fork_epoch` itself is
        // written in the child before any of its threads exist.
        self.epoch.load(EPOCH_OBSERVE) == runtime::fork_epoch()
    }

    #[inline(always)]
    pub(super) fn try_next_id(self: &Arc<Self>, inner: &Arc<Inner>) -> Option<i64> {
        if !self.fresh() {
            return None;
        }
        let t = self.ring.take_one()?;
        if t.wants_preload {
            self.maybe_preload(inner);
        }
        Some(t.first)
    }

    /// [`next_id`](Self::next_id) that never waits: the slow path with no time to wait.
    #[inline(always)]
    pub(super) fn next_id_now(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<i64> {
        match self.try_next_id(inner) {
            Some(id) => Ok(id),
            None => counted(
                self.slow(inner, 1, Duration::ZERO).map(|t| t.first),
                Mode::Segment,
            ),
        }
    }

    /// [`next_id_now`](Self::next_id_now) without counting its error: the async calls'
    /// first attempt, whose error is not final (they count what they return).
    #[inline(always)]
    pub(super) fn next_id_now_quiet(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<i64> {
        match self.try_next_id(inner) {
            Some(id) => Ok(id),
            None => self.slow(inner, 1, Duration::ZERO).map(|t| t.first),
        }
    }

    pub(super) fn fill(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        out: &mut [i64],
        wait: Duration,
    ) -> Result<()> {
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done) as u64;
            let taken = match self.take_fast(inner, want) {
                Some(t) => t,
                None => self.slow(inner, want, wait)?,
            };
            done += write_run(&mut out[done..], taken);
        }
        Ok(())
    }

    /// `n` ids when the current segment holds them all, without the slow path and
    /// without waiting; `None` (nothing taken) otherwise, so a batch is never split
    /// around ids others take before it completes.
    pub(super) fn batch_at_hand(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        n: usize,
    ) -> Option<Vec<i64>> {
        if !self.fresh() {
            return None;
        }
        let taken = self.ring.take_exact(n as u64)?;
        if taken.wants_preload {
            self.maybe_preload(inner);
        }
        let mut out = vec![0; n];
        write_run(&mut out, taken);
        Some(out)
    }

    /// Up to `want` ids from the current segment without the slow path.
    #[inline]
    pub(super) fn take_fast(self: &Arc<Self>, inner: &Arc<Inner>, want: u64) -> Option<Taken> {
        // `fresh` first: its Acquire must come before the take it guards.
        if !self.fresh() {
            return None;
        }
        let t = self.ring.take_many(want)?;
        if t.wants_preload {
            self.maybe_preload(inner);
        }
        Some(t)
    }

    /// Starts loading the next segment if nobody has (the 10% preload).
    #[cold]
    pub(super) fn maybe_preload(self: &Arc<Self>, inner: &Arc<Inner>) {
        // Acquire: pairs with the Release stores of the flag (a cheap early exit only;
        // `start_load` checks again under the lock).
        if self.ring.next.load(Ordering::Acquire) != NEXT_NONE {
            return;
        }
        // Relaxed: a hint for back-off; the lock below orders what matters.
        let retry_at = self.retry_at.load(Ordering::Relaxed);
        if retry_at != 0 && inner.opts.clock.now_millis() < retry_at {
            return;
        }
        let mut st = self.lock();
        self.start_load(inner, &mut st);
    }

    /// Spawns a refill of the next generation unless one runs or is ready. Caller holds
    /// the state lock, so the generation cannot move under the load. A refill that
    /// cannot even be spawned clears the flag and is recorded as a failed refill.
    pub(super) fn start_load(self: &Arc<Self>, inner: &Arc<Inner>, st: &mut SlowState) {
        // Acquire/Release on the flag: it is also read without the lock (preload hint).
        if st.closed || self.ring.next.load(Ordering::Acquire) != NEXT_NONE {
            return;
        }
        self.ring.next.store(NEXT_LOADING, Ordering::Release);
        let task = refill(inner.clone(), self.clone());
        // Spawning starts the runtime on first use, which can fail (no threads left).
        let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(runtime::spawn(task));
        }));
        if let Err(panic) = spawned {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            self.failed(
                inner,
                st,
                Error::store(format!(
                    "cannot start a refill of tag {:?}: {what}",
                    self.tag
                )),
            );
        }
    }

    /// Records a failed refill: back off, keep the error for callers, clear the flag.
    pub(super) fn failed(&self, inner: &Inner, st: &mut SlowState, e: Error) {
        tracing::warn!(tag = %self.tag, error = %e, "segment refill failed");
        st.backoff_ms = (st.backoff_ms * 2).clamp(FIRST_BACKOFF_MS, MAX_BACKOFF_MS);
        // Relaxed: a back-off hint, read again under the lock by the slow path.
        self.retry_at.store(
            inner.opts.clock.now_millis() + st.backoff_ms,
            Ordering::Relaxed,
        );
        st.last_error = Some(e);
        st.failures += 1;
        // Release: pairs with the Acquire loads of the flag.
        self.ring.next.store(NEXT_NONE, Ordering::Release);
        self.wake(st);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlowState> {
        // A refill task never panics while holding the lock; recover the state if one did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiter, blocking and async; call with the state lock held.
    pub(super) fn wake(&self, st: &SlowState) {
        self.changed.notify_all();
        st.woken.notify_waiters();
    }

    /// The state, with the parent's segments forgotten if this is a forked child.
    pub(super) fn lock_fresh(self: &Arc<Self>, inner: &Arc<Inner>) -> MutexGuard<'_, SlowState> {
        let mut st = self.lock();
        if !self.fresh() {
            inner.restart_after_fork();
            self.forget_parent(&mut st);
        }
        st
    }

    /// Everything that is not an atomic add: first load, switch, waiting for a refill,
    /// fork and close. Blocks the caller up to `wait` (zero: never blocks, and no I/O
    /// happens on the caller's thread on any path: loads are spawned).
    #[cold]
    pub(super) fn slow(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        want: u64,
        wait: Duration,
    ) -> Result<Taken> {
        let started = Instant::now();
        let deadline = deadline_after(started, wait);
        let mut st = self.lock_fresh(inner);
        let failures_at_start = st.failures;
        loop {
            if let Some(done) = self.attempt(inner, &mut st, want, failures_at_start) {
                return done;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.exhausted(&st, now - started));
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// [`slow`](Self::slow) for async callers: waits on the tag's notification instead
    /// of blocking a thread.
    pub(super) async fn slow_async(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        want: u64,
    ) -> Result<Taken> {
        let started = Instant::now();
        let deadline = deadline_after(started, inner.opts.wait_timeout);
        let failures_at_start = self.lock_fresh(inner).failures;
        let answer = self
            .wait_for(deadline, |st| {
                self.attempt(inner, st, want, failures_at_start)
            })
            .await;
        match answer {
            Some(done) => done,
            None => Err(self.exhausted(&self.lock(), started.elapsed())),
        }
    }

    /// Runs `check` under the state lock until it answers, sleeping between tries on
    /// the tag's notification (woken by every refill, failure and close); `None` once
    /// `deadline` passed. The async twin of the Condvar loop in [`slow`](Self::slow).
    pub(super) async fn wait_for<T>(
        &self,
        deadline: Instant,
        mut check: impl FnMut(&mut SlowState) -> Option<T>,
    ) -> Option<T> {
        let mut woken = None;
        loop {
            let next = {
                let mut st = self.lock();
                // Dropped under the lock (it takes the Notify's own lock to leave the
                // waiter list), as every notify happens under it: a fork, which holds
                // this lock, then never copies the Notify's lock held.
                drop(woken.take());
                if let Some(v) = check(&mut st) {
                    return Some(v);
                }
                if Instant::now() >= deadline {
                    return None;
                }
                // Registered before the lock is let go, so a wake in between is not lost.
                let mut next = Box::pin(st.woken.clone().notified_owned());
                next.as_mut().enable();
                next
            };
            let woken = woken.insert(next);
            let _ = tokio::time::timeout_at(deadline.into(), woken.as_mut()).await;
        }
    }

    /// One pass of the slow path under the lock: take, switch to a loaded segment, or
    /// start a refill. `None`: nothing to do but wait for the refill.
    pub(super) fn attempt(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        st: &mut SlowState,
        want: u64,
        failures_at_start: u64,
    ) -> Option<Result<Taken>> {
        loop {
            if st.closed {
                return Some(Err(Error::Closed));
            }
            if let Some(t) = self.ring.take_many(want) {
                if t.wants_preload {
                    self.start_load(inner, st);
                }
                return Some(Ok(t));
            }
            // The current segment is spent (or none was loaded yet).
            match self.ring.next.load(Ordering::Acquire) {
                NEXT_READY => {
                    if st.gen >= LAST_GEN {
                        return Some(Err(Error::InvalidConfig(format!(
                            "tag {:?} used up this generator's {LAST_GEN} segment generations; create a new generator",
                            self.tag
                        ))));
                    }
                    // The segment left is spent: all its ids were issued.
                    st.spent += self.ring.len_of(st.gen);
                    st.gen += 1;
                    // Release: pairs with the Acquire loads of the flag.
                    self.ring.next.store(NEXT_NONE, Ordering::Release);
                    self.ring.point_at(st.gen);
                    continue;
                }
                NEXT_NONE => {
                    if st.failures != failures_at_start {
                        return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                    }
                    // Relaxed: written under this lock (or a hint racing with it).
                    let retry_at = self.retry_at.load(Ordering::Relaxed);
                    if retry_at != 0 && inner.opts.clock.now_millis() < retry_at {
                        return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                    }
                    self.start_load(inner, st);
                    if st.failures != failures_at_start {
                        return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                    }
                }
                _ => {}
            }
            self.ring.clamp();
            return None;
        }
    }

    /// The error for a caller whose wait ended with no segment: the last refill's
    /// error, or, while a refill still runs with no error yet, that the store has not
    /// answered (never a bare "none" during an outage a caller is waiting out).
    pub(super) fn exhausted(&self, st: &SlowState, waited: Duration) -> Error {
        let loading = self.ring.next.load(Ordering::Acquire) == NEXT_LOADING;
        let (cause, source) =
            super::refill::exhausted_cause(st.last_error.as_ref(), loading, waited);
        Error::SegmentsExhausted {
            tag: self.tag.clone(),
            waited,
            cause,
            source,
        }
    }

    /// Starts loading the first segment if none is loaded or loading (a new handle, a
    /// created or found tag). Never waits for the load.
    pub(super) fn load_first(self: &Arc<Self>, inner: &Arc<Inner>) {
        let mut st = self.lock_fresh(inner);
        // Relaxed: a back-off hint, as in `maybe_preload`.
        let retry_at = self.retry_at.load(Ordering::Relaxed);
        let backing_off = retry_at != 0 && inner.opts.clock.now_millis() < retry_at;
        if !st.initialized && !backing_off {
            self.start_load(inner, &mut st);
        }
    }

    /// Waits until the first segment is loaded (`Ok`) or its load failed (the error).
    /// Bounded by the refill's own timeout.
    pub(super) async fn first_loaded(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<()> {
        let failures_at_start = self.lock_fresh(inner).failures;
        let never = deadline_after(Instant::now(), Duration::MAX);
        self.wait_for(never, |st| {
            if st.initialized {
                return Some(Ok(()));
            }
            if st.closed {
                return Some(Err(Error::Closed));
            }
            if st.failures != failures_at_start {
                return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
            }
            if self.ring.next.load(Ordering::Acquire) == NEXT_NONE {
                // Relaxed: a back-off hint, read under the lock.
                let retry_at = self.retry_at.load(Ordering::Relaxed);
                if retry_at != 0 && inner.opts.clock.now_millis() < retry_at {
                    return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                }
                self.start_load(inner, st);
                if st.failures != failures_at_start {
                    return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                }
            }
            None
        })
        .await
        .unwrap_or(Err(Error::Closed))
    }

    /// [`next_id`](Self::next_id) for async callers (runs on the core's runtime).
    pub(super) async fn next_id_async(self: Arc<Self>, inner: Arc<Inner>) -> Result<i64> {
        match self.try_next_id(&inner) {
            Some(id) => Ok(id),
            None => self.slow_async(&inner, 1).await.map(|t| t.first),
        }
    }

    /// [`fill`](Self::fill) for async callers (runs on the core's runtime).
    pub(super) async fn fill_async(
        self: Arc<Self>,
        inner: Arc<Inner>,
        n: usize,
    ) -> Result<Vec<i64>> {
        let mut out = vec![0; n];
        let mut done = 0;
        while done < n {
            let want = (n - done) as u64;
            let taken = match self.take_fast(&inner, want) {
                Some(t) => t,
                None => self.slow_async(&inner, want).await?,
            };
            done += write_run(&mut out[done..], taken);
        }
        Ok(out)
    }

    /// In a forked child: the segments belong to the parent, which keeps issuing them.
    pub(super) fn forget_parent(&self, st: &mut SlowState) {
        self.ring.forget();
        // A fresh generation with no slot: the next take goes to a new load.
        st.gen += 2;
        self.ring.point_at(st.gen);
        st.initialized = false;
        st.update_ts = 0;
        // Ids issued by this process only: the parent's were counted there.
        st.spent = 0;
        st.last_error = None;
        st.backoff_ms = 0;
        self.retry_at.store(0, Ordering::Relaxed);
        // The parent's async waiters belong to its runtime, absent here: never wake
        // them. Leaked, not dropped: dropping would touch their wakers.
        std::mem::forget(std::mem::take(&mut st.woken));
        // Release, last: publishes the forgotten slots and the moved cursor to every
        // thread that Acquire-loads the new epoch in `fresh`.
        self.epoch.store(runtime::fork_epoch(), EPOCH_PUBLISH);
    }

    /// Stops issuing and refilling, for good (handles included).
    pub(super) fn close(&self) {
        let mut st = self.lock();
        if !st.closed {
            // The ids issued from the current segment, before its offset is lost.
            st.spent += self.current_issued();
        }
        st.closed = true;
        // No slot ever holds CLOSED_GEN, so every take fails and goes to the slow
        // path, which answers `Closed`.
        self.ring.point_at(CLOSED_GEN);
        self.wake(&st);
    }

    /// Ids taken from the current segment (none when no slot holds it).
    fn current_issued(&self) -> u64 {
        let (gen, offset) = self.ring.position();
        // An overshooting take moves the offset past the end without issuing.
        offset.min(self.ring.len_of(gen))
    }

    pub(super) fn stats(&self) -> TagStats {
        let st = self.lock();
        let issued = st.spent + if st.closed { 0 } else { self.current_issued() };
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
            refill_latency: st.refill_latency.clone(),
            issued,
            last_error: st.last_error.as_ref().map(|e| e.to_string()),
        }
    }
}

/// `start + wait`, or a year from `start` when that overflows ("wait forever").
pub(super) fn deadline_after(start: Instant, wait: Duration) -> Instant {
    start
        .checked_add(wait)
        .unwrap_or_else(|| start + Duration::from_secs(365 * 24 * 3600))
}

/// Writes the run `taken` to the front of `out`; returns how many ids it wrote.
pub(super) fn write_run(out: &mut [i64], taken: Taken) -> usize {
    let count = taken.count as usize;
    for (k, slot) in out[..count].iter_mut().enumerate() {
        *slot = taken.first + k as i64;
    }
    count
}

impl runtime::ForkLock for TagBuffer {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        Box::new(self.lock())
    }
}
