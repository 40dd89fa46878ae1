//! Acquiring the identity's worker id: the in-process claim, the `live` node, then the
//! forever node found (reused, after the takeover watch) or created (its sequence is the
//! worker id), and the floor it comes with; on success the guard starts watching.
//!
//! Apart from renew and release: this is the start-up path of the module doc's
//! "Start-up" and fence rule 3, and the only place a worker id is chosen.

use std::sync::Arc;

use super::holder::held_identities;
use super::layout::{split_child, Endpoint};
use super::{guard, State, ZookeeperRegistry};
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::{fence, IssueLimit, Lease};

impl ZookeeperRegistry {
    /// Finds this identity's node: `(path, worker id)`. Other nodes that do not parse
    /// are skipped (logged); several own nodes resolve to the lowest id.
    pub(super) async fn find_own(&self, client: &zk::Client) -> Result<Option<(String, u32)>> {
        let forever = self.forever_path();
        let children = match client.list_children(&forever).await {
            Ok(c) => c,
            Err(zk::ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(self.err("list children of", &forever, e)),
        };
        let own = self.address();
        let mut found: Option<(String, u32)> = None;
        for child in children {
            match split_child(&child) {
                Some((addr, id)) if addr == own => {
                    if let Some((prev, prev_id)) = &found {
                        tracing::warn!(kept = %prev, other = %child, "several forever nodes for one ip:port; using the lowest id");
                        if *prev_id <= id {
                            continue;
                        }
                    }
                    found = Some((child.clone(), id));
                }
                Some(_) => {}
                None => {
                    let (addr, _) = child.rsplit_once('-').unwrap_or((child.as_str(), ""));
                    if addr == own {
                        return Err(Error::Malformed {
                            what: "ZooKeeper node",
                            path: format!("{forever}/{child}"),
                            reason: "the part after the last '-' is not a sequence number".into(),
                        });
                    }
                    tracing::warn!(path = %format!("{forever}/{child}"), "skipping a forever node whose name is not ip:port-sequence");
                }
            }
        }
        Ok(found.map(|(child, id)| (format!("{forever}/{child}"), id)))
    }

    /// Reads our node's stored timestamp.
    /// Reads our node's stored timestamp and its data version.
    pub(super) async fn read_timestamp(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(i64, i32)> {
        let (data, stat) = client
            .get_data(path)
            .await
            .map_err(|e| self.err("read", path, e))?;
        let ep: Endpoint = serde_json::from_slice(&data).map_err(|e| Error::Malformed {
            what: "ZooKeeper node",
            path: path.to_string(),
            reason: format!(
                "{e} (expected {{\"ip\":\"…\",\"port\":\"…\",\"timestamp\":N}}, found {:?})",
                String::from_utf8_lossy(&data)
            ),
        })?;
        Ok((ep.timestamp, stat.version))
    }

    pub(super) async fn take(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
        let mut st = self.state.lock().await;
        st.guard = None;
        if !st.claimed {
            let mut held = held_identities().lock().unwrap_or_else(|p| p.into_inner());
            if !held.insert(self.identity_key()) {
                return Err(self.in_use(
                    None,
                    format!(
                        "another snowflake generator in this process (pid {})",
                        std::process::id()
                    ),
                ));
            }
            st.claimed = true;
        }
        let client = self.client(&mut st).await?;
        let zk_now = self.claim_live(&client, &mut st).await?;
        let taken = self
            .take_node(&client, &mut st, max_worker_id, zk_now)
            .await;
        match &taken {
            Ok(lease) => {
                let (path, id, _) = st.node.clone().expect("take_node set the node");
                let own = st.own.clone().expect("take_node set the own write");
                debug_assert_eq!(id, lease.worker_id);
                st.guard = Some(guard::start(
                    client.clone(),
                    path,
                    self.id_live_path(id),
                    own,
                    limit,
                ));
            }
            Err(_) => {
                if let Some((_, id, _)) = st.node.take() {
                    self.unclaim_worker(&client, id).await;
                }
                self.let_go(&client, &mut st, false).await;
            }
        }
        taken
    }

    pub(super) async fn take_node(
        &self,
        client: &zk::Client,
        st: &mut State,
        max_worker_id: u32,
        zk_now: i64,
    ) -> Result<Lease> {
        let client = client.clone();
        let forever = self.forever_path();
        // `recorded`: the floor is a bound leafid recorded in `ids/{id}`. The forever
        // node's `timestamp` alone is not one: Java Leaf (or leafid, under rule 4)
        // writes it every 3 s and issues past it in between.
        let (path, id, floor, recorded, version, mzxid) = match self.find_own(&client).await? {
            Some((path, id)) => {
                // Claim the id first: a node of a recreated tree may carry a live
                // holder's id.
                st.node = Some((path.clone(), id, 0));
                let claimed = self.claim_worker(&client, id).await?;
                st.id_version = claimed.version;
                let seen = self
                    .watch_takeover(
                        &client,
                        &path,
                        id,
                        zk_now,
                        st.last_mzxid,
                        Some(claimed.mzxid),
                    )
                    .await?;
                let (stamp, version) = self.read_timestamp(&client, &path).await?;
                if version != seen.version {
                    return Err(self.in_use(
                        Some(id),
                        format!("a process that wrote {path} right after this start watched it"),
                    ));
                }
                let floor = stamp.max(claimed.bound_ms);
                tracing::info!(%path, worker_id = id, floor, "reusing this ip:port's forever node");
                // A newer `timestamp` (Java Leaf took the node over since) trails what
                // Java issued: `fence::floor_recorded` says it is no record.
                let own = Some(claimed.bound_ms).filter(|b| *b != i64::MIN);
                let recorded = fence::floor_recorded(own, Some(stamp));
                (path, id, floor, recorded, version, seen.mzxid)
            }
            None => {
                client
                    .mkdir(&forever)
                    .await
                    .map_err(|e| self.err("create", &forever, e))?;
                let prefix = format!("{forever}/{}-", self.address());
                let path = client
                    .create(
                        &prefix,
                        // ZooKeeper's clock, not ours: a local clock far ahead (refused
                        // by the skew check right after) must not become the floor.
                        &self.endpoint_bytes(zk_now),
                        zk::CreateMode::PersistentSequential,
                    )
                    .await
                    .map_err(|e| self.err("create", &prefix, e))?;
                // The id is the sequence ZooKeeper appended to the name it returned.
                let seq: i64 = path
                    .strip_prefix(&prefix)
                    .and_then(|seq| seq.parse().ok())
                    .ok_or_else(|| Error::Malformed {
                        what: "ZooKeeper node",
                        path: path.clone(),
                        reason: format!("created under {prefix} without a sequence number"),
                    })?;
                let id = u32::try_from(seq).unwrap_or(u32::MAX);
                tracing::info!(%path, worker_id = id, "created a forever node for this ip:port");
                // Our write: a release right after (a refused start) records it, so the
                // next start need not wait for the node to age.
                let stat = client
                    .check_stat(&path)
                    .await
                    .map_err(|e| self.err("read", &path, e))?
                    .ok_or_else(|| self.vanished(&path))?;
                if stat.version != 0 {
                    return Err(self.in_use(
                        Some(id),
                        format!("a process that wrote {path} the moment this start created it"),
                    ));
                }
                st.last_mzxid = Some(stat.mzxid);
                if id <= max_worker_id {
                    st.node = Some((path.clone(), id, 0));
                    // A tree recreated under live holders restarts its sequence at 0:
                    // the id itself must be free, and its last holder's bound is the floor.
                    let claimed = self.claim_worker(&client, id).await?;
                    st.id_version = claimed.version;
                    // No watch: a Java server creates its node before it issues, so none
                    // uses this one. No record of the id's last holder (a holder of a
                    // deleted tree, maybe cut off and still issuing up to its bound) is
                    // no wait either: the generator floors an unrecorded lease above
                    // every bound written before (fence rule 5).
                    // The node's `timestamp` is ours, written just now: no foreign stamp.
                    let own = Some(claimed.bound_ms).filter(|b| *b != i64::MIN);
                    let recorded = fence::floor_recorded(own, None);
                    (path, id, claimed.bound_ms, recorded, 0, stat.mzxid)
                } else {
                    (path, id, i64::MIN, false, 0, stat.mzxid)
                }
            }
        };
        if id > max_worker_id {
            return Err(Error::WorkerIdExhausted {
                pool: format!(
                    "ZooKeeper {} {forever} (node {path} has sequence {id}; Leaf's forever nodes are never \
                     reused, every new ip:port takes the next number, so past {max_worker_id} no new identity fits: \
                     split the fleet over several leaf names, reuse ip:port identities, or use zookeeper-recycle)",
                    crate::redact::url(&self.connect)
                ),
                size: max_worker_id + 1,
            });
        }
        st.node = Some((path.clone(), id, version));
        st.own = Some(Arc::new(tokio::sync::Mutex::new(mzxid)));
        Ok(Lease {
            worker_id: id,
            floor_ms: floor,
            floor_recorded: recorded,
            location: format!("zookeeper {}{path}", crate::redact::url(&self.connect)),
        })
    }
}
