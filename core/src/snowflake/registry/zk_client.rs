//! A small ZooKeeper client on the core's own tokio runtime: the handful of calls the
//! ZooKeeper registries make, over ZooKeeper's wire protocol (jute, one session per
//! client, one-shot watches).
//!
//! Why not a client crate: the Rust ZooKeeper clients do their socket I/O on a
//! process-wide reactor of their own (`async-io`: one epoll instance and a driver thread,
//! created once). A forked child inherits that epoll instance, shared with the parent
//! from then on, and a driver lock held by a thread that does not exist in the child, so
//! no ZooKeeper session could ever be opened in a child of a process that had used one.
//! Here every socket lives on the tokio runtime, which the core starts afresh in a forked
//! child, so a preforked worker takes a worker id of its own like any other process.
//!
//! Connect strings have Java's form plus credentials:
//! `[user:password@]host:port[,host:port…][/chroot]`. The user and password are
//! percent-decoded (`%40` for `@`, `%25` for `%`; [`connect_string`] writes them so);
//! with them the client authenticates with the `digest` scheme on every connection, new
//! session or resumed, before any call goes through. With a chroot every path a call
//! takes is below it and every path it returns is relative to it, as in Java. Show a
//! connect string only through [`shown_connect`], which hides the password.
//!
//! Sessions: a ping every fifth of the negotiated timeout; a connection the server has
//! been silent on for two fifths of it is dropped (stricter than the Java client's two
//! thirds, so a lease holder learns of trouble well before the server can expire it) and
//! the session resumed on the next server of the ensemble (state `Disconnected`
//! meanwhile, calls fail with `ConnectionLoss`); a server that no longer knows the
//! session, or no server reached before the timeout has passed since the last word from
//! one, ends it (`Expired`). A reply that is not for the oldest call in flight (ZooKeeper
//! answers in order) means the connection cannot be trusted: it is dropped and the
//! session resumed as for any other connection loss. Dropping the last clone of a
//! [`Client`] closes the session.
//!
//! Watches: [`Client::watch_node`] and [`Client::watch_children`] set ZooKeeper's
//! one-shot watches and return a [`Watch`], a future that completes with the first
//! [`WatchEvent`] the server sends for that path and kind. The waiter is registered by the
//! session task when the call's reply arrives, on the same ordered stream the server's
//! notifications (xid -1) come on, so no event between the read and the registration is
//! missed. Watches are NOT re-registered on a new connection (no `SetWatches`): when the
//! connection drops, the session moves to another server, expires or is closed, every
//! outstanding watch completes with [`WatchKind::SessionLost`], and its owner must read
//! the node again (on a new session if need be) and decide from what it finds.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected to a server; calls go through.
    SyncConnected,
    /// Between servers; the session may still be resumed.
    Disconnected,
    /// The session ended on the server side (or could not be resumed in time).
    Expired,
    /// Closed by this client.
    Closed,
}

impl SessionState {
    /// True once the session can never be used again.
    pub fn is_terminated(self) -> bool {
        matches!(self, SessionState::Expired | SessionState::Closed)
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

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
    fn from_code(code: i32) -> ZkError {
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
    fn flags(self) -> i32 {
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

/// Permission bits of an ACL entry.
const PERM_READ: i32 = 1;
const PERM_ALL: i32 = 31;

impl Acl {
    fn write(self, out: &mut Out) {
        match self {
            Acl::Open => {
                out.i32(1).i32(PERM_ALL).str("world").str("anyone");
            }
            Acl::CreatorAllAnyoneRead => {
                out.i32(2).i32(PERM_ALL).str("auth").str("");
                out.i32(PERM_READ).str("world").str("anyone");
            }
        }
    }
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

/// One operation of an atomic [`Client::multi`].
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

/// What one operation of a successful [`Client::multi`] returned.
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

/// Why a [`Client::multi`] failed: the index of the first failing operation and its error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiError {
    /// The first operation that failed, or `None` when the call itself failed.
    pub op: Option<usize>,
    /// What went wrong.
    pub error: ZkError,
}

// Operation codes of the protocol.
const OP_CREATE: i32 = 1;
const OP_DELETE: i32 = 2;
const OP_EXISTS: i32 = 3;
const OP_GET_DATA: i32 = 4;
const OP_SET_DATA: i32 = 5;
const OP_GET_CHILDREN: i32 = 8;
const OP_PING: i32 = 11;
const OP_CHECK: i32 = 13;
const OP_MULTI: i32 = 14;
const OP_CREATE2: i32 = 15;
const OP_AUTH: i32 = 100;
const OP_CLOSE: i32 = -11;
/// The type of a multi result that reports an error.
const OP_ERROR: i32 = -1;
const XID_WATCH_EVENT: i32 = -1;
const XID_PING: i32 = -2;
const XID_AUTH: i32 = -4;
/// ZooKeeper refuses frames past 1 MiB by default; a little slack for headers.
const MAX_FRAME: usize = 4 << 20;

/// Encodes jute records.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bool(&mut self, v: bool) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.i32(v.len() as i32);
        self.0.extend_from_slice(v);
        self
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    fn create(&mut self, path: &str, data: &[u8], mode: CreateMode, acl: Acl) -> &mut Self {
        self.str(path).bytes(data);
        acl.write(self);
        self.i32(mode.flags())
    }
    /// Prefixes the record with its length, as every frame is.
    fn framed(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.0.len() + 4);
        v.extend_from_slice(&(self.0.len() as i32).to_be_bytes());
        v.extend_from_slice(&self.0);
        v
    }
}

/// Decodes jute records. Every length read from the input is checked against the bytes
/// left before anything is allocated for it, so a hostile length cannot cost memory.
struct In<'a>(&'a [u8]);

impl In<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], ZkError> {
        if self.0.len() < n {
            return Err(ZkError::Protocol("reply shorter than its record".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn i32(&mut self) -> Result<i32, ZkError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self) -> Result<i64, ZkError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_be_bytes(a))
    }
    fn bool(&mut self) -> Result<bool, ZkError> {
        Ok(self.take(1)?[0] != 0)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, ZkError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(Vec::new());
        }
        // `take` checks `n` against what is left before `to_vec` allocates.
        Ok(self.take(n as usize)?.to_vec())
    }
    fn string(&mut self) -> Result<String, ZkError> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| ZkError::Protocol("a name is not UTF-8".into()))
    }
    fn stat(&mut self) -> Result<Stat, ZkError> {
        let czxid = self.i64()?;
        let mzxid = self.i64()?;
        let ctime = self.i64()?;
        let mtime = self.i64()?;
        let version = self.i32()?;
        self.take(8)?; // cversion, aversion
        let ephemeral_owner = self.i64()?;
        self.take(16)?; // dataLength, numChildren, pzxid
        Ok(Stat {
            czxid,
            mzxid,
            ctime,
            mtime,
            version,
            ephemeral_owner,
        })
    }
}

