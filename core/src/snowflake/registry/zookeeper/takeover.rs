//! Taking an identity over (fence rule 3) and claiming its worker id.
//!
//! - [`ZookeeperRegistry::watch_takeover`]: before its first id, a newcomer watches the
//!   forever node it is about to reuse (a ZooKeeper watch, not a poll) only as long as a
//!   Java Leaf server could be live on it and still unseen: for
//!   [`fence::TAKEOVER_WATCH_AFTER_RELEASE`] (1.5 s) when its last write is a leafid
//!   holder's (a renew, which writes `ids/{id}` in the same transaction, hence with the
//!   same `mzxid`; or a release marker): only a Java server started since can be there,
//!   and it uploads 1 s after its start. When the last write is foreign (Java's own
//!   upload, every 3 s), also until [`fence::TAKEOVER_WATCH`] after that write by
//!   ZooKeeper's clock, when its writer would have uploaded again if live. Any write
//!   meanwhile (a new `mzxid`) is a live writer: `WorkerIdInUse`. A node leafid itself
//!   just created is not watched at all: a Java server creates its node before it issues.
//! - [`ZookeeperRegistry::claim_worker`]: the worker id itself is claimed with an
//!   EPHEMERAL `/snowflake/{name}/ids/{id}/live` (Java Leaf never reads `ids/`), so a
//!   forever tree deleted and recreated under live holders (its sequence restarts at 0)
//!   cannot hand a live holder's id to a newcomer; and the persistent
//!   `/snowflake/{name}/ids/{id}` holds leafid's look-ahead bound for that id, a floor
//!   for whoever takes the id next, whatever happened to the forever node. A claim left
//!   by this host's dead predecessor is taken over at once (`holder.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::holder::TAKEOVER_ATTEMPTS;
use super::layout::LiveRecord;
use super::ZookeeperRegistry;
use crate::error::{Error, Result};
use crate::snowflake::registry::fence;
use crate::snowflake::registry::zk_client as zk;

/// leafid's own record of a worker id: `/snowflake/{name}/ids/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct IdRecord {
    /// The highest timestamp the last holder of this id may have issued at.
    pub bound_ms: i64,
    /// The `ip:port` identity that wrote it.
    pub address: String,
}

/// What a claimed worker id comes with.
pub(super) struct Claimed {
    /// The bound of [`IdRecord`] (`i64::MIN` when none was ever written).
    pub bound_ms: i64,
    /// The data version of `ids/{id}`, for conditional writes.
    pub version: i32,
    /// The `mzxid` of `ids/{id}`: a renew writes it and the forever node in one
    /// transaction, so a forever node with the same `mzxid` was last written by leafid.
    pub mzxid: i64,
}

impl ZookeeperRegistry {
    /// `/snowflake/{name}/ids/{id}`.
    pub(super) fn id_path(&self, id: u32) -> String {
        format!("/snowflake/{}/ids/{id}", self.name)
    }

    /// The EPHEMERAL claim of worker id `id`.
    pub(super) fn id_live_path(&self, id: u32) -> String {
        format!("{}/live", self.id_path(id))
    }

    /// Watches the forever node `path` (fence rule 3) and returns its metadata as last
    /// seen, or `WorkerIdInUse` when anyone writes it meanwhile. `zk_now` is
    /// ZooKeeper's clock at the claim; `own_last` the `mzxid` of this registry's last
    /// write to it (a re-acquire after its session ended); `id_mzxid` the `mzxid` of
    /// `ids/{id}` ([`Claimed::mzxid`]). Each of those, and the release marker, says the
    /// last write was leafid's.
    pub(super) async fn watch_takeover(
        &self,
        client: &zk::Client,
        path: &str,
        id: u32,
        zk_now: i64,
        own_last: Option<i64>,
        id_mzxid: Option<i64>,
    ) -> Result<zk::Stat> {
        let holder = self.holder_path();
        let released: Option<i64> = match client.get_data(&holder).await {
            Ok((data, _)) => std::str::from_utf8(&data)
                .ok()
                .and_then(|t| t.trim().parse().ok()),
            Err(zk::ZkError::NoNode) => None,
            Err(e) => return Err(self.err("read", &holder, e)),
        };
        let first = match client.check_stat(path).await {
            Ok(Some(stat)) => stat,
            Ok(None) => return Err(self.vanished(path)),
            Err(e) => return Err(self.err("read", path, e)),
        };
        let leafid_last = [released, own_last, id_mzxid].contains(&Some(first.mzxid));
        let watch_for = if leafid_last {
            fence::TAKEOVER_WATCH_AFTER_RELEASE
        } else {
            // A foreign writer's stamp: a live Java server writes again within
            // TAKEOVER_WATCH of it; one started since, within 1.5 s of now.
            let since = Duration::from_millis(zk_now.saturating_sub(first.mtime).max(0) as u64);
            fence::TAKEOVER_WATCH_AFTER_RELEASE.max(fence::TAKEOVER_WATCH.saturating_sub(since))
        };
        tracing::info!(%path, watch_ms = watch_for.as_millis() as u64, leafid_last,
            "watching the forever node before the first id, in case a Java Leaf server uses it");
        self.watch_unchanged(client, path, id, first, watch_for)
            .await
    }

