//! Model checks, with loom, of the snowflake generator's lock-free state: the issuing
//! compare-and-swap, the issue limit, close and the fork epoch (`src/snowflake/word.rs`,
//! which `SnowflakeGenerator::next_id`, `try_next_id`, `fill`, `close`, `install` and
//! `IssueLimit` run unchanged). Loom runs every interleaving of two or three threads, up
//! to a bound on preemptions, and the stale reads the memory orderings allow.
//!
//! Run (the cfg also switches `word.rs` to loom's atomics; it is not `loom` because
//! some dependencies react to that name):
//!
//! ```text
//! RUSTFLAGS="--cfg leafid_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p leafid --release --test loom_snowflake
//! ```
//!
//! The first build compiles every dependency again under the new flags (13 minutes on
//! two busy cores; after that, about a minute to rebuild leafid). The checks then take
//! under a second at `LOOM_MAX_PREEMPTIONS=2`, 3 to 6 s at 3 and 15 to 40 s at 4, by
//! the machine's load (the close race, three threads, is most of it). Every check
//! asserts it explored more than one interleaving, and each fails when its invariant is
//! broken in `word.rs` (a load and store for the swap, a raise that reopens a lost
//! limit, an install into a closed word, a gate that ignores the limit or the epoch, a
//! successor equal to the word were each tried).
//!
//! The model keeps the generator's code and replaces what is not lock-free: the clock
//! is a script of readings per thread (the model decides each step's time, and the
//! invariants must hold whatever the clock does, backwards included), the random
//! sequence start is fixed per thread, and the slow path's waits (next millisecond,
//! clock behind, fork rebuild) become a bounded number of retries. Persisting a bound
//! and acquiring a worker id are left out: the registry's side shows only as the
//! limit's `set`, `raise` and `lose`.
//!
//! What loom cannot show: its read-modify-writes always read the newest value, so the
//! one C11 reordering the gate's Acquire on the fork epoch exists for (see `gate_shut`)
//! passes here with Relaxed too; and it orders a plain store after another thread's
//! read-modify-write only when the storing thread saw it, which is why
//! `LimitWord::set` is a swap (with a store, the lost-lease check fails spuriously).
//!
//! Invariants checked, for every interleaving:
//! 1. no id is issued twice (by threads, `next_id`, `fill`);
//! 2. each thread's ids are strictly increasing, and all carry the generator's worker id;
//! 3. no id's timestamp is above a limit value the word held (the one its turn read),
//!    and a call that begins after a lost lease (`lose`) was published issues nothing;
//! 4. after `close`, every issued id is at most the word `close` read (and the largest
//!    issued is that word), the word stays closed, and a call that begins after the
//!    close fails with `Closed`;
//! 5. `raise` after `lose` leaves the limit lost;
//! 6. a worker id re-acquired after a lost lease, or taken by a forked child, issues
//!    only above its floor; a forked child never issues under its parent's worker id;
//! 7. a re-acquire racing `close` cannot reopen issuing.
#![cfg(leafid_loom)]

use leafid::snowflake::word::{
    gate_shut, why_shut, LimitWord, Shape, Shut, Stall, StateWord, CLOSED_STATE, LOST_LIMIT,
    OPENING_LIMIT,
};
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// 4 ids per millisecond, so a few calls spend one; 4 worker ids.
const SHAPE: Shape = Shape::new(40, 2, 2, 0);
const WORKER: u32 = 1;
/// The process's fork epoch in the model (what `runtime::fork_epoch()` returns).
const PROCESS_EPOCH: u64 = 1;
/// Slow-path turns a model call takes before giving up (the real waits are bounded too).
const TURNS: usize = 6;
/// The largest backward step waited out (the builder's `max_backward`).
const MAX_BACKWARD_MS: i64 = 5;

/// Why a model call issued nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    Closed,
    LeaseLost,
    Late,
    Behind,
    Overflow,
    GaveUp,
}