// Reply decoders. Each takes the bytes of one record and returns an error for anything
// that does not parse; none panics or allocates more than its input (see `fuzz_decoders`).

/// A reply header: `(xid, zxid, error code)` and the body after it.
fn decode_reply_header(frame: &[u8]) -> Result<(i32, i64, i32, &[u8]), ZkError> {
    let mut r = In(frame);
    let xid = r.i32()?;
    let zxid = r.i64()?;
    let err = r.i32()?;
    Ok((xid, zxid, err, r.0))
}

/// A connect response: the negotiated timeout in ms (0 or less: the session is gone)
/// and the session.
fn decode_connect_response(frame: &[u8]) -> Result<(i32, SessionInfo), ZkError> {
    let mut r = In(frame);
    r.i32()?; // protocol version
    let negotiated = r.i32()?;
    let id = r.i64()?;
    let password = r.bytes()?;
    // A trailing read-only flag may follow (servers since 3.4); it is not used.
    Ok((negotiated, SessionInfo { id, password }))
}

/// A watch event: `(type, state, path)`.
fn decode_watch_event(body: &[u8]) -> Result<(i32, i32, String), ZkError> {
    let mut r = In(body);
    Ok((r.i32()?, r.i32()?, r.string()?))
}

fn decode_stat(body: &[u8]) -> Result<Stat, ZkError> {
    In(body).stat()
}

fn decode_get_data(body: &[u8]) -> Result<(Vec<u8>, Stat), ZkError> {
    let mut r = In(body);
    Ok((r.bytes()?, r.stat()?))
}

fn decode_children(body: &[u8]) -> Result<Vec<String>, ZkError> {
    let mut r = In(body);
    let n = r.i32()?.max(0) as usize;
    // Each name takes at least its 4-byte length: a count past that is a lie, and must
    // not size an allocation.
    if n > r.0.len() / 4 {
        return Err(ZkError::Protocol(format!(
            "{n} children announced in {} bytes",
            r.0.len()
        )));
    }
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(r.string()?);
    }
    Ok(names)
}

fn decode_path(body: &[u8]) -> Result<String, ZkError> {
    In(body).string()
}

/// A multi reply as the session task hands it over: the reply header's error code, then
/// the results (see `Session::serve`). `ops` is how many operations were sent.
fn decode_multi(body: &[u8], ops: usize) -> Result<Vec<OpResult>, MultiError> {
    let whole = |error| MultiError { op: None, error };
    let mut r = In(body);
    let header_err = r.i32().map_err(whole)?;
    let mut results = Vec::with_capacity(ops.min(body.len()));
    for i in 0..ops {
        let kind = r.i32().map_err(whole)?;
        let done = r.bool().map_err(whole)?;
        r.i32().map_err(whole)?; // the header's own error field; the result has it too
        if done {
            break;
        }
        let result = match kind {
            OP_ERROR => {
                let code = r.i32().map_err(whole)?;
                // -2 (runtime inconsistency) marks the operations rolled back
                // because another one failed; report the one that did.
                if code != 0 && code != -2 {
                    return Err(MultiError {
                        op: Some(i),
                        error: ZkError::from_code(code),
                    });
                }
                continue;
            }
            OP_CREATE => OpResult::Create(r.string().map_err(whole)?),
            OP_CREATE2 => {
                let path = r.string().map_err(whole)?;
                r.stat().map_err(whole)?;
                OpResult::Create(path)
            }
            OP_SET_DATA => OpResult::SetData(r.stat().map_err(whole)?),
            OP_CHECK => OpResult::Check,
            OP_DELETE => OpResult::Delete,
            other => {
                return Err(whole(ZkError::Protocol(format!(
                    "multi result of unknown type {other}"
                ))))
            }
        };
        results.push(result);
    }
    if header_err != 0 {
        return Err(whole(ZkError::from_code(header_err)));
    }
    if results.len() != ops {
        return Err(whole(ZkError::Protocol(format!(
            "{} results for {ops} operations",
            results.len()
        ))));
    }
    Ok(results)
}

/// Runs every reply decoder over `data`, for the fuzzer (`core/fuzz/`) and the
/// property test: each must return, never panic, whatever the bytes.
#[doc(hidden)]
pub fn fuzz_decoders(data: &[u8]) {
    let _ = decode_connect_response(data);
    let _ = decode_stat(data);
    let _ = decode_get_data(data);
    let _ = decode_children(data);
    let _ = decode_path(data);
    let _ = decode_watch_event(data);
    // A multi reply with as many operations as the first byte says.
    let ops = data.first().map_or(0, |&b| b as usize % 8);
    let _ = decode_multi(data, ops);
    let _ = decode_multi(data, usize::MAX);
    if let Ok((_, _, _, body)) = decode_reply_header(data) {
        let _ = decode_stat(body);
        let _ = decode_get_data(body);
        let _ = decode_children(body);
        let _ = decode_path(body);
        let _ = decode_watch_event(body);
        let _ = decode_multi(body, ops);
    }
    let _ = parse_connect(&String::from_utf8_lossy(data));
    let _ = shown_connect(&String::from_utf8_lossy(data));
}

