//! The state every clone of a generator shares ([`Core`]) and one worker-id holding
//! ([`Session`]), with the small pieces of logic that read or write them alone: the
//! gate, the last failure callers are told about, the registry clock's reference.
//!
//! Apart from the public API (`generator.rs`) and from the I/O that fills it
//! (`session.rs`): each of the other files adds methods to [`Core`] for one job, and
//! this one holds what they all touch. The fields are `pub(super)` for those files.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::super::layout::Layout;
use super::super::registry::identity_lock::IdentityLock;
use super::super::registry::{IssueLimit, Lease, LocalRegistry, WorkerCache, WorkerRegistry};
use super::super::word::{self, Shape, StateWord};
use super::lead::LeadClock;
use super::settings::Settings;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::runtime;

/// The longest one registry call (a renew, a release) may take before the generator
/// treats it as failed. Registries have their own, shorter timeouts (MySQL's
/// `CALL_TIMEOUT`, ZooKeeper's session); this bounds any registry, a custom one too, so
/// no caller and no close waits on one forever.
pub(super) const REGISTRY_CALL_LIMIT: Duration = Duration::from_secs(10);

/// `Core::rebuilding` when no caller of any process is re-acquiring a worker id. Fork
/// epochs count forks from 0 and never reach it.
pub(super) const NO_REBUILD: u64 = u64::MAX;

/// `fut` (a registry call named `what`), failed with `RegistryUnavailable` after
/// [`REGISTRY_CALL_LIMIT`].
pub(super) async fn bounded<T>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(REGISTRY_CALL_LIMIT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(Error::registry(format!(
                "the worker registry's {what} took longer than {REGISTRY_CALL_LIMIT:?}"
            )))
        })
}

/// What a running holder's clock may be off the registry's beyond `max_skew` before it
/// stops: the reading's round trip and the monotonic clock's drift against a slewing
/// wall clock (at most 0.05%: 0.3 s over ten minutes).
pub(super) const SKEW_SLACK_MS: i64 = 1000;

/// A skew value meaning "no reading yet".
pub(super) const NO_SKEW: i64 = i64::MIN;

/// Why issuing cannot go on, kept lock-free between a failed renew and later callers.
#[derive(Debug, Clone)]
pub(super) enum Failure {
    /// Any registry or cache failure, as text, with its underlying error if any.
    Text(String, Option<crate::error::Cause>),
    /// The local clock is too far from the registry's.
    Skew {
        skew_ms: i64,
        max_skew_ms: i64,
        source: String,
    },
}

impl Failure {
    fn of(e: &Error) -> Failure {
        match e {
            Error::ClockSkew {
                skew_ms,
                max_skew_ms,
                source_desc,
                ..
            } => Failure::Skew {
                skew_ms: *skew_ms,
                max_skew_ms: *max_skew_ms,
                source: source_desc.clone(),
            },
            // The cause alone: `renew_error` wraps it in a `RegistryUnavailable` again.
            Error::RegistryUnavailable { cause, source } => {
                Failure::Text(cause.clone(), source.clone())
            }
            other => Failure::Text(other.to_string(), other.cause().cloned()),
        }
    }
}

pub(super) fn skew_of(skew_ms: i64, max_skew_ms: i64, source: String) -> Error {
    Error::ClockSkew {
        skew_ms,
        direction: if skew_ms > 0 { "ahead of" } else { "behind" },
        max_skew_ms,
        source_desc: source,
    }
}

