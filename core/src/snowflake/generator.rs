//! [`SnowflakeGenerator`]: issues ids from one atomic word.
//!
//! The whole issuing state is the last id issued (timestamp, worker id, sequence), kept
//! in one `AtomicU64`. `next_id` reads it, reads the clock, computes the successor and
//! installs it with a compare-and-swap: no lock, no allocation, no syscall (the system
//! clock is read through the vDSO). Because every successful swap moves the word
//! strictly upwards, no two calls ever get the same id, whatever the clock does; the
//! clock only decides whether a call may issue now.
//!
//! Two more words gate issuing. The [`IssueLimit`] is the highest timestamp a persisted
//! bound covers (the heartbeat raises it, a registry lowers it on a lost lease), and
//! the fork epoch tells a forked child that the worker id it sees is its parent's.
//! Anything unusual drops to a cold path that may wait, persist a bound, re-acquire a
//! worker id or fail with a clear error.
//!
//! The lock-free part (the word's compare-and-swap, the limit's word, the gate) lives in
//! `word.rs`, which states what it guarantees and is model-checked with loom
//! (`tests/loom_snowflake.rs`); this file adds the clock, the sessions and the I/O;
//! `generator/slow.rs` the slow path as each kind of caller may wait (`next_id` blocks,
//! `next_id_now` never waits on I/O, `next_id_async` awaits) and `generator/close.rs`
//! the bounded close.
//!
//! Where a caller's thread can block, and for how long: `build_blocking` (the registry's
//! timeouts and `startup_wait`); `next_id` / `next_ids` / `fill` (one persist or one
//! re-acquire after a fork, bounded by the registry's timeouts and
//! [`REGISTRY_CALL_LIMIT`]; a backward step up to twice `max_backward`); `close` /
//! `close_within` (the deadline given). Nothing else: `next_id_now`, `try_next_id`,
//! the async calls and every `Drop` return without waiting on I/O, and the heartbeat
//! holds the lease state only across registry calls that are bounded.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::layout::{decode, DecodedId, Layout};
use super::registry::identity_lock::IdentityLock;
use super::registry::{
    default_cache_dir, CacheEntry, IssueLimit, Lease, LocalRegistry, RegistryConfig, WorkerCache,
    WorkerRegistry, IN_USE_ADVICE,
};
use super::word::{self, Shape, Stall, StateWord, OPENING_LIMIT};
use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::runtime;

mod close;
mod slow;
mod stats;

pub use stats::{LeaseStatus, SnowflakeStats};

/// The first wait before retrying a failed re-acquire; doubles up to the last one.
const REACQUIRE_FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between re-acquire attempts (or the heartbeat, when shorter), so a
/// worker is back within about a second of its registry.
const REACQUIRE_LAST_RETRY: Duration = Duration::from_secs(1);
/// The longest one registry call (a renew, a release) may take before the generator
/// treats it as failed. Registries have their own, shorter timeouts (MySQL's
/// `CALL_TIMEOUT`, ZooKeeper's session); this bounds any registry, a custom one too, so
/// no caller and no close waits on one forever.
const REGISTRY_CALL_LIMIT: Duration = Duration::from_secs(10);

/// `Core::rebuilding` when no caller of any process is re-acquiring a worker id. Fork
/// epochs count forks from 0 and never reach it.
const NO_REBUILD: u64 = u64::MAX;

/// `fut` (a registry call named `what`), failed with `RegistryUnavailable` after
/// [`REGISTRY_CALL_LIMIT`].
async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(REGISTRY_CALL_LIMIT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(Error::registry(format!(
                "the worker registry's {what} took longer than {REGISTRY_CALL_LIMIT:?}"
            )))
        })
}

/// Options of a generator, with their defaults; see the builder's methods.
/// Where worker ids come from.
#[derive(Debug, Clone)]
enum Source {
    Config(RegistryConfig),
    Custom(Arc<dyn WorkerRegistry>),
}

impl Source {
    fn scheme(&self) -> &'static str {
        match self {
            Source::Config(c) => c.scheme(),
            Source::Custom(_) => "custom",
        }
    }

    fn reacquires_after_fork(&self) -> bool {
        matches!(self, Source::Config(c) if c.reacquires_after_fork())
    }
}

