//! The lock-free part of a snowflake generator: the state word, the issue limit's word
//! and the gate in front of them, as plain atomics and arithmetic.
//!
//! No clock, no I/O, no allocation here: callers pass the time, the process's fork epoch
//! and the random sequence start in as closures, which inline into the caller. That keeps
//! this module small enough for `loom` to check every interleaving of it
//! (`tests/loom_snowflake.rs`): under `--cfg leafid_loom` the atomics below are loom's, in every
//! other build they are `std`'s.
//!
//! What the module guarantees, with the reasons (each one checked by the loom model):
//! 1. **No id twice.** The state word holds the last id issued; an id is issued only by
//!    a compare-and-swap from the word it was computed from to the id itself (or, for
//!    a run, to its last id), and every id computed is strictly greater than that word.
//!    The word therefore only grows, and each successful swap owns the values between
//!    the old word (excluded) and the new one (included): two swaps never share one.
//! 2. **Increasing per thread, one worker id.** A thread's next swap starts from a word
//!    at least its own last one (its own write or a later one in the word's modification
//!    order), so its ids increase. Issuing keeps the word's worker bits; only
//!    [`StateWord::install`] changes them.
//! 3. **Never past the limit.** An id's timestamp is at most the limit value its own
//!    turn read, after reading the clock and before the swap (the gate is checked again
//!    on every retry). Every value the limit takes is a persisted bound, or one of the
//!    two markers below every clock reading, so no id is above the highest bound
//!    persisted, and none issued after [`LimitWord::set`]`(LOST_LIMIT)` (a lost lease)
//!    has a timestamp above the limit before the loss. What a loss does not do is stop a
//!    turn that read the limit before it: that turn may still swap after the loss
//!    returned, under the old (persisted) limit. A call whose limit read happens after
//!    the loss (for instance one that starts after seeing it) issues nothing.
//! 4. **Close is final.** [`StateWord::close`] swaps in [`CLOSED_STATE`], which is
//!    absorbing: a swap prepared from an earlier word fails; from the closed word itself
//!    nothing can be issued, because its timestamp is above every timestamp the layout
//!    allows (the bits sum to at most 63), so a reading is behind it ([`Stall::Closed`])
//!    or past the layout's end; and [`StateWord::install`] refuses it. So the word
//!    `close` read is the last id any thread issued, even if a re-acquire racing the
//!    close leaves the limit open.
//! 5. **A lost lease stays lost.** [`LimitWord::raise`] never moves the limit off
//!    [`LOST_LIMIT`]; only a new lease's [`LimitWord::set`] does. (It does raise
//!    [`OPENING_LIMIT`]: the generator keeps an old lease's raise from racing a new
//!    lease's acquisition by holding the lease mutex around both.)
//! 6. **A forked child issues under its own worker id.** Until the child's session
//!    stores its fork epoch, [`gate_shut`] sends every caller to the slow path; the
//!    epoch is stored after the child's worker id is installed and its limit raised,
//!    and read with Acquire, so a caller that passes the gate swaps after the install.
//!
//! Beside these, one rule of fairness (arithmetic, not an interleaving): **room for
//! single ids.** A run ([`StateWord::reserve`]) never ends past [`Shape::batch_max`],
//! three quarters into a millisecond's sequence; the last quarter is issued one id at a
//! time ([`StateWord::issue`]) only. However many maximal batches run, a single id does
//! not wait for the next millisecond because of them (before, each new millisecond's
//! whole sequence went to whichever batch swapped first, and single ids waited out
//! hundreds of milliseconds). It only lowers where a run may end, so 1–6 hold as before.
//!
//! Not modelled here: the limit's wake-up (`IssueLimit::lose` notifies the heartbeat),
//! the clock, persisting, and the slow path's waits, which all live in `generator.rs`.

#[cfg(leafid_loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
#[cfg(not(leafid_loom))]
pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The state word after `close()`: above every real id, so any swap prepared before
/// the close fails and its caller re-checks (and sees `Closed`).
pub const CLOSED_STATE: u64 = u64::MAX;
/// The limit of a lost lease (as the registries set it): nothing is issued, and a late
/// heartbeat's [`LimitWord::raise`] does not reopen it.
pub const LOST_LIMIT: i64 = i64::MIN;
/// The limit while a worker id is being (re-)acquired: below every clock reading (so
/// nothing is issued) but distinct from [`LOST_LIMIT`].
pub const OPENING_LIMIT: i64 = i64::MIN + 1;

