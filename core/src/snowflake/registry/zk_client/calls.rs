//! The call API of [`Client`]: reads, writes, transactions and watched reads, each one
//! request queued to the session task and its reply decoded.
//!
//! Apart from the client's construction (`mod.rs`) and the session task
//! (`session.rs`): a call knows only the path mapping of the chroot, the request it
//! encodes and the reply it decodes; how the request travels is the session's job.

use tokio::sync::oneshot;

use super::codec::{
    decode_children, decode_get_data, decode_multi, decode_path, decode_stat, Out, OP_CHECK,
    OP_CREATE, OP_DELETE, OP_EXISTS, OP_GET_CHILDREN, OP_GET_DATA, OP_MULTI, OP_SET_DATA,
};
use super::error::ZkError;
use super::records::{Acl, CreateMode, MultiError, Op, OpResult, Stat};
use super::session::Call;
use super::watch::{Watch, WatchClass, WatchReg};
use super::Client;

impl Client {
    pub(super) async fn call(&self, op: i32, body: Out) -> Result<Vec<u8>, ZkError> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .calls
            .send(Call {
                op,
                body: body.0,
                reply,
                watch: None,
            })
            .map_err(|_| ZkError::Closed)?;
        rx.await.unwrap_or(Err(ZkError::ConnectionLoss))
    }

    /// A call that sets a watch on `path` when it succeeds (for `exists`, also when the
    /// node is missing).
    async fn call_watched(
        &self,
        op: i32,
        path: &str,
        class: WatchClass,
    ) -> (Result<Vec<u8>, ZkError>, Watch) {
        let server_path = self.server_path(path);
        let mut body = Out::default();
        body.str(&server_path).bool(true);
        let (tx, watch_rx) = oneshot::channel();
        let watch = Watch {
            rx: watch_rx,
            path: path.to_string(),
        };
        let (reply, rx) = oneshot::channel();
        let call = Call {
            op,
            body: body.0,
            reply,
            watch: Some(WatchReg {
                class,
                server_path,
                client_path: path.to_string(),
                tx,
            }),
        };
        if self.shared.calls.send(call).is_err() {
            return (Err(ZkError::Closed), watch);
        }
        (rx.await.unwrap_or(Err(ZkError::ConnectionLoss)), watch)
    }

    /// A node's metadata (`None` when it does not exist) and a watch on it that fires
    /// when it is created, deleted or its data is written (ZooKeeper's `exists` with a
    /// watch). See the module doc for what happens to the watch on a connection loss.
    pub async fn watch_node(&self, path: &str) -> Result<(Option<Stat>, Watch), ZkError> {
        let (reply, watch) = self.call_watched(OP_EXISTS, path, WatchClass::Node).await;
        match reply {
            Ok(body) => Ok((Some(decode_stat(&body)?), watch)),
            Err(ZkError::NoNode) => Ok((None, watch)),
            Err(e) => Err(e),
        }
    }

    /// The names of a node's children and a watch that fires when a child is added or
    /// removed or the node is deleted (`getChildren` with a watch). A missing node is
    /// [`ZkError::NoNode`] (and no watch is set).
    pub async fn watch_children(&self, path: &str) -> Result<(Vec<String>, Watch), ZkError> {
        let (reply, watch) = self
            .call_watched(OP_GET_CHILDREN, path, WatchClass::Children)
            .await;
        Ok((decode_children(&reply?)?, watch))
    }

    /// Creates a node open to anyone; returns its path (with the sequence number, for
    /// a sequential one).
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String, ZkError> {
        self.create_with_acl(path, data, mode, Acl::Open).await
    }

    /// Creates a node with `acl`; returns its path.
    pub async fn create_with_acl(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: Acl,
    ) -> Result<String, ZkError> {
        let mut body = Out::default();
        body.create(&self.server_path(path), data, mode, acl);
        let reply = self.call(OP_CREATE, body).await?;
        Ok(self.client_path(decode_path(&reply)?))
    }

    /// Creates `path` and its missing parents as persistent nodes open to anyone; a
    /// node that exists is fine.
    ///
    /// With a chroot, the chroot node itself is created when missing (open to anyone),
    /// but never the nodes above it: a missing parent of the chroot is
    /// [`ZkError::NoChroot`]. Nothing outside the chroot is ever written.
    pub async fn mkdir(&self, path: &str) -> Result<(), ZkError> {
        self.mkdir_with_acl(path, Acl::Open).await
    }

    /// As [`Client::mkdir`], the last node of `path` created with `acl` (its parents
    /// open to anyone, so that other names can live beside it).
    pub async fn mkdir_with_acl(&self, path: &str, acl: Acl) -> Result<(), ZkError> {
        let ends: Vec<usize> = path
            .match_indices('/')
            .map(|(i, _)| i)
            .filter(|&i| i > 0)
            .chain(std::iter::once(path.len()))
            .collect();
        let mut chroot_made = false;
        let mut i = 0;
        while i < ends.len() {
            let end = ends[i];
            let node_acl = if end == path.len() { acl } else { Acl::Open };
            match self
                .create_with_acl(&path[..end], &[], CreateMode::Persistent, node_acl)
                .await
            {
                Ok(_) | Err(ZkError::NodeExists) => {}
                // Under a chroot that does not exist yet: make it, then the node again.
                Err(ZkError::NoNode) if i == 0 && !chroot_made && self.chroot().is_some() => {
                    self.make_chroot().await?;
                    chroot_made = true;
                    continue;
                }
                Err(e) => return Err(e),
            }
            i += 1;
        }
        Ok(())
    }

    /// Creates the chroot node (its parent must exist).
    async fn make_chroot(&self) -> Result<(), ZkError> {
        let root = self.shared.chroot.clone().unwrap_or_default();
        let mut body = Out::default();
        body.create(&root, &[], CreateMode::Persistent, Acl::Open);
        match self.call(OP_CREATE, body).await {
            Ok(_) | Err(ZkError::NodeExists) => {
                tracing::info!(chroot = %root, "created the ZooKeeper chroot node");
                Ok(())
            }
            Err(ZkError::NoNode) => Err(ZkError::NoChroot(root)),
            Err(e) => Err(e),
        }
    }

    /// Deletes a node, at `version` when given.
    pub async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), ZkError> {
        let mut body = Out::default();
        body.str(&self.server_path(path)).i32(version.unwrap_or(-1));
        self.call(OP_DELETE, body).await.map(drop)
    }

    /// A node's data and metadata.
    pub async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError> {
        let mut body = Out::default();
        body.str(&self.server_path(path)).bool(false);
        let reply = self.call(OP_GET_DATA, body).await?;
        decode_get_data(&reply)
    }

    /// Sets a node's data, at `version` when given.
    pub async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<Stat, ZkError> {
        let mut body = Out::default();
        body.str(&self.server_path(path))
            .bytes(data)
            .i32(version.unwrap_or(-1));
        let reply = self.call(OP_SET_DATA, body).await?;
        decode_stat(&reply)
    }

    /// The names of a node's children.
    pub async fn list_children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        let mut body = Out::default();
        body.str(&self.server_path(path)).bool(false);
        let reply = self.call(OP_GET_CHILDREN, body).await?;
        decode_children(&reply)
    }

    /// A node's metadata, `None` when it does not exist.
    pub async fn check_stat(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        let mut body = Out::default();
        body.str(&self.server_path(path)).bool(false);
        match self.call(OP_EXISTS, body).await {
            Ok(reply) => Ok(Some(decode_stat(&reply)?)),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs `ops` as one transaction: all of them or none. Returns one result per
    /// operation (a set-data result carries the node's new metadata).
    pub async fn multi(&self, ops: &[Op<'_>]) -> Result<Vec<OpResult>, MultiError> {
        let mut body = Out::default();
        for op in ops {
            match *op {
                Op::Check { path, version } => {
                    body.i32(OP_CHECK)
                        .bool(false)
                        .i32(-1)
                        .str(&self.server_path(path))
                        .i32(version);
                }
                Op::SetData { path, data } => {
                    body.i32(OP_SET_DATA)
                        .bool(false)
                        .i32(-1)
                        .str(&self.server_path(path))
                        .bytes(data)
                        .i32(-1);
                }
                Op::Create {
                    path,
                    data,
                    mode,
                    acl,
                } => {
                    body.i32(OP_CREATE).bool(false).i32(-1).create(
                        &self.server_path(path),
                        data,
                        mode,
                        acl,
                    );
                }
            }
        }
        body.i32(-1).bool(true).i32(-1);
        let reply = self
            .call(OP_MULTI, body)
            .await
            .map_err(|error| MultiError { op: None, error })?;
        let results = decode_multi(&reply, ops.len())?;
        Ok(results
            .into_iter()
            .map(|r| match r {
                OpResult::Create(path) => OpResult::Create(self.client_path(path)),
                other => other,
            })
            .collect())
    }
}
