//! [`SnowflakeGenerator`]: issues ids from one atomic word. This file is the public API;
//! the parts it stands on each have a file of their own.
//!
//! The whole issuing state is the last id issued (timestamp, worker id, sequence), kept
//! in one `AtomicU64`. `next_id` reads it, reads the clock, computes the successor and
//! installs it with a compare-and-swap: no lock, no allocation, no syscall (the system
//! clock is read through the vDSO). Because every successful swap moves the word
//! strictly upwards, no two calls ever get the same id, whatever the clock does; the
//! clock only decides whether a call may issue now.
//!
//! Two more words gate issuing. The [`IssueLimit`](super::registry::IssueLimit) is the
//! highest timestamp a persisted bound covers (the heartbeat raises it, a registry
//! lowers it on a lost lease), and the fork epoch tells a forked child that the worker
//! id it sees is its parent's. Anything unusual drops to a cold path that may wait,
//! persist a bound, re-acquire a worker id or fail with a clear error.
//!
//! The map, from the bottom up:
//! - `word.rs` (beside this folder): the lock-free part (the word's compare-and-swap,
//!   the limit's word, the gate), which states what it guarantees and is model-checked
//!   with loom (`tests/loom_snowflake.rs`);
//! - `generator/settings.rs`: the checked options a generator runs with, and the limits
//!   the builder checks them against;
//! - `generator/state.rs`: the shared state behind every clone (`Core`) and one
//!   worker-id holding (`Session`);
//! - `generator/session.rs`: acquiring a worker id, installing it into the word,
//!   persisting time bounds, the heartbeat and the re-acquire after a lost lease;
//! - `generator/builder.rs`: [`SnowflakeBuilder`], which validates and starts a session;
//! - `generator/slow.rs`: the slow path as each kind of caller may wait (`next_id`
//!   blocks, `next_id_now` never waits on I/O, `next_id_async` awaits);
//! - `generator/close.rs`: the bounded close; `generator/stats.rs`: the statistics.
//!
//! Where a caller's thread can block, and for how long: `build_blocking` (the registry's
//! timeouts and `startup_wait`); `next_id` / `next_ids` / `fill` (one persist or one
//! re-acquire after a fork, bounded by the registry's timeouts and
//! `REGISTRY_CALL_LIMIT`; a backward step up to twice `max_backward`); `close` /
//! `close_within` (the deadline given). Nothing else: `next_id_now`, `try_next_id`,
//! the async calls and every `Drop` return without waiting on I/O, and the heartbeat
//! holds the lease state only across registry calls that are bounded.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::layout::{decode, DecodedId, Layout};
use super::word::Stall;
use crate::error::Result;
use crate::runtime;

mod builder;
mod close;
mod lead;
mod session;
mod settings;
mod slow;
mod state;
mod stats;

pub use builder::SnowflakeBuilder;
pub use settings::{
    DEFAULT_CLOSE_WAIT, DEFAULT_LOOKAHEAD, DEFAULT_MAX_SKEW, MAX_ASYNC_WAIT, MAX_BACKWARD,
    MAX_HEARTBEAT, MAX_LOOKAHEAD,
};
pub use stats::{LeaseStatus, SnowflakeStats};

use self::state::Core;

/// Issues snowflake ids. Cheap to clone (all clones share one state); `Send + Sync`.
/// Dropping the last clone closes it without waiting (the release runs on the core's
/// runtime). Which calls may wait: [`next_id`](Self::next_id) (blocking, bounded by the
/// registry's timeouts), [`next_id_now`](Self::next_id_now) (never on I/O),
/// [`next_id_async`](Self::next_id_async) (awaits without a thread),
/// [`close`](Self::close) (at most [`DEFAULT_CLOSE_WAIT`]).
///
/// ```
/// # fn main() -> leafid::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let generator = leafid::SnowflakeGenerator::builder()
///     .registry_url("fixed:7")?
///     .cache_dir(dir.path())
///     .build_blocking()?;
/// let a = generator.next_id()?;
/// let b = generator.next_id()?;
/// assert!(b > a);
/// assert_eq!(generator.decode(b).worker_id, 7);
/// generator.close();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SnowflakeGenerator {
    inner: Arc<Handle>,
}

