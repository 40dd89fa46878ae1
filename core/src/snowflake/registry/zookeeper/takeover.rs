//! Taking an identity over (fence rule 3) and claiming its worker id.
//!
//! - [`ZookeeperRegistry::watch_takeover`]: before its first id, a newcomer watches the
//!   forever node it is about to reuse (a ZooKeeper watch, not a poll) for
//!   [`fence::TAKEOVER_WATCH_AFTER_RELEASE`] when its last write is a leafid holder's
//!   release marker (only a foreign server started since can be there, and it uploads
//!   1 s after its start), else for [`fence::TAKEOVER_WATCH`], and in any case until a
//!   node written recently has aged past [`JAVA_LIVE_WINDOW`]. Any write meanwhile (a new
//!   `mzxid`) is a live writer, most likely a Java Leaf server: `WorkerIdInUse`.
//! - [`ZookeeperRegistry::claim_worker`]: the worker id itself is claimed with an
//!   EPHEMERAL `/snowflake/{name}/ids/{id}/live` (Java Leaf never reads `ids/`), so a
//!   forever tree deleted and recreated under live holders (its sequence restarts at 0)
//!   cannot hand a live holder's id to a newcomer; and the persistent
//!   `/snowflake/{name}/ids/{id}` holds leafid's look-ahead bound for that id, a floor
//!   for whoever takes the id next, whatever happened to the forever node.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::layout::LiveRecord;
use super::{ZookeeperRegistry, JAVA_LIVE_WINDOW};
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::{fence, system_now_ms};

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

    /// Rule 5: how long a newcomer with no floor record for its id watches, with this
    /// client's session timeout.
    pub(super) fn unfloored_watch(client: &zk::Client) -> Duration {
        fence::unfloored_watch(fence::zookeeper_out_of_touch(client.session_timeout()))
    }

    /// Watches the forever node `path` (fence rule 3) and returns its metadata as last
    /// seen, or `WorkerIdInUse` when anyone writes it meanwhile. `zk_now` is
    /// ZooKeeper's clock at the claim; `own_last` the `mzxid` of this registry's last
    /// write to it (a re-acquire after its session ended), which counts as released;
    /// `unfloored`: the id has no leafid record (`ids/{id}` missing), so the watch lasts
    /// at least [`Self::unfloored_watch`] (rule 5).
    pub(super) async fn watch_takeover(
        &self,
        client: &zk::Client,
        path: &str,
        id: u32,
        zk_now: i64,
        own_last: Option<i64>,
        unfloored: bool,
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
        // Our own last write still there: our generator stopped issuing before this
        // re-acquire, as after a release.
        let released = released == Some(first.mzxid) || own_last == Some(first.mzxid);
        let watch_for = if released {
            fence::released_watch(fence::zookeeper_out_of_touch(client.session_timeout()))
        } else {
            // Until a recent write has aged past the window (a Java server that keeps
            // uploading), and at least one full upload cycle (a server started just
            // before us, whose first upload is still to come).
            let age = zk_now.saturating_sub(first.mtime);
            let to_age = (JAVA_LIVE_WINDOW.as_millis() as i64).saturating_sub(age);
            fence::TAKEOVER_WATCH.max(Duration::from_millis(to_age.max(0) as u64))
        };
        let watch_for = if unfloored {
            watch_for.max(Self::unfloored_watch(client))
        } else {
            watch_for
        };
        tracing::info!(%path, watch_ms = watch_for.as_millis() as u64, released, unfloored,
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
    /// whose forever node was just deleted lets go at once), then `WorkerIdInUse`.
    pub(super) async fn claim_worker(&self, client: &zk::Client, id: u32) -> Result<Claimed> {
        let record_path = self.id_path(id);
        let live = self.id_live_path(id);
        client
            .mkdir(&record_path)
            .await
            .map_err(|e| self.err("create", &record_path, e))?;
        let me = serde_json::to_vec(&LiveRecord {
            host: crate::snowflake::registry::host_lock::host_name(),
            pid: std::process::id(),
            since_ms: system_now_ms(),
        })
        .expect("a live record always serializes");
        let deadline = tokio::time::Instant::now() + fence::TAKEOVER_WATCH;
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
            tokio::select! {
                _ = watch => continue,
                _ = tokio::time::sleep_until(deadline) => {}
            }
            let other = match client.get_data(&live).await {
                Ok((data, _)) => serde_json::from_slice::<LiveRecord>(&data).ok(),
                Err(zk::ZkError::NoNode) => continue,
                Err(e) => return Err(self.err("read", &live, e)),
            };
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
