//! `zookeeper-recycle` — worker ids leased with a ZooKeeper session, for fleets whose
//! addresses change (pods, autoscaling, preforked workers).
//!
//! Layout under `/snowflake/{name}/recycle/` (distinct from the Leaf fork's
//! `notuse`/`inuse` nodes, which it does not read or write):
//! - `lease/{id}` — EPHEMERAL, data `{"ip","port","pid","session"}`: id `id` is held by
//!   that session. ZooKeeper creates a path once, so whoever creates it holds the id;
//!   ZooKeeper deletes it when the session ends (closed, or expired after the session
//!   timeout without contact), never while the session lives.
//! - `last/{id}` — PERSISTENT, data `{"bound_ms",…}`: the highest bound any holder of
//!   `id` persisted, i.e. the latest timestamp it may have issued; the next holder's floor.
//!
//! Acquire opens a new session, lists `lease`, and creates a free `lease/{id}`, trying the
//! first few free ids lowest last bound first (NodeExists: someone was faster, try the
//! next); then reads `last/{id}` as the floor.
//! Every renew first checks that the lease node is still owned by this session, then
//! writes `last/{id}` in a multi-op guarded by the lease node's version, through the
//! same session: a session that ended can write nothing.
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

use super::zk_client as zk;
use super::zookeeper::zk_err;
use super::{system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// How many free ids `acquire` ranks by their last bound before taking one.
const RANKED_CANDIDATES: usize = 16;

/// The data of `last/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LastBound {
    bound_ms: i64,
    #[serde(default)]
    ip: String,
    #[serde(default)]
    port: String,
    #[serde(default)]
    pid: u32,
}

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
    /// Cleared before this registry lets go of the session on purpose, so the state
    /// watcher does not report our own close as a lost lease.
    watching: Arc<AtomicBool>,
    watcher: tokio::task::JoinHandle<()>,
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
        zk::Client::connect(&self.connect, self.session_timeout, self.connect_timeout)
            .await
            .map_err(|e| match e {
                // Retrying cannot help: the configuration has to change.
                zk::ZkError::AuthFailed(why) | zk::ZkError::InvalidConnect(why) => {
                    Error::InvalidConfig(format!("zookeeper-recycle {}: {why}", self.shown))
                }
                e => Error::registry(format!(
                    "cannot open a ZooKeeper session with {}: {e}",
                    self.shown
                )),
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

    /// Lets go of a held lease: stops the watcher, deletes the lease node, closes the session.
    async fn let_go(&self, held: Held) {
        held.watching.store(false, Ordering::SeqCst);
        held.watcher.abort();
        // On a disconnected session a delete would wait for a session that is likely
        // gone; ZooKeeper removes the node when the session ends anyway.
        if held.client.state() == zk::SessionState::SyncConnected {
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

    async fn take(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
        let mut slot = self.held.lock().await;
        if let Some(old) = slot.take() {
            self.let_go(old).await;
        }
        let client = self.open_session().await?;
        // Watch before taking anything, so no state change after this point is missed.
        let watching = Arc::new(AtomicBool::new(true));
        let mut states = client.state_watcher();
        let watcher = {
            let watching = watching.clone();
            let limit = limit.clone();
            let connect = self.shown.clone();
            tokio::spawn(async move {
                let mut state = *states.borrow_and_update();
                loop {
                    if state != zk::SessionState::SyncConnected {
                        // SeqCst: pairs with the store in `let_go`; our own close is not a loss.
                        if watching.load(Ordering::SeqCst) {
                            limit.lose();
                            tracing::warn!(%connect, ?state, "ZooKeeper session not connected; worker id lease in doubt, issuing stopped");
                        }
                        return;
                    }
                    state = match states.changed().await {
                        Ok(()) => *states.borrow_and_update(),
                        // The session task ended without a last word: as good as closed.
                        Err(_) => zk::SessionState::Closed,
                    };
                }
            })
        };
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
            let read_floor = |id: u32| {
                let last = format!("{last_dir}/{id}");
                let client = &client;
                async move {
                    match client.get_data(&last).await {
                        Ok((data, _)) => serde_json::from_slice::<LastBound>(&data)
                            .map(|b| b.bound_ms)
                            .map_err(|e| Error::Malformed {
                                what: "ZooKeeper node",
                                path: last.clone(),
                                reason: format!("{e} (expected {{\"bound_ms\":N,…}})"),
                            }),
                        Err(zk::ZkError::NoNode) => Ok(i64::MIN),
                        Err(e) => Err(self.err("read", &last, e)),
                    }
                }
            };
            // Among the first few free ids, try those whose last holder's bound is lowest
            // first: a holder that lost its session then starts at once instead of
            // waiting out a bound another holder persisted just before it died.
            // Lazy: a layout with many worker bits must not allocate one entry per id.
            let free = (0..=max_worker_id).filter(|id| !taken.contains(id));
            let mut ranked = Vec::with_capacity(RANKED_CANDIDATES);
            for id in free.clone().take(RANKED_CANDIDATES) {
                ranked.push((read_floor(id).await?, id));
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
                let floor = read_floor(id).await?;
                // A new node is at version 0 and this registry never writes to it.
                return Ok((id, path, 0, floor));
            }
            Err(Error::WorkerIdExhausted {
                pool: format!("ZooKeeper {} {lease_dir}", self.shown),
                size: max_worker_id.saturating_add(1),
            })
        }
        .await;
        match result {
            Ok((id, path, version, floor)) => {
                tracing::info!(worker_id = id, %path, floor, session = %client.session_id(),
                    session_timeout = ?negotiated, "worker id leased");
                let location = format!("zookeeper-recycle {}{path}", self.shown);
                *slot = Some(Held {
                    client,
                    worker_id: id,
                    lease_path: path,
                    lease_version: version,
                    watching,
                    watcher,
                });
                Ok(Lease {
                    worker_id: id,
                    floor_ms: floor,
                    location,
                })
            }
            Err(e) => {
                watching.store(false, Ordering::SeqCst);
                watcher.abort();
                drop(client); // closes the session, and with it any lease node it made
                Err(e)
            }
        }
    }

    async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let held = self.held.lock().await;
        let lost = |cause: String| Error::LeaseLost {
            worker_id: lease.worker_id,
            cause,
        };
        let Some(h) = held.as_ref().filter(|h| h.worker_id == lease.worker_id) else {
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
        let last = format!("{}/{}", self.last_dir(), lease.worker_id);
        let data = serde_json::to_vec(&LastBound {
            bound_ms,
            ip: self.ip.clone(),
            port: self.port.clone(),
            pid: std::process::id(),
        })
        .expect("a bound always serializes");
        let guard = zk::Op::Check {
            path: &h.lease_path,
            version: h.lease_version,
        };
        let set = zk::Op::SetData {
            path: &last,
            data: &data,
        };
        let failed = |e: zk::MultiError, op: &str| match e.op {
            Some(0) => lost(format!("{} failed its check: {}", h.lease_path, e.error)),
            _ => self.err(op, &last, e.error),
        };
        let source = || format!("ZooKeeper mtime of {last}");
        let before = system_now_ms();
        match h.client.multi(&[guard.clone(), set]).await {
            Ok(results) => {
                match results.get(1) {
                    Some(zk::OpResult::SetData(stat)) => {
                        self.record_clock(stat.mtime, before, source())
                    }
                    other => tracing::debug!(?other, "no Stat in the multi's set-data result"),
                }
                Ok(())
            }
            Err(zk::MultiError {
                op: Some(1),
                error: zk::ZkError::NoNode,
            }) => {
                // First bound for this id: create `last/{id}` under the same guard.
                let create = zk::Op::Create {
                    path: &last,
                    data: &data,
                    mode: zk::CreateMode::Persistent,
                    acl: Self::floor_acl(&h.client),
                };
                let before = system_now_ms();
                h.client
                    .multi(&[guard, create])
                    .await
                    .map_err(|e| failed(e, "create"))?;
                // A create result carries no Stat: read the new node's mtime. Its write
                // happened between `before` and this reply, so the reading holds.
                match h.client.check_stat(&last).await {
                    Ok(Some(stat)) => self.record_clock(stat.mtime, before, source()),
                    Ok(None) => {}
                    Err(e) => tracing::debug!(error = %e, path = %last, "no clock reading"),
                }
                Ok(())
            }
            Err(e) => Err(failed(e, "write")),
        }
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
            h.watching.store(false, Ordering::SeqCst);
            h.watcher.abort();
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
