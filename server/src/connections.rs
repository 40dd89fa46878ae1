//! The accept loop and the life of each connection: how long a client may take, how
//! many may be open, and how the server lets them go at shutdown.
//!
//! Written by hand on hyper rather than with `axum::serve`, which has no timer (so
//! hyper's head timeout never fires), no write timeout, no connection cap and no end
//! to its graceful shutdown: one client that stops reading or writing would otherwise
//! hold its fd, and SIGTERM, forever. The rules, each closing one way to stall:
//!
//! 1. **Request head and idle keep-alive**: hyper's `header_read_timeout` (with a
//!    timer) runs from the moment the connection waits for a head, so it bounds a
//!    trickled head and a silent kept-alive connection alike.
//! 2. **Request body**: no route reads one; once the answer is written, hyper drops
//!    what is left unread and closes the read side, so a trickled body holds nothing.
//! 3. **Response write**: a write that makes no progress for `write_timeout` fails
//!    ([`WriteDeadline`]) and the connection closes, whatever the body's size.
//! 4. **Connection cap**: at `max_connections`, a new connection displaces the oldest
//!    one that has no request in service (a slow head, an idle keep-alive: the states
//!    a slow client occupies), so slow clients cannot lock out a fast one; when every
//!    one is in service, the newcomer gets a 503 at once. The cap stays
//!    [`FD_RESERVE`] below the fd limit, so accept never meets `EMFILE` because of
//!    clients, and the store's and registry's sockets still open.
//! 5. **Shutdown**: idle connections close at once, requests in service may finish
//!    until `shutdown_timeout`; then what is left is closed, so the caller can go on
//!    to release the snowflake worker id.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Sleep;

/// File descriptors kept free of client connections: the listener, the store's pool,
/// the registry's sockets and files, the log. The connection cap is at most the fd
/// limit minus this.
pub const FD_RESERVE: u64 = 128;

/// What a connection may take (from `leafid serve`'s flags).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once (before [`FD_RESERVE`] lowers it to the fd limit).
    pub max_connections: usize,
    /// From waiting for a request head to having all of it.
    pub header_timeout: Duration,
    /// A write that makes no progress this long closes the connection.
    pub write_timeout: Duration,
    /// How long requests in service may finish after SIGTERM.
    pub shutdown_timeout: Duration,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (systemd and most
/// shells start services at 1 024) and returns the soft limit then in force.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the struct we own; no other memory is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    // Linux refuses RLIM_INFINITY for files (fs.nr_open caps it): ask for 2^20 then.
    let want = lim.rlim_max.min(1 << 20);
    if lim.rlim_cur < want {
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit(2) reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = want;
        }
    }
    lim.rlim_cur
}

/// The connection cap under an fd limit of `nofile`.
pub fn connection_cap(max_connections: usize, nofile: u64) -> usize {
    let room = nofile.saturating_sub(FD_RESERVE).max(1);
    max_connections.min(usize::try_from(room).unwrap_or(usize::MAX))
}

/// Accepts and serves until `shutdown` resolves, then lets the connections go (rule 5).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    cap: usize,
    shutdown: impl Future<Output = ()>,
) {
    let open = Arc::new(Open::default());
    let (stopping, stop) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut last_fd_warning: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, _)) => {
                // No Nagle delay: every answer is one small write the caller waits for.
                let _ = stream.set_nodelay(true);
                open.admit(stream, &router, limits, cap, &stop);
            }
            Err(e) => {
                // Out of fds (other files, or a cap set above what the reserve allows):
                // the pending connection stays in the backlog, so accept would fail
                // again at once; pause instead of spinning, and say so now and then.
                let exhausted = matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                );
                if exhausted && last_fd_warning.is_none_or(|t| t.elapsed().as_secs() >= 10) {
                    tracing::warn!(error = %e, "cannot accept: out of file descriptors; raise LimitNOFILE or lower --max-connections");
                    last_fd_warning = Some(tokio::time::Instant::now());
                }
                let pause = if exhausted { 100 } else { 5 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    let deadline = tokio::time::Instant::now() + limits.shutdown_timeout;
    while open.count() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = open.abort_all();
    if left > 0 {
        tracing::warn!(
            connections = left,
            "closed connections still open after the shutdown timeout ({:?})",
            limits.shutdown_timeout
        );
    }
}

/// The open connections, oldest first.
#[derive(Default)]
struct Open {
    conns: Mutex<BTreeMap<u64, Entry>>,
    next: AtomicU64,
}

