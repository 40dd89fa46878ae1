//! The slow path of a snowflake generator, in the three ways a caller may wait.
//!
//! The fast path (`word.rs`) stops with a [`Stall`] when it cannot issue; what happens
//! next depends on what the caller chose:
//! - [`Core::stalled`] (`next_id`, `next_ids`, `fill`): the blocking API for threaded
//!   callers. It may sleep out a small backward clock step and wait for one persist of
//!   a time bound (at most [`REGISTRY_CALL_LIMIT`](super::state::REGISTRY_CALL_LIMIT)
//!   in all, the wait for the heartbeat's persist included) or one re-acquire after a
//!   fork, bounded by the registry's timeouts.
//! - [`Core::stalled_now`] (`next_id_now`, `next_ids_now`): never waits on I/O. Work the
//!   registry must do (persist a bound, re-acquire after a fork) starts in the
//!   background, once for all callers, and the caller fails at once with the cause's
//!   error. Only CPU waits remain: the spin to the next millisecond when one is spent,
//!   and a backward step small enough ([`NOW_MAX_SLEEP_MS`]) to sleep out.
//! - [`Core::stalled_async`] (`next_id_async`, `next_ids_async`): awaits the same work on
//!   the runtime without holding a thread, retrying transient causes until a deadline
//!   ([`MAX_ASYNC_WAIT`](super::settings::MAX_ASYNC_WAIT)).
//!
//! Persisting a bound on a caller's behalf goes through [`catch_up`], which runs one
//! attempt at a time per session: callers that queued behind an attempt take its answer
//! instead of each making their own round trip to a registry that is down.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::super::word::{self, Stall};
use super::session::{persist_locked, start_session};
use super::state::{skew_of, Core, Failure, Session, NO_REBUILD, REGISTRY_CALL_LIMIT};
use crate::error::{counted, Error, Mode, Result};
use crate::runtime;

/// Clock reads spent waiting for the next millisecond before sleeping instead. A real
/// clock moves on long before this (a read costs ~20 ns); only a stopped or manual
/// clock gets here.
const SPIN_READS: u32 = 200_000;
/// How long a stalled clock is waited for at a sequence overflow before giving up.
const STALL_LIMIT_MS: u32 = 1_000;
/// After a failed catch-up persist, callers get its error without retrying for this long.
const RENEW_BACKOFF_MS: i64 = 100;
/// The largest sleep `_now` takes for a backward clock step (twice the step): the
/// caller asked not to wait, so only a step this small is waited out, as a CPU-scale
/// pause rather than an I/O wait.
const NOW_MAX_SLEEP_MS: i64 = 10;
/// How long an async caller waits between checks while a lost lease or a fork's worker
/// id is being re-acquired by someone else.
const ASYNC_POLL: Duration = Duration::from_millis(10);
/// What an async caller sleeps when a millisecond's sequence is spent. Tokio's timer
/// rounds a deadline up to its next 1 ms tick, so this wakes at that tick: in steady
/// state once per millisecond, at a fixed phase. (`sleep(1 ms)` would wake one to two
/// ms later, and a maximal async batch took twice as long: 720 ms instead of 370.)
const NEXT_TICK: Duration = Duration::from_micros(1);
/// The pause before an async caller retries a failed catch-up persist.
const ASYNC_RETRY: Duration = Duration::from_millis(100);

/// How a synchronous caller of the slow path may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// May block on the registry (bounded by its timeouts).
    Block,
    /// Never waits on I/O.
    Never,
}

impl Core {
    /// The slow path of a blocking caller: waits, persists or re-acquires as the stall
    /// needs (`Ok`: load the word and try again) or fails.
    #[cold]
    pub(super) fn stalled(self: &Arc<Self>, stall: Stall) -> Result<()> {
        counted(self.stalled_sync(stall, Wait::Block), Mode::Snowflake)
    }

    /// The slow path of a caller that never waits on I/O (see the module docs).
    #[cold]
    pub(super) fn stalled_now(self: &Arc<Self>, stall: Stall) -> Result<()> {
        counted(self.stalled_sync(stall, Wait::Never), Mode::Snowflake)
    }

    /// The slow path of a blocking batch (`fill`, `next_ids`): as [`stalled`](Self::stalled),
    /// but a spent millisecond is slept out rather than spun out. A maximal batch waits
    /// out hundreds of them; spinning, it would hold a CPU the whole time (two cores
    /// serve the runtime's refills and heartbeats, and every other caller).
    #[cold]
    pub(super) fn stalled_batch(self: &Arc<Self>, stall: Stall) -> Result<()> {
        match stall {
            Stall::Spent { last } => counted(self.sleep_next_ms(last), Mode::Snowflake),
            _ => self.stalled(stall),
        }
    }