impl std::fmt::Debug for SnowflakeGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnowflakeGenerator")
            .field("worker_id", &self.worker_id())
            .field("layout", &self.inner.core.layout)
            .field("registry", &self.inner.core.settings.registry)
            .finish()
    }
}

/// The users' share of a generator; its drop (the last clone's) closes the generator,
/// while the heartbeat task holds only the [`Core`].
struct Handle {
    core: Arc<Core>,
}

impl Drop for Handle {
    /// Starts the close and returns at once: the release runs on the runtime, so a
    /// drop (a binding's garbage collection included) never waits on the registry.
    fn drop(&mut self) {
        self.core.begin_close();
    }
}

impl SnowflakeGenerator {
    /// A builder with Leaf's defaults; a registry is required.
    pub fn builder() -> SnowflakeBuilder {
        SnowflakeBuilder::default()
    }

    /// The next id: strictly greater than every id this generator issued before.
    ///
    /// The blocking call, for threaded callers: almost always lock-free and without a
    /// syscall, but when the heartbeat is late it persists a bound itself (waiting for
    /// the heartbeat's persist and the registry at most 10 s in all), it sleeps out a small backward clock step
    /// (up to twice `max_backward`), and in a forked child it acquires the child's own
    /// worker id. Use [`next_id_now`](Self::next_id_now) where no wait is acceptable
    /// and [`next_id_async`](Self::next_id_async) to wait without a thread.
    #[inline]
    pub fn next_id(&self) -> Result<i64> {
        let core = &self.inner.core;
        loop {
            match self.attempt() {
                Ok(id) => return Ok(id),
                Err(stall) => core.stalled(stall)?,
            }
        }
    }

    /// One turn of the fast path: an id, or why it stalled.
    #[inline(always)]
    fn attempt(&self) -> std::result::Result<i64, Stall> {
        let core = &self.inner.core;
        let mut cur = core.state.load();
        let id = core.state.issue(
            &mut cur,
            &core.shape,
            || core.clock.now_millis(),
            |now| core.gated(now),
            || core.random_start(),
        )?;
        // On success `cur` is the word the swap replaced.
        core.note_issued(cur, id);
        Ok(id as i64)
    }

    /// One attempt at [`next_id`](Self::next_id) that never waits, sleeps or does I/O:
    /// `None` whenever the slow path is needed (gate shut after a fork, close or late
    /// heartbeat; this millisecond's sequence spent; clock behind; timestamp overflow).
    /// Bindings that hold an interpreter lock call this first and [`next_id`](Self::next_id)
    /// with the lock released on `None`.
    #[inline]
    pub fn try_next_id(&self) -> Option<i64> {
        self.attempt().ok()
    }

    /// Fills `out` with fresh ids, in increasing order, reserving a run of sequence
    /// numbers per atomic swap; may wait as [`next_id`](Self::next_id) does. A batch
    /// takes at most three quarters of each millisecond's sequence (the rest is kept
    /// for single ids) and sleeps, not spins, until the next millisecond. On error
    /// the ids already written are valid but `out` is only partly filled.
    pub fn fill(&self, out: &mut [i64]) -> Result<()> {
        self.fill_with(out, |core, stall| core.stalled_batch(stall))
    }

    fn fill_with(
        &self,
        out: &mut [i64],
        mut slow: impl FnMut(&Arc<Core>, Stall) -> Result<()>,
    ) -> Result<()> {
        let mut filled = 0usize;
        while filled < out.len() {
            match self.reserve_into(&mut out[filled..]) {
                Ok(k) => filled += k,
                Err(stall) => slow(&self.inner.core, stall)?,
            }
        }
        Ok(())
    }

    /// One reservation of up to `out.len()` (at least 1) consecutive ids into the front
    /// of `out`: how many, or why it stalled.
    fn reserve_into(&self, out: &mut [i64]) -> std::result::Result<usize, Stall> {
        let core = &self.inner.core;
        let mut cur = core.state.load();
        let run = core.state.reserve(
            &mut cur,
            out.len() as u64,
            &core.shape,
            || core.clock.now_millis(),
            |now| core.gated(now),
            || core.random_start(),
        )?;
        core.note_issued(run.prev, run.first);
        for (slot, id) in out.iter_mut().zip(run.first..=run.last) {
            *slot = id as i64;
        }
        Ok((run.last - run.first + 1) as usize)
    }

