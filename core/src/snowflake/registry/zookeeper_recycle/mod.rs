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
//! Fence rule 5 (a holder out of touch stops): the session watcher stops issuing when
//! the client reports the connection Disconnected (below); and a newcomer that finds
//! neither `last/{id}` nor the pool record in `last/` (the tree deleted under a holder
//! that is cut off, or a pool just made) waits `max(`[`fence::TAKEOVER_WATCH`]`, 2/5 of
//! its session timeout + `[`fence::TAKEOVER_MARGIN`]`)` (3.5 s at the default 6 s)
//! before its first id, by which time such a holder has stopped (`floor.rs`).
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
//! That holds even when the old holder is paused (GC, SIGSTOP) past its session timeout.
//! On top, the holder stops on its own as soon as it cannot be sure of its session:
//! this registry keeps the generator's [`IssueLimit`] and sets it to `i64::MIN` the
//! moment the client reports the session Disconnected, Expired or Closed. The client
//! ([`super::zk_client`]) pings every 1/5 of the negotiated session timeout and reports
//! a connection Disconnected after 2/5 of it without hearing from the server (a closed
//! connection at once); the server expires the session no earlier than the full timeout
//! after it last heard from the client. The holder therefore stops at least ~0.6 × the
//! timeout (3.6 s at the default 6 s) before ZooKeeper can give its id to anyone, minus
//! network latency. The generator's heartbeat then calls `acquire` again at once: a new
//! session, perhaps another id.
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fence;
use super::zk_client as zk;
use super::zookeeper::zk_err;
use super::{system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

mod floor;
mod foreign;
mod watch;

use floor::{LastBound, Pool};

/// How many free ids `acquire` ranks by their last bound before taking one.
const RANKED_CANDIDATES: usize = 16;

/// How often a renew retries after another holder changed the pool record meanwhile.
const POOL_RETRIES: usize = 8;

/// The data of `lease/{id}` (for operators: who holds the id).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Holder {
    ip: String,
    port: String,
    pid: u32,
    session: String,
}

struct Held {
    client: zk::Client,
    worker_id: u32,
    lease_path: String,
    lease_version: i32,
    /// `last/{id}`.
    last_path: String,
    /// What this holder knows of `last/{id}`: shared with the watcher, which takes any
    /// other version for another writer's.
    floor: Arc<watch::FloorState>,
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