    /// The slow path of a paced batch (`fill_paced`): a spent millisecond is slept out
    /// as in [`stalled_batch`](Self::stalled_batch), anything needing the registry as
    /// in [`stalled_now`](Self::stalled_now) (started in the background; the caller
    /// fails at once and may wait elsewhere, as Python's interruptible wait does).
    #[cold]
    pub(super) fn stalled_paced(self: &Arc<Self>, stall: Stall) -> Result<()> {
        match stall {
            Stall::Spent { last } => counted(self.sleep_next_ms(last), Mode::Snowflake),
            _ => self.stalled_now(stall),
        }
    }

    fn stalled_sync(self: &Arc<Self>, stall: Stall, wait: Wait) -> Result<()> {
        match stall {
            Stall::Shut { now } => self.reopen(now, wait),
            Stall::Overflow => Err(self.overflow()),
            Stall::Spent { last } => self.wait_next_ms(last, wait),
            Stall::Behind { last, ts } => {
                let offset = self.backward_waitable(last, ts, wait)?;
                self.clock.sleep_millis((offset as u64) << 1);
                self.after_backward_wait(last)
            }
            Stall::Closed => Err(Error::Closed),
        }
    }

    /// The slow path of an async caller: as [`stalled`](Self::stalled), awaiting on the
    /// runtime instead of blocking, and retrying transient causes until `deadline`.
    pub(super) async fn stalled_async(
        self: &Arc<Self>,
        stall: Stall,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        counted(
            self.stalled_async_uncounted(stall, deadline).await,
            Mode::Snowflake,
        )
    }

    async fn stalled_async_uncounted(
        self: &Arc<Self>,
        stall: Stall,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        match stall {
            Stall::Shut { now } => self.reopen_async(now, deadline).await,
            Stall::Overflow => Err(self.overflow()),
            // A timer, never a spin: this runs on the runtime's two threads, which
            // refills and heartbeats need. Spinning out each spent millisecond there,
            // maximal batches took them from segment refills, which then failed. Only a
            // clock that stands still fails, after STALL_LIMIT_MS in this millisecond
            // (as `sleep_next_ms`), never the caller's deadline: that bounds waits for
            // the registry, and a long batch outlives it while the clock runs.
            Stall::Spent { last } => {
                let stuck_since = tokio::time::Instant::now();
                while self.clock.now_millis() - self.shape.epoch_ms == last {
                    if stuck_since.elapsed() >= Duration::from_millis(STALL_LIMIT_MS.into()) {
                        return Err(Error::ClockMovedBackwards { offset_ms: 0 });
                    }
                    tokio::time::sleep(NEXT_TICK).await;
                }
                Ok(())
            }
            Stall::Behind { last, ts } => {
                let offset = self.backward_waitable(last, ts, Wait::Block)?;
                tokio::time::sleep(Duration::from_millis((offset as u64) << 1)).await;
                self.after_backward_wait(last)
            }
            Stall::Closed => Err(Error::Closed),
        }
    }

    fn overflow(&self) -> Error {
        Error::TimestampOverflow {
            max_ms: self.layout.max_timestamp_ms(),
        }
    }

    /// A backward step from `last` to `ts` (both relative to the epoch): its size when
    /// it may be waited out (twice the offset, as Leaf), else `ClockMovedBackwards`.
    fn backward_waitable(&self, last: i64, ts: i64, wait: Wait) -> Result<i64> {
        // A fresh reading first: the clock may have been moved to a new floor (`lead.rs`)
        // after the fast path read it, while the worker id was installed.
        let ts = ts.max(self.clock.now_millis() - self.shape.epoch_ms);
        let offset = (last - ts).max(0);
        if offset == 0 {
            return Ok(0);
        }
        self.note_backward(offset);
        let limit = match wait {
            Wait::Block => self.settings.max_backward_ms,
            Wait::Never => self.settings.max_backward_ms.min(NOW_MAX_SLEEP_MS / 2),
        };
        if offset > limit {
            tracing::warn!(
                offset_ms = offset,
                "clock moved backwards beyond the wait limit"
            );
            return Err(Error::ClockMovedBackwards { offset_ms: offset });
        }
        Ok(offset)
    }

    /// After waiting out a backward step: `Ok` when the clock is back at `last`.
    fn after_backward_wait(&self, last: i64) -> Result<()> {
        let again = self.clock.now_millis() - self.shape.epoch_ms;
        if again < last {
            self.note_backward(last - again);
            return Err(Error::ClockMovedBackwards {
                offset_ms: last - again,
            });
        }
        Ok(())
    }