/// Where a call's reply goes: the body after the reply header, or the error.
type Reply = oneshot::Sender<Result<Vec<u8>, ZkError>>;

/// One call on its way to the session task.
struct Call {
    op: i32,
    body: Vec<u8>,
    reply: Reply,
    /// The watch the call sets, registered when its reply arrives.
    watch: Option<WatchReg>,
}

/// What fired a [`Watch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    /// The node was created (a watch set by [`Client::watch_node`] on a missing node).
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data was written (even with the same bytes).
    NodeDataChanged,
    /// A child was added or removed.
    NodeChildrenChanged,
    /// The watch can no longer fire: the connection dropped, the session moved to
    /// another server, expired or was closed. Watches are not re-registered; read the
    /// node again to learn what happened meanwhile.
    SessionLost,
}

/// What a [`Watch`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchKind,
    /// The watched path (relative to the chroot, as given to the call that set it).
    pub path: String,
}

/// Which of ZooKeeper's watch tables a watch is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum WatchClass {
    /// Set by `exists`: fires on created, deleted, data changed.
    Node,
    /// Set by `getChildren`: fires on children changed, deleted.
    Children,
}

/// A watch on its way to the session task.
struct WatchReg {
    class: WatchClass,
    /// The path as the server knows it (below the chroot): events name it so.
    server_path: String,
    /// The path as the caller gave it, for the event.
    client_path: String,
    tx: oneshot::Sender<WatchEvent>,
}

/// A one-shot ZooKeeper watch: completes with the first event for its path and kind,
/// or with [`WatchKind::SessionLost`] once it can no longer fire (see the module doc).
/// Dropping it forgets the watch on this side (the server's one-shot entry stays until
/// it fires, harmlessly).
#[derive(Debug)]
pub struct Watch {
    rx: oneshot::Receiver<WatchEvent>,
    path: String,
}

impl std::future::Future for Watch {
    type Output = WatchEvent;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<WatchEvent> {
        match std::pin::Pin::new(&mut self.rx).poll(cx) {
            std::task::Poll::Ready(Ok(event)) => std::task::Poll::Ready(event),
            std::task::Poll::Ready(Err(_)) => std::task::Poll::Ready(WatchEvent {
                kind: WatchKind::SessionLost,
                path: self.path.clone(),
            }),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// Watches registered on the current connection, by server path and table.
type WatchTable = std::collections::HashMap<(String, WatchClass), Vec<WatchReg>>;

/// The session's identity, for resuming it on another server.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The session id the server gave.
    pub id: i64,
    /// The session's password.
    pub password: Vec<u8>,
}

/// Digest credentials from a connect string.
#[derive(Clone, PartialEq, Eq)]
struct Credentials {
    user: String,
    /// `user:password`, as the `digest` scheme takes it.
    auth: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:***", self.user)
    }
}

/// A connect string taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    hosts: Vec<String>,
    /// `/a/b`, never `/` alone nor with a trailing `/`.
    chroot: Option<String>,
    credentials: Option<Credentials>,
}

/// Bytes kept as they are in a connect string's user and password; the rest is
/// percent-encoded.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if unreserved(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes; `None` for a broken escape or a result that is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            // Two ASCII hex digits: always parses.
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Writes a connect string: `[user:password@]hosts[/chroot]`, the user and password
/// percent-encoded so that any character may appear in them.
pub fn connect_string(
    hosts: &str,
    chroot: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> String {
    let mut s = String::new();
    if let Some((user, password)) = credentials {
        s.push_str(&percent_encode(user));
        s.push(':');
        s.push_str(&percent_encode(password));
        s.push('@');
    }
    s.push_str(hosts);
    if let Some(chroot) = chroot.filter(|c| *c != "/" && !c.is_empty()) {
        s.push_str(chroot);
    }
    s
}

/// Checks a connect string as [`Client::connect`] reads it, without any I/O.
pub fn check_connect(connect: &str) -> Result<(), ZkError> {
    parse_connect(connect).map(drop)
}

/// The connect string with its password replaced by `***`, for messages, descriptions
/// and file names. Everything before the last `@` is taken for credentials when the
/// string does not parse cleanly, so a password is hidden even in a malformed string
/// (a chroot with an `@` in it is then shown cut).
pub fn shown_connect(connect: &str) -> String {
    // One redaction for every URL and connect string (see `crate::redact`).
    crate::redact::url(connect)
}

/// Parses `[user:password@]host:port[,host:port…][/chroot]`.
fn parse_connect(connect: &str) -> Result<Target, ZkError> {
    let invalid = |why: &str| ZkError::InvalidConnect(format!("{}: {why}", shown_connect(connect)));
    let (authority, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], Some(&connect[i..])),
        None => (connect, None),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((creds, hosts)) => {
            let (user, password) = creds
                .split_once(':')
                .ok_or_else(|| invalid("credentials must be user:password"))?;
            let user = percent_decode(user)
                .ok_or_else(|| invalid("the user is not valid percent-encoded UTF-8"))?;
            let password = percent_decode(password)
                .ok_or_else(|| invalid("the password is not valid percent-encoded UTF-8"))?;
            if user.is_empty() || user.contains(':') {
                return Err(invalid("the user must be non-empty and free of ':'"));
            }
            let auth = format!("{user}:{password}").into_bytes();
            (Some(Credentials { user, auth }), hosts)
        }
        None if connect.contains('@') => {
            return Err(invalid(
                "'@' after the first '/': percent-encode a '/' in a password as %2F",
            ))
        }
        None => (None, authority),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    if hosts.is_empty() {
        return Err(invalid("it names no server"));
    }
    let chroot = match chroot {
        None | Some("/") => None,
        Some(c) => {
            let bad_segment = c[1..]
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == ".." || s.chars().any(char::is_control));
            if bad_segment {
                return Err(invalid(
                    "the chroot must be /segment[/segment…] without empty, '.' or '..' segments \
                     or a trailing '/'",
                ));
            }
            Some(c.to_string())
        }
    };
    Ok(Target {
        hosts,
        chroot,
        credentials,
    })
}