/// The numbers of a layout the hot path needs, precomputed.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The epoch timestamps count from (ms since the Unix epoch).
    pub epoch_ms: i64,
    /// Where the timestamp starts (worker bits + sequence bits).
    pub ts_shift: u32,
    /// Where the worker id starts (sequence bits).
    pub seq_bits: u32,
    /// The largest sequence (all sequence bits set).
    pub seq_mask: u64,
    /// The largest sequence a run of a batch may end at: the first three quarters of a
    /// millisecond's sequence go to batches and single ids, the rest to single ids only,
    /// so batches never spend a millisecond that single ids need (room for single ids, in the module docs).
    pub batch_max: u64,
    /// The largest timestamp relative to the epoch.
    pub max_rel: i64,
}

impl Shape {
    /// From bit widths; they must leave the sign bit clear (sum to at most 63), so that
    /// [`CLOSED_STATE`]'s timestamp is above every timestamp of the layout.
    pub const fn new(
        timestamp_bits: u32,
        worker_bits: u32,
        sequence_bits: u32,
        epoch_ms: i64,
    ) -> Shape {
        assert!(timestamp_bits + worker_bits + sequence_bits <= 63);
        let ids_per_ms = 1u64 << sequence_bits;
        Shape {
            epoch_ms,
            ts_shift: worker_bits + sequence_bits,
            seq_bits: sequence_bits,
            seq_mask: ids_per_ms - 1,
            // At least one id (a 0- or 1-bit sequence keeps nothing back).
            batch_max: ids_per_ms - ids_per_ms / 4 - 1,
            max_rel: ((1u64 << timestamp_bits) - 1) as i64,
        }
    }

    /// The word of an id.
    #[inline]
    pub const fn compose(&self, relative_ms: i64, worker_id: u32, sequence: u64) -> u64 {
        ((relative_ms as u64) << self.ts_shift) | ((worker_id as u64) << self.seq_bits) | sequence
    }

    /// The timestamp (relative to the epoch) of a word.
    #[inline]
    pub const fn timestamp(&self, word: u64) -> i64 {
        (word >> self.ts_shift) as i64
    }

    /// The worker bits of a word, in place.
    #[inline]
    const fn worker_bits(&self, word: u64) -> u64 {
        word & ((1u64 << self.ts_shift) - 1) & !self.seq_mask
    }
}

/// Why a turn of [`StateWord::issue`] or [`StateWord::reserve`] did not issue; the
/// caller's slow path deals with it and then calls again with a freshly loaded word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// The gate is shut at `now` (closed, forked, lease lost, limit passed).
    Shut { now: i64 },
    /// The clock is past the layout's last timestamp.
    Overflow,
    /// The sequence of millisecond `last` (relative) is spent.
    Spent { last: i64 },
    /// The clock (`ts`, relative) is behind the last id's millisecond `last`.
    Behind { last: i64, ts: i64 },
    /// The word is [`CLOSED_STATE`] (every reading is behind it). The gate normally
    /// reports a close first, but a re-acquire racing `close` can leave the limit open
    /// over a closed word; this keeps the answer `Closed` rather than a clock error.
    Closed,
}

/// A run of consecutive ids [`StateWord::reserve`] took, and the word its swap replaced
/// (the caller tells a new millisecond from it, for counting ids issued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The word before the swap: the last id issued before the run, or a marker.
    pub prev: u64,
    /// The run's first id.
    pub first: u64,
    /// The run's last id.
    pub last: u64,
}

/// The last id issued (timestamp, worker id, sequence), or a marker: a floor's
/// millisecond with the sequence full (so the next id comes from a later millisecond),
/// or [`CLOSED_STATE`].
#[derive(Debug)]
pub struct StateWord(AtomicU64);

impl StateWord {
    /// A word standing at `word`.
    pub fn new(word: u64) -> StateWord {
        StateWord(AtomicU64::new(word))
    }

    /// The current word.
    #[inline]
    pub fn load(&self) -> u64 {
        // Acquire: the clock is read after the word, so a timestamp another thread
        // installed is never ahead of the reading that follows (no false "behind").
        self.0.load(Ordering::Acquire)
    }

