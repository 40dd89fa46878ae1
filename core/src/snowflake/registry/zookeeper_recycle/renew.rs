//! Renewing the lease: after checking that the lease node is still this session's and
//! that the fork's layout has not appeared, one transaction writes `last/{id}` guarded by
//! the lease node's version and by the floor's version as this holder last knew it
//! (creating the floor, and bumping the pool record, the first time).
//!
//! Apart from acquire and release because this is fence rules 1 and 2 made every
//! heartbeat: a failed check is a lost lease, never "unavailable".

use super::ZookeeperRecycleRegistry;
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::{fence, system_now_ms, Lease};

/// How often a renew retries after another holder changed the pool record meanwhile.
const POOL_RETRIES: usize = 8;

impl ZookeeperRecycleRegistry {
    pub(super) async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let mut held = self.held.lock().await;
        let lost = |cause: String| fence::lost(lease.worker_id, cause);
        let Some(h) = held.as_mut().filter(|h| h.worker_id == lease.worker_id) else {
            return Err(lost("this registry no longer holds it".into()));
        };
        // A session that ended lost the lease; a connection merely down is an outage
        // (fence rule 5: issuing goes on up to the bound `last/{id}` holds).
        let state = h.client.state();
        if state.is_terminated() {
            return Err(lost(format!("ZooKeeper session {state}")));
        }
        if state == zk::SessionState::Disconnected {
            return Err(self.err("renew", &h.last_path, zk::ZkError::ConnectionLoss));
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
    pub(super) async fn pool_again(&self, client: &zk::Client, creating: bool) -> Result<()> {
        if creating {
            let dir = self.last_dir();
            client
                .mkdir_with_acl(&dir, Self::floor_acl(client))
                .await
                .map_err(|e| self.err("create", &dir, e))?;
        }
        Ok(())
    }
}
