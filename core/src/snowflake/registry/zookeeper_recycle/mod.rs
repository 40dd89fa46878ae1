//! `zookeeper-recycle` — worker ids leased with a ZooKeeper session, for fleets whose
//! addresses change (pods, autoscaling, preforked workers).
//!
//! Layout under `/snowflake/{name}/recycle/` (beside which the NotFound9 fork's
//! `notuse`/`inuse` nodes must not exist: see `foreign.rs`, which refuses and watches):
//! - `lease/{id}` — EPHEMERAL, data `{"ip","port","pid","session"}`: id `id` is held by
//!   that session. ZooKeeper creates a path once, so whoever creates it holds the id;
//!   ZooKeeper deletes it when the session ends (closed, or expired after the session
//!   timeout without contact), never while the session lives.
//! - `last/{id}` — PERSISTENT, data `{"bound_ms",…}`: the highest bound any holder of
//!   `id` persisted, i.e. the latest timestamp it may have issued; the next holder's floor.
//! - `last/` itself — data `{"floors","ahead_ms"}`: how many floors were ever created and
//!   the largest lookahead written, so that a deleted floor is told from an unused id
//!   (`floor.rs`).
//!
//! Acquire opens a new session, lists `lease`, and creates a free `lease/{id}`, trying the
//! first few free ids lowest last bound first (NodeExists: someone was faster, try the
//! next); then reads `last/{id}` as the floor.
//! Every renew first checks that the lease node is still owned by this session and that
//! the fork's layout has not appeared, then writes `last/{id}` in a multi-op guarded by
//! the lease node's version and by the version of `last/{id}` this holder last read or
//! wrote (fence rule 1), through the same session: a session that ended can write
//! nothing, and a floor another writer changed or deleted is never overwritten blindly.
//!
//! Fence rule 5 (a holder out of touch issues up to its bound; nobody waits for it):
//! while the client cannot reach a server, the holder keeps issuing up to the bound
//! `last/{id}` holds (renewals fail meanwhile) and stops there; it stops at once when a
//! server reports its session expired. A newcomer that finds no `last/{id}` (a pool just
//! made, an id never used, the tree deleted under a holder that is cut off) starts at
//! once: its lease is unrecorded, and the generator floors it above every bound any
//! holder wrote before (`floor.rs`). No foreign server writes this layout (the fork's
//! own beside it is refused, `foreign.rs`), so nothing watches before the first id.
//!
//! Fence rule 2: a lease node or `last/{id}` missing or changed under a live holder is
//! [`Error::LeaseLost`], never "unavailable". A watcher task sees it at once (ZooKeeper
//! watches on the lease node, on `last/{id}` and on the pool's children) and stops
//! issuing; the renew finds the same by its conditional write. When the holder then lets
//! go of the id it first restores its floor if it is missing or lower than the last bound
//! it wrote (never lowering one), under its lease guard, so that the next holder starts
//! above everything it issued. An operator deleting `lease/{id}` alone lets a newcomer
//! take the id at once, with the floor still in `last/{id}`; should the old holder's
//! renew race with the newcomer's first one, the `last/{id}` version check lets only one
//! of them write, and the newcomer issues nothing before its own write succeeds.
//!
//! Why no two live holders ever issue one id at one timestamp:
//! 1. The generator issues only up to its issue limit, and raises the limit only after a
//!    bound was written to `last/{id}` (this registry does not survive an outage, so the
//!    cache file alone never counts).
//! 2. The next holder can create `lease/{id}` only after the previous session ended; a
//!    session that ended can no longer write, so `last/{id}` then holds the highest bound
//!    the previous holder ever had, and the next holder issues strictly above it.
//!
//! That holds even when the old holder is paused (GC, SIGSTOP) past its session timeout,
//! or cut off from ZooKeeper for longer: it issues only up to the bound it persisted,
//! which floors the next holder. So a holder out of touch keeps issuing to that bound
//! (the lookahead, 65 s by default) rather than stopping, as Leaf does. It stops
//! ([`IssueLimit::lose`]) when the lease is lost for sure: a server reports the session
//! Expired (the client never decides that by its own clock, [`super::zk_client`]), or a
//! watch sees its records deleted or changed. The generator's heartbeat then calls
//! `acquire` again at once: a new session, perhaps another id.
//!
//! Credentials and chroot come with the connect string
//! (`user:password@host:port,host:port/chroot`, see [`super::zk_client`]); the layout
//! above is then below the chroot. With credentials, `last/` and every `last/{id}` are
//! created with [`zk::Acl::CreatorAllAnyoneRead`]: only clients with the same
//! credentials may write or delete a floor (ZooKeeper checks a delete against the
//! parent's ACL, hence `last/` too), so nobody else can lower one. Nodes created before
//! credentials were configured keep their open ACL. The password is never shown:
//! messages, [`WorkerRegistry::describe`] and the cache file name use
//! [`zk::shown_connect`].
//!
//! Clock readings ([`WorkerRegistry::take_clock_reading`]): the `ctime` of the lease
//! node an acquire creates, and the `mtime` of `last/{id}` each renew writes, between
//! the local clock read before the write was sent and after its Stat came back.
//!
//! The files: `acquire.rs`, `renew.rs` and `release.rs` (the three steps of a lease),
//! `nodes.rs` (the node reads they share), `floor.rs` (what a floor record means),
//! `watch.rs` (the holder's watchers) and `foreign.rs` (the fork's layout).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::zk_client as zk;
use super::zookeeper::zk_err;
use super::{system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

mod acquire;
mod floor;
mod foreign;
mod nodes;
mod release;
mod renew;
mod watch;

use self::floor::Pool;

/// A lease this registry holds, with its session and watchers.
struct Held {
    client: zk::Client,
    worker_id: u32,
    lease_path: String,
    lease_version: i32,
    /// `last/{id}`.
    last_path: String,
    /// What this holder knows of `last/{id}`: shared with the watcher, which takes any
    /// other version for another writer's.
    floor: Arc<self::watch::FloorState>,
    /// The last bound this holder wrote to `last/{id}` (`i64::MIN` before the first).
    written: i64,
    /// The pool record as last read or written.
    pool: Pool,
    /// Cleared before this registry lets go of the session on purpose, so the watchers
    /// do not report our own close as a lost lease.
    watching: Arc<AtomicBool>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

impl Held {
    fn stop_watching(&self) {
        // SeqCst: pairs with the loads in the watchers; our own close is not a loss.
        self.watching.store(false, Ordering::SeqCst);
        for w in &self.watchers {
            w.abort();
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("worker_id", &self.worker_id)
            .field("lease_path", &self.lease_path)
            .field("session", &format_args!("{:#x}", self.client.session_id()))
            .finish()
    }
}

/// The recycling registry. Connects at `acquire`; building it does no I/O.
pub struct ZookeeperRecycleRegistry {
    connect: String,
    /// `connect` without its password, for everything shown.
    shown: String,
    name: String,
    ip: String,
    port: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    held: tokio::sync::Mutex<Option<Held>>,
    /// The latest clock reading, until the generator takes it. Never held across an
    /// await.
    clock: Mutex<Option<ClockReading>>,
}

impl std::fmt::Debug for ZookeeperRecycleRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // By hand: the connect string may carry a password.
        f.debug_struct("ZookeeperRecycleRegistry")
            .field("connect", &self.shown)
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("port", &self.port)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl ZookeeperRecycleRegistry {
    /// A pool `/snowflake/{name}/recycle` on the ensemble `connect`
    /// (`[user:password@]host:port[,host:port…][/chroot]`); `ip` / `port` are only
    /// recorded in the nodes as the holder's address.
    pub fn new(
        connect: impl Into<String>,
        name: impl Into<String>,
        ip: impl Into<String>,
        port: impl Into<String>,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> ZookeeperRecycleRegistry {
        let connect = connect.into();
        ZookeeperRecycleRegistry {
            shown: zk::shown_connect(&connect),
            connect,
            name: name.into(),
            ip: ip.into(),
            port: port.into(),
            session_timeout,
            connect_timeout,
            held: tokio::sync::Mutex::new(None),
            clock: Mutex::new(None),
        }
    }

    /// `/snowflake/{name}/recycle`.
    pub fn recycle_dir(&self) -> String {
        format!("/snowflake/{}/recycle", self.name)
    }

    /// `/snowflake/{name}/recycle/lease`.
    pub fn lease_dir(&self) -> String {
        format!("/snowflake/{}/recycle/lease", self.name)
    }

    /// `/snowflake/{name}/recycle/last`.
    pub fn last_dir(&self) -> String {
        format!("/snowflake/{}/recycle/last", self.name)
    }

    fn err(&self, op: &str, path: &str, e: zk::ZkError) -> Error {
        zk_err(&self.shown, op, path, e)
    }

    /// Keeps a reading of ZooKeeper's clock for [`WorkerRegistry::take_clock_reading`].
    fn record_clock(&self, registry_ms: i64, local_before_ms: i64, source: String) {
        let reading = ClockReading {
            registry_ms,
            local_before_ms,
            local_after_ms: system_now_ms(),
            source,
        };
        *self.clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(reading);
    }

    /// The id and session of the lease held now (for tests and diagnostics).
    pub async fn held_session(&self) -> Option<(u32, zk::SessionInfo)> {
        let h = self.held.lock().await;
        h.as_ref()
            .map(|h| (h.worker_id, h.client.session().clone()))
    }
}

impl Drop for ZookeeperRecycleRegistry {
    fn drop(&mut self) {
        if let Some(h) = self.held.get_mut().take() {
            h.stop_watching();
            // The client drops here: the session closes and ZooKeeper frees the id.
        }
    }
}

impl WorkerRegistry for ZookeeperRecycleRegistry {
    fn acquire(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        Box::pin(self.take(max_worker_id, limit))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write(lease, bound_ms))
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.give_back(lease))
    }

    fn survives_outage(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        format!("zookeeper-recycle-{}-{}", self.shown, self.name)
    }

    fn take_clock_reading(&self) -> Option<ClockReading> {
        self.clock.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}