    /// Issues one id after `*cur` (a word loaded with [`load`](Self::load)), retrying
    /// lost races; on a stall `*cur` is stale and the caller reloads it. Each turn reads
    /// `now()`, asks `shut(now)` and only then computes and swaps.
    #[inline(always)]
    pub fn issue(
        &self,
        cur: &mut u64,
        shape: &Shape,
        mut now: impl FnMut() -> i64,
        mut shut: impl FnMut(i64) -> bool,
        mut start: impl FnMut() -> u64,
    ) -> Result<u64, Stall> {
        loop {
            let now = now();
            if shut(now) {
                return Err(Stall::Shut { now });
            }
            let ts = now - shape.epoch_ms;
            let last = shape.timestamp(*cur);
            let next = if ts > last {
                if ts > shape.max_rel {
                    return Err(Stall::Overflow);
                }
                // Keep the worker bits, replace timestamp and sequence.
                ((ts as u64) << shape.ts_shift) | shape.worker_bits(*cur) | start()
            } else if ts == last {
                if *cur & shape.seq_mask < shape.seq_mask {
                    *cur + 1
                } else {
                    return Err(Stall::Spent { last });
                }
            } else if *cur == CLOSED_STATE {
                return Err(Stall::Closed);
            } else {
                return Err(Stall::Behind { last, ts });
            };
            // AcqRel on success publishes the new word; Acquire on failure gives the
            // winner's word, read before the clock on the next turn.
            match self
                .0
                .compare_exchange_weak(*cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(next),
                Err(actual) => *cur = actual,
            }
        }
    }

    /// Like [`issue`](Self::issue), but takes a run of up to `want` (at least 1)
    /// consecutive ids in one swap, within one millisecond and never past
    /// [`Shape::batch_max`]: [`Stall::Spent`] once the batches' share of the millisecond
    /// is taken (room for single ids, in the module docs). On success `*cur` is the run's last id, so the caller may
    /// go on without reloading.
    #[inline(always)]
    pub fn reserve(
        &self,
        cur: &mut u64,
        want: u64,
        shape: &Shape,
        mut now: impl FnMut() -> i64,
        mut shut: impl FnMut(i64) -> bool,
        mut start: impl FnMut() -> u64,
    ) -> Result<Run, Stall> {
        loop {
            let now = now();
            if shut(now) {
                return Err(Stall::Shut { now });
            }
            let ts = now - shape.epoch_ms;
            let last = shape.timestamp(*cur);
            let (first, next) = if ts > last {
                if ts > shape.max_rel {
                    return Err(Stall::Overflow);
                }
                let start = start();
                // A random start above the batches' share (not with leafid's start
                // bound, half a millisecond's ids at most) still gives one id.
                let take = want.min(shape.batch_max.max(start) - start + 1);
                let first = ((ts as u64) << shape.ts_shift) | shape.worker_bits(*cur) | start;
                (first, first + take - 1)
            } else if ts == last {
                let seq = *cur & shape.seq_mask;
                if seq >= shape.batch_max {
                    return Err(Stall::Spent { last });
                }
                let take = want.min(shape.batch_max - seq);
                (*cur + 1, *cur + take)
            } else if *cur == CLOSED_STATE {
                return Err(Stall::Closed);
            } else {
                return Err(Stall::Behind { last, ts });
            };
            // Orderings as in `issue`.
            match self
                .0
                .compare_exchange_weak(*cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(prev) => {
                    *cur = next;
                    return Ok(Run {
                        prev,
                        first,
                        last: next,
                    });
                }
                Err(actual) => *cur = actual,
            }
        }
    }

    /// Swaps in [`CLOSED_STATE`] and returns the word it replaced: the last id any
    /// thread issued (or the last marker).
    pub fn close(&self) -> u64 {
        // AcqRel: sees every issuing swap before it (their ids are below the word read
        // here) and publishes the close to every later load or failed swap.
        self.0.swap(CLOSED_STATE, Ordering::AcqRel)
    }