/// One thread's clock: the readings in order, then the last one forever, each plus
/// the time slept so far (as `ManualClock`, whose `sleep_millis` advances it), or
/// frozen (as `ManualClock::frozen`, which sleeping does not move).
struct Script {
    readings: &'static [i64],
    at: usize,
    slept: i64,
    frozen: bool,
}

impl Script {
    fn new(readings: &'static [i64]) -> Script {
        Script {
            readings,
            at: 0,
            slept: 0,
            frozen: false,
        }
    }

    fn frozen(at: &'static [i64]) -> Script {
        Script {
            frozen: true,
            ..Script::new(at)
        }
    }

    fn read(&mut self) -> i64 {
        let t = self.readings[self.at.min(self.readings.len() - 1)];
        self.at += 1;
        t + self.slept
    }

    fn sleep(&mut self, ms: i64) {
        if !self.frozen {
            self.slept += ms;
        }
    }
}

/// The lock-free part of a generator's `Core`.
struct Model {
    state: StateWord,
    limit: LimitWord,
    closed: AtomicBool,
    /// The fork epoch the worker id was taken in (`Core::epoch`).
    held_epoch: AtomicU64,
}

impl Model {
    /// A generator holding `WORKER` from `floor` (ms), issuing up to `limit`.
    fn new(floor: i64, limit: i64) -> Arc<Model> {
        let m = Model {
            state: StateWord::new(0),
            limit: LimitWord::new(limit),
            closed: AtomicBool::new(false),
            held_epoch: AtomicU64::new(PROCESS_EPOCH),
        };
        assert!(m.state.install(&SHAPE, WORKER, floor));
        Arc::new(m)
    }

    /// `SnowflakeGenerator::next_id`, its waits turned into retries.
    fn next_id(&self, clock: &mut Script, start: u64) -> Result<u64, Fail> {
        let mut cur = self.state.load();
        for _ in 0..TURNS {
            match self.state.issue(
                &mut cur,
                &SHAPE,
                || clock.read(),
                |now| self.gate(now),
                || start,
            ) {
                Ok(id) => return Ok(id),
                Err(stall) => self.stalled(stall, clock)?,
            }
            cur = self.state.load();
        }
        Err(Fail::GaveUp)
    }

    /// `SnowflakeGenerator::try_next_id`: one attempt, no slow path.
    fn try_next_id(&self, clock: &mut Script, start: u64) -> Option<u64> {
        let mut cur = self.state.load();
        self.state
            .issue(
                &mut cur,
                &SHAPE,
                || clock.read(),
                |now| self.gate(now),
                || start,
            )
            .ok()
    }

    /// `SnowflakeGenerator::fill` for `n` ids.
    fn fill(&self, n: usize, clock: &mut Script, start: u64) -> (Vec<u64>, Result<(), Fail>) {
        let mut out = Vec::new();
        let mut cur = self.state.load();
        for _ in 0..TURNS {
            if out.len() == n {
                return (out, Ok(()));
            }
            match self.state.reserve(
                &mut cur,
                (n - out.len()) as u64,
                &SHAPE,
                || clock.read(),
                |now| self.gate(now),
                || start,
            ) {
                Ok(run) => out.extend(run.first..=run.last),
                Err(stall) => {
                    if let Err(e) = self.stalled(stall, clock) {
                        return (out, Err(e));
                    }
                    cur = self.state.load();
                }
            }
        }
        let done = if out.len() == n {
            Ok(())
        } else {
            Err(Fail::GaveUp)
        };
        (out, done)
    }

    /// `Core::gated`.
    fn gate(&self, now: i64) -> bool {
        gate_shut(now, &self.limit, || PROCESS_EPOCH, &self.held_epoch)
    }