    /// The sequence of millisecond `last` is spent: waits until the clock leaves it,
    /// forwards or (Leaf PR #153) backwards; the caller then re-reads everything. A
    /// running clock leaves it within the spin; only a stopped clock sleeps, and never
    /// for a caller that does not wait.
    fn wait_next_ms(&self, last: i64, wait: Wait) -> Result<()> {
        let mut reads = 0u32;
        let mut slept = 0u32;
        loop {
            if self.clock.now_millis() - self.shape.epoch_ms != last {
                return Ok(());
            }
            reads += 1;
            if reads < SPIN_READS {
                std::hint::spin_loop();
            } else {
                if slept >= STALL_LIMIT_MS || wait == Wait::Never {
                    return Err(Error::ClockMovedBackwards { offset_ms: 0 });
                }
                self.clock.sleep_millis(1);
                slept += 1;
                reads = 0;
            }
        }
    }

    /// [`wait_next_ms`](Self::wait_next_ms) by sleeping, for a blocking batch.
    fn sleep_next_ms(&self, last: i64) -> Result<()> {
        for _ in 0..STALL_LIMIT_MS {
            if self.clock.now_millis() - self.shape.epoch_ms != last {
                return Ok(());
            }
            self.clock.sleep_millis(1);
        }
        Err(Error::ClockMovedBackwards { offset_ms: 0 })
    }

    /// The slow path when the gate is shut: closed, forked, lease lost, or the clock
    /// past the last persisted bound. `Ok` means "try again".
    fn reopen(self: &Arc<Self>, now: i64, wait: Wait) -> Result<()> {
        match self.why_shut(now) {
            word::Shut::Closed => Err(Error::Closed),
            word::Shut::Forked => match wait {
                Wait::Block => self.after_fork(),
                Wait::Never => self.after_fork_now(),
            },
            word::Shut::LeaseLost => Err(self.lease_lost()),
            word::Shut::Reopened => Ok(()), // raised meanwhile
            // The heartbeat is late or failing: persist a bound now, once for all callers.
            word::Shut::Late => {
                if now < self.retry_after.load(Ordering::Acquire) {
                    return Err(self.renew_error());
                }
                match wait {
                    Wait::Block => runtime::block_on(catch_up(self.clone(), blocking_deadline())),
                    Wait::Never => {
                        self.start_catch_up();
                        Err(self.renew_error())
                    }
                }
            }
        }
    }

    /// [`reopen`](Self::reopen) for an async caller.
    async fn reopen_async(
        self: &Arc<Self>,
        now: i64,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        let (pause, err) = match self.why_shut(now) {
            word::Shut::Closed => return Err(Error::Closed),
            word::Shut::Reopened => return Ok(()),
            word::Shut::Forked => {
                if !self.settings.registry.reacquires_after_fork() {
                    return self.after_fork(); // fails at once, no I/O
                }
                self.start_after_fork();
                (ASYNC_POLL, self.fork_pending())
            }
            // The heartbeat is re-acquiring a worker id: wait for it.
            word::Shut::LeaseLost => (ASYNC_POLL, self.lease_lost()),
            word::Shut::Late => {
                if now >= self.retry_after.load(Ordering::Acquire) {
                    match catch_up(self.clone(), deadline).await {
                        Ok(()) => return Ok(()),
                        Err(e @ (Error::Closed | Error::LeaseLost { .. })) => return Err(e),
                        Err(e) => (ASYNC_RETRY, e),
                    }
                } else {
                    (ASYNC_RETRY, self.renew_error())
                }
            }
        };
        if tokio::time::Instant::now() + pause > deadline {
            return Err(err);
        }
        tokio::time::sleep(pause).await;
        Ok(())
    }

    fn why_shut(&self, now: i64) -> word::Shut {
        word::why_shut(
            now,
            &self.closed,
            runtime::fork_epoch,
            &self.epoch,
            self.limit.word(),
        )
    }

    fn lease_lost(&self) -> Error {
        Error::LeaseLost {
            worker_id: self.worker.load(Ordering::Relaxed),
            cause: "the registry reported the lease lost; a new worker id is being acquired, retry shortly"
                .into(),
        }
    }

    /// Starts one background [`catch_up`] unless one is under way; never waits.
    fn start_catch_up(self: &Arc<Self>) {
        let Some(session) = self.session() else {
            return;
        };
        // Acquire/Release on the flag: the task that clears it has finished its attempt.
        if session.catching_up.swap(true, Ordering::AcqRel) {
            return;
        }
        let core = self.clone();
        runtime::spawn(async move {
            let _ = catch_up(core, blocking_deadline()).await;
            session.catching_up.store(false, Ordering::Release);
        });
    }