/// Why issuing cannot go on, kept lock-free between a failed renew and later callers.
#[derive(Debug, Clone)]
enum Failure {
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

/// `ClockSkew` for a reading whose skew exceeds `max_skew_ms`, else `None`.
fn skew_error(reading: &super::registry::ClockReading, max_skew_ms: i64) -> Option<Error> {
    let skew = reading.skew_ms();
    (skew.abs() > max_skew_ms).then(|| skew_of(skew, max_skew_ms, reading.source.clone()))
}

fn skew_of(skew_ms: i64, max_skew_ms: i64, source: String) -> Error {
    Error::ClockSkew {
        skew_ms,
        direction: if skew_ms > 0 { "ahead of" } else { "behind" },
        max_skew_ms,
        source_desc: source,
    }
}

#[derive(Debug, Clone)]
struct Settings {
    registry: Source,
    cache_dir: PathBuf,
    max_backward_ms: i64,
    heartbeat: Duration,
    lookahead_ms: i64,
    startup_wait_ms: i64,
    max_skew_ms: i64,
}

/// The default largest local-vs-registry clock difference ([`SnowflakeBuilder::max_skew`]).
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(5);
/// How long [`SnowflakeGenerator::close`] waits for the registry before letting go
/// (the lease then expires on the registry's side).
pub const DEFAULT_CLOSE_WAIT: Duration = Duration::from_secs(3);
/// How long [`SnowflakeGenerator::next_id_async`] keeps waiting for a transient cause
/// (a late or failing heartbeat, a lease being re-acquired, a forked child's own worker
/// id) before failing with it.
pub const MAX_ASYNC_WAIT: Duration = Duration::from_secs(10);
/// The longest heartbeat accepted.
pub const MAX_HEARTBEAT: Duration = Duration::from_secs(60);
/// The largest backward clock step waited out: the caller waits twice the step.
pub const MAX_BACKWARD: Duration = Duration::from_secs(1);
/// The longest lookahead accepted (a crashed holder's id is unusable at most this long).
pub const MAX_LOOKAHEAD: Duration = Duration::from_secs(300);

/// Builds a [`SnowflakeGenerator`]. Defaults: Leaf's layout, the system clock, the
/// cache directory of `default_cache_dir()`, a 5 ms backward step waited out, a
/// heartbeat every 3 s persisting a bound 6 s ahead, and up to 10 s of waiting at
/// start-up for a clock that is behind the worker's floor.
#[derive(Debug, Clone)]
pub struct SnowflakeBuilder {
    registry: Option<Source>,
    layout: Layout,
    clock: Arc<dyn Clock>,
    cache_dir: Option<PathBuf>,
    max_backward: Duration,
    heartbeat: Duration,
    lookahead: Option<Duration>,
    startup_wait: Duration,
    max_skew: Duration,
}

impl Default for SnowflakeBuilder {
    fn default() -> Self {
        SnowflakeBuilder {
            registry: None,
            layout: Layout::default(),
            clock: clock::system(),
            cache_dir: None,
            max_backward: Duration::from_millis(5),
            heartbeat: Duration::from_secs(3),
            lookahead: None,
            startup_wait: Duration::from_secs(10),
            max_skew: DEFAULT_MAX_SKEW,
        }
    }
}

impl SnowflakeBuilder {
    /// The worker-id registry (required).
    pub fn registry(mut self, registry: RegistryConfig) -> Self {
        self.registry = Some(Source::Config(registry));
        self
    }

    /// A registry of your own (any [`WorkerRegistry`]) instead of a configured one. A
    /// generator built on it refuses to issue in a forked child.
    pub fn custom_registry(mut self, registry: Arc<dyn WorkerRegistry>) -> Self {
        self.registry = Some(Source::Custom(registry));
        self
    }

    /// The worker-id registry as a URL (see [`RegistryConfig::parse`]).
    pub fn registry_url(self, url: &str) -> Result<Self> {
        Ok(self.registry(RegistryConfig::parse(url)?))
    }

    /// The bit layout and epoch (default: Leaf's 41 + 10 + 12, epoch 1288834974657).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Where time comes from (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The directory of the worker cache file (default: `$XDG_CACHE_HOME/leafid`,
    /// `~/.cache/leafid` or `/tmp/leafid-<uid>`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The largest backward clock step waited out (twice the step, then re-checked)
    /// instead of failing with `ClockMovedBackwards` (default 5 ms, as Leaf; at most
    /// [`MAX_BACKWARD`], since the caller waits twice the step).
    pub fn max_backward(mut self, max: Duration) -> Self {
        self.max_backward = max;
        self
    }

