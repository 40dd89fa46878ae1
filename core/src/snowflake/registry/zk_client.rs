//! A small ZooKeeper client on the core's own tokio runtime: the handful of calls the
//! ZooKeeper registries make, over ZooKeeper's wire protocol (jute, one session per
//! client, no watches).
//!
//! Why not a client crate: the Rust ZooKeeper clients do their socket I/O on a
//! process-wide reactor of their own (`async-io`: one epoll instance and a driver thread,
//! created once). A forked child inherits that epoll instance, shared with the parent
//! from then on, and a driver lock held by a thread that does not exist in the child, so
//! no ZooKeeper session could ever be opened in a child of a process that had used one.
//! Here every socket lives on the tokio runtime, which the core starts afresh in a forked
//! child, so a preforked worker takes a worker id of its own like any other process.
//!
//! Sessions: a ping every fifth of the negotiated timeout; a connection the server has
//! been silent on for two fifths of it is dropped (stricter than the Java client's two
//! thirds, so a lease holder learns of trouble well before the server can expire it) and
//! the session resumed on the next server of the ensemble (state `Disconnected`
//! meanwhile, calls fail with `ConnectionLoss`); a server that no longer knows the
//! session, or no server reached before the timeout has passed since the last word from
//! one, ends it (`Expired`). Dropping the last clone of a [`Client`] closes the session.

use std::collections::HashMap;
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
            -110 => ZkError::NodeExists,
            -103 => ZkError::BadVersion,
            -112 => ZkError::SessionExpired,
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
    },
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
const OP_CLOSE: i32 = -11;
const XID_WATCH_EVENT: i32 = -1;
const XID_PING: i32 = -2;
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
    /// The one ACL the registries use: world:anyone, all permissions.
    fn open_acl(&mut self) -> &mut Self {
        self.i32(1).i32(31).str("world").str("anyone")
    }
    fn create(&mut self, path: &str, data: &[u8], mode: CreateMode) -> &mut Self {
        self.str(path).bytes(data).open_acl().i32(mode.flags())
    }
    /// Prefixes the record with its length, as every frame is.
    fn framed(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.0.len() + 4);
        v.extend_from_slice(&(self.0.len() as i32).to_be_bytes());
        v.extend_from_slice(&self.0);
        v
    }
}

/// Decodes jute records.
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
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i64(&mut self) -> Result<i64, ZkError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bool(&mut self) -> Result<bool, ZkError> {
        Ok(self.take(1)?[0] != 0)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, ZkError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(Vec::new());
        }
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

/// Where a call's reply goes: the body after the reply header, or the error.
type Reply = oneshot::Sender<Result<Vec<u8>, ZkError>>;

/// One call on its way to the session task.
struct Call {
    op: i32,
    body: Vec<u8>,
    reply: Reply,
}

/// The session's identity, for resuming it on another server.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The session id the server gave.
    pub id: i64,
    /// The session's password.
    pub password: Vec<u8>,
}

struct Shared {
    calls: mpsc::UnboundedSender<Call>,
    state: watch::Receiver<SessionState>,
    session: SessionInfo,
    timeout: Duration,
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
            .finish()
    }
}

/// Parses `host:port[,host:port…][/chroot]` (a chroot is not supported).
fn hosts(connect: &str) -> Result<Vec<String>, ZkError> {
    if connect.contains('/') {
        return Err(ZkError::NoHosts(format!(
            "{connect:?}: a chroot path is not supported; put the path in the registry name"
        )));
    }
    let hosts: Vec<String> = connect
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    if hosts.is_empty() {
        return Err(ZkError::NoHosts(format!("{connect:?} names no server")));
    }
    Ok(hosts)
}

/// Why a handshake failed.
enum Refused {
    /// The server no longer knows the session.
    Expired,
    /// The server could not be reached or did not answer.
    Unreachable(String),
}

