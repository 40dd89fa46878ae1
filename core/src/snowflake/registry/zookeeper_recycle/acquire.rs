//! Acquiring a worker id from the pool: a new session watched from its first moment,
//! the lowest-floored free id among the first few taken with an EPHEMERAL `lease/{id}`,
//! its floor read again once it is ours, and the record watchers started. Nothing
//! waits: an id without a floor record is an unrecorded lease, which the generator
//! floors above every bound written before (fence rule 5).
//!
//! Apart from renew and release: this is the module doc's "Acquire" paragraph and the
//! only place an id is chosen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::floor::Pool;
use super::{watch, Held, ZookeeperRecycleRegistry};
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::{fence, system_now_ms, IssueLimit, Lease};

/// How many free ids `acquire` ranks by their last bound before taking one.
const RANKED_CANDIDATES: usize = 16;

/// The data of `lease/{id}` (for operators: who holds the id).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Holder {
    ip: String,
    port: String,
    pid: u32,
    session: String,
}

impl ZookeeperRecycleRegistry {
    /// Opens a session, failing within the connect timeout when no server answers.
    pub(super) async fn open_session(&self) -> Result<zk::Client> {
        zk::Client::connect(&self.connect, self.session_timeout, self.connect_timeout)
            .await
            .map_err(|e| match e {
                // Retrying cannot help: the configuration has to change.
                zk::ZkError::InvalidConnect(why) => {
                    Error::InvalidConfig(format!("zookeeper-recycle {}: {why}", self.shown))
                }
                // Refused credentials: `AccessDenied` (a configuration error too).
                e => crate::snowflake::registry::zookeeper::session_err(&self.shown, e),
            })
    }

    pub(super) async fn take(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
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
            let floor_of = |read: Option<(i64, i32)>, pool: &Pool| match read {
                Some((bound, _)) => bound,
                None => pool.missing_floor(system_now_ms()),
            };
            // Among the first few free ids, try those whose last holder's bound is lowest
            // first: the ids' time part then leads the clock the least (`generator/
            // lead.rs`). An id without `last/{id}` ranks last: the generator floors it at
            // ZooKeeper's clock plus the reach, above any recorded bound (fence rule 5).
            // Lazy: a layout with many worker bits must not allocate one entry per id.
            let free = (0..=max_worker_id).filter(|id| !taken.contains(id));
            let mut ranked = Vec::with_capacity(RANKED_CANDIDATES);
            for id in free.clone().take(RANKED_CANDIDATES) {
                let bound = self.read_last(&client, id).await?.map_or(i64::MAX, |(b, _)| b);
                ranked.push((bound, id));
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
                return Ok((id, path, 0, floor, read.map(|(_, v)| v), pool));
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
                let (id, ref path, _, _, version, _) = taken;
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
                self.check_no_fork(&client)
                    .await
                    .map(|()| (taken, floor_state))
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(((id, path, version, floor, last_version, pool), floor_state)) => {
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
                    // A missing `last/{id}` is no record, whatever floor stands in for it;
                    // the fork's `lastUsedTimestamp` is never read (its layout is refused).
                    floor_recorded: fence::floor_recorded(last_version.map(|_| floor), None),
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
}