    /// The error for a bound that could not be persisted: `ClockSkew` when that was the
    /// cause, else `RegistryUnavailable` with the last failure.
    pub(super) fn renew_error(&self) -> Error {
        let (cause, source) = match &*self.last_failure.load_full() {
            Failure::Skew {
                skew_ms,
                max_skew_ms,
                source,
            } => return skew_of(*skew_ms, *max_skew_ms, source.clone()),
            Failure::Text(t, _) if t.is_empty() => (
                "the heartbeat has not persisted one yet; one is being persisted now".to_string(),
                None,
            ),
            Failure::Text(t, source) => (t.clone(), source.clone()),
        };
        Error::RegistryUnavailable {
            cause: format!(
                "worker {} cannot persist a time bound past its last one ({}): {cause}",
                self.worker.load(Ordering::Relaxed),
                self.limit.get()
            ),
            source,
        }
    }

    /// First use in a forked child by a blocking caller: the worker id is the parent's.
    #[cold]
    fn after_fork(self: &Arc<Self>) -> Result<()> {
        if !self.settings.registry.reacquires_after_fork() {
            return self.refuse_fork();
        }
        // One thread re-acquires; the others wait for it. A flag and a sleep, not a
        // lock: a lock copied into the child while its parent held it stays locked.
        if !self.claim_rebuild() {
            for _ in 0..60_000 {
                std::thread::sleep(Duration::from_millis(1));
                if !self.rebuild_claimed_here() {
                    return Ok(()); // the winner's result shows on the retry
                }
            }
            return Err(Error::registry(
                "re-acquiring a worker id after fork() takes too long",
            ));
        }
        let core = self.clone();
        let result = runtime::block_on(async move { core.rebuild_after_fork().await });
        self.end_rebuild();
        result
    }

    /// First use in a forked child by a caller that never waits: starts the re-acquire
    /// in the background and fails at once.
    fn after_fork_now(self: &Arc<Self>) -> Result<()> {
        if !self.settings.registry.reacquires_after_fork() {
            return self.refuse_fork();
        }
        self.start_after_fork();
        Err(self.fork_pending())
    }

    /// Starts the child's re-acquire on the runtime unless one is under way.
    fn start_after_fork(self: &Arc<Self>) {
        if !self.claim_rebuild() {
            return;
        }
        let core = self.clone();
        runtime::spawn(async move {
            if let Err(e) = core.rebuild_after_fork().await {
                tracing::warn!(error = %e, "cannot acquire a worker id after fork()");
            }
            core.end_rebuild();
        });
    }

    fn fork_pending(&self) -> Error {
        Error::RegistryUnavailable {
            cause:
                "this process is a fork()ed child: a worker id of its own is being acquired in the \
                    background (next_id_async waits for it); retry shortly"
                    .into(),
            source: None,
        }
    }

    fn refuse_fork(&self) -> Result<()> {
        // The id belongs to the parent; only pool registries can give the child its own.
        runtime::refuse_after_fork(
            self.epoch.load(Ordering::Acquire),
            &format!(
                "this snowflake generator ({} registry: its worker id belongs to the parent process; \
                 local: and zookeeper-recycle: registries give each process its own id)",
                self.settings.registry.scheme()
            ),
        )
    }