    /// `Core::stalled`: `Ok` means "load the word and try again".
    fn stalled(&self, stall: Stall, clock: &mut Script) -> Result<(), Fail> {
        match stall {
            Stall::Shut { now } => match why_shut(
                now,
                &self.closed,
                || PROCESS_EPOCH,
                &self.held_epoch,
                &self.limit,
            ) {
                Shut::Closed => Err(Fail::Closed),
                // Another thread is taking the child's worker id: wait for it.
                Shut::Forked => {
                    thread::yield_now();
                    Ok(())
                }
                Shut::LeaseLost => Err(Fail::LeaseLost),
                Shut::Reopened => Ok(()),
                // The real slow path persists a bound; the model has no registry.
                Shut::Late => Err(Fail::Late),
            },
            Stall::Overflow => Err(Fail::Overflow),
            Stall::Closed => Err(Fail::Closed),
            // `wait_next_ms`: until the clock leaves millisecond `last` (a spin, then
            // sleeps; the model sleeps at once).
            Stall::Spent { last } => {
                if clock.read() - SHAPE.epoch_ms == last {
                    clock.sleep(1);
                }
                Ok(())
            }
            // `clock_back`: a small step is waited out (twice over), then re-read.
            Stall::Behind { last, ts } => {
                if last - ts > MAX_BACKWARD_MS {
                    return Err(Fail::Behind);
                }
                clock.sleep(2 * (last - ts));
                if clock.read() - SHAPE.epoch_ms < last {
                    Err(Fail::Behind)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The lock-free steps of `close()`, in its order; returns the word it read.
    fn close(&self) -> u64 {
        assert!(!self.closed.swap(true, Ordering::AcqRel));
        self.limit.set(LOST_LIMIT);
        self.state.close()
    }
}

/// `loom::model`, checking that it explored more than one interleaving (a model whose
/// threads never overlap proves nothing); returns how many.
fn model(f: impl Fn() + Sync + Send + 'static) -> usize {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model(move || {
        // Relaxed: loom runs the iterations one after another on this thread's behalf.
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    assert!(runs > 1, "loom explored {runs} interleaving");
    runs
}

fn worker_of(id: u64) -> u32 {
    ((id >> SHAPE.seq_bits) & 0b11) as u32
}

/// Invariants 1 and 2 over the ids each thread saw; returns them all, sorted.
fn distinct_and_increasing(per_thread: &[&[u64]], worker: u32) -> Vec<u64> {
    for ids in per_thread {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's ids went down or repeated: {ids:?}"
        );
        for &id in ids.iter() {
            assert_eq!(worker_of(id), worker, "id {id:#x} under another worker id");
            assert_ne!(id, CLOSED_STATE);
        }
    }
    let mut all: Vec<u64> = per_thread
        .iter()
        .flat_map(|ids| ids.iter().copied())
        .collect();
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "an id was issued twice: {per_thread:?}");
    all
}

#[test]
fn concurrent_issuers_in_one_millisecond_spend_its_sequence_exactly_once() {
    model(|| {
        let m = Model::new(9, 100);
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                let mut clock = Script::new(&[10]);
                let a = m.next_id(&mut clock, 0).unwrap();
                let b = m.next_id(&mut clock, 0).unwrap();
                vec![a, b]
            })
        };
        let mut clock = Script::new(&[10]);
        let mine = vec![
            m.next_id(&mut clock, 0).unwrap(),
            m.next_id(&mut clock, 0).unwrap(),
        ];
        let theirs = t.join().unwrap();
        let all = distinct_and_increasing(&[&mine, &theirs], WORKER);
        // Four ids fill millisecond 10 (sequence 0..=3) and the word is the last.
        assert!(all.iter().all(|&id| SHAPE.timestamp(id) == 10));
        assert_eq!(m.state.load(), SHAPE.compose(10, WORKER, 3));
        // The sequence is spent: a call on a clock stuck at 10 issues nothing.
        let mut frozen = Script::frozen(&[10]);
        assert_eq!(m.next_id(&mut frozen, 0), Err(Fail::GaveUp));
    });
}