/// Opens a TCP connection to `host` and establishes (or resumes) a session on it.
/// Returns the stream, the negotiated timeout and the session.
async fn handshake(
    host: &str,
    timeout: Duration,
    session: Option<&SessionInfo>,
    last_zxid: i64,
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
        let mut r = In(&frame);
        let parse = |r: &mut In| -> Result<(i32, i64, Vec<u8>), ZkError> {
            r.i32()?; // protocol version
            let negotiated = r.i32()?;
            let id = r.i64()?;
            let password = r.bytes()?;
            Ok((negotiated, id, password))
        };
        let (negotiated, id, password) = parse(&mut r).map_err(|e| unreachable(&e))?;
        if negotiated <= 0 {
            return Err(Refused::Expired);
        }
        Ok((
            stream,
            Duration::from_millis(negotiated as u64),
            SessionInfo { id, password },
        ))
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
    /// (in the order given, starting at a random one) within `connect_timeout`.
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
        let hosts = hosts(connect)?;
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
            match handshake(&hosts[at], session_timeout, resume.as_ref(), 0, left).await {
                Ok((stream, negotiated, session)) => {
                    let (calls, rx) = mpsc::unbounded_channel();
                    let (state_tx, state) = watch::channel(SessionState::SyncConnected);
                    let task = Session {
                        hosts,
                        at,
                        timeout: negotiated,
                        session: session.clone(),
                        state: state_tx,
                        xid: 0,
                        zxid: 0,
                    };
                    tokio::spawn(task.run(stream, rx));
                    return Ok(Client {
                        shared: Arc::new(Shared {
                            calls,
                            state,
                            session,
                            timeout: negotiated,
                        }),
                    });
                }
                Err(Refused::Expired) => return Err(ZkError::SessionExpired),
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

    async fn call(&self, op: i32, body: Out) -> Result<Vec<u8>, ZkError> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .calls
            .send(Call {
                op,
                body: body.0,
                reply,
            })
            .map_err(|_| ZkError::Closed)?;
        rx.await.unwrap_or(Err(ZkError::ConnectionLoss))
    }

    /// Creates a node; returns its path (with the sequence number, for a sequential one).
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String, ZkError> {
        let mut body = Out::default();
        body.create(path, data, mode);
        let reply = self.call(OP_CREATE, body).await?;
        In(&reply).string()
    }

    /// Creates `path` and its missing parents as persistent nodes; a node that exists is fine.
    pub async fn mkdir(&self, path: &str) -> Result<(), ZkError> {
        let ends = path
            .match_indices('/')
            .map(|(i, _)| i)
            .filter(|&i| i > 0)
            .chain(std::iter::once(path.len()));
        for end in ends {
            match self.create(&path[..end], &[], CreateMode::Persistent).await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Deletes a node, at `version` when given.
    pub async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), ZkError> {
        let mut body = Out::default();
        body.str(path).i32(version.unwrap_or(-1));
        self.call(OP_DELETE, body).await.map(drop)
    }

    /// A node's data and metadata.
    pub async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError> {
        let mut body = Out::default();
        body.str(path).bool(false);
        let reply = self.call(OP_GET_DATA, body).await?;
        let mut r = In(&reply);
        Ok((r.bytes()?, r.stat()?))
    }

    /// Sets a node's data, at `version` when given.
    pub async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<Stat, ZkError> {
        let mut body = Out::default();
        body.str(path).bytes(data).i32(version.unwrap_or(-1));
        let reply = self.call(OP_SET_DATA, body).await?;
        In(&reply).stat()
    }

    /// The names of a node's children.
    pub async fn list_children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        let mut body = Out::default();
        body.str(path).bool(false);
        let reply = self.call(OP_GET_CHILDREN, body).await?;
        let mut r = In(&reply);
        let n = r.i32()?;
        (0..n.max(0)).map(|_| r.string()).collect()
    }

    /// A node's metadata, `None` when it does not exist.
    pub async fn check_stat(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        let mut body = Out::default();
        body.str(path).bool(false);
        match self.call(OP_EXISTS, body).await {
            Ok(reply) => Ok(Some(In(&reply).stat()?)),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs `ops` as one transaction: all of them or none.
    pub async fn multi(&self, ops: &[Op<'_>]) -> Result<(), MultiError> {
        let mut body = Out::default();
        for op in ops {
            match *op {
                Op::Check { path, version } => {
                    body.i32(OP_CHECK)
                        .bool(false)
                        .i32(-1)
                        .str(path)
                        .i32(version);
                }
                Op::SetData { path, data } => {
                    body.i32(OP_SET_DATA)
                        .bool(false)
                        .i32(-1)
                        .str(path)
                        .bytes(data)
                        .i32(-1);
                }
                Op::Create { path, data, mode } => {
                    body.i32(OP_CREATE)
                        .bool(false)
                        .i32(-1)
                        .create(path, data, mode);
                }
            }
        }
        body.i32(-1).bool(true).i32(-1);
        let whole = |error| MultiError { op: None, error };
        let reply = self.call(OP_MULTI, body).await.map_err(whole)?;
        // The session task puts the reply header's error code first (see `serve`).
        let mut r = In(&reply);
        let header_err = r.i32().map_err(whole)?;
        for i in 0..ops.len() {
            let kind = r.i32().map_err(whole)?;
            let done = r.bool().map_err(whole)?;
            r.i32().map_err(whole)?; // the header's own error field; the result has it too
            if done {
                break;
            }
            match kind {
                -1 => {
                    let code = r.i32().map_err(whole)?;
                    // -2 (runtime inconsistency) marks the operations rolled back
                    // because another one failed; report the one that did.
                    if code != 0 && code != -2 {
                        return Err(MultiError {
                            op: Some(i),
                            error: ZkError::from_code(code),
                        });
                    }
                }
                OP_CREATE => {
                    r.string().map_err(whole)?;
                }
                OP_SET_DATA => {
                    r.stat().map_err(whole)?;
                }
                _ => {}
            }
        }
        if header_err != 0 {
            return Err(whole(ZkError::from_code(header_err)));
        }
        Ok(())
    }
}

/// The task that owns a session's connection.
struct Session {
    hosts: Vec<String>,
    at: usize,
    timeout: Duration,
    session: SessionInfo,
    state: watch::Sender<SessionState>,
    /// The last request id used.
    xid: i32,
    /// The newest transaction id seen in a reply, sent when resuming on another server.
    zxid: i64,
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
            let zxid = self.zxid;
            match handshake(
                &self.hosts[self.at],
                self.timeout,
                Some(&self.session),
                zxid,
                limit,
            )
            .await
            {
                Ok((stream, _, _)) => return Some(stream),
                Err(Refused::Expired) => return None,
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
        let mut pending: HashMap<i32, (i32, Reply)> = HashMap::new();
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
                    pending.insert(xid, (call.op, call.reply));
                }
                frame = frames.recv() => {
                    let Some(Ok(frame)) = frame else { break Ended::Lost(last_read) };
                    last_read = Instant::now();
                    let mut r = In(&frame);
                    let (Ok(xid), Ok(zxid), Ok(err)) = (r.i32(), r.i64(), r.i32()) else {
                        break Ended::Lost(last_read);
                    };
                    self.zxid = self.zxid.max(zxid);
                    if xid == XID_PING || xid == XID_WATCH_EVENT {
                        continue;
                    }
                    if err == -112 {
                        if let Some((_, reply)) = pending.remove(&xid) {
                            let _ = reply.send(Err(ZkError::SessionExpired));
                        }
                        break Ended::Expired;
                    }
                    if let Some((op, reply)) = pending.remove(&xid) {
                        let result = if op == OP_MULTI && (err == 0 || !r.0.is_empty()) {
                            // A failed transaction still lists each operation's result.
                            let mut body = err.to_be_bytes().to_vec();
                            body.extend_from_slice(r.0);
                            Ok(body)
                        } else if err == 0 {
                            Ok(r.0.to_vec())
                        } else {
                            Err(ZkError::from_code(err))
                        };
                        let _ = reply.send(result);
                    }
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
        for (_, (_, reply)) in pending.drain() {
            let _ = reply.send(Err(ZkError::ConnectionLoss));
        }
        ended
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
        assert_eq!(hosts("a:1, b:2,").unwrap(), vec!["a:1", "b:2"]);
        assert!(hosts("").is_err());
        assert!(hosts("a:1/chroot").is_err());
    }
}
