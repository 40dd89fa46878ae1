//! The records the client's calls take and return: how a node is created (mode, ACL),
//! a node's metadata, the operations and results of a transaction, a session's identity.
//!
//! Plain data, apart from the wire codec (`codec.rs`) and the calls (`calls.rs`), so a
//! reader of the API finds every type a call names in one place.

use super::error::ZkError;

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent,
    /// Deleted when the creating session ends.
    Ephemeral,
    /// Persistent, with a 10-digit sequence number appended to the name.
    PersistentSequential,
}

impl CreateMode {
    pub(super) fn flags(self) -> i32 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::PersistentSequential => 2,
        }
    }
}

/// Who may do what with a node created by this client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acl {
    /// Anyone may do anything (`world:anyone`, all permissions; Java's
    /// `OPEN_ACL_UNSAFE`). The default.
    #[default]
    Open,
    /// The identities this session authenticated as get every permission (the `auth`
    /// scheme, Java's `CREATOR_ALL_ACL`), anyone else may only read
    /// (`world:anyone` READ). Needs credentials in the connect string: the server
    /// refuses it with [`ZkError::InvalidAcl`] otherwise.
    CreatorAllAnyoneRead,
}

/// A node's metadata (the fields the registries read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The zxid of the change that created the node.
    pub czxid: i64,
    /// The zxid of the change that last modified the node's data.
    pub mzxid: i64,
    /// When the node was created, by the ZooKeeper leader's clock (ms since the epoch).
    pub ctime: i64,
    /// When the node's data was last written, by the leader's clock (ms since the epoch).
    pub mtime: i64,
    /// Data version, for conditional writes.
    pub version: i32,
    /// The session that owns an ephemeral node, 0 for a persistent one.
    pub ephemeral_owner: i64,
}

/// One operation of an atomic [`Client::multi`](super::Client::multi).
#[derive(Debug, Clone)]
pub enum Op<'a> {
    /// Fails the whole transaction unless `path` is at `version`.
    Check { path: &'a str, version: i32 },
    /// Sets data, at any version.
    SetData { path: &'a str, data: &'a [u8] },
    /// Creates a node.
    Create {
        path: &'a str,
        data: &'a [u8],
        mode: CreateMode,
        /// Who may use the node ([`Acl::Open`] unless the node needs guarding).
        acl: Acl,
    },
}

/// What one operation of a successful [`Client::multi`](super::Client::multi) returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// A check passed.
    Check,
    /// Data was set; the node's metadata after the write.
    SetData(Stat),
    /// A node was created at this path (relative to the chroot).
    Create(String),
    /// A node was deleted.
    Delete,
}

/// Why a [`Client::multi`](super::Client::multi) failed: the index of the first failing operation and its error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiError {
    /// The first operation that failed, or `None` when the call itself failed.
    pub op: Option<usize>,
    /// What went wrong.
    pub error: ZkError,
}

/// The session's identity, for resuming it on another server.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The session id the server gave.
    pub id: i64,
    /// The session's password.
    pub password: Vec<u8>,
}