#[test]
fn issuers_across_a_millisecond_boundary_with_the_sequence_spent() {
    model(|| {
        let m = Model::new(9, 100);
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                // The threads' clocks differ: one may read 10 after the other issued
                // at 11 (a step back, waited out).
                let mut clock = Script::new(&[10, 10, 11, 12]);
                let a = m.next_id(&mut clock, 1);
                let b = m.next_id(&mut clock, 1);
                let c = m.next_id(&mut clock, 1);
                [a, b, c]
            })
        };
        let mut clock = Script::new(&[10, 11, 11, 12]);
        let (mine, filled) = m.fill(3, &mut clock, 2);
        let theirs = t.join().unwrap();
        assert_eq!(filled, Ok(()), "fill stopped after {mine:?}");
        let theirs: Vec<u64> = theirs.iter().map(|r| r.unwrap()).collect();
        let all = distinct_and_increasing(&[&mine, &theirs], WORKER);
        assert!(all.iter().all(|&id| SHAPE.timestamp(id) >= 10));
        assert_eq!(m.state.load(), *all.last().unwrap());
    });
}

#[test]
fn close_racing_issuers_reads_the_last_id_and_stops_all_later_calls() {
    model(|| {
        let m = Model::new(9, 100);
        let closed_done = Arc::new(AtomicBool::new(false));
        let issuer = |use_fill: bool| {
            let (m, closed_done) = (m.clone(), closed_done.clone());
            thread::spawn(move || {
                let mut clock = Script::new(&[10, 10, 11]);
                let mut ids = Vec::new();
                for _ in 0..2 {
                    // A call that begins after close() returned (and was seen) issues nothing.
                    let after_close = closed_done.load(Ordering::Acquire);
                    let got = if use_fill {
                        let (some, r) = m.fill(2, &mut clock, 0);
                        r.map(|()| some.clone()).map_err(|e| (e, some))
                    } else {
                        m.next_id(&mut clock, 0)
                            .map(|id| vec![id])
                            .map_err(|e| (e, vec![]))
                    };
                    match got {
                        Ok(some) => {
                            assert!(!after_close, "issued {some:?} after close");
                            ids.extend(some);
                        }
                        Err((e, some)) => {
                            assert!(!after_close || some.is_empty());
                            ids.extend(some);
                            assert_eq!(e, Fail::Closed, "only close stops these calls");
                        }
                    }
                }
                ids
            })
        };
        let (a, b) = (issuer(false), issuer(true));
        let last = m.close();
        closed_done.store(true, Ordering::Release);
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let all = distinct_and_increasing(&[&a, &b], WORKER);
        // The word close read is the last id issued (or the start marker when none was).
        match all.last() {
            Some(&max) => assert_eq!(last, max, "an id was issued after close read the word"),
            None => assert_eq!(last, SHAPE.compose(9, WORKER, 3)),
        }
        assert_eq!(m.state.load(), CLOSED_STATE);
        assert!(
            !m.state.install(&SHAPE, 2, 50),
            "install reopened a closed word"
        );
        assert_eq!(m.next_id(&mut Script::new(&[20]), 0), Err(Fail::Closed));
    });
}

#[test]
fn a_suspension_never_reopens_a_lost_lease_and_a_raise_lifts_it() {
    // Fence rule 5: the registry's guard lowers the limit (out of touch) while the
    // heartbeat raises it and the registry may lose the lease, in any order.
    model(|| {
        let m = Model::new(9, 20);
        let guard = {
            let m = m.clone();
            thread::spawn(move || m.limit.lower(12))
        };
        let heartbeat = {
            let m = m.clone();
            thread::spawn(move || m.limit.raise(30))
        };
        let lose = {
            let m = m.clone();
            thread::spawn(move || m.limit.set(LOST_LIMIT))
        };
        guard.join().unwrap();
        heartbeat.join().unwrap();
        lose.join().unwrap();
        assert_eq!(
            m.limit.get(),
            LOST_LIMIT,
            "a suspension or raise reopened a lost lease"
        );
    });
    model(|| {
        let m = Model::new(9, 20);
        let guard = {
            let m = m.clone();
            thread::spawn(move || m.limit.lower(12))
        };
        let raised = m.limit.raise(30);
        guard.join().unwrap();
        let now = m.limit.get();
        // Whatever the order: a suspension is a pause, lifted by a later raise.
        assert!(raised);
        assert!(now == 12 || now == 30, "limit {now}");
        assert!(m.limit.raise(40));
        assert_eq!(m.limit.get(), 40);
    });
}