struct Shared {
    calls: mpsc::UnboundedSender<Call>,
    state: watch::Receiver<SessionState>,
    session: SessionInfo,
    timeout: Duration,
    chroot: Option<String>,
    has_auth: bool,
}

/// A ZooKeeper session. Clones share it; dropping the last clone closes it.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session", &format_args!("{:#x}", self.shared.session.id))
            .field("state", &self.state())
            .field("chroot", &self.shared.chroot)
            .field("has_auth", &self.shared.has_auth)
            .finish()
    }
}

/// Why a handshake failed.
#[derive(Debug)]
enum Refused {
    /// The server no longer knows the session.
    Expired,
    /// The server refused the credentials.
    AuthFailed(String),
    /// The server could not be reached or did not answer.
    Unreachable(String),
}

/// Opens a TCP connection to `host` and establishes (or resumes) a session on it, then
/// authenticates with `credentials` and waits for the server to accept them.
/// Returns the stream, the negotiated timeout and the session.
async fn handshake(
    host: &str,
    timeout: Duration,
    session: Option<&SessionInfo>,
    last_zxid: i64,
    credentials: Option<&Credentials>,
    limit: Duration,
) -> Result<(TcpStream, Duration, SessionInfo), Refused> {
    let unreachable = |e: &dyn std::fmt::Display| Refused::Unreachable(format!("{host}: {e}"));
    let attempt = async {
        let mut stream = TcpStream::connect(host)
            .await
            .map_err(|e| unreachable(&e))?;
        stream.set_nodelay(true).ok();
        let mut req = Out::default();
        req.i32(0) // protocol version
            // A server that has not seen this yet refuses the session: the client never
            // reads older state than it has already seen.
            .i64(last_zxid)
            .i32(timeout.as_millis().min(i32::MAX as u128) as i32)
            .i64(session.map_or(0, |s| s.id))
            .bytes(session.map_or(&[0u8; 16][..], |s| &s.password))
            .bool(false); // read-only not allowed
        stream
            .write_all(&req.framed())
            .await
            .map_err(|e| unreachable(&e))?;
        let frame = read_frame(&mut stream).await.map_err(|e| unreachable(&e))?;
        let (negotiated, info) = decode_connect_response(&frame).map_err(|e| unreachable(&e))?;
        if negotiated <= 0 {
            return Err(Refused::Expired);
        }
        if let Some(c) = credentials {
            // Before any call: a call that raced ahead of the credentials would run as
            // nobody (and a node it creates with the `auth` ACL would be refused).
            let mut auth = Out::default();
            auth.i32(XID_AUTH)
                .i32(OP_AUTH)
                .i32(0) // type, unused
                .str("digest")
                .bytes(&c.auth);
            stream
                .write_all(&auth.framed())
                .await
                .map_err(|e| unreachable(&e))?;
            let frame = read_frame(&mut stream).await.map_err(|e| unreachable(&e))?;
            let (xid, _, err, _) = decode_reply_header(&frame).map_err(|e| unreachable(&e))?;
            if xid != XID_AUTH {
                return Err(unreachable(&format_args!(
                    "answered the authentication with a reply for xid {xid}"
                )));
            }
            if err != 0 {
                return Err(Refused::AuthFailed(format!(
                    "{host} refused digest authentication as user {:?} (server error {err}); \
                     check the user:password of the connect string",
                    c.user
                )));
            }
        }
        Ok((stream, Duration::from_millis(negotiated as u64), info))
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(r) => r,
        Err(_) => Err(unreachable(&format_args!("no answer within {limit:?}"))),
    }
}

async fn read_frame<R: AsyncReadExt + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let n = r.read_i32().await?;
    if n < 0 || n as usize > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes"),
        ));
    }
    let mut buf = vec![0u8; n as usize];
    r.read_exact(&mut buf).await?;
    Ok(buf)
}

