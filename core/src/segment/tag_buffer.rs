//! One tag's buffer: the lock-free ring ([`Ring`], `buffer.rs`) plus the state only
//! the slow path touches, and what every part of the tag's issuing builds on: the lock
//! and its wake-ups, the fork check, recording a failed refill, forgetting the parent's
//! segments in a forked child, close and stats.
//!
//! The rest of a tag's work sits in this folder, each file using only the ones listed
//! before it (a callee never reaches back into its caller):
//! - `refill.rs`: loading the next segment from the store (a background task);
//! - `loading.rs`: starting that task (the 10% preload, the first load);
//! - `slow_path.rs`: switching segments and waiting for a refill, blocking or async;
//! - `issue.rs`: the calls the generator and handles make, the hot path first.
//!
//! What the tag needs of its generator (options, store, marks) comes as a [`Loader`].

mod issue;
mod loading;
mod refill;
mod slow_path;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use super::buffer::{Ring, CLOSED_GEN, EPOCH_OBSERVE, EPOCH_PUBLISH, NEXT_NONE, NEXT_READY};
use super::loader::Loader;
use super::thread_chunk;
use super::{RefillLatency, SegmentStats, TagStats};
use crate::error::Error;
use crate::runtime;

/// Longest pause between refill attempts while the store keeps failing.
pub(super) const MAX_BACKOFF_MS: i64 = 1_000;
pub(super) const FIRST_BACKOFF_MS: i64 = 50;

/// One tag: the lock-free ring plus the state only the slow path touches.
#[derive(Debug)]
pub(super) struct TagBuffer {
    pub(super) tag: String,
    pub(super) ring: Ring,
    /// Fork epoch this buffer's segments were loaded under.
    pub(super) epoch: AtomicU64,
    /// The chunked form's largest chunk per thread ([`SegmentOptions::thread_chunk`]);
    /// 0 for the strictly ordered form. Fixed for the buffer's life.
    ///
    /// [`SegmentOptions::thread_chunk`]: crate::SegmentOptions::thread_chunk
    pub(super) chunk: u64,
    /// The key threads' chunks of this buffer are kept under (`thread_chunk.rs`),
    /// replaced at each segment switch, on close and in a forked child so that no chunk
    /// taken before is used ([`renew_chunks`](Self::renew_chunks)).
    pub(super) chunk_key: AtomicU64,
    /// The threads that took a chunk under the current key, one bit each
    /// (`thread_chunk::count_thread`): how long a chunk may trail the cursor.
    pub(super) chunk_threads: AtomicU64,
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
    /// A buffer for `tag` whose segments will be loaded under fork epoch `epoch`, with
    /// thread chunks of up to `chunk` ids (0: the strictly ordered form).
    pub(super) fn shared(tag: String, epoch: u64, chunk: u64) -> Arc<TagBuffer> {
        let buf = Arc::new(TagBuffer {
            tag,
            ring: Ring::new(),
            epoch: AtomicU64::new(epoch),
            chunk,
            chunk_key: AtomicU64::new(thread_chunk::new_key()),
            chunk_threads: AtomicU64::new(0),
            retry_at: AtomicI64::new(0),
            state: Mutex::new(SlowState::default()),
            changed: Condvar::new(),
        });
        // Rank 0: the slow path may take the generator's locks (rank 1) while holding this.
        let weak: Weak<TagBuffer> = Arc::downgrade(&buf);
        runtime::register_fork_lock(0, weak);
        buf
    }

    /// Whether the segments were loaded in this process (not inherited through fork).
    #[inline(always)]
    pub(super) fn fresh(&self) -> bool {
        // Acquire (EPOCH_OBSERVE) pairs with the Release in `forget_parent`: a thread of
        // a forked child that sees the child's epoch here also sees the parent's
        // segments forgotten and the cursor moved past them, so it cannot take from
        // them. (Relaxed would let a second thread on a weakly ordered CPU see the new
        // epoch with the old cursor; loom-checked in `buffer/loom_tests.rs`.) `fork_epoch` itself is
        // written in the child before any of its threads exist.
        self.epoch.load(EPOCH_OBSERVE) == runtime::fork_epoch()
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

    /// Records a failed refill: back off, keep the error for callers, clear the flag.
    pub(super) fn failed(&self, loader: &Loader, st: &mut SlowState, e: Error) {
        tracing::warn!(tag = %self.tag, error = %e, "segment refill failed");
        st.backoff_ms = (st.backoff_ms * 2).clamp(FIRST_BACKOFF_MS, MAX_BACKOFF_MS);
        // Relaxed: a back-off hint, read again under the lock by the slow path.
        self.retry_at.store(
            loader.opts.clock.now_millis() + st.backoff_ms,
            Ordering::Relaxed,
        );
        st.last_error = Some(e);
        st.failures += 1;
        // Release: pairs with the Acquire loads of the flag.
        self.ring.next.store(NEXT_NONE, Ordering::Release);
        self.wake(st);
    }

    /// The state, with the parent's segments forgotten if this is a forked child.
    pub(super) fn lock_fresh(self: &Arc<Self>, loader: &Arc<Loader>) -> MutexGuard<'_, SlowState> {
        let mut st = self.lock();
        if !self.fresh() {
            loader.follow_fork();
            self.forget_parent(&mut st);
        }
        st
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
        // The chunk the forking thread inherited is the parent's, which keeps issuing
        // it: a new key, so no thread of this process ever takes from it. Published by
        // the epoch's Release below.
        self.renew_chunks();
        // Release, last: publishes the forgotten slots, the moved cursor and the new
        // chunk key to every thread that Acquire-loads the new epoch in `fresh`.
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
        // Threads' chunks end too (each thread sees the new key on its next call). A
        // thread that still sees the old key takes ids reserved before the close, as a
        // take racing with the close does.
        self.renew_chunks();
        self.wake(&st);
    }

    /// Threads' chunks of this buffer are never used again: a new key, and no thread
    /// counted under it yet. Called under the lock, at a segment switch, a close, and
    /// in a forked child.
    pub(super) fn renew_chunks(&self) {
        // Relaxed: a thread that counts itself under the new key sees the set cleared
        // through the key's Release below.
        self.chunk_threads.store(0, Ordering::Relaxed);
        // Release: pairs with the Acquire load of the key before a thread counts itself
        // for a new chunk (`new_chunk`), so its count lands after the clear above. The
        // rest that must be seen with the key is published by the caller (the cursor's
        // swap at a switch or close, the epoch in a forked child); a thread that still
        // sees the old key takes only ids reserved before.
        self.chunk_key
            .store(thread_chunk::new_key(), Ordering::Release);
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

impl runtime::ForkLock for TagBuffer {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        Box::new(self.lock())
    }
}