    /// Puts `worker_id` and a floor (`floor_rel`, relative to the epoch) into the word:
    /// the later of the floor's and the word's millisecond, with a full sequence, so the
    /// next id comes from a later millisecond. Never moves the timestamp back. False
    /// (and nothing changed) when the word is closed.
    pub fn install(&self, shape: &Shape, worker_id: u32, floor_rel: i64) -> bool {
        // Acquire on the load and AcqRel on the swap: the word is the only shared state.
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            if cur == CLOSED_STATE {
                return false;
            }
            let marker = shape.compose(
                shape.timestamp(cur).max(floor_rel),
                worker_id,
                shape.seq_mask,
            );
            match self
                .0
                .compare_exchange(cur, marker, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// The highest timestamp (ms since the Unix epoch) the generator may issue at, as one
/// atomic word: [`IssueLimit`](super::registry::IssueLimit) without its wake-up.
#[derive(Debug)]
pub struct LimitWord(AtomicI64);

impl LimitWord {
    /// A limit standing at `limit_ms`.
    pub fn new(limit_ms: i64) -> LimitWord {
        LimitWord(AtomicI64::new(limit_ms))
    }

    /// The current limit.
    #[inline]
    pub fn get(&self) -> i64 {
        // Acquire pairs with `set`: a generator that sees a raised limit also sees the
        // lease state written before it.
        self.0.load(Ordering::Acquire)
    }

    /// Sets the limit (a new lease's, or [`LOST_LIMIT`] / [`OPENING_LIMIT`]).
    #[inline]
    pub fn set(&self, limit_ms: i64) {
        // Release pairs with `get`. A swap where a store would do: the same effect (a
        // cold path), but loom places a plain store after another thread's `raise` only
        // if this thread saw it, and would then report a lost lease reopened by a raise
        // that C11 orders before the loss (the raise read the limit before it).
        self.0.swap(limit_ms, Ordering::Release);
    }

    /// Raises the limit to `limit_ms` unless it is [`LOST_LIMIT`]; never lowers it.
    /// False when the lease was lost.
    pub fn raise(&self, limit_ms: i64) -> bool {
        // AcqRel: publishes the persisted bound (Release) and orders after a concurrent
        // loss signal (Acquire) so the check below sees it.
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                if cur == LOST_LIMIT {
                    None
                } else {
                    Some(cur.max(limit_ms))
                }
            })
            .is_ok()
    }

    /// Lowers the limit to `limit_ms` (never raises it), unless it is [`LOST_LIMIT`] or
    /// [`OPENING_LIMIT`]: a pause of a held lease, which a later [`LimitWord::raise`]
    /// lifts, and which never turns a lost or opening lease into a held one.
    pub fn lower(&self, limit_ms: i64) {
        // AcqRel as `raise`: ordered against a concurrent loss, which it never undoes.
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                if cur == LOST_LIMIT || cur == OPENING_LIMIT || cur <= limit_ms {
                    None
                } else {
                    Some(limit_ms)
                }
            });
    }
}

/// True when the fast path may not issue at `now`: the limit is passed, or this
/// process (`fork_epoch()`, read only when the limit allows) is not the one the worker
/// id was taken in (`held_epoch`).
#[inline(always)]
pub fn gate_shut(
    now: i64,
    limit: &LimitWord,
    fork_epoch: impl FnOnce() -> u64,
    held_epoch: &AtomicU64,
) -> bool {
    // Acquire on the epoch, not Relaxed. In a forked child, the thread that takes the
    // child's worker id installs it in the state word, then stores the epoch (Release).
    // A thread that reads that epoch with Relaxed is not ordered after the install: C11
    // (and ARM, which may perform the swap's load first) lets its swap land before the
    // install, issuing under the parent's worker id from the parent's word, with the
    // parent's limit read before the child lowered it. Acquire puts the install before
    // the swap, which then fails and retries from the child's word. On x86 both are a
    // plain load. (loom cannot show the Relaxed failure: its swaps read the newest value.)
    now > limit.get() || fork_epoch() != held_epoch.load(Ordering::Acquire)
}

/// What the slow path found behind a shut gate, in the order it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shut {
    /// `close()` ran.
    Closed,
    /// This process is a forked child of the one the worker id was taken in.
    Forked,
    /// The lease is lost, or a new one is being acquired.
    LeaseLost,
    /// The limit was raised meanwhile: try again.
    Reopened,
    /// The clock is past the limit: a bound must be persisted first.
    Late,
}

/// Why the gate was shut at `now`.
pub fn why_shut(
    now: i64,
    closed: &AtomicBool,
    fork_epoch: impl FnOnce() -> u64,
    held_epoch: &AtomicU64,
    limit: &LimitWord,
) -> Shut {
    // Acquire on both: whoever set them (close, a re-acquire) published what goes with them.
    if closed.load(Ordering::Acquire) {
        return Shut::Closed;
    }
    if fork_epoch() != held_epoch.load(Ordering::Acquire) {
        return Shut::Forked;
    }
    let limit = limit.get();
    if limit == LOST_LIMIT || limit == OPENING_LIMIT {
        Shut::LeaseLost
    } else if now <= limit {
        Shut::Reopened
    } else {
        Shut::Late
    }
}