    /// How often the time bound is persisted (default 3 s, Leaf's upload interval).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// How far ahead of the clock each persisted bound reaches (default twice the
    /// heartbeat). Issuing continues through a registry outage this long; a restart
    /// after a crash waits at most this long for its own old bound.
    pub fn lookahead(mut self, ahead: Duration) -> Self {
        self.lookahead = Some(ahead);
        self
    }

    /// How long start-up waits for a clock that is behind the worker's floor before
    /// failing with `ClockBehindRegistry` (default 10 s).
    pub fn startup_wait(mut self, wait: Duration) -> Self {
        self.startup_wait = wait;
        self
    }

    /// The largest difference allowed between the local clock and the registry's clock
    /// (ZooKeeper's `mtime` of a node just written, the database's `NOW(3)`), checked at
    /// start-up (refused with `ClockSkew`) and on every heartbeat (issuing stops until the
    /// clocks agree again). Default 5 s; at most 1 hour. Registries without a clock of
    /// their own (`fixed`, `local`) are not checked.
    pub fn max_skew(mut self, max: Duration) -> Self {
        self.max_skew = max;
        self
    }

    /// Checks the configuration (no I/O) and splits it into parts.
    fn validate(self) -> Result<(Layout, Arc<dyn Clock>, Settings)> {
        let registry = self.registry.ok_or_else(|| {
            Error::InvalidConfig(
                "no worker registry given; call .registry(…) or .registry_url(\"local:///var/lib/leafid/workers\")"
                    .into(),
            )
        })?;
        if let Source::Config(RegistryConfig::Fixed(id)) = registry {
            self.layout.check_worker_id(id as i64)?;
        }
        if self.heartbeat < Duration::from_millis(10) {
            return Err(Error::InvalidConfig(format!(
                "heartbeat {:?} is below 10 ms; Leaf uses 3 s",
                self.heartbeat
            )));
        }
        // Upper limits keep a crashed holder's bound from locking its worker id out for
        // long: a new holder of the id waits until the clock passes that bound.
        if self.heartbeat > MAX_HEARTBEAT {
            return Err(Error::InvalidConfig(format!(
                "heartbeat {:?} is above {MAX_HEARTBEAT:?}; a crashed holder's bound (twice the heartbeat \
                 ahead of the clock) would keep its worker id unusable that long; Leaf uses 3 s",
                self.heartbeat
            )));
        }
        if self.max_backward > MAX_BACKWARD {
            return Err(Error::InvalidConfig(format!(
                "max_backward {:?} is above {MAX_BACKWARD:?}: a caller would wait twice that for a clock \
                 stepped back; Leaf uses 5 ms",
                self.max_backward
            )));
        }
        let lookahead = self.lookahead.unwrap_or(self.heartbeat * 2);
        if lookahead > MAX_LOOKAHEAD {
            return Err(Error::InvalidConfig(format!(
                "lookahead {lookahead:?} is above {MAX_LOOKAHEAD:?}; after a crash the worker id stays \
                 unusable until the clock passes the last bound, so keep it short (default: twice the heartbeat)"
            )));
        }
        if self.max_skew < Duration::from_millis(10) || self.max_skew > Duration::from_secs(3600) {
            return Err(Error::InvalidConfig(format!(
                "max_skew {:?} must be between 10 ms and 1 hour (default 5 s)",
                self.max_skew
            )));
        }
        if lookahead <= self.heartbeat {
            return Err(Error::InvalidConfig(format!(
                "lookahead {lookahead:?} must exceed the heartbeat {:?}, or issuing would pause between heartbeats",
                self.heartbeat
            )));
        }
        let now = self.clock.now_millis();
        if now <= self.layout.epoch_ms() {
            return Err(Error::InvalidConfig(format!(
                "the clock ({now}) is not after the layout's epoch ({}); pick an earlier epoch or fix the clock",
                self.layout.epoch_ms()
            )));
        }
        if now > self.layout.max_timestamp_ms() {
            return Err(Error::TimestampOverflow {
                max_ms: self.layout.max_timestamp_ms(),
            });
        }
        let ms = |d: Duration| d.as_millis().min(i64::MAX as u128 / 4) as i64;
        Ok((
            self.layout,
            self.clock,
            Settings {
                registry,
                cache_dir: self.cache_dir.unwrap_or_else(default_cache_dir),
                max_backward_ms: ms(self.max_backward),
                heartbeat: self.heartbeat,
                lookahead_ms: ms(lookahead),
                startup_wait_ms: ms(self.startup_wait),
                max_skew_ms: ms(self.max_skew),
            },
        ))
    }