    /// Opens a session, failing within the connect timeout when no server answers.
    async fn open_session(&self) -> Result<zk::Client> {
        super::fence::check_zookeeper_session_timeout(self.session_timeout)?;
        zk::Client::connect(&self.connect, self.session_timeout, self.connect_timeout)
            .await
            .map_err(|e| match e {
                // Retrying cannot help: the configuration has to change.
                zk::ZkError::InvalidConnect(why) => {
                    Error::InvalidConfig(format!("zookeeper-recycle {}: {why}", self.shown))
                }
                // Refused credentials: `AccessDenied` (a configuration error too).
                e => super::zookeeper::session_err(&self.shown, e),
            })
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

    /// The ACL of the nodes that hold floors: guarded when the session has credentials.
    fn floor_acl(client: &zk::Client) -> zk::Acl {
        if client.has_auth() {
            zk::Acl::CreatorAllAnyoneRead
        } else {
            zk::Acl::Open
        }
    }

    /// The id and session of the lease held now (for tests and diagnostics).
    pub async fn held_session(&self) -> Option<(u32, zk::SessionInfo)> {
        let h = self.held.lock().await;
        h.as_ref()
            .map(|h| (h.worker_id, h.client.session().clone()))
    }

    /// Refuses when the fork's `notuse` / `inuse` are in the pool ([`foreign`]).
    async fn check_no_fork(&self, client: &zk::Client) -> Result<()> {
        let dir = self.recycle_dir();
        let children = match client.list_children(&dir).await {
            Ok(c) => c,
            Err(zk::ZkError::NoNode) => return Ok(()),
            Err(e) => return Err(self.err("list children of", &dir, e)),
        };
        let found = foreign::fork_nodes(&children);
        if found.is_empty() {
            Ok(())
        } else {
            Err(foreign::refusal(&self.shown, &dir, &found, &self.name))
        }
    }

    /// The pool record of `last/`, with its version and child count.
    async fn read_pool(&self, client: &zk::Client) -> Result<Pool> {
        let dir = self.last_dir();
        let (data, stat) = client
            .get_data(&dir)
            .await
            .map_err(|e| self.err("read", &dir, e))?;
        let children = client
            .list_children(&dir)
            .await
            .map_err(|e| self.err("list children of", &dir, e))?;
        Ok(Pool::parse(&data, stat.version, children.len() as u64))
    }

    /// `last/{id}`: its bound and version, or `None` when missing.
    async fn read_last(&self, client: &zk::Client, id: u32) -> Result<Option<(i64, i32)>> {
        let last = format!("{}/{id}", self.last_dir());
        match client.get_data(&last).await {
            Ok((data, stat)) => serde_json::from_slice::<LastBound>(&data)
                .map(|b| Some((b.bound_ms, stat.version)))
                .map_err(|e| Error::Malformed {
                    what: "ZooKeeper node",
                    path: last.clone(),
                    reason: format!("{e} (expected {{\"bound_ms\":N,…}})"),
                }),
            Err(zk::ZkError::NoNode) => Ok(None),
            Err(e) => Err(self.err("read", &last, e)),
        }
    }

    fn last_bound(&self, bound_ms: i64) -> Vec<u8> {
        serde_json::to_vec(&LastBound {
            bound_ms,
            ip: self.ip.clone(),
            port: self.port.clone(),
            pid: std::process::id(),
        })
        .expect("a bound always serializes")
    }

    /// Lets go of a held lease: stops the watchers, restores the floor if it went
    /// missing or lower, deletes the lease node, closes the session.
    async fn let_go(&self, held: Held) {
        held.stop_watching();
        // On a disconnected session a call would wait for a session that is likely
        // gone; ZooKeeper removes the node when the session ends anyway.
        if held.client.state() == zk::SessionState::SyncConnected {
            self.restore_floor(&held).await;
            match held
                .client
                .delete(&held.lease_path, Some(held.lease_version))
                .await
            {
                Ok(()) | Err(zk::ZkError::NoNode) => {}
                Err(e) => tracing::info!(path = %held.lease_path, error = %e,
                    "could not delete the lease node; ZooKeeper removes it when the session ends"),
            }
        }
        // Dropping the last client closes the session.
        drop(held.client);
    }

    /// Before giving an id back: if `last/{id}` is missing or below the last bound this
    /// holder wrote (an operator deleted or rewrote it), writes that bound again, under
    /// the lease guard, so the next holder starts above everything this one issued.
    async fn restore_floor(&self, h: &Held) {
        if h.written == i64::MIN {
            return;
        }
        let current = match self.read_last(&h.client, h.worker_id).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the floor before giving the id back");
                return;
            }
        };
        let data = self.last_bound(h.written);
        let guard = zk::Op::Check {
            path: &h.lease_path,
            version: h.lease_version,
        };
        let fix = match current {
            Some((bound, _)) if bound >= h.written => return,
            Some((_, version)) => vec![
                guard,
                zk::Op::Check {
                    path: &h.last_path,
                    version,
                },
                zk::Op::SetData {
                    path: &h.last_path,
                    data: &data,
                },
            ],
            None => {
                // `deleteall last` takes the directory too.
                if let Err(e) = h
                    .client
                    .mkdir_with_acl(&self.last_dir(), Self::floor_acl(&h.client))
                    .await
                {
                    tracing::warn!(error = %e, "cannot recreate the floors' directory");
                    return;
                }
                vec![
                    guard,
                    zk::Op::Create {
                        path: &h.last_path,
                        data: &data,
                        mode: zk::CreateMode::Persistent,
                        acl: Self::floor_acl(&h.client),
                    },
                ]
            }
        };
        match h.client.multi(&fix).await {
            Ok(_) => tracing::warn!(path = %h.last_path, bound = h.written,
                "the floor was missing or lowered by another writer; restored it before giving the id back"),
            Err(e) => tracing::warn!(path = %h.last_path, error = %e.error,
                "the floor was missing or lowered by another writer and could not be restored"),
        }
    }

    async fn take(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
        let mut slot = self.held.lock().await;
        if let Some(old) = slot.take() {
            self.let_go(old).await;
        }
        let client = self.open_session().await?;
        // Watch before taking anything, so no state change after this point is missed.
        let watching = Arc::new(AtomicBool::new(true));
        let mut watchers = vec![watch::session(
            &client,
            watching.clone(),
            limit.clone(),
            self.shown.clone(),
        )];
        let negotiated = client.session_timeout();
        let lease_dir = self.lease_dir();
        let last_dir = self.last_dir();
        let result = async {
            client
                .mkdir(&lease_dir)
                .await
                .map_err(|e| self.err("create", &lease_dir, e))?;
            client
                .mkdir_with_acl(&last_dir, Self::floor_acl(&client))
                .await
                .map_err(|e| self.err("create", &last_dir, e))?;
            self.check_no_fork(&client).await?;
            let taken: std::collections::HashSet<u32> = client
                .list_children(&lease_dir)
                .await
                .map_err(|e| self.err("list children of", &lease_dir, e))?
                .iter()
                .filter_map(|c| c.parse().ok())
                .collect();
            let holder = serde_json::to_vec(&Holder {
                ip: self.ip.clone(),
                port: self.port.clone(),
                pid: std::process::id(),
                session: client.session_id().to_string(),
            })
            .expect("a holder always serializes");
            let pool = self.read_pool(&client).await?;
            let floor_of = |read: Option<(i64, i32)>, pool: &Pool| match read {
                Some((bound, _)) => bound,
                None => pool.missing_floor(system_now_ms()),
            };
            // Among the first few free ids, try those whose last holder's bound is lowest
            // first: a holder that lost its session then starts at once instead of
            // waiting out a bound another holder persisted just before it died.
            // Lazy: a layout with many worker bits must not allocate one entry per id.
            let free = (0..=max_worker_id).filter(|id| !taken.contains(id));
            let mut ranked = Vec::with_capacity(RANKED_CANDIDATES);
            for id in free.clone().take(RANKED_CANDIDATES) {
                ranked.push((floor_of(self.read_last(&client, id).await?, &pool), id));
            }
            ranked.sort_unstable();
            let order = ranked
                .into_iter()
                .map(|(_, id)| id)
                .chain(free.skip(RANKED_CANDIDATES));
            for id in order {
                let path = format!("{lease_dir}/{id}");
                let before = system_now_ms();
                match client
                    .create(&path, &holder, zk::CreateMode::Ephemeral)
                    .await
                {
                    Ok(_) => {}
                    Err(zk::ZkError::NodeExists) => continue,
                    Err(e) => return Err(self.err("create", &path, e)),
                }
                // The node's ctime is ZooKeeper's clock at the create (a plain create
                // returns no Stat; create2 would need a 3.5 server).
                match client.check_stat(&path).await {
                    Ok(Some(stat)) => {
                        self.record_clock(stat.ctime, before, format!("ZooKeeper ctime of {path}"))
                    }
                    Ok(None) => return Err(self.err("check", &path, zk::ZkError::NoNode)),
                    Err(e) => return Err(self.err("check", &path, e)),
                }
                // Read again now that the id is ours: the bound read above may be stale
                // (another holder may have come and gone since), this one cannot be.
                let pool = self.read_pool(&client).await?;
                let read = self.read_last(&client, id).await?;
                let floor = floor_of(read, &pool);
                if read.is_none() && pool.floor_deleted() {
                    tracing::warn!(worker_id = id, floor, "the floor of this id is missing and some floor of the pool was deleted: starting above the largest lookahead any holder wrote");
                }
                // A new node is at version 0 and this registry never writes to it.
                let unfloored = pool.unfloored(read.map(|(b, _)| b));
                return Ok((id, path, 0, floor, read.map(|(_, v)| v), pool, unfloored));
            }
            Err(Error::WorkerIdExhausted {
                pool: format!("ZooKeeper {} {lease_dir}", self.shown),
                size: max_worker_id.saturating_add(1),
            })
        }
        .await;
        // The fork may have arrived during the acquire: watch from here, and look once
        // more now that the watch is set.
        let result = match result {
            Ok(taken) => {
                let (id, ref path, _, _, version, _, unfloored) = taken;
                let floor_state = Arc::new(watch::FloorState::new(version));
                let last_path = format!("{last_dir}/{id}");
                watchers.push(watch::records(
                    &client,
                    watch::Records {
                        recycle_dir: self.recycle_dir(),
                        lease_path: path.clone(),
                        lease_version: 0,
                        last_path,
                        floor: floor_state.clone(),
                    },
                    watching.clone(),
                    limit.clone(),
                ));
                if unfloored {
                    // Fence rule 5 (`floor`): no record that nobody holds this id; the
                    // watchers run meanwhile and stop this lease on any sign of a writer.
                    let watch_for =
                        fence::unfloored_watch(fence::zookeeper_out_of_touch(negotiated));
                    tracing::info!(worker_id = id, watch_ms = watch_for.as_millis() as u64,
                        "no pool record and no floor for this id: waiting out any holder out of touch");
                    tokio::time::sleep(watch_for).await;
                }
                self.check_no_fork(&client)
                    .await
                    .map(|()| (taken, floor_state))
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(((id, path, version, floor, _, pool, _), floor_state)) => {
                tracing::info!(worker_id = id, %path, floor, session = %client.session_id(),
                    session_timeout = ?negotiated, "worker id leased");
                let location = format!("zookeeper-recycle {}{path}", self.shown);
                *slot = Some(Held {
                    client,
                    worker_id: id,
                    lease_path: path,
                    lease_version: version,
                    last_path: format!("{last_dir}/{id}"),
                    floor: floor_state,
                    written: i64::MIN,
                    pool,
                    watching,
                    watchers,
                });
                Ok(Lease {
                    worker_id: id,
                    floor_ms: floor,
                    location,
                })
            }
            Err(e) => {
                watching.store(false, Ordering::SeqCst);
                for w in &watchers {
                    w.abort();
                }
                drop(client); // closes the session, and with it any lease node it made
                Err(e)
            }
        }
    }

    async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let mut held = self.held.lock().await;
        let lost = |cause: String| fence::lost(lease.worker_id, cause);
        let Some(h) = held.as_mut().filter(|h| h.worker_id == lease.worker_id) else {
            return Err(lost("this registry no longer holds it".into()));
        };
        let state = h.client.state();
        if state != zk::SessionState::SyncConnected {
            return Err(lost(format!("ZooKeeper session {state}")));
        }
        // The lease node must still be this session's (not deleted by hand and re-taken).
        match h.client.check_stat(&h.lease_path).await {
            Ok(Some(stat)) if stat.ephemeral_owner == h.client.session_id() => {}
            Ok(Some(stat)) => {
                return Err(lost(format!(
                    "{} is owned by session {:#x} now",
                    h.lease_path, stat.ephemeral_owner
                )))
            }
            Ok(None) => return Err(lost(format!("{} is gone", h.lease_path))),
            Err(e) => return Err(self.err("check", &h.lease_path, e)),
        }
        // Belt and braces beside the watcher: the fork's layout ends the lease.
        if let Err(e) = self.check_no_fork(&h.client).await {
            return Err(match e {
                Error::InvalidConfig(why) => lost(why),
                e => e,
            });
        }
        let data = self.last_bound(bound_ms);
        let ahead = bound_ms.saturating_sub(system_now_ms());
        let last_dir = self.last_dir();
        let source = || format!("ZooKeeper mtime of {}", h.last_path);
        for _ in 0..POOL_RETRIES {
            let known = h.floor.version();
            let creating = known.is_none();
            let next = h.pool.next(creating, ahead);
            let pool_data = next.map(|r| serde_json::to_vec(&r).expect("a record serializes"));
            let mut ops = vec![zk::Op::Check {
                path: &h.lease_path,
                version: h.lease_version,
            }];
            if let Some(d) = &pool_data {
                ops.push(zk::Op::Check {
                    path: &last_dir,
                    version: h.pool.version,
                });
                ops.push(zk::Op::SetData {
                    path: &last_dir,
                    data: d,
                });
            }
            let at_floor = ops.len();
            match known {
                Some(version) => {
                    ops.push(zk::Op::Check {
                        path: &h.last_path,
                        version,
                    });
                    ops.push(zk::Op::SetData {
                        path: &h.last_path,
                        data: &data,
                    });
                }
                None => ops.push(zk::Op::Create {
                    path: &h.last_path,
                    data: &data,
                    mode: zk::CreateMode::Persistent,
                    acl: Self::floor_acl(&h.client),
                }),
            }
            let before = system_now_ms();
            h.floor.begin_write();
            let failed = match h.client.multi(&ops).await {
                Ok(results) => {
                    let stat = match results.get(at_floor + 1) {
                        Some(zk::OpResult::SetData(stat)) => Some(*stat),
                        // A create result carries no Stat: read the new node's. Its write
                        // happened between `before` and this reply, so the reading holds.
                        _ => h.client.check_stat(&h.last_path).await.ok().flatten(),
                    };
                    h.floor.written(match (known, stat) {
                        (_, Some(s)) => s.version,
                        (Some(v), None) => v + 1,
                        (None, None) => 0,
                    });
                    if let Some(s) = stat {
                        self.record_clock(s.mtime, before, source());
                    }
                    if let Some(r) = next {
                        h.pool.record = r;
                        h.pool.version += 1;
                        h.pool.children += u64::from(creating);
                    }
                    h.written = bound_ms;
                    return Ok(());
                }
                Err(e) => e,
            };
            h.floor.write_failed();
            match (failed.op, failed.error) {
                (Some(0), e) => {
                    return Err(lost(format!("{} failed its check: {e}", h.lease_path)))
                }
                // The pool record changed (another holder's first floor) or `last/` is
                // gone: read it again, and try again (or find our floor gone).
                (Some(1), zk::ZkError::BadVersion | zk::ZkError::NoNode) if pool_data.is_some() => {
                    if !creating {
                        if let Ok(None) = h.client.check_stat(&h.last_path).await {
                            return Err(lost(format!("{} was deleted", h.last_path)));
                        }
                    }
                    self.pool_again(&h.client, creating).await?;
                    h.pool = self.read_pool(&h.client).await?;
                }
                (Some(i), zk::ZkError::NoNode) if i == at_floor && creating => {
                    // `last/` itself was deleted: make it again, then the floor.
                    self.pool_again(&h.client, creating).await?;
                    h.pool = self.read_pool(&h.client).await?;
                }
                (Some(i), zk::ZkError::NodeExists) if i == at_floor => {
                    return Err(lost(format!(
                        "{} was created by another writer",
                        h.last_path
                    )))
                }
                (Some(i), zk::ZkError::NoNode) if i == at_floor => {
                    return Err(lost(format!("{} was deleted", h.last_path)))
                }
                (Some(i), zk::ZkError::BadVersion) if i == at_floor => {
                    return Err(lost(format!(
                        "{} was written by another writer",
                        h.last_path
                    )))
                }
                (_, e) => return Err(self.err("write", &h.last_path, e)),
            }
        }
        Err(Error::registry(format!(
            "ZooKeeper {}: {last_dir} kept changing under {POOL_RETRIES} writes",
            self.shown
        )))
    }

    /// Makes `last/` again when a first floor finds it gone.
    async fn pool_again(&self, client: &zk::Client, creating: bool) -> Result<()> {
        if creating {
            let dir = self.last_dir();
            client
                .mkdir_with_acl(&dir, Self::floor_acl(client))
                .await
                .map_err(|e| self.err("create", &dir, e))?;
        }
        Ok(())
    }

    async fn give_back(&self, lease: &Lease) -> Result<()> {
        let mut slot = self.held.lock().await;
        if slot.as_ref().map(|h| h.worker_id) == Some(lease.worker_id) {
            let held = slot.take().expect("checked above");
            self.let_go(held).await;
        }
        Ok(())
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
