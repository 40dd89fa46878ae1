//! A tag's slow path: everything that is not an atomic add on the current segment —
//! taking under the lock, switching to the next segment once the current one is spent,
//! starting a refill, and waiting for one, blocking (a `Condvar`) or async (a `Notify`).
//! Also the wait for a tag's first segment.
//!
//! Separate from `issue.rs` (the calls, hot path first) so the hot path reads on its
//! own; it starts refills through `loading.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::{SlowState, TagBuffer};
use crate::error::{Error, Result};
use crate::segment::buffer::{Taken, LAST_GEN, NEXT_LOADING, NEXT_NONE, NEXT_READY};
use crate::segment::loader::Loader;
use crate::segment::refill_error::{exhausted_cause, replay};

impl TagBuffer {
    /// Everything that is not an atomic add: first load, switch, waiting for a refill,
    /// fork and close. Blocks the caller up to `wait` (zero: never blocks, and no I/O
    /// happens on the caller's thread on any path: loads are spawned).
    #[cold]
    pub(in crate::segment) fn slow(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        want: u64,
        wait: Duration,
    ) -> Result<Taken> {
        let started = Instant::now();
        let deadline = deadline_after(started, wait);
        let mut st = self.lock_fresh(loader);
        let failures_at_start = st.failures;
        loop {
            if let Some(done) = self.attempt(loader, &mut st, want, failures_at_start) {
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
    pub(in crate::segment) async fn slow_async(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        want: u64,
    ) -> Result<Taken> {
        let started = Instant::now();
        let deadline = deadline_after(started, loader.opts.wait_timeout);
        let failures_at_start = self.lock_fresh(loader).failures;
        let answer = self
            .wait_for(deadline, |st| {
                self.attempt(loader, st, want, failures_at_start)
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
    pub(in crate::segment) async fn wait_for<T>(
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
    pub(in crate::segment) fn attempt(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
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
                    self.start_load(loader, st);
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
                    if self.chunk != 0 {
                        // Threads' chunks of the spent segment are given up (a gap of at
                        // most one chunk each: they lie in a segment no one takes from
                        // any more), and the new segment counts its threads afresh (for
                        // the order bound, `thread_chunk.rs`). Before the switch, which
                        // publishes both to every thread that takes from the new segment.
                        // Within a segment, a chunk is given up once the cursor is more
                        // than `n` × threads past it, so an id from a chunk trails every
                        // id taken before its call by less than that, idle or not.
                        self.renew_chunks();
                    }
                    self.ring.point_at(st.gen);
                    continue;
                }
                NEXT_NONE => {
                    if st.failures != failures_at_start {
                        return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                    }
                    // Relaxed: written under this lock (or a hint racing with it).
                    let retry_at = self.retry_at.load(Ordering::Relaxed);
                    if retry_at != 0 && loader.opts.clock.now_millis() < retry_at {
                        return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                    }
                    self.start_load(loader, st);
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
    pub(in crate::segment) fn exhausted(&self, st: &SlowState, waited: Duration) -> Error {
        let loading = self.ring.next.load(Ordering::Acquire) == NEXT_LOADING;
        let (cause, source) = exhausted_cause(st.last_error.as_ref(), loading, waited);
        Error::SegmentsExhausted {
            tag: self.tag.clone(),
            waited,
            cause,
            source,
        }
    }

    /// Waits until the first segment is loaded (`Ok`) or its load failed (the error).
    /// Bounded by the refill's own timeout.
    pub(in crate::segment) async fn first_loaded(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
    ) -> Result<()> {
        let failures_at_start = self.lock_fresh(loader).failures;
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
                if retry_at != 0 && loader.opts.clock.now_millis() < retry_at {
                    return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                }
                self.start_load(loader, st);
                if st.failures != failures_at_start {
                    return Some(Err(replay(st.last_error.as_ref(), &self.tag)));
                }
            }
            None
        })
        .await
        .unwrap_or(Err(Error::Closed))
    }
}

/// `start + wait`, or a year from `start` when that overflows ("wait forever").
fn deadline_after(start: Instant, wait: Duration) -> Instant {
    start
        .checked_add(wait)
        .unwrap_or_else(|| start + Duration::from_secs(365 * 24 * 3600))
}