    /// Watches `path` for `watch_for` from `first` (its metadata as read): its metadata
    /// at the end, or `WorkerIdInUse` when anyone writes it meanwhile.
    pub(super) async fn watch_unchanged(
        &self,
        client: &zk::Client,
        path: &str,
        id: u32,
        first: zk::Stat,
        watch_for: Duration,
    ) -> Result<zk::Stat> {
        let deadline = tokio::time::Instant::now() + watch_for;
        loop {
            // Re-read with a watch each round: a SessionLost or a fired watch both come
            // back here and look again.
            let (stat, watch) = client
                .watch_node(path)
                .await
                .map_err(|e| self.err("watch", path, e))?;
            let Some(stat) = stat else {
                return Err(self.vanished(path));
            };
            if stat.mzxid != first.mzxid {
                return Err(self.in_use(
                    Some(id),
                    format!(
                        "a process that wrote {path} while this start watched it ({} ms after its \
                         previous write by ZooKeeper's clock), most likely a live Java Leaf server \
                         with this ip:port",
                        stat.mtime - first.mtime
                    ),
                ));
            }
            tokio::select! {
                _ = watch => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(stat),
            }
        }
    }

    pub(super) fn vanished(&self, path: &str) -> Error {
        Error::registry(format!(
            "{}: {path} was deleted while this start read it (an operator cleaning up?); try again",
            self.identity()
        ))
    }

    /// Claims worker id `id` for this session and reads leafid's bound record of it.
    /// Another session's claim is waited for up to [`fence::TAKEOVER_WATCH`] (a holder
    /// whose forever node was just deleted lets go at once), then `WorkerIdInUse`; one
    /// left by this host's dead predecessor is taken over at once.
    pub(super) async fn claim_worker(&self, client: &zk::Client, id: u32) -> Result<Claimed> {
        let record_path = self.id_path(id);
        let live = self.id_live_path(id);
        client
            .mkdir(&record_path)
            .await
            .map_err(|e| self.err("create", &record_path, e))?;
        let me = self.live_record();
        let deadline = tokio::time::Instant::now() + fence::TAKEOVER_WATCH;
        let mut takeovers = 0;
        loop {
            match client.create(&live, &me, zk::CreateMode::Ephemeral).await {
                Ok(_) => break,
                Err(zk::ZkError::NodeExists) => {}
                Err(e) => return Err(self.err("create", &live, e)),
            }
            let (stat, watch) = client
                .watch_node(&live)
                .await
                .map_err(|e| self.err("watch", &live, e))?;
            let Some(stat) = stat else { continue };
            if stat.ephemeral_owner == client.session_id() {
                break;
            }
            let other = match client.get_data(&live).await {
                Ok((data, now)) if now.ephemeral_owner == stat.ephemeral_owner => {
                    serde_json::from_slice::<LiveRecord>(&data).ok()
                }
                Ok(_) | Err(zk::ZkError::NoNode) => continue,
                Err(e) => return Err(self.err("read", &live, e)),
            };
            if takeovers < TAKEOVER_ATTEMPTS
                && other.as_ref().is_some_and(|r| self.dead_predecessor(r))
            {
                takeovers += 1;
                tracing::info!(%live, "the last holder of this worker id on this host has exited; taking its claim at once");
                // Conditional on the version read: another session's new claim stays.
                match client.delete(&live, Some(stat.version)).await {
                    Ok(()) | Err(zk::ZkError::NoNode | zk::ZkError::BadVersion) => continue,
                    Err(e) => return Err(self.err("delete", &live, e)),
                }
            }
            tokio::select! {
                _ = watch => continue,
                _ = tokio::time::sleep_until(deadline) => {}
            }
            let holder = match other {
                Some(r) => format!(
                    "leafid pid {} on {} holding worker id {id} ({live}, ZooKeeper session {:#x}); \
                     was the forever tree deleted or recreated?",
                    r.pid, r.host, stat.ephemeral_owner
                ),
                None => format!("ZooKeeper session {:#x} ({live})", stat.ephemeral_owner),
            };
            return Err(self.in_use(Some(id), holder));
        }
        let (data, stat) = client
            .get_data(&record_path)
            .await
            .map_err(|e| self.err("read", &record_path, e))?;
        let bound_ms = if data.is_empty() {
            i64::MIN
        } else {
            serde_json::from_slice::<IdRecord>(&data)
                .map_err(|e| Error::Malformed {
                    what: "ZooKeeper node",
                    path: record_path.clone(),
                    reason: format!("{e} (expected {{\"bound_ms\":N,\"address\":\"…\"}})"),
                })?
                .bound_ms
        };
        Ok(Claimed {
            bound_ms,
            version: stat.version,
            mzxid: stat.mzxid,
        })
    }

    /// Gives the claim of worker id `id` back, when this session has it.
    pub(super) async fn unclaim_worker(&self, client: &zk::Client, id: u32) {
        let live = self.id_live_path(id);
        if let Ok(Some(stat)) = client.check_stat(&live).await {
            if stat.ephemeral_owner == client.session_id() {
                if let Err(e) = client.delete(&live, Some(stat.version)).await {
                    tracing::debug!(error = %e, %live, "cannot delete the worker-id claim; it goes with the session");
                }
            }
        }
    }

    pub(super) fn id_record_bytes(&self, bound_ms: i64) -> Vec<u8> {
        serde_json::to_vec(&IdRecord {
            bound_ms,
            address: self.address(),
        })
        .expect("an id record always serializes")
    }
}