#[test]
fn a_lost_lease_stops_issuing_and_a_late_raise_does_not_reopen_it() {
    model(|| {
        let m = Model::new(9, 20);
        let lost = Arc::new(AtomicBool::new(false));
        let issuer = {
            let (m, lost) = (m.clone(), lost.clone());
            thread::spawn(move || {
                // 25 is past the limit of 20 unless the heartbeat's raise lands first.
                let mut clock = Script::new(&[10, 15, 25]);
                let mut ids = Vec::new();
                for _ in 0..3 {
                    let after_loss = lost.load(Ordering::Acquire);
                    match m.next_id(&mut clock, 0) {
                        Ok(id) => {
                            assert!(!after_loss, "issued {id:#x} after the lease was lost");
                            ids.push(id);
                        }
                        Err(e) => assert!(
                            matches!(e, Fail::LeaseLost | Fail::Late),
                            "unexpected {e:?}"
                        ),
                    }
                }
                ids
            })
        };
        let heartbeat = {
            let m = m.clone();
            // A heartbeat that persisted 30 and raises the limit, racing the loss.
            thread::spawn(move || m.limit.raise(30))
        };
        // The registry: `IssueLimit::lose` (its wake-up is not part of the model).
        m.limit.set(LOST_LIMIT);
        lost.store(true, Ordering::Release);
        let ids = issuer.join().unwrap();
        let raised = heartbeat.join().unwrap();
        distinct_and_increasing(&[&ids], WORKER);
        let highest_limit = if raised { 30 } else { 20 };
        for &id in &ids {
            assert!(
                SHAPE.timestamp(id) + SHAPE.epoch_ms <= highest_limit,
                "id at {} above every limit in force ({highest_limit})",
                SHAPE.timestamp(id)
            );
        }
        assert_eq!(m.limit.get(), LOST_LIMIT, "a raise reopened a lost lease");
        assert!(!m.limit.raise(40));
        assert_eq!(m.limit.get(), LOST_LIMIT);
    });
}

#[test]
fn three_issuers_spend_a_millisecond_and_move_on_without_repeating() {
    model(|| {
        let m = Model::new(9, 100);
        let spawn = |start: u64, readings: &'static [i64]| {
            let m = m.clone();
            thread::spawn(move || {
                let mut clock = Script::new(readings);
                // `try_next_id` first, as the bindings call it, then `next_id`.
                let mut ids: Vec<u64> = m.try_next_id(&mut clock, start).into_iter().collect();
                ids.push(m.next_id(&mut clock, start).unwrap());
                ids
            })
        };
        let a = spawn(1, &[10, 10, 11]);
        let b = spawn(2, &[10, 11]);
        let mut clock = Script::new(&[10]);
        let mine: Vec<u64> = m.try_next_id(&mut clock, 3).into_iter().collect();
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let all = distinct_and_increasing(&[&mine, &a, &b], WORKER);
        assert_eq!(m.state.load(), *all.last().unwrap());
    });
}