    /// Validates, acquires a worker id, checks the clock against its floor and starts
    /// the heartbeat. The registry's I/O runs on the background runtime.
    pub async fn build(self) -> Result<SnowflakeGenerator> {
        let (layout, clock, settings) = self.validate()?;
        runtime::watch_forks();
        let core = Arc::new(Core::new(layout, clock, settings));
        let c = core.clone();
        runtime::run(async move { start_session(&c).await }).await?;
        #[cfg(feature = "metrics")]
        crate::metrics::track_arc(&core);
        Ok(SnowflakeGenerator {
            inner: Arc::new(Handle { core }),
        })
    }

    /// [`build`](Self::build) for callers without an async runtime (bindings).
    pub fn build_blocking(self) -> Result<SnowflakeGenerator> {
        let (layout, clock, settings) = self.validate()?;
        runtime::watch_forks();
        let core = Arc::new(Core::new(layout, clock, settings));
        let c = core.clone();
        runtime::block_on(async move { start_session(&c).await })?;
        #[cfg(feature = "metrics")]
        crate::metrics::track_arc(&core);
        Ok(SnowflakeGenerator {
            inner: Arc::new(Handle { core }),
        })
    }
}

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

/// One worker-id holding: the registry, its lease, the cache file, the heartbeat.
struct Session {
    registry: Arc<dyn WorkerRegistry>,
    /// The same registry when it is `local`, to close inherited lock files after a fork.
    local: Option<Arc<LocalRegistry>>,
    cache: WorkerCache,
    /// This host's claim on the identity, for registries whose id follows from
    /// configuration.
    identity_lock: Option<IdentityLock>,
    /// Held across every persist and the final release (registry calls are bounded).
    lease: tokio::sync::Mutex<LeaseState>,
    stop: tokio::sync::Notify,
    /// Catch-up persists finished (`slow::catch_up`): a caller that queued behind one
    /// takes its answer. Per session, not per core: a forked child starts afresh.
    attempts: std::sync::atomic::AtomicU64,
    /// A background catch-up is under way (`next_id_now` starts at most one).
    catching_up: AtomicBool,
}

struct LeaseState {
    lease: Lease,
    /// The highest bound persisted so far.
    persisted: i64,
}

struct Core {
    layout: Layout,
    clock: Arc<dyn Clock>,
    settings: Settings,
    /// The last id issued (or a marker: the floor's millisecond with the sequence full).
    state: StateWord,
    limit: Arc<IssueLimit>,
    worker: AtomicU32,
    /// The fork epoch the current session was acquired under (`word`'s atomics: the
    /// gate reads it).
    epoch: word::AtomicU64,
    /// The fork epoch of the process whose caller is re-acquiring a worker id after a
    /// fork, or [`NO_REBUILD`]. An epoch, not a flag: a process forked while its parent
    /// was itself re-acquiring (nested pools) inherits the parent's claim with no thread
    /// to clear it, and must not count it as its own (see `slow.rs`).
    rebuilding: std::sync::atomic::AtomicU64,
    closed: word::AtomicBool,
    /// The current session, an `Arc` turned into a raw pointer. A replaced session is
    /// leaked, never freed, so a pointer read while the core lives stays valid.
    session: AtomicPtr<Session>,
    /// Until when (ms) a failed synchronous renew is not retried, and its message.
    retry_after: AtomicI64,
    /// Lock-free: a fork() may land while another thread writes it.
    last_failure: arc_swap::ArcSwap<Failure>,
    /// The registry's clock at the last reading and the monotonic instant it was taken:
    /// before every write, the local clock is compared with the registry's clock carried
    /// forward by the monotonic clock, so a bound from a clock that jumped is never
    /// written. Lock-free: a fork() may land while another thread stores it.
    clock_ref: arc_swap::ArcSwapOption<(i64, std::time::Instant)>,
    /// True once the final release after `close` has completed (or had nothing to do).
    released: tokio::sync::watch::Sender<bool>,
    /// Ids issued in milliseconds that ended (see `stats.rs`).
    issued: std::sync::atomic::AtomicU64,
    /// The first id of the millisecond in progress, as far as counting knows.
    ms_first: std::sync::atomic::AtomicU64,
    /// The highest count reported, so a report never goes down.
    reported: std::sync::atomic::AtomicU64,
    /// The largest backward clock step a caller met (ms).
    max_backward_ms: AtomicI64,
    /// Local minus registry clock at the latest reading (ms), or `stats::NO_SKEW`.
    skew_ms: AtomicI64,
    /// Persists of a time bound that failed.
    persist_failures: std::sync::atomic::AtomicU64,
    // Precomputed from the layout for the hot path.
    shape: Shape,
    random_bound: u32,
}

impl Core {
    fn new(layout: Layout, clock: Arc<dyn Clock>, settings: Settings) -> Core {
        Core {
            clock,
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
            issued: std::sync::atomic::AtomicU64::new(0),
            ms_first: std::sync::atomic::AtomicU64::new(0),
            reported: std::sync::atomic::AtomicU64::new(0),
            max_backward_ms: AtomicI64::new(0),
            skew_ms: AtomicI64::new(stats::NO_SKEW),
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

    fn session(&self) -> Option<Arc<Session>> {
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
    fn random_start(&self) -> u64 {
        fastrand::u32(..self.random_bound) as u64
    }

    /// True when the fast path may not issue at `now`.
    #[inline]
    fn gated(&self, now: i64) -> bool {
        word::gate_shut(now, self.limit.word(), runtime::fork_epoch, &self.epoch)
    }

    /// Keeps the outcome of a persist as the cause callers see while the gate is shut
    /// (`next_id_now` reports it without asking the registry): a failure's message, or
    /// none after a success.
    fn note_persist(&self, result: &Result<()>) {
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
    fn keep_clock_ref(&self, reading: &super::registry::ClockReading) {
        self.note_skew(reading.skew_ms());
        // The reading may be older than now (a registry that waited after reading its
        // clock): move its instant back by the wall time passed since.
        let age = super::registry::system_now_ms().saturating_sub(reading.local_after_ms);
        let now = std::time::Instant::now();
        let at = now
            .checked_sub(Duration::from_millis(age.clamp(0, 3_600_000) as u64))
            .unwrap_or(now);
        self.clock_ref
            .store(Some(Arc::new((reading.registry_ms, at))));
    }

    /// `ClockSkew` when the local clock is off the registry's clock of the last reading,
    /// carried forward by the monotonic clock, by more than the allowed skew.
    fn jumped_clock(&self) -> Option<Error> {
        let reference = self.clock_ref.load_full()?;
        let (registry_ms, at) = *reference;
        let expected = registry_ms.saturating_add(at.elapsed().as_millis() as i64);
        let skew = super::registry::system_now_ms() - expected;
        // One second on top for the reading's round trip and the monotonic clock's drift
        // against a slewing wall clock (at most 0.05%: 0.3 s over ten minutes).
        let allowed = self.settings.max_skew_ms + 1000;
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

/// Acquires a worker id, checks the clock against its floor, installs the state and
/// starts the heartbeat. Runs on the background runtime.
async fn start_session(core: &Arc<Core>) -> Result<()> {
    let settings = &core.settings;
    let (registry, local): (Arc<dyn WorkerRegistry>, Option<Arc<LocalRegistry>>) =
        match &settings.registry {
            Source::Config(RegistryConfig::Local { dir }) => {
                let l = Arc::new(LocalRegistry::new(dir.clone()));
                (l.clone(), Some(l))
            }
            Source::Config(other) => (other.build(core.layout.max_worker_id())?, None),
            Source::Custom(r) => (r.clone(), None),
        };
    let cache = WorkerCache::new(&settings.cache_dir, &registry.describe());
    // Old cache files of identities long gone; best effort, off the runtime's workers.
    let cache_dir = settings.cache_dir.clone();
    let _ = tokio::task::spawn_blocking(move || super::registry::cache::prune(&cache_dir)).await;
    let identity_lock = match registry.host_identity() {
        Some(identity) => {
            // A generator of this identity dropped or closed just before: its release
            // runs in the background, bounded by the registry calls' limit.
            close::wait_for_release(&identity, REGISTRY_CALL_LIMIT * 2).await;
            Some(claim_identity(&identity)?)
        }
        None => None,
    };
    core.limit.set(OPENING_LIMIT);
    let max = core.layout.max_worker_id();
    let lease = match registry.acquire(max, core.limit.clone()).await {
        Ok(lease) => {
            if let Some(reading) = registry.take_clock_reading() {
                if let Some(e) = skew_error(&reading, settings.max_skew_ms) {
                    core.note_skew(reading.skew_ms());
                    let _ = registry.release(&lease).await;
                    return Err(e);
                }
                core.keep_clock_ref(&reading);
            }
            lease
        }
        Err(e @ (Error::RegistryUnavailable { .. } | Error::StoreUnavailable { .. }))
            if registry.survives_outage() =>
        {
            let cached = tokio::task::spawn_blocking({
                let cache = cache.clone();
                move || cache.read()
            })
            .await
            .map_err(Error::registry)??;
            match cached {
                Some(entry) => {
                    core.layout.check_worker_id(entry.worker_id as i64)?;
                    tracing::warn!(error = %e, worker_id = entry.worker_id, cache = %cache.path().display(),
                        "worker registry unreachable at start-up; using the cached worker id");
                    Lease {
                        worker_id: entry.worker_id,
                        floor_ms: entry.bound_ms,
                        location: format!("cache file {}", cache.path().display()),
                    }
                }
                None => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    match hold(core, &cache, &lease).await {
        Ok(floor) => {
            let session = Arc::new(Session {
                registry,
                local,
                cache,
                identity_lock,
                lease: tokio::sync::Mutex::new(LeaseState {
                    lease: lease.clone(),
                    persisted: i64::MIN,
                }),
                stop: tokio::sync::Notify::new(),
                attempts: std::sync::atomic::AtomicU64::new(0),
                catching_up: AtomicBool::new(false),
            });
            install(core, lease.worker_id, floor)?;
            if let Err(e) = persist(
                core,
                &session,
                core.clock.now_millis() + settings.lookahead_ms,
            )
            .await
            {
                let _ = session.registry.release(&lease).await;
                return Err(e);
            }
            // The previous session (a forked parent's) is leaked: see `Core::session`.
            core.session.store(
                Arc::into_raw(session.clone()) as *mut Session,
                Ordering::Release,
            );
            core.epoch.store(runtime::fork_epoch(), Ordering::Release);
            runtime::spawn(heartbeat(core.clone(), session));
            // No floor (a fresh id) is i64::MIN; `leafid serve` prints it as "none".
            tracing::info!(worker_id = lease.worker_id, location = %lease.location, floor, "snowflake worker id held");
            Ok(())
        }
        Err(e) => {
            let _ = registry.release(&lease).await;
            Err(e)
        }
    }
}

/// Claims `identity` on this host, or fails with `WorkerIdInUse`.
fn claim_identity(identity: &str) -> Result<IdentityLock> {
    IdentityLock::try_claim(identity)?.ok_or_else(|| {
        let who = match super::registry::identity_lock::holder_pid(identity) {
            Some(pid) if pid == std::process::id() => {
                format!("another generator of this process (pid {pid})")
            }
            Some(pid) => format!("pid {pid} on this host"),
            None => "another process of this host".to_string(),
        };
        Error::WorkerIdInUse {
            identity: format!("identity {identity} on this host"),
            worker_id: None,
            holder: format!("{who} (`ss -xap | grep @leafid/{identity}` shows it)"),
            advice: IN_USE_ADVICE.into(),
        }
    })
}

/// Works out the floor for `lease` and waits for the clock to pass it (up to the
/// start-up wait). Returns the floor.
async fn hold(core: &Arc<Core>, cache: &WorkerCache, lease: &Lease) -> Result<i64> {
    core.layout.check_worker_id(lease.worker_id as i64)?;
    let cached = tokio::task::spawn_blocking({
        let cache = cache.clone();
        move || cache.read()
    })
    .await
    .map_err(Error::registry)??;
    let mut floor = lease.floor_ms;
    if let Some(entry) = cached.filter(|e| e.worker_id == lease.worker_id) {
        floor = floor.max(entry.bound_ms);
    }
    let mut waited = 0i64;
    loop {
        let now = core.clock.now_millis();
        if now > floor {
            return Ok(floor);
        }
        let gap = floor - now + 1;
        if waited + gap > core.settings.startup_wait_ms {
            return Err(Error::ClockBehindRegistry {
                worker_id: lease.worker_id,
                last_ms: floor,
                behind_ms: floor - now,
            });
        }
        tracing::info!(
            worker_id = lease.worker_id,
            wait_ms = gap,
            "clock is behind the worker's floor; waiting"
        );
        let clock = core.clock.clone();
        tokio::task::spawn_blocking(move || clock.sleep_millis(gap as u64))
            .await
            .map_err(Error::registry)?;
        waited += gap;
    }
}

/// Puts the worker id and its floor into the state word: the floor's millisecond with
/// a full sequence, so the next id comes from a later millisecond. Never moves the
/// word's timestamp back.
fn install(core: &Core, worker_id: u32, floor: i64) -> Result<()> {
    let floor_rel = floor
        .saturating_sub(core.shape.epoch_ms)
        .clamp(0, core.shape.max_rel);
    let before = core.state.load();
    if !core.state.install(&core.shape, worker_id, floor_rel) {
        return Err(Error::Closed);
    }
    // Counts the millisecond in progress (the gate is shut: nothing is issued during an
    // install) and moves the count's first id past the marker, which is no id.
    // Wrapping: a close racing the install leaves CLOSED_STATE (u64::MAX) in the word,
    // and the count of a closed generator no longer matters.
    core.rolled_over(before, core.state.load().wrapping_add(1));
    core.worker.store(worker_id, Ordering::Relaxed);
    Ok(())
}

/// Persists `bound` (cache file and registry) and raises the limit to it when it is
/// persisted somewhere that counts.
async fn persist(core: &Arc<Core>, session: &Session, bound: i64) -> Result<()> {
    let mut st = session.lease.lock().await;
    persist_locked(core, session, &mut st, bound).await
}

async fn persist_locked(
    core: &Arc<Core>,
    session: &Session,
    st: &mut LeaseState,
    bound: i64,
) -> Result<()> {
    if core.closed.load(Ordering::Acquire) {
        return Err(Error::Closed);
    }
    if bound <= st.persisted {
        return Ok(());
    }
    let worker_id = st.lease.worker_id;
    // A local clock that jumped since the registry's last reading: write no bound from it
    // (a bound far ahead would strand the worker id that long after a crash).
    if let Some(e) = core.jumped_clock() {
        tracing::warn!(error = %e, "clock skew against the registry; no bound written");
        return Err(e);
    }
    let cache = session.cache.clone();
    let cache_res = tokio::task::spawn_blocking(move || {
        cache.write(CacheEntry {
            worker_id,
            bound_ms: bound,
        })
    })
    .await
    .map_err(Error::registry)
    .and_then(|r| r);
    let mut reg_res = bounded("renew", session.registry.renew(&st.lease, bound)).await;
    if let Err(Error::LeaseLost { .. }) = reg_res {
        // Found by the renew itself (the lease node gone or re-taken): stop, re-acquire.
        core.limit.lose();
    }
    let skewed = reg_res.is_ok()
        && match session.registry.take_clock_reading() {
            Some(r) => match skew_error(&r, core.settings.max_skew_ms) {
                Some(e) => {
                    core.note_skew(r.skew_ms());
                    tracing::warn!(error = %e, "clock skew against the registry; issuing stops at the last bound");
                    reg_res = Err(e);
                    true
                }
                None => {
                    core.keep_clock_ref(&r);
                    false
                }
            },
            None => false,
        };
    let counted = match (&reg_res, &cache_res) {
        (Ok(()), Ok(())) => true,
        (Ok(()), Err(ce)) => {
            tracing::warn!(error = %ce, "cannot write the worker cache file");
            !session.registry.cache_is_only_record()
        }
        (Err(re), Ok(())) => {
            tracing::warn!(error = %re, "worker registry renew failed");
            // A skewed clock is not an outage: the bound must not rise on the cache alone.
            session.registry.survives_outage() && !skewed
        }
        (Err(re), Err(ce)) => {
            tracing::warn!(registry = %re, cache = %ce, "time bound persisted nowhere");
            false
        }
    };
    if !counted {
        return Err(match (reg_res, cache_res) {
            (Err(e), _) | (_, Err(e)) => e,
            _ => unreachable!("counted is false only when something failed"),
        });
    }
    st.persisted = bound;
    if !core.limit.raise(bound) {
        return Err(Error::LeaseLost {
            worker_id,
            cause: "the registry reported the lease lost".into(),
        });
    }
    Ok(())
}

/// Persists a bound every heartbeat; re-acquires a worker id after a lost lease.
async fn heartbeat(core: Arc<Core>, session: Arc<Session>) {
    let mut wait = core.settings.heartbeat;
    let mut retry = REACQUIRE_FIRST_RETRY;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = core.limit.lost() => {}
            _ = session.stop.notified() => return,
        }
        wait = core.settings.heartbeat;
        if core.closed.load(Ordering::Acquire)
            || runtime::fork_epoch() != core.epoch.load(Ordering::Acquire)
        {
            return;
        }
        if core.limit.get() == i64::MIN {
            match reacquire(&core, &session).await {
                Ok(()) => retry = REACQUIRE_FIRST_RETRY,
                Err(e) => {
                    // Soon at first, then backing off; the jitter spreads a fleet's
                    // retries so a registry coming back is not hit all at once.
                    wait = retry.min(wait).mul_f64(0.8 + 0.4 * fastrand::f64());
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot re-acquire a worker id after a lost lease");
                    retry = (retry * 2).min(REACQUIRE_LAST_RETRY);
                }
            }
            continue;
        }
        let bound = core.clock.now_millis() + core.settings.lookahead_ms;
        let result = persist(&core, &session, bound).await;
        if let Err(e) = &result {
            tracing::warn!(error = %e, "heartbeat could not persist a time bound");
        }
        core.note_persist(&result);
    }
}

/// After a registry reported the lease lost: takes a (possibly different) worker id
/// from the same registry, with the usual floor check.
async fn reacquire(core: &Arc<Core>, session: &Session) -> Result<()> {
    let mut st = session.lease.lock().await;
    if core.closed.load(Ordering::Acquire) {
        return Err(Error::Closed);
    }
    let _ = bounded("release", session.registry.release(&st.lease)).await;
    core.limit.set(OPENING_LIMIT);
    let lease = match session
        .registry
        .acquire(core.layout.max_worker_id(), core.limit.clone())
        .await
    {
        Ok(lease) => lease,
        Err(e) => {
            // Back to "lease lost", so the next heartbeat tries again.
            core.limit.set(i64::MIN);
            return Err(e);
        }
    };
    let floor = match hold(core, &session.cache, &lease).await {
        Ok(f) => f,
        Err(e) => {
            let _ = session.registry.release(&lease).await;
            core.limit.set(i64::MIN);
            return Err(e);
        }
    };
    install(core, lease.worker_id, floor)?;
    st.lease = lease;
    st.persisted = i64::MIN;
    let bound = core.clock.now_millis() + core.settings.lookahead_ms;
    persist_locked(core, session, &mut st, bound).await
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
    /// the registry, bounded by its timeouts), it sleeps out a small backward clock step
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
    /// numbers per atomic swap; may wait as [`next_id`](Self::next_id) does. On error
    /// the ids already written are valid but `out` is only partly filled.
    pub fn fill(&self, out: &mut [i64]) -> Result<()> {
        self.fill_with(out, |core, stall| core.stalled(stall))
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

    /// `n` ids without ever waiting on I/O (see [`next_id_now`](Self::next_id_now)). On
    /// error no id is returned (those reserved are skipped, never reissued).
    pub fn next_ids_now(&self, n: usize) -> Result<Vec<i64>> {
        let n = crate::limits::batch(n as u64)?;
        let mut out = vec![0; n];
        self.fill_now(&mut out)?;
        Ok(out)
    }

    /// [`fill`](Self::fill) without ever waiting on I/O (see
    /// [`next_id_now`](Self::next_id_now)); for bindings that write into memory they own.
    pub fn fill_now(&self, out: &mut [i64]) -> Result<()> {
        self.fill_with(out, |core, stall| core.stalled_now(stall))
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
            runtime::run(async move {
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
            runtime::run(gen.fill_rest_async(out, filled)).await
        }
    }

    /// Fills `out[filled..]` on the core's runtime, waiting out stalls as
    /// [`next_id_async`](Self::next_id_async) does.
    async fn fill_rest_async(self, mut out: Vec<i64>, mut filled: usize) -> Result<Vec<i64>> {
        let core = self.inner.core.clone();
        let deadline = tokio::time::Instant::now() + MAX_ASYNC_WAIT;
        while filled < out.len() {
            match self.reserve_into(&mut out[filled..]) {
                Ok(k) => filled += k,
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
    /// with [`Error::Closed`]. On the core's own runtime threads it does not wait.
    pub fn close_within(&self, wait: Duration) -> bool {
        self.inner.core.begin_close();
        self.inner.core.wait_released(wait)
    }

    /// [`close_within`](Self::close_within)`(`[`DEFAULT_CLOSE_WAIT`]`)` for async
    /// callers: issuing stops when this is called; the future resolves when the worker
    /// id is released or after the deadline (`true`: released).
    pub fn close_async(&self) -> impl std::future::Future<Output = bool> + Send + 'static {
        let core = self.inner.core.clone();
        core.begin_close();
        runtime::run(core.released_within(DEFAULT_CLOSE_WAIT))
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
    /// so it blocks at most that long. Idempotent; every later call on any clone fails
    /// with [`Error::Closed`]. Dropping the last clone closes without waiting at all.
    pub fn close(&self) {
        self.close_within(DEFAULT_CLOSE_WAIT);
    }
}