/// One worker-id holding: the registry, its lease, the cache file, the heartbeat.
pub(super) struct Session {
    pub(super) registry: Arc<dyn WorkerRegistry>,
    /// The same registry when it is `local`, to close inherited lock files after a fork.
    pub(super) local: Option<Arc<LocalRegistry>>,
    pub(super) cache: WorkerCache,
    /// This host's claim on the identity, for registries whose id follows from
    /// configuration.
    pub(super) identity_lock: Option<IdentityLock>,
    /// Held across every persist and the final release (registry calls are bounded).
    pub(super) lease: tokio::sync::Mutex<LeaseState>,
    pub(super) stop: tokio::sync::Notify,
    /// Catch-up persists finished (`slow::catch_up`): a caller that queued behind one
    /// takes its answer. Per session, not per core: a forked child starts afresh.
    pub(super) attempts: std::sync::atomic::AtomicU64,
    /// A background catch-up is under way (`next_id_now` starts at most one).
    pub(super) catching_up: AtomicBool,
}

pub(super) struct LeaseState {
    pub(super) lease: Lease,
    /// The highest bound persisted so far.
    pub(super) persisted: i64,
    /// The highest bound the registry itself has confirmed for this lease (a renew
    /// that succeeded; for a lease taken over from a handover, the one its cache file
    /// names); `i64::MIN` before any.
    pub(super) confirmed: i64,
    /// The last registry call of this lease failed as an outage (`Unavailable`): a
    /// close then keeps the confirmed bound in the registry and hands it over through
    /// the cache file (`close.rs`).
    pub(super) out_of_touch: bool,
    /// The lease comes from a handover in the cache file, taken while the registry was
    /// down, and is not the registry's yet: the heartbeat acquires the identity instead
    /// of renewing (`session::adopt`), and bounds go to the cache file only, up to
    /// `confirmed`.
    pub(super) adopting: bool,
}

impl LeaseState {
    /// The state of a lease just acquired from the registry.
    pub(super) fn acquired(lease: Lease) -> LeaseState {
        LeaseState {
            lease,
            persisted: i64::MIN,
            confirmed: i64::MIN,
            out_of_touch: false,
            adopting: false,
        }
    }
}

pub(super) struct Core {
    pub(super) layout: Layout,
    /// The real clock, or ahead of it while a floor is (`lead.rs`); what ids are stamped with.
    pub(super) clock: LeadClock,
    pub(super) settings: Settings,
    /// The last id issued (or a marker: the floor's millisecond with the sequence full).
    pub(super) state: StateWord,
    pub(super) limit: Arc<IssueLimit>,
    pub(super) worker: AtomicU32,
    /// The fork epoch the current session was acquired under (`word`'s atomics: the
    /// gate reads it).
    pub(super) epoch: word::AtomicU64,
    /// The fork epoch of the process whose caller is re-acquiring a worker id after a
    /// fork, or [`NO_REBUILD`]. An epoch, not a flag: a process forked while its parent
    /// was itself re-acquiring (nested pools) inherits the parent's claim with no thread
    /// to clear it, and must not count it as its own (see `slow.rs`).
    pub(super) rebuilding: std::sync::atomic::AtomicU64,
    pub(super) closed: word::AtomicBool,
    /// The current session, an `Arc` turned into a raw pointer. A replaced session is
    /// leaked, never freed, so a pointer read while the core lives stays valid.
    pub(super) session: AtomicPtr<Session>,
    /// Until when (ms) a failed synchronous renew is not retried, and its message.
    pub(super) retry_after: AtomicI64,
    /// Lock-free: a fork() may land while another thread writes it.
    pub(super) last_failure: arc_swap::ArcSwap<Failure>,
    /// The registry's clock at the last reading and the monotonic instant it was taken:
    /// before every write, the local clock is compared with the registry's clock carried
    /// forward by the monotonic clock, so a bound from a clock that jumped is never
    /// written. Lock-free: a fork() may land while another thread stores it.
    pub(super) clock_ref: arc_swap::ArcSwapOption<(i64, std::time::Instant)>,
    /// True once the final release after `close` has completed (or had nothing to do).
    pub(super) released: tokio::sync::watch::Sender<bool>,
    /// The last id's timestamp at close, on a layout a foreign server shares (else
    /// `i64::MIN`): `close` waits until the clock passes it (`close.rs`).
    pub(super) last_issued_ms: AtomicI64,
    /// Ids issued in milliseconds that ended (see `stats.rs`).
    pub(super) issued: std::sync::atomic::AtomicU64,
    /// The first id of the millisecond in progress, as far as counting knows.
    pub(super) ms_first: std::sync::atomic::AtomicU64,
    /// The highest count reported, so a report never goes down.
    pub(super) reported: std::sync::atomic::AtomicU64,
    /// The largest backward clock step a caller met (ms).
    pub(super) max_backward_ms: AtomicI64,
    /// Local minus registry clock at the latest reading (ms), or `NO_SKEW`.
    pub(super) skew_ms: AtomicI64,
    /// Persists of a time bound that failed.
    pub(super) persist_failures: std::sync::atomic::AtomicU64,
    // Precomputed from the layout for the hot path.
    pub(super) shape: Shape,
    pub(super) random_bound: u32,
}