#[test]
fn a_re_acquired_worker_id_takes_over_above_its_floor() {
    const NEW: u32 = 2;
    model(|| {
        // The registry reported the lease lost; ids of worker 1 reached millisecond 10.
        let m = Model::new(9, 20);
        let issuer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut clock = Script::new(&[10, 12, 13]);
                let mut ids = Vec::new();
                for _ in 0..3 {
                    match m.next_id(&mut clock, 0) {
                        Ok(id) => ids.push(id),
                        Err(e) => assert_eq!(e, Fail::LeaseLost),
                    }
                }
                ids
            })
        };
        // The registry's `lose`, then the heartbeat's `reacquire`: OPENING, the new
        // worker id from floor 11, a bound persisted and raised.
        m.limit.set(LOST_LIMIT);
        m.limit.set(OPENING_LIMIT);
        assert!(m.state.install(&SHAPE, NEW, 11));
        assert!(m.limit.raise(50));
        let ids = issuer.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        for &id in &ids {
            match worker_of(id) {
                WORKER => assert!(SHAPE.timestamp(id) <= 20),
                NEW => assert!(SHAPE.timestamp(id) > 11),
                other => panic!("worker {other}"),
            }
        }
        assert_eq!(worker_of(m.state.load()), NEW);
    });
}

#[test]
fn close_racing_a_re_acquire_stays_closed() {
    const NEW: u32 = 2;
    model(|| {
        let m = Model::new(9, LOST_LIMIT);
        let reacquire = {
            let m = m.clone();
            // `reacquire` after a lost lease, racing `close`: it checks `closed`, opens,
            // installs the new worker id, and `persist_locked` checks `closed` again
            // before raising the limit to the bound it persisted.
            thread::spawn(move || {
                if m.closed.load(Ordering::Acquire) {
                    return;
                }
                m.limit.set(OPENING_LIMIT);
                if m.state.install(&SHAPE, NEW, 11) && !m.closed.load(Ordering::Acquire) {
                    m.limit.raise(50);
                }
            })
        };
        let last = m.close();
        reacquire.join().unwrap();
        assert_eq!(m.state.load(), CLOSED_STATE);
        // Whatever the limit ended at, a call after close fails with Closed.
        let mut clock = Script::new(&[20]);
        assert_eq!(m.next_id(&mut clock, 0), Err(Fail::Closed));
        assert!(matches!(worker_of(last), WORKER | NEW));
    });
}

#[test]
fn a_forked_child_issues_only_under_its_own_worker_id() {
    const PARENT: u32 = 1;
    const CHILD: u32 = 2;
    model(|| {
        // What the child inherits: the parent's word (worker 1, millisecond 10), the
        // parent's open limit, and the parent's fork epoch (0), while the process's
        // epoch is already the child's (PROCESS_EPOCH).
        let m = Arc::new(Model {
            state: StateWord::new(SHAPE.compose(10, PARENT, 1)),
            limit: LimitWord::new(100),
            closed: AtomicBool::new(false),
            held_epoch: AtomicU64::new(PROCESS_EPOCH - 1),
        });
        let issuer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut clock = Script::new(&[12, 12, 13]);
                let mut ids = Vec::new();
                for _ in 0..2 {
                    match m.next_id(&mut clock, 0) {
                        Ok(id) => ids.push(id),
                        // Between the rebuilder's OPENING limit and its raise.
                        Err(Fail::LeaseLost | Fail::GaveUp) => {}
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                ids
            })
        };
        // The thread that won `rebuilding` in `after_fork`, through `start_session`:
        // stop issuing, take worker 2 from floor 11, persist a bound and raise the
        // limit to it, then mark the session as this process's.
        m.limit.set(OPENING_LIMIT);
        assert!(m.state.install(&SHAPE, CHILD, 11));
        assert!(m.limit.raise(100));
        m.held_epoch.store(PROCESS_EPOCH, Ordering::Release);
        let ids = issuer.join().unwrap();
        distinct_and_increasing(&[&ids], CHILD);
        assert!(ids.iter().all(|&id| SHAPE.timestamp(id) > 11));
        // After the rebuild the child issues normally.
        let mut clock = Script::new(&[13]);
        assert_eq!(worker_of(m.next_id(&mut clock, 0).unwrap()), CHILD);
    });
}