impl Client {
    /// Opens a session on the first server of `connect` that answers, trying each once
    /// (in the order given, starting at a random one) within `connect_timeout`. With
    /// credentials in `connect`, a server refusing them fails the call at once with
    /// [`ZkError::AuthFailed`] (no other server is tried: they share the credentials).
    pub async fn connect(
        connect: &str,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Client, ZkError> {
        Self::open(connect, session_timeout, connect_timeout, None).await
    }

    /// Resumes an existing session (for tests that end a session from outside).
    pub async fn attach(
        connect: &str,
        session: SessionInfo,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Client, ZkError> {
        Self::open(connect, session_timeout, connect_timeout, Some(session)).await
    }

    async fn open(
        connect: &str,
        session_timeout: Duration,
        connect_timeout: Duration,
        resume: Option<SessionInfo>,
    ) -> Result<Client, ZkError> {
        let Target {
            hosts,
            chroot,
            credentials,
        } = parse_connect(connect)?;
        let deadline = Instant::now() + connect_timeout;
        let first = fastrand::usize(..hosts.len());
        let mut causes = Vec::new();
        for i in 0..hosts.len() {
            let at = (first + i) % hosts.len();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                causes.push(format!("no answer within {connect_timeout:?}"));
                break;
            }
            let shake = handshake(
                &hosts[at],
                session_timeout,
                resume.as_ref(),
                0,
                credentials.as_ref(),
                left,
            );
            match shake.await {
                Ok((stream, negotiated, session)) => {
                    let (calls, rx) = mpsc::unbounded_channel();
                    let (state_tx, state) = watch::channel(SessionState::SyncConnected);
                    let has_auth = credentials.is_some();
                    let task = Session {
                        hosts,
                        at,
                        timeout: negotiated,
                        session: session.clone(),
                        credentials,
                        state: state_tx,
                        xid: 0,
                        zxid: 0,
                        watches: WatchTable::new(),
                    };
                    tokio::spawn(task.run(stream, rx));
                    return Ok(Client {
                        shared: Arc::new(Shared {
                            calls,
                            state,
                            session,
                            timeout: negotiated,
                            chroot,
                            has_auth,
                        }),
                    });
                }
                Err(Refused::Expired) => return Err(ZkError::SessionExpired),
                Err(Refused::AuthFailed(e)) => return Err(ZkError::AuthFailed(e)),
                Err(Refused::Unreachable(e)) => causes.push(e),
            }
        }
        Err(ZkError::NoHosts(causes.join("; ")))
    }

    /// The session's current state.
    pub fn state(&self) -> SessionState {
        *self.shared.state.borrow()
    }

    /// A receiver that sees every state change.
    pub fn state_watcher(&self) -> watch::Receiver<SessionState> {
        self.shared.state.clone()
    }

    /// The session id.
    pub fn session_id(&self) -> i64 {
        self.shared.session.id
    }

    /// The session id and password.
    pub fn session(&self) -> &SessionInfo {
        &self.shared.session
    }

    /// The timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Whether the connect string carried credentials (sent on every connection).
    pub fn has_auth(&self) -> bool {
        self.shared.has_auth
    }

    /// The chroot every path is below, if any.
    pub fn chroot(&self) -> Option<&str> {
        self.shared.chroot.as_deref()
    }

    /// `path` as the server knows it: below the chroot.
    fn server_path(&self, path: &str) -> String {
        match &self.shared.chroot {
            None => path.to_string(),
            Some(root) if path == "/" => root.clone(),
            Some(root) => format!("{root}{path}"),
        }
    }

    /// A path the server returned, relative to the chroot (as the Java client does, a
    /// path outside it is returned whole).
    fn client_path(&self, path: String) -> String {
        match &self.shared.chroot {
            None => path,
            Some(root) if path == *root => "/".to_string(),
            Some(root) => match path.strip_prefix(root.as_str()) {
                Some(rest) if rest.starts_with('/') => rest.to_string(),
                _ => path,
            },
        }
    }

    async fn call(&self, op: i32, body: Out) -> Result<Vec<u8>, ZkError> {
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

/// The task that owns a session's connection.
struct Session {
    hosts: Vec<String>,
    at: usize,
    timeout: Duration,
    session: SessionInfo,
    credentials: Option<Credentials>,
    state: watch::Sender<SessionState>,
    /// The last request id used.
    xid: i32,
    /// The zxid of the newest reply to one of our requests, sent when resuming on
    /// another server. Pings, watch events and authentication replies carry the
    /// server's own latest zxid, which this client has not necessarily seen; counting
    /// them would make a server that is behind that (but not behind the client) refuse
    /// the session (Java's `ClientCnxn.readResponse` also skips them).
    zxid: i64,
    /// Watches set on the current connection; dropped (so they report
    /// [`WatchKind::SessionLost`]) when it ends.
    watches: WatchTable,
}

impl Session {
    fn next_xid(&mut self) -> i32 {
        // Positive only: negative xids are the protocol's own (pings, events).
        self.xid = if self.xid == i32::MAX {
            1
        } else {
            self.xid + 1
        };
        self.xid
    }

    async fn run(mut self, mut stream: TcpStream, mut calls: mpsc::UnboundedReceiver<Call>) {
        loop {
            let outcome = self.serve(stream, &mut calls).await;
            // The server forgets this connection's watches with it, and they are not
            // set again on the next one: each reports SessionLost to its owner.
            self.watches.clear();
            let last_heard = match outcome {
                Ended::Lost(at) => at,
                _ => Instant::now(),
            };
            match outcome {
                Ended::ByUs => {
                    self.state.send_replace(SessionState::Closed);
                    return;
                }
                Ended::Expired => {
                    self.state.send_replace(SessionState::Expired);
                    fail_all(&mut calls, ZkError::SessionExpired);
                    return;
                }
                Ended::Lost(_) => {}
            }
            self.state.send_replace(SessionState::Disconnected);
            match self.resume(&mut calls, last_heard + self.timeout).await {
                Some(s) => {
                    self.state.send_replace(SessionState::SyncConnected);
                    stream = s;
                }
                None => {
                    let closed = calls.is_closed();
                    self.state.send_replace(if closed {
                        SessionState::Closed
                    } else {
                        SessionState::Expired
                    });
                    fail_all(&mut calls, ZkError::SessionExpired);
                    return;
                }
            }
        }
    }

    /// Reconnects to the next servers in turn until the session timeout has passed
    /// since the last reply; fails calls made meanwhile with `ConnectionLoss`.
    async fn resume(
        &mut self,
        calls: &mut mpsc::UnboundedReceiver<Call>,
        deadline: Instant,
    ) -> Option<TcpStream> {
        let mut pause = Duration::from_millis(50);
        loop {
            self.at = (self.at + 1) % self.hosts.len();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let limit = left.min(self.timeout / 3).max(Duration::from_millis(100));
            let shake = handshake(
                &self.hosts[self.at],
                self.timeout,
                Some(&self.session),
                self.zxid,
                self.credentials.as_ref(),
                limit,
            );
            match shake.await {
                Ok((stream, _, _)) => return Some(stream),
                Err(Refused::Expired) => return None,
                Err(Refused::AuthFailed(e)) => {
                    // Credentials the ensemble took before and refuses now: no server
                    // will take them again, so end the session rather than loop.
                    tracing::error!(error = %e, "ZooKeeper refused the credentials on reconnect; ending the session");
                    return None;
                }
                Err(Refused::Unreachable(e)) => {
                    tracing::debug!(error = %e, "ZooKeeper reconnect failed")
                }
            }
            // Between attempts, answer calls at once rather than let them wait.
            let wait =
                tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    _ = &mut wait => break,
                    call = calls.recv() => match call {
                        Some(c) => { let _ = c.reply.send(Err(ZkError::ConnectionLoss)); }
                        None => return None,
                    },
                }
            }
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Serves one connection until it drops, the session ends, or every client is gone.
    async fn serve(
        &mut self,
        stream: TcpStream,
        calls: &mut mpsc::UnboundedReceiver<Call>,
    ) -> Ended {
        let (mut rd, mut wr) = stream.into_split();
        // Reading in a task of its own keeps each frame whole whatever the select below does.
        let (frames_tx, mut frames) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            loop {
                let f = read_frame(&mut rd).await;
                let end = f.is_err();
                if frames_tx.send(f).is_err() || end {
                    return;
                }
            }
        });
        let _stop_reader = AbortOnDrop(reader);
        // Calls sent on this connection, oldest first: ZooKeeper answers in order.
        let mut pending: VecDeque<(i32, i32, Reply, Option<WatchReg>)> = VecDeque::new();
        let ping_every = self.timeout / 5;
        let silence_limit = self.timeout * 2 / 5;
        let mut last_read = Instant::now();
        let mut last_write = Instant::now();
        let ended = loop {
            let ping_at = last_write + ping_every;
            let dead_at = last_read + silence_limit;
            tokio::select! {
                call = calls.recv() => {
                    let Some(call) = call else {
                        // Every client is gone: close the session politely.
                        let mut close = Out::default();
                        close.i32(self.next_xid()).i32(OP_CLOSE);
                        let _ = tokio::time::timeout(Duration::from_secs(1), wr.write_all(&close.framed())).await;
                        let _ = tokio::time::timeout(Duration::from_secs(1), frames.recv()).await;
                        break Ended::ByUs;
                    };
                    let xid = self.next_xid();
                    let mut frame = Out::default();
                    frame.i32(xid).i32(call.op);
                    frame.0.extend_from_slice(&call.body);
                    if wr.write_all(&frame.framed()).await.is_err() {
                        let _ = call.reply.send(Err(ZkError::ConnectionLoss));
                        break Ended::Lost(last_read);
                    }
                    last_write = Instant::now();
                    pending.push_back((xid, call.op, call.reply, call.watch));
                }
                frame = frames.recv() => {
                    let Some(Ok(frame)) = frame else { break Ended::Lost(last_read) };
                    last_read = Instant::now();
                    let Ok((xid, zxid, err, body)) = decode_reply_header(&frame) else {
                        break Ended::Lost(last_read);
                    };
                    if xid == XID_PING {
                        continue;
                    }
                    if xid == XID_WATCH_EVENT {
                        match decode_watch_event(body) {
                            Ok((kind, _, path)) => self.fire(kind, &path),
                            Err(_) => break Ended::Lost(last_read),
                        }
                        continue;
                    }
                    // Anything else must answer the oldest call in flight. A reply that
                    // does not (an unknown xid, a later call's, an authentication reply
                    // nobody asked for) means this connection's stream cannot be
                    // trusted: every call on it fails as on any connection loss.
                    if pending.front().map(|p| p.0) != Some(xid) {
                        tracing::warn!(xid, expected = ?pending.front().map(|p| p.0),
                            "ZooKeeper reply out of order; dropping the connection");
                        break Ended::Lost(last_read);
                    }
                    let (_, op, reply, watch) = pending.pop_front().expect("front checked above");
                    if let Some(w) = watch {
                        // Registered before any later frame is read: the server sends a
                        // change's notification after this reply, never before.
                        if err == 0 || (err == -101 && w.class == WatchClass::Node) {
                            self.watches
                                .entry((w.server_path.clone(), w.class))
                                .or_default()
                                .push(w);
                        }
                    }
                    if zxid > 0 {
                        // Replies come in order, so this only grows on one server; max
                        // keeps it from going back across servers.
                        self.zxid = self.zxid.max(zxid);
                    }
                    if err == -112 {
                        let _ = reply.send(Err(ZkError::SessionExpired));
                        break Ended::Expired;
                    }
                    let result = if op == OP_MULTI && (err == 0 || !body.is_empty()) {
                        // A failed transaction still lists each operation's result.
                        let mut whole = err.to_be_bytes().to_vec();
                        whole.extend_from_slice(body);
                        Ok(whole)
                    } else if err == 0 {
                        Ok(body.to_vec())
                    } else {
                        Err(ZkError::from_code(err))
                    };
                    let _ = reply.send(result);
                }
                _ = tokio::time::sleep_until(ping_at) => {
                    let mut ping = Out::default();
                    ping.i32(XID_PING).i32(OP_PING);
                    if wr.write_all(&ping.framed()).await.is_err() {
                        break Ended::Lost(last_read);
                    }
                    last_write = Instant::now();
                }
                _ = tokio::time::sleep_until(dead_at) => break Ended::Lost(last_read),
            }
        };
        for (_, _, reply, _) in pending.drain(..) {
            let _ = reply.send(Err(ZkError::ConnectionLoss));
        }
        ended
    }
}

impl Session {
    /// Completes the watches a server notification (`kind`, server `path`) fires.
    fn fire(&mut self, kind: i32, path: &str) {
        let (event, classes): (WatchKind, &[WatchClass]) = match kind {
            1 => (WatchKind::NodeCreated, &[WatchClass::Node]),
            2 => (
                WatchKind::NodeDeleted,
                &[WatchClass::Node, WatchClass::Children],
            ),
            3 => (WatchKind::NodeDataChanged, &[WatchClass::Node]),
            4 => (WatchKind::NodeChildrenChanged, &[WatchClass::Children]),
            // -1: a state change (not sent over the wire for this session's own
            // state); 5..: watch-removed notices for calls this client never makes.
            _ => return,
        };
        for class in classes {
            for w in self
                .watches
                .remove(&(path.to_string(), *class))
                .unwrap_or_default()
            {
                let _ = w.tx.send(WatchEvent {
                    kind: event,
                    path: w.client_path,
                });
            }
        }
    }
}

enum Ended {
    ByUs,
    /// The connection dropped; when the server was last heard from.
    Lost(Instant),
    Expired,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn fail_all(calls: &mut mpsc::UnboundedReceiver<Call>, e: ZkError) {
    calls.close();
    while let Ok(c) = calls.try_recv() {
        let _ = c.reply.send(Err(e.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut o = Out::default();
        o.i32(-7).i64(1 << 40).bool(true).str("/a/b").bytes(&[]);
        let mut r = In(&o.0);
        assert_eq!(r.i32().unwrap(), -7);
        assert_eq!(r.i64().unwrap(), 1 << 40);
        assert!(r.bool().unwrap());
        assert_eq!(r.string().unwrap(), "/a/b");
        assert_eq!(r.bytes().unwrap(), Vec::<u8>::new());
        assert!(r.i32().is_err());
    }

    #[test]
    fn connect_strings() {
        let t = parse_connect("a:1, b:2,").unwrap();
        assert_eq!(t.hosts, vec!["a:1", "b:2"]);
        assert_eq!(t.chroot, None);
        assert_eq!(t.credentials, None);
        assert!(parse_connect("").is_err());
        assert!(parse_connect("/chroot").is_err());
    }

    #[test]
    fn connect_strings_carry_credentials_and_a_chroot() {
        let t = parse_connect("leaf:s%40cr%2Ft%3A@a:1,b:2/apps/leaf").unwrap();
        assert_eq!(t.hosts, vec!["a:1", "b:2"]);
        assert_eq!(t.chroot.as_deref(), Some("/apps/leaf"));
        let c = t.credentials.unwrap();
        assert_eq!(c.user, "leaf");
        assert_eq!(c.auth, b"leaf:s@cr/t:".to_vec());
        // "/" alone is no chroot, as in Java.
        assert_eq!(parse_connect("a:1/").unwrap().chroot, None);
        for bad in [
            "a:1/x/",
            "a:1//x",
            "a:1/x/../y",
            "nopass@a:1",
            ":p@a:1",
            "u:%zz@a:1",
        ] {
            assert!(parse_connect(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connect_string_round_trips_any_password() {
        let pw = "p@ss:w/rd%?#,é";
        let s = connect_string("a:1,b:2", Some("/x/y"), Some(("u", pw)));
        let t = parse_connect(&s).unwrap();
        assert_eq!(t.credentials.unwrap().auth, format!("u:{pw}").into_bytes());
        assert_eq!(t.chroot.as_deref(), Some("/x/y"));
        assert_eq!(t.hosts, vec!["a:1", "b:2"]);
        assert_eq!(connect_string("a:1", None, None), "a:1");
    }

    proptest::proptest! {
        #[test]
        fn any_credentials_survive_the_connect_string(
            user in "[^:]{1,12}",
            password in "\\PC{0,24}",
        ) {
            let s = connect_string("h:1", Some("/c"), Some((&user, &password)));
            let c = parse_connect(&s).unwrap().credentials.unwrap();
            proptest::prop_assert_eq!(c.user, user.clone());
            proptest::prop_assert_eq!(c.auth, format!("{user}:{password}").into_bytes());
        }
    }

    #[test]
    fn shown_connect_hides_the_password_even_in_a_malformed_string() {
        assert_eq!(shown_connect("u:secret@a:1,b:2/r"), "u:***@a:1,b:2/r");
        assert_eq!(shown_connect("a:1,b:2/r"), "a:1,b:2/r");
        for s in [
            "u:sec/ret@a:1/r",
            "u:secret@",
            "secret@a:1",
            "u:se@cret@a:1",
        ] {
            let shown = shown_connect(s);
            assert!(
                !shown.contains("secret") && !shown.contains("cret"),
                "{s} -> {shown}"
            );
        }
        // Errors about a connect string show it the same way.
        let e = parse_connect("u:secret@/x/").unwrap_err();
        assert!(!format!("{e} {e:?}").contains("secret"), "{e:?}");
    }

    #[test]
    fn decoders_refuse_lengths_past_the_input() {
        // A children count of i32::MAX in eight bytes: refused before any allocation.
        let mut o = Out::default();
        o.i32(i32::MAX).i32(0);
        assert!(decode_children(&o.0).is_err());
        let mut o = Out::default();
        o.i32(i32::MAX);
        assert!(decode_path(&o.0).is_err());
        // A multi reply that ends early is an error, not a short success.
        let mut o = Out::default();
        o.i32(0).i32(OP_CHECK).bool(false).i32(0);
        assert!(decode_multi(&o.0, 2).is_err());
        assert_eq!(decode_multi(&o.0, 1).unwrap(), vec![OpResult::Check]);
    }

    /// A scripted peer on loopback speaking ZooKeeper's wire protocol, for replies no
    /// real server sends on purpose: replies out of order or for unknown xids (a server
    /// answers each connection's requests strictly in order; only a broken server or a
    /// broken middlebox would do otherwise), and pings or watch events carrying a zxid
    /// newer than anything this client was answered (a real server's ping replies carry
    /// its own latest zxid, but making a second server lag behind it on cue is beyond a
    /// test). The real server covers everything else (`core/tests/zk_client.rs`).
    mod scripted {
        use super::*;
        use tokio::net::TcpListener;

        /// Reads one frame from the client.
        async fn recv(s: &mut TcpStream) -> Vec<u8> {
            read_frame(s).await.expect("a frame from the client")
        }

        async fn send(s: &mut TcpStream, out: Out) {
            s.write_all(&out.framed())
                .await
                .expect("write to the client");
        }

        /// Accepts a connection and answers its connect request: session 0x42, 120 s, so
        /// that within a test's guard the client neither pings nor drops a connection
        /// for silence. Returns the stream and the last zxid the client said it had seen.
        async fn accept(l: &TcpListener) -> (TcpStream, i64) {
            let (mut s, _) = l.accept().await.unwrap();
            let req = recv(&mut s).await;
            let mut r = In(&req);
            r.i32().unwrap();
            let last_zxid = r.i64().unwrap();
            let mut resp = Out::default();
            resp.i32(0)
                .i32(120_000)
                .i64(0x42)
                .bytes(&[7; 16])
                .bool(false);
            send(&mut s, resp).await;
            (s, last_zxid)
        }

        /// The xid of a request frame.
        fn xid_of(frame: &[u8]) -> i32 {
            In(frame).i32().unwrap()
        }

        fn reply(xid: i32, zxid: i64, err: i32) -> Out {
            let mut o = Out::default();
            o.i32(xid).i64(zxid).i32(err);
            o
        }

        fn stat_bytes(o: &mut Out) {
            o.i64(1)
                .i64(2)
                .i64(3)
                .i64(4)
                .i32(0)
                .i32(0)
                .i32(0)
                .i64(0)
                .i32(0)
                .i32(0)
                .i64(0);
        }

        /// A guard against a hang on broken code; no timing is asserted.
        async fn within<F: std::future::Future>(f: F) -> F::Output {
            tokio::time::timeout(Duration::from_secs(20), f)
                .await
                .expect("the client never answered")
        }

        async fn wait_for(client: &Client, want: SessionState) {
            let mut w = client.state_watcher();
            within(w.wait_for(|s| *s == want)).await.unwrap();
        }

        #[tokio::test]
        async fn a_reply_for_an_unknown_xid_drops_the_connection() {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let peer = async {
                let (mut s, _) = accept(&l).await;
                let req = recv(&mut s).await;
                send(&mut s, reply(xid_of(&req) + 1000, 5, 0)).await;
                // The client must close this connection (nothing else comes first)…
                assert!(
                    read_frame(&mut s).await.is_err(),
                    "the connection stayed open"
                );
                // …and resume the session on a new one.
                let (s2, _) = accept(&l).await;
                (s, s2)
            };
            let client = async {
                let c = Client::connect(&addr, Duration::from_secs(30), Duration::from_secs(5))
                    .await
                    .unwrap();
                let r = c.check_stat("/x").await;
                (c, r)
            };
            let (_peer, (c, r)) = within(async { tokio::join!(peer, client) }).await;
            assert_eq!(r, Err(ZkError::ConnectionLoss));
            wait_for(&c, SessionState::SyncConnected).await;
        }

        #[tokio::test]
        async fn a_reply_for_a_later_call_than_the_oldest_fails_both_calls() {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let c = Client::connect(&addr, Duration::from_secs(30), Duration::from_secs(5));
            let (peer, c) = within(async { tokio::join!(accept(&l), c) }).await;
            let (mut s, _) = peer;
            let c = c.unwrap();
            let first = c.check_stat("/a");
            let second = c.check_stat("/b");
            let peer = async {
                let r1 = recv(&mut s).await;
                let r2 = recv(&mut s).await;
                assert_eq!(xid_of(&r2), xid_of(&r1) + 1);
                // The second call's reply first: a well-formed exists reply, wrong order.
                let mut out = reply(xid_of(&r2), 9, 0);
                stat_bytes(&mut out);
                send(&mut s, out).await;
                s
            };
            let (_s, a, b) = within(async { tokio::join!(peer, first, second) }).await;
            assert_eq!(a, Err(ZkError::ConnectionLoss));
            assert_eq!(b, Err(ZkError::ConnectionLoss));
        }

        #[tokio::test]
        async fn resume_sends_the_zxid_of_the_last_reply_not_of_pings_or_events() {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let c = Client::connect(&addr, Duration::from_secs(30), Duration::from_secs(5));
            let (peer, c) = within(async { tokio::join!(accept(&l), c) }).await;
            let (mut s, first_zxid) = peer;
            assert_eq!(first_zxid, 0);
            let c = c.unwrap();
            let call = c.check_stat("/a");
            let peer = async {
                let req = recv(&mut s).await;
                // A watch event and a ping reply with zxids the client never saw a
                // reply for, then the reply (zxid 5), then another ping.
                let mut event = reply(XID_WATCH_EVENT, 900, 0);
                event.i32(3).i32(3).str("/a");
                send(&mut s, event).await;
                send(&mut s, reply(XID_PING, 901, 0)).await;
                send(&mut s, reply(xid_of(&req), 5, -101)).await;
                send(&mut s, reply(XID_PING, 902, 0)).await;
                s
            };
            let (s, r) = within(async { tokio::join!(peer, call) }).await;
            assert_eq!(r, Ok(None));
            // Drop the connection: the client resumes and says which zxid it has seen.
            drop(s);
            let (_s2, resumed_zxid) = within(accept(&l)).await;
            assert_eq!(resumed_zxid, 5);
        }

        #[tokio::test]
        async fn refused_credentials_fail_the_connect_without_retrying() {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let peer = async {
                let (mut s, _) = accept(&l).await;
                let auth = recv(&mut s).await;
                let mut r = In(&auth);
                assert_eq!(r.i32().unwrap(), XID_AUTH);
                assert_eq!(r.i32().unwrap(), OP_AUTH);
                r.i32().unwrap();
                assert_eq!(r.string().unwrap(), "digest");
                assert_eq!(r.bytes().unwrap(), b"leaf:pw".to_vec());
                send(&mut s, reply(XID_AUTH, 0, -115)).await;
                s
            };
            // Two hosts, both this peer, which answers one connection only: a client
            // that tried the next host would wait out its connect timeout there and
            // end with NoHosts instead.
            let connect = format!("leaf:pw@{addr},{addr}");
            let client = Client::connect(&connect, Duration::from_secs(30), Duration::from_secs(5));
            let (_s, r) = within(async { tokio::join!(peer, client) }).await;
            match r {
                Err(ZkError::AuthFailed(msg)) => {
                    assert!(msg.contains("leaf") && !msg.contains("pw"), "{msg}")
                }
                other => panic!("expected AuthFailed, got {other:?}"),
            }
        }
    }
}
