//! The session task: the one task that owns a session's connection. It writes calls in
//! order, matches replies to the oldest call in flight, pings, drops a silent or
//! untrustworthy connection, resumes the session on the next server of the ensemble,
//! and reports where the session stands ([`SessionState`]).
//!
//! Apart from the call API (`calls.rs`, which only queues a [`Call`] and awaits its
//! reply) because this is the state machine of the module doc's "Sessions" paragraph,
//! and the only code that touches the socket after the handshake.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::codec::{
    decode_reply_header, decode_watch_event, Out, OP_CLOSE, OP_MULTI, OP_PING, XID_PING,
    XID_WATCH_EVENT,
};
use super::connect_string::Credentials;
use super::error::ZkError;
use super::handshake::{handshake, read_frame, Refused};
use super::records::SessionInfo;
use super::watch::{fire, WatchClass, WatchReg, WatchTable};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected to a server; calls go through.
    SyncConnected,
    /// Between servers; the session may still be resumed.
    Disconnected,
    /// The session ended: a server said so (it expired it, or refused to resume it), or
    /// refused the credentials on a reconnect. Never decided by this client's clock
    /// alone: a client that reaches no server stays `Disconnected`.
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

/// Where a call's reply goes: the body after the reply header, or the error.
pub(super) type Reply = oneshot::Sender<Result<Vec<u8>, ZkError>>;

/// One call on its way to the session task.
pub(super) struct Call {
    pub(super) op: i32,
    pub(super) body: Vec<u8>,
    pub(super) reply: Reply,
    /// The watch the call sets, registered when its reply arrives.
    pub(super) watch: Option<WatchReg>,
}

/// The task that owns a session's connection.
pub(super) struct Session {
    pub(super) hosts: Vec<String>,
    pub(super) at: usize,
    pub(super) timeout: Duration,
    pub(super) session: SessionInfo,
    pub(super) credentials: Option<Credentials>,
    pub(super) state: watch::Sender<SessionState>,
    /// The last request id used.
    pub(super) xid: i32,
    /// The zxid of the newest reply to one of our requests, sent when resuming on
    /// another server. Pings, watch events and authentication replies carry the
    /// server's own latest zxid, which this client has not necessarily seen; counting
    /// them would make a server that is behind that (but not behind the client) refuse
    /// the session (Java's `ClientCnxn.readResponse` also skips them).
    pub(super) zxid: i64,
    /// Watches set on the current connection; dropped (so they report
    /// [`WatchKind::SessionLost`]) when it ends.
    pub(super) watches: WatchTable,
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

    pub(super) async fn run(
        mut self,
        mut stream: TcpStream,
        mut calls: mpsc::UnboundedReceiver<Call>,
    ) {
        loop {
            let outcome = self.serve(stream, &mut calls).await;
            // The server forgets this connection's watches with it, and they are not
            // set again on the next one: each reports SessionLost to its owner.
            self.watches.clear();
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
                Ended::Lost => {}
            }
            self.state.send_replace(SessionState::Disconnected);
            match self.resume(&mut calls).await {
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

    /// Reconnects to the next servers in turn until one takes the session back or says
    /// it has ended (`None`, as when every client is gone); fails calls made meanwhile
    /// with `ConnectionLoss`.
    ///
    /// No deadline of its own, as in Java's client: only a server knows whether the
    /// session expired. A holder cut off from every server keeps its lease in doubt, not
    /// lost, and issues up to the bound ZooKeeper holds (fence rule 5); it learns of an
    /// expiry from the first server it reaches again, and re-acquires then.
    async fn resume(&mut self, calls: &mut mpsc::UnboundedReceiver<Call>) -> Option<TcpStream> {
        let mut pause = Duration::from_millis(50);
        loop {
            self.at = (self.at + 1) % self.hosts.len();
            let limit = (self.timeout / 3).max(Duration::from_millis(100));
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
            let wait = tokio::time::sleep(pause);
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
                        break Ended::Lost;
                    }
                    last_write = Instant::now();
                    pending.push_back((xid, call.op, call.reply, call.watch));
                }
                frame = frames.recv() => {
                    let Some(Ok(frame)) = frame else { break Ended::Lost };
                    last_read = Instant::now();
                    let Ok((xid, zxid, err, body)) = decode_reply_header(&frame) else {
                        break Ended::Lost;
                    };
                    if xid == XID_PING {
                        continue;
                    }
                    if xid == XID_WATCH_EVENT {
                        match decode_watch_event(body) {
                            Ok((kind, _, path)) => fire(&mut self.watches, kind, &path),
                            Err(_) => break Ended::Lost,
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
                        break Ended::Lost;
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
                        break Ended::Lost;
                    }
                    last_write = Instant::now();
                }
                _ = tokio::time::sleep_until(dead_at) => break Ended::Lost,
            }
        };
        for (_, _, reply, _) in pending.drain(..) {
            let _ = reply.send(Err(ZkError::ConnectionLoss));
        }
        ended
    }
}

enum Ended {
    ByUs,
    /// The connection dropped.
    Lost,
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
