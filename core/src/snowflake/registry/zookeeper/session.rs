//! Opening a ZooKeeper session for the forever registry, and turning the client's
//! errors into leafid errors (also for `zookeeper-recycle`, which shares them).
//!
//! Apart from acquire and renew because every ZooKeeper call of both registries ends in
//! one of these conversions, which decide what a user sees: refused credentials are
//! `AccessDenied`, anything else `RegistryUnavailable`, the client's error kept as the
//! source.

use std::time::Duration;

use super::{State, ZookeeperRegistry};
use crate::error::{Error, Result};
use crate::snowflake::registry::zk_client as zk;

/// Opens a ZooKeeper session, failing with [`Error::RegistryUnavailable`] within
/// `connect_timeout` when no server answers.
pub(crate) async fn connect(
    connect: &str,
    session_timeout: Duration,
    connect_timeout: Duration,
) -> Result<zk::Client> {
    zk::Client::connect(connect, session_timeout, connect_timeout)
        .await
        .map_err(|e| session_err(&crate::redact::url(connect), e))
}

/// A failed session open as the user sees it (`shown`: the connect string, password
/// removed), the client's error kept as the source: refused credentials are
/// `AccessDenied` (retrying cannot help), anything else `RegistryUnavailable`.
pub(crate) fn session_err(shown: &str, e: zk::ZkError) -> Error {
    let text = format!("cannot open a ZooKeeper session with {shown}: {e}");
    match e {
        zk::ZkError::AuthFailed(_) => Error::access_denied(
            format!("{text}; check the user:password of the connect string"),
            crate::error::Cause::from(e),
        ),
        e => Error::registry_with(text, crate::error::Cause::from(e)),
    }
}

/// Turns a ZooKeeper error into [`Error::RegistryUnavailable`] naming the operation,
/// the client's error kept as the source.
pub(crate) fn zk_err(connect: &str, op: &str, path: &str, e: zk::ZkError) -> Error {
    Error::registry_with(
        format!(
            "ZooKeeper {}: {op} {path}: {e}",
            crate::redact::url(connect)
        ),
        crate::error::Cause::from(e),
    )
}

impl ZookeeperRegistry {
    pub(super) fn err(&self, op: &str, path: &str, e: zk::ZkError) -> Error {
        zk_err(&self.connect, op, path, e)
    }

    /// A live client, reconnecting when the last session ended.
    pub(super) async fn client(&self, st: &mut State) -> Result<zk::Client> {
        if let Some(c) = &st.client {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            tracing::info!(connect = %crate::redact::url(&self.connect), "ZooKeeper session ended; opening a new one");
            st.client = None;
        }
        let c = connect(&self.connect, self.session_timeout, self.connect_timeout).await?;
        st.client = Some(c.clone());
        Ok(c)
    }
}
