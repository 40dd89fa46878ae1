//! Worker-id registries: who may issue snowflake ids with which worker id.
//!
//! A registry hands out a [`Lease`] on a worker id and persists, every heartbeat, an
//! upper bound on the timestamps this worker may issue. The generator never issues past
//! the last bound that was persisted somewhere (the registry or the local cache file),
//! and a new holder of the id never issues at or below the highest bound any earlier
//! holder persisted. That closes Leaf issue #216: a restart with the clock set back by
//! less than the upload interval is refused (or waited out) instead of reissuing ids.
//!
//! Every registry follows the fencing rule of [`fence`]: writes conditional on its own
//! last write, a record missing or changed under it is a lost lease, a newcomer watches a
//! record another writer may use, and foreign fields never get a future time.
//!
//! Backends, chosen by [`RegistryConfig`]:
//! - `zookeeper` — Leaf's `/snowflake/{name}/forever` layout, byte-compatible with Java Leaf;
//! - `zookeeper-recycle` — a pool of ids leased with the ZooKeeper session;
//! - `mysql` — the Leaf fork's `leaf_workerid_alloc` table;
//! - `postgres` — the identity lease of `mysql` on PostgreSQL;
//! - [`pool`] — any free id of a named pool, leased on MySQL or PostgreSQL;
//! - `local` — file locks in a directory on one host;
//! - `fixed` — an id from configuration;
//! - `statefulset` — a Kubernetes StatefulSet pod's ordinal.

use std::sync::Arc;

use crate::error::Result;
use crate::runtime::BoxFuture;

use super::word::{LimitWord, LOST_LIMIT};

pub mod cache;
mod config;
pub mod fence;
pub mod fixed;
pub mod host_lock;
pub mod identity_lock;
pub mod local;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(any(feature = "mysql", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "mysql", feature = "postgres"))))]
pub mod pool;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
pub mod statefulset;
// Always built: the URL parser checks ZooKeeper connect strings with it, so a
// `zookeeper://` URL is validated (and then refused by name) even without the feature.
pub mod zk_client;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub mod zookeeper;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub mod zookeeper_recycle;
// Each scheme's URL grammar sits beside its registry, but is declared here rather than
// in the registry's own `mod.rs`: a build without the registry's feature still parses
// its URL (and refuses it by name), so the grammar is built whatever the features.
#[path = "mysql/url.rs"]
mod mysql_url;
#[path = "zookeeper_recycle/url.rs"]
mod zookeeper_recycle_url;
#[path = "zookeeper/url.rs"]
mod zookeeper_url;

pub use cache::{default_cache_dir, ensure_private_dir, CacheEntry, Handover, WorkerCache};
pub use config::host_ip::first_non_loopback_ipv4;
pub use config::RegistryConfig;
pub use fixed::FixedRegistry;
pub use local::LocalRegistry;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use mysql::MysqlRegistry;
pub use statefulset::{StatefulsetConfig, StatefulsetRegistry};
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use zookeeper::ZookeeperRegistry;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use zookeeper_recycle::ZookeeperRecycleRegistry;

/// A worker id held by this process, and the time floor it comes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The worker id.
    pub worker_id: u32,
    /// The highest timestamp (ms since the Unix epoch) any earlier holder of this id
    /// may have issued; the generator issues only at timestamps strictly above it.
    /// `i64::MIN` when the registry found no record of an earlier holder.
    pub floor_ms: i64,
    /// True when `floor_ms` is an earlier holder's bound from a record the registry
    /// trusts; false when there is no record (a new one, or one deleted, wiped or
    /// restored without it) or one that may be stale (a file a volume snapshot can bring
    /// back). When false and the registry has a clock, the generator also waits until
    /// that clock plus the allowed skew has passed (fence rule 5): the earlier holder
    /// issued by its own clock, which may have run that far ahead.
    pub floor_recorded: bool,
    /// Where the lease lives, for messages and stats (`zookeeper:/snowflake/x/forever/…`).
    pub location: String,
}

/// The highest timestamp the generator may issue at. Heartbeats raise it after each
/// persisted bound; a registry that loses its lease lowers it to stop issuing at once.
///
/// The word itself is a `LimitWord` (`snowflake/word.rs`), checked with loom apart
/// from the wake-up here.
#[derive(Debug)]
pub struct IssueLimit {
    limit: LimitWord,
    /// Wakes the generator's heartbeat to take a worker id again after [`IssueLimit::lose`].
    lost: tokio::sync::Notify,
}

impl IssueLimit {
    /// A limit that forbids issuing until raised.
    pub fn closed() -> Arc<IssueLimit> {
        Arc::new(IssueLimit {
            limit: LimitWord::new(LOST_LIMIT),
            lost: tokio::sync::Notify::new(),
        })
    }

    /// The current limit (ms since the Unix epoch).
    #[inline]
    pub fn get(&self) -> i64 {
        self.limit.get()
    }

    /// The atomic word alone, for the generator's gate.
    #[inline]
    pub(crate) fn word(&self) -> &LimitWord {
        &self.limit
    }

    /// Sets the limit (raise after a persisted bound, lower on a lost lease).
    pub fn set(&self, limit_ms: i64) {
        self.limit.set(limit_ms);
    }

    /// The lease is lost or in doubt: stops issuing now and wakes the generator to take
    /// a worker id again at once rather than at its next heartbeat.
    pub fn lose(&self) {
        self.set(LOST_LIMIT);
        // notify_one keeps a permit when the heartbeat is busy, so no loss is missed.
        self.lost.notify_one();
    }

    /// Completes after the next [`IssueLimit::lose`] (or at once if one is pending).
    pub async fn lost(&self) {
        self.lost.notified().await
    }