impl Core {
    pub(super) fn new(layout: Layout, clock: Arc<dyn Clock>, settings: Settings) -> Core {
        Core {
            clock: LeadClock::new(clock),
            settings,
            state: StateWord::new(0),
            limit: IssueLimit::closed(),
            worker: AtomicU32::new(0),
            epoch: word::AtomicU64::new(runtime::fork_epoch()),
            rebuilding: std::sync::atomic::AtomicU64::new(NO_REBUILD),
            closed: word::AtomicBool::new(false),
            session: AtomicPtr::new(std::ptr::null_mut()),
            retry_after: AtomicI64::new(i64::MIN),
            last_failure: arc_swap::ArcSwap::from_pointee(Failure::Text(String::new(), None)),
            clock_ref: arc_swap::ArcSwapOption::empty(),
            released: tokio::sync::watch::Sender::new(false),
            last_issued_ms: AtomicI64::new(i64::MIN),
            issued: std::sync::atomic::AtomicU64::new(0),
            ms_first: std::sync::atomic::AtomicU64::new(0),
            reported: std::sync::atomic::AtomicU64::new(0),
            max_backward_ms: AtomicI64::new(0),
            skew_ms: AtomicI64::new(NO_SKEW),
            persist_failures: std::sync::atomic::AtomicU64::new(0),
            shape: Shape::new(
                layout.timestamp_bits().into(),
                layout.worker_bits().into(),
                layout.sequence_bits().into(),
                layout.epoch_ms(),
            ),
            // Leaf starts each millisecond at a random value in [0, 100) so low-traffic ids
            // do not all end alike; small sequences keep at least half their room.
            random_bound: (layout.ids_per_ms() / 2).clamp(1, 100) as u32,
            layout,
        }
    }