struct Entry {
    /// Requests of this connection in service (0 or 1 in HTTP/1.1): those answers are
    /// never cut by the cap.
    in_service: Arc<AtomicUsize>,
    task: AbortHandle,
}

/// The answer when every connection is in service: a 503 the client reads before
/// the close (its request never reached a handler, so no id was taken).
const FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 43\r\n\r\ntoo many connections in service; try again\n";

impl Open {
    fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        // A panic under this lock leaves the map whole (inserts and removes only).
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admit(
        self: &Arc<Self>,
        stream: TcpStream,
        router: &Router,
        limits: Limits,
        cap: usize,
        stop: &watch::Receiver<bool>,
    ) {
        let mut conns = self.lock();
        if conns.len() >= cap {
            // Rule 4: the oldest connection not in service makes room. Relaxed: a
            // request that starts just now is cut like one that came a moment later.
            let idle = conns
                .iter()
                .find(|(_, e)| e.in_service.load(Ordering::Relaxed) == 0)
                .map(|(&id, _)| id);
            match idle {
                Some(id) => {
                    if let Some(e) = conns.remove(&id) {
                        e.task.abort();
                    }
                }
                None => {
                    drop(conns);
                    // Never waits: a fresh socket's send buffer is empty; if it is not,
                    // the client simply sees the close.
                    let _ = stream.try_write(FULL);
                    return;
                }
            }
        }
        // Relaxed: only unique, and ordered by the lock held here.
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let in_service = Arc::new(AtomicUsize::new(0));
        let gone = Departure {
            open: self.clone(),
            id,
        };
        // Spawned under the lock, so the task's own removal (on its end) comes after
        // this insert.
        let task = tokio::spawn(connection(
            stream,
            router.clone(),
            limits,
            in_service.clone(),
            stop.clone(),
            gone,
        ));
        conns.insert(
            id,
            Entry {
                in_service,
                task: task.abort_handle(),
            },
        );
    }

    /// Closes every connection left; returns how many there were.
    fn abort_all(&self) -> usize {
        let conns = std::mem::take(&mut *self.lock());
        for e in conns.values() {
            e.task.abort();
        }
        conns.len()
    }
}

/// Takes a connection's entry out when its task ends, returns or is aborted.
struct Departure {
    open: Arc<Open>,
    id: u64,
}

impl Drop for Departure {
    fn drop(&mut self) {
        self.open.lock().remove(&self.id);
    }
}

/// Serves one connection until it closes, a timeout closes it, or shutdown.
async fn connection(
    stream: TcpStream,
    router: Router,
    limits: Limits,
    in_service: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
    _gone: Departure,
) {
    let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
    let counter = in_service.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = InService::enter(&counter);
        let mut router = router.clone();
        async move {
            let resp = tower_service::Service::call(&mut router, req.map(Body::new)).await?;
            // The guard rides with the body: the request is in service until hyper has
            // written (or dropped) the whole answer.
            Ok::<_, Infallible>(resp.map(|body| {
                Body::new(Tracked {
                    body,
                    _guard: guard,
                })
            }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|stopping| *stopping) => {}
    }
    // Shutting down (rule 5): a connection between requests closes now; one with a
    // request in service finishes it, and `serve` aborts it at the deadline.
    if in_service.load(Ordering::Relaxed) == 0 {
        return;
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// One request in service on a connection, from its head to the end of its answer.
struct InService(Arc<AtomicUsize>);

impl InService {
    fn enter(counter: &Arc<AtomicUsize>) -> InService {
        // Relaxed: a count read by the cap's choice, which tolerates a stale view.
        counter.fetch_add(1, Ordering::Relaxed);
        InService(counter.clone())
    }
}

impl Drop for InService {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body carrying its [`InService`] guard.
struct Tracked {
    body: Body,
    _guard: InService,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket whose writes fail with `TimedOut` after `timeout` without progress
/// (rule 3): a client that stops reading cannot hold its connection, nor the answer
/// buffered for it.
struct WriteDeadline {
    io: TcpStream,
    timeout: Duration,
    /// Armed when a write finds the socket full; disarmed by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    fn new(io: TcpStream, timeout: Duration) -> WriteDeadline {
        WriteDeadline {
            io,
            timeout,
            stalled: None,
        }
    }

    /// Maps a write's poll: progress disarms the timer, a stall arms it and fails once
    /// it has run out.
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {timeout:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_cap_leaves_the_fd_reserve_free() {
        assert_eq!(connection_cap(10_000, 1024), 1024 - FD_RESERVE as usize);
        assert_eq!(connection_cap(500, 65_536), 500);
        assert_eq!(connection_cap(500, 10), 1);
    }
}