    /// Claims the child's re-acquire; false when another caller of this process has
    /// it. A claim of another process (an ancestor forked us while it re-acquired:
    /// nested pools) does not count: no thread here will ever clear it.
    fn claim_rebuild(&self) -> bool {
        let mine = runtime::fork_epoch();
        let mut seen = self.rebuilding.load(Ordering::Relaxed);
        loop {
            if seen == mine {
                return false;
            }
            // Acquire/Release on the claim: the waiter that sees it cleared sees the new
            // session.
            match self.rebuilding.compare_exchange_weak(
                seen,
                mine,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }

    /// Whether a caller of this process holds the re-acquire claim.
    fn rebuild_claimed_here(&self) -> bool {
        self.rebuilding.load(Ordering::Acquire) == runtime::fork_epoch()
    }

    /// Clears this process's claim (and nobody else's: a process forked meanwhile made
    /// its own claim in its own memory, and a claim is never taken from another caller
    /// of this process).
    fn end_rebuild(&self) {
        let _ = self.rebuilding.compare_exchange(
            runtime::fork_epoch(),
            NO_REBUILD,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// Takes a worker id of the child's own (the claim held). Runs on the runtime.
    async fn rebuild_after_fork(self: &Arc<Self>) -> Result<()> {
        if self.epoch.load(Ordering::Acquire) == runtime::fork_epoch() {
            return Ok(()); // done by the previous claimant
        }
        tracing::info!("fork detected: acquiring a worker id of this process's own");
        if let Some(old) = self.session() {
            if let Some(local) = &old.local {
                local.forget_inherited();
            }
            // The old session belongs to the parent; it is never used again here.
        }
        start_session(self).await
    }
}

/// The longest pause [`catch_up`] makes for the cap to move (the lease lock is held).
const CAPPED_PAUSE: Duration = Duration::from_millis(50);

/// How many times [`catch_up`] persists a bound the cap kept below the clock.
const CAPPED_TRIES: u32 = 5;

/// How long a blocking caller (and a background catch-up) may wait in [`catch_up`]:
/// one registry call's limit, from the stall.
fn blocking_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + REGISTRY_CALL_LIMIT
}

/// Persists a bound past the clock for callers whose gate is shut because the
/// heartbeat is late or failing. One attempt at a time per session: a caller that
/// waited while another attempt ran takes that attempt's answer.
///
/// The caller's wait ends at `deadline`, whatever it waits on: the session's lease is
/// held by the heartbeat's persist (itself bounded, but by a limit of its own that
/// began earlier) and then by this caller's own, so without it a caller could wait for
/// two registry calls. Giving up is safe at any point: the limit rises only at the end
/// of a persist, with its answer, and a registry call left running raises nothing.
pub(super) async fn catch_up(core: Arc<Core>, deadline: tokio::time::Instant) -> Result<()> {
    match tokio::time::timeout_at(deadline, catch_up_once(core.clone())).await {
        Ok(answer) => answer,
        Err(_) => Err(core.renew_error()),
    }
}

async fn catch_up_once(core: Arc<Core>) -> Result<()> {
    let session: Arc<Session> = core.session().ok_or(Error::Closed)?;
    // Acquire pairs with the Release below: a changed count comes with the failure stored before it.
    let seen = session.attempts.load(Ordering::Acquire);
    let mut st = session.lease.lock().await;
    let now = core.clock.now_millis();
    // The heartbeat, or the attempt this caller queued behind, may have persisted meanwhile.
    if core.limit.get() >= now {
        return Ok(());
    }
    if session.attempts.load(Ordering::Acquire) != seen {
        return match core.why_shut(now) {
            word::Shut::Closed => Err(Error::Closed),
            word::Shut::LeaseLost => Err(core.lease_lost()),
            _ => Err(core.renew_error()),
        };
    }
    // The bound from the clock read after the wait for the lock, and checked again
    // after the write: a registry slower than the lookahead would otherwise persist
    // bounds already in the past and bring every caller back here, one round trip
    // after another. A clock that leads by the whole reach meets the cap (`Core::capped`): the registry's
    // clock must move before a bound reaches past it, and a reading taken over a slow
    // round trip can set the cap back a little. So such a persist is tried again, a
    // millisecond or two later, a few times, before it counts as too slow.
    let mut now = now;
    let mut result = Ok(());
    for _ in 0..CAPPED_TRIES {
        tokio::time::sleep(core.until_cap_reaches(now + 2).min(CAPPED_PAUSE)).await;
        now = core.clock.now_millis();
        result = persist_locked(&core, &session, &mut st, now + core.settings.lookahead_ms).await;
        let capped =
            core.capped(now + core.settings.lookahead_ms) < now + core.settings.lookahead_ms;
        if result.is_err() || core.limit.get() >= core.clock.now_millis() || !capped {
            break;
        }
    }
    if result.is_ok() && core.limit.get() < core.clock.now_millis() {
        result = Err(Error::registry(format!(
            "persisting a time bound took longer than the lookahead ({} ms)",
            core.settings.lookahead_ms
        )));
    }
    core.note_persist(&result);
    let answer = match result {
        Ok(()) => Ok(()),
        Err(e @ (Error::Closed | Error::LeaseLost { .. })) => Err(e),
        Err(_) => {
            // Release pairs with the Acquire in `reopen`: a caller that sees the deadline also sees the message.
            // From the clock after the attempt: a timed-out one took seconds.
            let until = core.clock.now_millis() + RENEW_BACKOFF_MS;
            core.retry_after.store(until, Ordering::Release);
            Err(core.renew_error())
        }
    };
    session.attempts.fetch_add(1, Ordering::Release);
    answer
}