    pub(super) fn session(&self) -> Option<Arc<Session>> {
        let ptr = self.session.load(Ordering::Acquire);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr` came from Arc::into_raw and the core's own count is never given
        // up while the core lives (replaced sessions are leaked), so it is alive.
        unsafe {
            Arc::increment_strong_count(ptr);
            Some(Arc::from_raw(ptr))
        }
    }

    #[inline]
    pub(super) fn random_start(&self) -> u64 {
        fastrand::u32(..self.random_bound) as u64
    }

    /// True when the fast path may not issue at `now`.
    #[inline]
    pub(super) fn gated(&self, now: i64) -> bool {
        word::gate_shut(now, self.limit.word(), runtime::fork_epoch, &self.epoch)
    }

    /// Keeps the outcome of a persist as the cause callers see while the gate is shut
    /// (`next_id_now` reports it without asking the registry): a failure's message, or
    /// none after a success.
    pub(super) fn note_persist(&self, result: &Result<()>) {
        match result {
            Ok(()) => self
                .last_failure
                .store(Arc::new(Failure::Text(String::new(), None))),
            Err(Error::Closed | Error::LeaseLost { .. }) => {}
            Err(e) => {
                // Relaxed: a statistic.
                self.persist_failures.fetch_add(1, Ordering::Relaxed);
                self.last_failure.store(Arc::new(Failure::of(e)));
            }
        }
    }

    /// Remembers the registry's clock from a reading that passed the skew check.
    pub(super) fn keep_clock_ref(&self, reading: &super::super::registry::ClockReading) {
        self.note_skew(reading.skew_ms());
        // The reading may be older than now (a registry that waited after reading its
        // clock): move its instant back by the wall time passed since.
        let age = super::super::registry::system_now_ms().saturating_sub(reading.local_after_ms);
        let now = std::time::Instant::now();
        let at = now
            .checked_sub(Duration::from_millis(age.clamp(0, 3_600_000) as u64))
            .unwrap_or(now);
        self.clock_ref
            .store(Some(Arc::new((reading.registry_ms, at))));
    }

    /// Fence rule 5: how far ahead of the registry's clock any bound of this identity may
    /// reach: the lookahead a holder's clock adds, plus the skew its clock may have from
    /// the registry's, plus the slack of a reading. A newcomer that finds no recorded
    /// floor starts this far ahead of the registry's clock (`session.rs`).
    pub(super) fn reach_ms(&self) -> i64 {
        self.settings.lookahead_ms + self.settings.max_skew_ms + SKEW_SLACK_MS
    }

    /// The registry's clock now, from the last reading carried forward by the monotonic
    /// clock: never ahead of the registry's own (its stamp was taken before the reading
    /// came back). `None` before any reading, or for a registry without a clock.
    pub(super) fn registry_now_ms(&self) -> Option<i64> {
        let reference = self.clock_ref.load_full()?;
        let (registry_ms, at) = *reference;
        Some(registry_ms.saturating_add(at.elapsed().as_millis() as i64))
    }

    /// Fence rule 5: `bound`, but never beyond the registry's clock plus the reach. A
    /// holder in step with the registry never meets this cap (its clock is within the
    /// skew); one whose clock leads (`lead.rs`) does, so no bound it writes is beyond
    /// what a newcomer without a record starts above.
    pub(super) fn capped(&self, bound: i64) -> i64 {
        // A registry without a clock (`fixed`, `local`, a custom one): this host's own
        // clock, so crashes in a row cannot pile leads up (each restart starts above the
        // last bound, which is within the reach of the clock).
        let clock = self
            .registry_now_ms()
            .unwrap_or_else(|| self.clock.real_millis());
        bound.min(clock.saturating_add(self.reach_ms()))
    }

    /// How long until [`capped`](Self::capped) lets a bound reach `ms`: zero unless the
    /// generator's clock leads by the whole reach (a floor with no record, `session.rs`),
    /// when the registry's clock must move a millisecond or two first.
    pub(super) fn until_cap_reaches(&self, ms: i64) -> Duration {
        let short = ms.saturating_sub(self.capped(ms));
        Duration::from_millis(short.clamp(0, i64::MAX / 4) as u64)
    }

    /// `ClockSkew` when the local clock is off the registry's clock of the last reading,
    /// carried forward by the monotonic clock, by more than the allowed skew.
    pub(super) fn jumped_clock(&self) -> Option<Error> {
        let expected = self.registry_now_ms()?;
        let skew = super::super::registry::system_now_ms() - expected;
        let allowed = self.settings.max_skew_ms + SKEW_SLACK_MS;
        (skew.abs() > allowed).then(|| {
            skew_of(
                skew,
                self.settings.max_skew_ms,
                "the registry's clock at its last reading, carried forward by the monotonic clock"
                    .into(),
            )
        })
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        let ptr = *self.session.get_mut();
        // Relaxed: `&mut self`, no other thread can write it now.
        if !ptr.is_null() && runtime::fork_epoch() == self.epoch.load(Ordering::Relaxed) {
            // SAFETY: the core's own count of the current session, given up once here.
            drop(unsafe { Arc::from_raw(ptr) });
        }
        // In a forked child that never re-acquired, the session (with the parent's
        // connections and runtime handles) is leaked on purpose.
    }
}
