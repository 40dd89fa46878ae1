//! Giving a worker id back: the watchers stop, the floor is restored when another
//! writer deleted or lowered it (never lowered by us), the lease node is deleted and the
//! session closed, so ZooKeeper frees the id.
//!
//! Apart from acquire and renew because a release also runs at the start of an acquire
//! (a lease held from before) and must leave the next holder a floor above everything
//! this one issued.

use super::{Held, ZookeeperRecycleRegistry};
use crate::error::Result;
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::Lease;

impl ZookeeperRecycleRegistry {
    /// Lets go of a held lease: stops the watchers, restores the floor if it went
    /// missing or lower, deletes the lease node, closes the session.
    pub(super) async fn let_go(&self, held: Held) {
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
    pub(super) async fn restore_floor(&self, h: &Held) {
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

    pub(super) async fn give_back(&self, lease: &Lease) -> Result<()> {
        let mut slot = self.held.lock().await;
        if slot.as_ref().map(|h| h.worker_id) == Some(lease.worker_id) {
            let held = slot.take().expect("checked above");
            self.let_go(held).await;
        }
        Ok(())
    }
}
