//! Renewing the lease: one conditional transaction that writes the generator's bound
//! into `ids/{id}` and Leaf's own field (never a future time) into the forever node,
//! after checking that this session is still the identity's live holder.
//!
//! Apart from acquire and release because this is fence rules 1, 2 and 4 in one call,
//! made every heartbeat: a failed check is a lost lease, never "unavailable".

use super::ZookeeperRegistry;
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::{fence, system_now_ms, ClockReading, Lease};

impl ZookeeperRegistry {
    pub(super) async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let mut st = self.state.lock().await;
        let client = self.client(&mut st).await?;
        let (path, version) = match &st.node {
            Some((path, id, version)) if *id == lease.worker_id => (path.clone(), *version),
            Some((path, id, _)) => {
                return Err(Error::LeaseLost {
                    worker_id: lease.worker_id,
                    cause: format!(
                        "this registry holds worker {id} ({path}), not {}",
                        lease.worker_id
                    ),
                })
            }
            None => {
                return Err(Error::LeaseLost {
                    worker_id: lease.worker_id,
                    cause: format!("{} holds no forever node", self.identity()),
                })
            }
        };
        // Still the live holder? A new session (the old one expired) claims again; a
        // `live` node of another session means someone else now holds this identity.
        let live = self.live_path();
        if st.live_session != Some(client.session_id()) {
            match self.claim_live(&client, &mut st).await {
                Ok(_) => {}
                Err(Error::WorkerIdInUse { holder, .. }) => {
                    return Err(Error::LeaseLost {
                        worker_id: lease.worker_id,
                        cause: format!("{} is now held by {holder}", self.identity()),
                    })
                }
                Err(e) => return Err(e),
            }
        } else {
            match client.check_stat(&live).await {
                Ok(Some(stat)) if stat.ephemeral_owner == client.session_id() => {}
                Ok(_) => {
                    st.live_session = None;
                    return Err(Error::LeaseLost {
                        worker_id: lease.worker_id,
                        cause: format!("{live} was deleted or taken by another session"),
                    });
                }
                Err(e) => return Err(self.err("read", &live, e)),
            }
        }
        let before = system_now_ms();
        let id_path = self.id_path(lease.worker_id);
        let own = st.own.clone();
        // Held across the write: the guard compares the node only with settled writes.
        let mut own_guard = match &own {
            Some(o) => Some(o.lock().await),
            None => None,
        };
        // Conditional on the versions this holder last wrote: a write by anyone else in
        // between means another holder (or a Java Leaf server) has used this node, so
        // this lease is over; overwriting could lower the bound it issued under. Leaf's
        // own field gets only what Leaf would write (rule 4); leafid's bound goes into
        // ids/{id}, in the same transaction.
        let forever_data = self.endpoint_bytes(fence::foreign_timestamp(bound_ms));
        let id_data = self.id_record_bytes(bound_ms);
        let ops = [
            zk::Op::Check {
                path: &path,
                version,
            },
            zk::Op::SetData {
                path: &path,
                data: &forever_data,
            },
            zk::Op::Check {
                path: &id_path,
                version: st.id_version,
            },
            zk::Op::SetData {
                path: &id_path,
                data: &id_data,
            },
        ];
        let (stat, id_stat) = match client.multi(&ops).await {
            Ok(results) => match (&results[1], &results[3]) {
                (zk::OpResult::SetData(a), zk::OpResult::SetData(b)) => (*a, *b),
                _ => {
                    return Err(self.err(
                        "write",
                        &path,
                        zk::ZkError::Protocol("unexpected multi results".into()),
                    ))
                }
            },
            Err(zk::MultiError {
                op: Some(i),
                error: e @ (zk::ZkError::BadVersion | zk::ZkError::NoNode),
            }) => {
                let which = if i < 2 { &path } else { &id_path };
                let what = if e == zk::ZkError::NoNode {
                    "was deleted"
                } else {
                    "was written by another process since this holder's last write"
                };
                return Err(fence::lost(lease.worker_id, format!("{which} {what}")));
            }
            Err(e) => return Err(self.err("write", &path, e.error)),
        };
        if let Some(g) = own_guard.as_mut() {
            **g = stat.mzxid;
        }
        drop(own_guard);
        if let Some(node) = st.node.as_mut() {
            node.2 = stat.version;
        }
        st.id_version = id_stat.version;
        st.last_mzxid = Some(stat.mzxid);
        *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(ClockReading {
            registry_ms: stat.mtime,
            local_before_ms: before,
            local_after_ms: system_now_ms(),
            source: format!("ZooKeeper mtime of {path}"),
        });
        Ok(())
    }
}