    /// Fence rule 5 ([`fence`]): the registry is out of touch, so issuing pauses at
    /// `now_ms` (the limit is lowered to it, never raised) while the lease stays held;
    /// the next bound persisted ([`IssueLimit::raise`]) lifts the pause. A lost or
    /// opening lease stays as it is.
    pub fn suspend(&self, now_ms: i64) {
        self.limit.lower(now_ms);
    }

    /// Raises the limit to `limit_ms` unless a registry lowered it to `i64::MIN`
    /// (lease lost) meanwhile; a lost lease is never reopened by a late heartbeat.
    /// Returns false when the lease was lost.
    pub fn raise(&self, limit_ms: i64) -> bool {
        self.limit.raise(limit_ms)
    }
}

/// What a `WorkerIdInUse` error advises.
pub(crate) const IN_USE_ADVICE: &str =
    "several processes started from one configuration (gunicorn \
workers, Node cluster workers, two instances of a service) cannot share one identity: use \
local:///var/lib/leafid/workers (one host) or zookeeper-recycle://host:2181/name (any number of \
hosts), which give every process its own worker id, or give each process its own ?port= / fixed id";

/// A reading of the registry's own clock, taken while writing to it, for the start-up
/// and heartbeat clock check (the 2017 Leaf article's check against the cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockReading {
    /// The registry's time (ms since the Unix epoch): ZooKeeper's `mtime` / `ctime` of a
    /// node just written, the database's `NOW(3)`.
    pub registry_ms: i64,
    /// The local system clock just before the request was sent.
    pub local_before_ms: i64,
    /// The local system clock just after the reply arrived.
    pub local_after_ms: i64,
    /// Where the reading came from, for messages (`ZooKeeper mtime of /snowflake/…`).
    pub source: String,
}

impl ClockReading {
    /// Local minus registry time in ms, 0 when the registry's time falls inside the
    /// request's round trip (the reading cannot be more precise than that).
    pub fn skew_ms(&self) -> i64 {
        if self.registry_ms < self.local_before_ms {
            self.local_before_ms - self.registry_ms
        } else if self.registry_ms > self.local_after_ms {
            self.local_after_ms - self.registry_ms
        } else {
            0
        }
    }
}

/// The local system clock in ms since the Unix epoch, for [`ClockReading`]s.
pub(crate) fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One worker-id registry. Methods run on the background runtime.
pub trait WorkerRegistry: Send + Sync + std::fmt::Debug {
    /// Takes a worker id in `0..=max_worker_id`. `limit` is the generator's issue
    /// limit: a registry whose lease can be lost (a ZooKeeper session) keeps a clone
    /// and sets it to `i64::MIN` the moment the lease is in doubt, before anyone else
    /// can take the id.
    fn acquire(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>>;

    /// Persists `bound_ms`: this worker may issue at timestamps up to it. Called every
    /// heartbeat with a bound ahead of the clock, and on close with the exact last
    /// timestamp issued.
    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>>;

    /// Gives the id back (where the backend has leases) after a final `renew`.
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>>;

    /// True on a layout a Java Leaf or fork server shares (`zookeeper://` forever nodes,
    /// `mysql://?port=` rows): such a server takes an identity over by its own clock, so
    /// a generator lets go of it only once the clock has passed its last id
    /// (`generator/close.rs`).
    fn shared_with_foreign_servers(&self) -> bool {
        false
    }

    /// True when the id stays this process's own while the registry is unreachable
    /// (ZooKeeper forever nodes, MySQL rows, fixed ids, file locks), so a bound written
    /// to the local cache file alone is enough to keep issuing. False for leases that
    /// die with a session.
    fn survives_outage(&self) -> bool;

    /// A short name for the cache file and messages (`zookeeper-127.0.0.1:2181-order`).
    fn describe(&self) -> String;

    /// True when the registry's records are kept by this host's own clock: `statefulset`
    /// (each node's clock; two holders' readings are as far apart as their hosts'
    /// clocks), `fixed` and `local` (this host's files, which hold no clock of their own
    /// and no record that survives the directory being emptied). The generator never lets
    /// its ids lead the clock there (fence rule 5): it floors a lease with no record at
    /// the reading plus `max_skew` plus 1 s, and waits for a floor ahead of the clock, so
    /// a record lost after a holder stopped is never below ids it issued.
    fn clock_is_local(&self) -> bool {
        false
    }

    /// The registry's clock as seen by the last successful `acquire` or `renew`, taken
    /// (and cleared) by the generator for its clock check. `None` for registries without
    /// a clock of their own (`fixed`, `local`).
    fn take_clock_reading(&self) -> Option<ClockReading> {
        None
    }

    /// For registries whose worker id follows from configuration (`fixed`, `zookeeper`,
    /// `mysql`): the identity one process of this host at a time may hold, claimed by
    /// the generator (also for a registry passed as a custom one). `None` for pools that
    /// give every process its own id.
    fn host_identity(&self) -> Option<String> {
        None
    }

    /// True when the worker id follows from configuration alone, one identity per
    /// configuration (`zookeeper://` and `?port=`'s `ip:port`, `fixed`), so every process
    /// of this host that shares its cache file claims the same [`host_identity`] first:
    /// one at a time. False for pools, whose host identity is each process's own. Where
    /// the id does not survive an outage, a close out of touch with the registry hands
    /// its bound over through the cache file to the next such process
    /// (`generator/close.rs`).
    ///
    /// [`host_identity`]: WorkerRegistry::host_identity
    fn identity_is_configured(&self) -> bool {
        false
    }

    /// True when the local cache file is the only record of the bound (`fixed`): a
    /// bound that could not be written there does not count.
    fn cache_is_only_record(&self) -> bool {
        false
    }
}
