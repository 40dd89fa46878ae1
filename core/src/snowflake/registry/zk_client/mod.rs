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
//! meanwhile, calls fail with `ConnectionLoss`, for as long as no server answers); a
//! server that no longer knows the session ends it (`Expired`). Only a server decides
//! that, as in Java's client: a holder cut off from the ensemble keeps issuing up to the
//! bound ZooKeeper holds (fence rule 5) and learns of an expiry when it is back. A reply that is not for the oldest call in flight (ZooKeeper
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
//!
//! The parts, each in a file of its own: `records.rs` (the types calls take and return),
//! `error.rs` ([`ZkError`] and its classification), `connect_string.rs` (connect strings),
//! `codec.rs` (the wire format), `handshake.rs` (opening one connection), `session.rs`
//! (the task that owns the connection: ordering, pings, resumption), `watch.rs`
//! (one-shot watches) and `calls.rs` (the call API). This file builds a [`Client`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

mod calls;
mod codec;
mod connect_string;
mod error;
mod handshake;
mod records;
#[cfg(test)]
mod scripted_peer;
mod session;
mod watch;

pub(crate) use self::connect_string::percent_decode;
pub use self::connect_string::{check_connect, connect_string, shown_connect};
pub use self::error::ZkError;
pub use self::records::{Acl, CreateMode, MultiError, Op, OpResult, SessionInfo, Stat};
pub use self::session::SessionState;
pub use self::watch::{Watch, WatchEvent, WatchKind};

use self::codec::{
    decode_children, decode_connect_response, decode_get_data, decode_multi, decode_path,
    decode_reply_header, decode_stat, decode_watch_event,
};
use self::connect_string::{parse_connect, Target};
use self::handshake::{handshake, Refused};
use self::session::{Call, Session};
use self::watch::WatchTable;

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

/// What every clone of a [`Client`] shares: the way to the session task and what the
/// handshake settled.
struct Shared {
    calls: mpsc::UnboundedSender<Call>,
    state: tokio::sync::watch::Receiver<SessionState>,
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
                    let (state_tx, state) =
                        tokio::sync::watch::channel(SessionState::SyncConnected);
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
    pub fn state_watcher(&self) -> tokio::sync::watch::Receiver<SessionState> {
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
}