    /// The next id without ever waiting on I/O. When the slow path would need the
    /// registry, it fails at once with the cause's error and the work goes on in the
    /// background, once for all callers: a late or failing heartbeat gives
    /// `RegistryUnavailable` (with the last failure) or `ClockSkew` while one persist
    /// runs on the core's runtime; a lost lease gives `LeaseLost`, a closed generator
    /// `Closed`; the first call in a forked child starts acquiring the child's own worker
    /// id and fails with `RegistryUnavailable`. Only CPU-scale waits remain: the spin to
    /// the next millisecond when this one's sequence is spent, and a backward clock step
    /// of at most 5 ms (slept out twice, as Leaf; a larger one fails with
    /// `ClockMovedBackwards`). For callers that must never block (Node's synchronous
    /// calls, an event loop).
    #[inline]
    pub fn next_id_now(&self) -> Result<i64> {
        let core = &self.inner.core;
        loop {
            match self.attempt() {
                Ok(id) => return Ok(id),
                Err(stall) => core.stalled_now(stall)?,
            }
        }
    }

    /// `n` ids without ever waiting on I/O (see [`next_id_now`](Self::next_id_now)),
    /// at most [`max_sync_batch`](Self::max_sync_batch): the call spins through every
    /// millisecond the batch spans, holding its caller (Node's event loop) that long.
    /// On error no id is returned (those reserved are skipped, never reissued).
    pub fn next_ids_now(&self, n: usize) -> Result<Vec<i64>> {
        let n = self.sync_batch(n)?;
        let mut out = vec![0; n];
        self.fill_now(&mut out)?;
        Ok(out)
    }

    /// [`fill`](Self::fill) without ever waiting on I/O (see
    /// [`next_id_now`](Self::next_id_now)); for bindings that write into memory they own.
    /// `out` holds at most [`max_sync_batch`](Self::max_sync_batch) ids, as
    /// [`next_ids_now`](Self::next_ids_now).
    pub fn fill_now(&self, out: &mut [i64]) -> Result<()> {
        self.sync_batch(out.len())?;
        self.fill_with(out, |core, stall| core.stalled_now(stall))
    }

    /// [`fill`](Self::fill) that never waits on I/O: a spent millisecond is slept out
    /// (the thread is held, not a CPU), and anything needing the registry fails at once
    /// as in [`next_id_now`](Self::next_id_now), the work going on in the background.
    /// No size limit beyond what sleeping through the milliseconds costs the caller's
    /// thread. For bindings that take a big batch in chunks off their interpreter lock
    /// and wait for the registry in their own interruptible way (Python's `next_ids`).
    /// On error the ids already written are valid but `out` is only partly filled.
    pub fn fill_paced(&self, out: &mut [i64]) -> Result<()> {
        self.fill_with(out, |core, stall| core.stalled_paced(stall))
    }

    /// The most ids [`next_ids_now`](Self::next_ids_now) and [`fill_now`](Self::fill_now)
    /// take under this generator's layout: [`SYNC_BATCH_MS`](crate::limits::SYNC_BATCH_MS)
    /// milliseconds of the batches' share of the sequence (24 576 ids in Leaf's layout,
    /// 3 072 in the JS-safe one).
    pub fn max_sync_batch(&self) -> usize {
        crate::limits::max_sync_batch(self.inner.core.shape.batch_max + 1)
    }

    /// Checks `n` against [`max_sync_batch`](Self::max_sync_batch), with the error
    /// [`next_ids_now`](Self::next_ids_now) gives: for bindings that check before they
    /// allocate the memory [`fill_now`](Self::fill_now) writes into.
    pub fn sync_batch(&self, n: usize) -> Result<usize> {
        crate::limits::sync_batch(n as u64, self.inner.core.shape.batch_max + 1)
    }

