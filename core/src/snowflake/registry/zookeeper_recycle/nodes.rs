//! The pool's node reads and encodings that acquire, renew and release share: the fork
//! check, the pool record of `last/`, a `last/{id}` floor read and written, and the ACL
//! floors are created with.
//!
//! Apart from `floor.rs` (what a floor record means, no I/O) because these are the
//! ZooKeeper calls around it, and apart from each step because all three use them.

use super::floor::{LastBound, Pool};
use super::{foreign, ZookeeperRecycleRegistry};
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;

impl ZookeeperRecycleRegistry {
    /// The ACL of the nodes that hold floors: guarded when the session has credentials.
    pub(super) fn floor_acl(client: &zk::Client) -> zk::Acl {
        if client.has_auth() {
            zk::Acl::CreatorAllAnyoneRead
        } else {
            zk::Acl::Open
        }
    }

    /// Refuses when the fork's `notuse` / `inuse` are in the pool ([`foreign`](super::foreign)).
    pub(super) async fn check_no_fork(&self, client: &zk::Client) -> Result<()> {
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
    pub(super) async fn read_pool(&self, client: &zk::Client) -> Result<Pool> {
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
    pub(super) async fn read_last(
        &self,
        client: &zk::Client,
        id: u32,
    ) -> Result<Option<(i64, i32)>> {
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

    pub(super) fn last_bound(&self, bound_ms: i64) -> Vec<u8> {
        serde_json::to_vec(&LastBound {
            bound_ms,
            ip: self.ip.clone(),
            port: self.port.clone(),
            pid: std::process::id(),
        })
        .expect("a bound always serializes")
    }
}
