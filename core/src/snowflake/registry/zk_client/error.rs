//! [`ZkError`], what a call of the client fails with, and how it is classified.
//!
//! Separate from the calls so that the registries, the connect-string parser and the
//! session task share one error type, and so that the classification into the error
//! module's neutral [`CauseKind`] lives here, with the client that knows its errors,
//! rather than in `crate::error` reaching up into a backend.

#[cfg(feature = "zookeeper")]
use crate::error::{Cause, CauseKind};

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZkError {
    /// The node does not exist.
    #[error("no node")]
    NoNode,
    /// The node exists already.
    #[error("node exists")]
    NodeExists,
    /// The node's version is not the one expected.
    #[error("bad version")]
    BadVersion,
    /// The node's ACL does not let this session's identities do that.
    #[error("not authorized by the node's ACL (connect with the user:password that created it)")]
    NoAuth,
    /// The server refused an ACL (the `auth` scheme without credentials, for one).
    #[error("invalid ACL")]
    InvalidAcl,
    /// The server refused the credentials of the connect string.
    #[error("authentication failed: {0}")]
    AuthFailed(String),
    /// The session ended.
    #[error("session expired")]
    SessionExpired,
    /// The connection dropped before the reply (the call may or may not have happened).
    #[error("connection loss")]
    ConnectionLoss,
    /// The client was closed.
    #[error("client closed")]
    Closed,
    /// No server of the ensemble could be reached.
    #[error("no server reachable: {0}")]
    NoHosts(String),
    /// The connect string does not parse (shown without its password).
    #[error("invalid ZooKeeper connect string {0}")]
    InvalidConnect(String),
    /// The chroot does not exist and neither does its parent: the client creates the
    /// chroot node itself, never nodes above it.
    #[error(
        "the chroot {0} does not exist, nor its parent; create the parent first \
         (leafid creates the chroot node itself, never the nodes above it)"
    )]
    NoChroot(String),
    /// Another error code from the server.
    #[error("server error {0}")]
    Server(i32),
    /// A reply that does not parse.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ZkError {
    pub(super) fn from_code(code: i32) -> ZkError {
        match code {
            -101 => ZkError::NoNode,
            -102 => ZkError::NoAuth,
            -110 => ZkError::NodeExists,
            -103 => ZkError::BadVersion,
            -112 => ZkError::SessionExpired,
            -114 => ZkError::InvalidAcl,
            -115 => ZkError::AuthFailed("the server refused the credentials".into()),
            -4 => ZkError::ConnectionLoss,
            c => ZkError::Server(c),
        }
    }
}

#[cfg(feature = "zookeeper")]
impl ZkError {
    /// The kind of failure, for [`Error::cause_kind`](crate::Error::cause_kind).
    /// `NoHosts` carries the per-server reasons as text (the client tries every server
    /// of the ensemble); the kind is read from it.
    pub(crate) fn cause_kind(&self) -> CauseKind {
        match self {
            ZkError::AuthFailed(_) | ZkError::NoAuth => CauseKind::LoginRefused,
            ZkError::NoChroot(_) | ZkError::NoNode => CauseKind::NotFound,
            ZkError::NoHosts(why) => {
                let t = why.to_ascii_lowercase();
                if t.contains("refused") {
                    CauseKind::Refused
                } else if t.contains("no answer") || t.contains("timed out") {
                    CauseKind::TimedOut
                } else if crate::error::cause::unresolved(&t) {
                    CauseKind::NotFound
                } else {
                    CauseKind::Other
                }
            }
            _ => CauseKind::Other,
        }
    }
}

/// A ZooKeeper client error as the cause a leafid error keeps, classified.
#[cfg(feature = "zookeeper")]
impl From<ZkError> for Cause {
    fn from(e: ZkError) -> Cause {
        Cause::new(e.cause_kind(), e)
    }
}

#[cfg(all(test, feature = "zookeeper"))]
mod tests {
    use super::*;

    /// The client's errors land in the error module's neutral kinds, and the leafid
    /// error's source is the `ZkError` itself.
    #[test]
    fn errors_are_classified_into_neutral_kinds() {
        let kind = |e: ZkError| Cause::from(e).kind();
        assert_eq!(kind(ZkError::NoAuth), CauseKind::LoginRefused);
        assert_eq!(
            kind(ZkError::AuthFailed("x".into())),
            CauseKind::LoginRefused
        );
        assert_eq!(kind(ZkError::NoNode), CauseKind::NotFound);
        assert_eq!(kind(ZkError::NoChroot("/a".into())), CauseKind::NotFound);
        let hosts = |why: &str| kind(ZkError::NoHosts(why.into()));
        assert_eq!(
            hosts("127.0.0.1:1: Connection refused (os error 111)"),
            CauseKind::Refused
        );
        assert_eq!(
            hosts("127.0.0.1:2: no answer within 3s"),
            CauseKind::TimedOut
        );
        assert_eq!(
            hosts("nowhere:2181: failed to lookup address information: Name or service not known"),
            CauseKind::NotFound
        );
        assert_eq!(hosts("h:1: connection reset"), CauseKind::Other);
        assert_eq!(kind(ZkError::ConnectionLoss), CauseKind::Other);
        let e = crate::Error::registry_with("cannot open", Cause::from(ZkError::NoAuth));
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.downcast_ref::<ZkError>(), Some(&ZkError::NoAuth));
    }
}