    /// The next id, waiting without holding a thread: the future runs on the core's
    /// runtime (any executor, a binding's event loop included, can await it). Where
    /// [`next_id`](Self::next_id) would block, it awaits the same work, shared with other
    /// callers (one persist of a bound, the heartbeat's re-acquire after a lost lease,
    /// a forked child's own worker id) and retries transient failures for up to
    /// [`MAX_ASYNC_WAIT`], then fails with the cause's error. Clock waits are timers.
    pub fn next_id_async(&self) -> impl std::future::Future<Output = Result<i64>> + Send + 'static {
        let gen = self.clone();
        async move {
            // The fast path on the caller's executor (lock-free, no I/O); only the slow
            // path moves to the core's runtime, where its timers and I/O live.
            if let Ok(id) = gen.attempt() {
                return Ok(id);
            }
            runtime::run_cancellable(async move {
                let core = gen.inner.core.clone();
                let deadline = tokio::time::Instant::now() + MAX_ASYNC_WAIT;
                loop {
                    match gen.attempt() {
                        Ok(id) => return Ok(id),
                        Err(stall) => core.stalled_async(stall, deadline).await?,
                    }
                }
            })
            .await
        }
    }

    /// `n` ids, waiting without holding a thread (see [`next_id_async`](Self::next_id_async)).
    pub fn next_ids_async(
        &self,
        n: usize,
    ) -> impl std::future::Future<Output = Result<Vec<i64>>> + Send + 'static {
        let gen = self.clone();
        async move {
            let n = crate::limits::batch(n as u64)?;
            // As `next_id_async`: what the lock-free path gives on the caller's executor
            // first; only a stall (a spent millisecond, the registry) moves the rest to
            // the core's runtime.
            let mut out = vec![0; n];
            let mut filled = 0usize;
            while filled < n {
                match gen.reserve_into(&mut out[filled..]) {
                    Ok(k) => filled += k,
                    Err(_) => break,
                }
            }
            if filled == n {
                return Ok(out);
            }
            runtime::run_cancellable(gen.fill_rest_async(out, filled, MAX_ASYNC_WAIT)).await
        }
    }

    /// Fills `out[filled..]` on the core's runtime, waiting out stalls as
    /// [`next_id_async`](Self::next_id_async) does. `wait` bounds a wait without
    /// progress, not the batch: each run of ids reserved starts it afresh (a maximal
    /// batch in a layout with a short sequence, or beside other batches, takes longer).
    async fn fill_rest_async(
        self,
        mut out: Vec<i64>,
        mut filled: usize,
        wait: Duration,
    ) -> Result<Vec<i64>> {
        let core = self.inner.core.clone();
        let mut deadline = tokio::time::Instant::now() + wait;
        while filled < out.len() {
            match self.reserve_into(&mut out[filled..]) {
                Ok(k) => {
                    filled += k;
                    deadline = tokio::time::Instant::now() + wait;
                }
                Err(stall) => core.stalled_async(stall, deadline).await?,
            }
        }
        Ok(out)
    }

    /// Stops issuing at once, then waits at most `wait` for the final write of the
    /// last timestamp issued and the release of the worker id, which run on the core's
    /// runtime. `true` when they completed in time; otherwise they go on in the
    /// background and, if they never complete, the lease expires on the registry's side
    /// (safe: the bound persisted before already covers every id issued). Idempotent
    /// (a later call waits for the same release); every later call on any clone fails
    /// with [`Error::Closed`](crate::Error::Closed). On the core's own runtime threads it does not wait.
    pub fn close_within(&self, wait: Duration) -> bool {
        self.inner.core.begin_close();
        self.inner.core.wait_released(wait)
    }

    /// [`close_within`](Self::close_within)`(`[`DEFAULT_CLOSE_WAIT`]`)` for async
    /// callers: issuing stops when this is called; the future resolves when the worker
    /// id is released or after the deadline (`true`: released). Unlike
    /// [`close`](Self::close) it does not wait out a lead of the ids.
    pub fn close_async(&self) -> impl std::future::Future<Output = bool> + Send + 'static {
        let core = self.inner.core.clone();
        core.begin_close();
        runtime::run(core.released_within(DEFAULT_CLOSE_WAIT))
    }

    /// After a close, on the layouts a Java Leaf or fork server shares (`zookeeper://`,
    /// `mysql://?port=`): how long until the clock passes the last id issued, the wait
    /// [`close`](Self::close) adds. Zero before a close, on other layouts, and once the
    /// clock has passed it. For callers that wait for it their own way (`leafid serve`
    /// waits asynchronously, and a second signal cuts the wait short).
    pub fn lead_left(&self) -> Duration {
        self.inner.core.lead_left()
    }

    /// `n` fresh ids in increasing order (see [`fill`](Self::fill)).
    pub fn next_ids(&self, n: usize) -> Result<Vec<i64>> {
        let n = crate::limits::batch(n as u64)?;
        let mut out = vec![0; n];
        self.fill(&mut out)?;
        Ok(out)
    }

    /// The generator's state: ids issued, lease, bound lead, clock skew. Reads atomics
    /// only: never waits, never slows issuing.
    pub fn stats(&self) -> SnowflakeStats {
        self.inner.core.stats()
    }

    /// The worker id this generator issues under.
    pub fn worker_id(&self) -> u32 {
        self.inner.core.worker.load(Ordering::Relaxed)
    }

    /// The bit layout.
    pub fn layout(&self) -> &Layout {
        &self.inner.core.layout
    }

    /// Splits an id into timestamp, worker id and sequence under this generator's layout.
    pub fn decode(&self, id: i64) -> DecodedId {
        decode(id, &self.inner.core.layout)
    }

    /// Where the worker lease lives (a lock file, a ZooKeeper node, …), for logs.
    pub fn lease_location(&self) -> Option<String> {
        let session = self.inner.core.session()?;
        let st = session.lease.try_lock().ok()?;
        Some(st.lease.location.clone())
    }

    /// Stops issuing, persists the exact last timestamp issued, releases the worker id
    /// and stops the heartbeat: [`close_within`](Self::close_within)`(`[`DEFAULT_CLOSE_WAIT`]`)`,
    /// so it blocks at most that long, except on the layouts a Java Leaf or fork server
    /// shares (`zookeeper://`, `mysql://?port=`) when the ids lead the clock (the first
    /// minutes after a start above a floor): then it first waits until the clock has
    /// passed the last id (at most `lookahead` + `max_skew` + 1 s), so that such a server
    /// started on the identity next never issues those ids again. Idempotent; every later
    /// call on any clone fails with [`Error::Closed`](crate::Error::Closed). Dropping the
    /// last clone closes without waiting at all.
    pub fn close(&self) {
        let core = &self.inner.core;
        core.begin_close();
        core.wait_released(DEFAULT_CLOSE_WAIT);
        let lead = core.lead_left();
        if !lead.is_zero() && !runtime::on_runtime_thread() {
            tracing::info!(
                lead_ms = lead.as_millis() as u64,
                "the last ids lead the clock: close waits until the clock passes them, so that \
                 a Java Leaf or fork server started on this identity next never issues them again"
            );
            std::thread::sleep(lead);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegistryConfig;

    /// Issue 29 review: an async batch's wait bounds a stall, not the batch. With no
    /// wait left at all, a batch spanning several milliseconds still completes while
    /// the clock runs (before: `ClockMovedBackwards { offset_ms: 0 }` at the first
    /// spent millisecond past the deadline, so three concurrent maximal batches in the
    /// JS-safe layout failed at 10 s).
    #[test]
    fn an_async_batch_outlives_its_wait_while_the_clock_runs() {
        let cache = tempfile::tempdir().unwrap();
        let sf = SnowflakeGenerator::builder()
            .registry(RegistryConfig::Fixed(1))
            .cache_dir(cache.path())
            .build_blocking()
            .unwrap();
        // About seven milliseconds of the batches' share in Leaf's layout.
        let n = 20_000;
        let ids =
            runtime::block_on(sf.clone().fill_rest_async(vec![0; n], 0, Duration::ZERO)).unwrap();
        assert!(ids.windows(2).all(|p| p[0] < p[1]));
        sf.close();
    }
}
