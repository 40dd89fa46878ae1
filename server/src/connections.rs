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
//!    ([`WriteDeadline`]) and the connection closes, whatever the body's size; and
//!    each answer must be written within `response_timeout` of its request's head, or
//!    the connection closes mid-answer (a steady slow reader otherwise holds its slot
//!    for as long as its batch takes: 20 MB at 30 KB/s is 11 minutes). A request is in
//!    service from its head until its answer's last byte is handed to the socket.
//! 4. **Connection cap**: at `max_connections`, a new connection displaces the oldest
//!    one that has no request in service (a slow head, an idle keep-alive: the states
//!    a slow client occupies), so slow clients cannot lock out a fast one; when every
//!    one is in service, the newcomer takes one of [`HEALTH_RESERVE`] slots beyond the
//!    cap that answer `/health` only (anything else there is a 503), so a liveness
//!    probe is never refused for the cap; past those, a 503 at once. The cap stays
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

/// Connections beyond the cap that may ask for `/health` only (rule 4): a few, for the
/// probes of a service manager or load balancer.
pub const HEALTH_RESERVE: usize = 8;

/// What a connection may take (from `leafid serve`'s flags).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once (before [`FD_RESERVE`] lowers it to the fd limit).
    pub max_connections: usize,
    /// From waiting for a request head to having all of it.
    pub header_timeout: Duration,
    /// A write that makes no progress this long closes the connection.
    pub write_timeout: Duration,
    /// From a request's head to its answer's last byte written.
    pub response_timeout: Duration,
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
    // The cap's own fds plus the health reserve's stay below the fd limit.
    let room = nofile
        .saturating_sub(FD_RESERVE + HEALTH_RESERVE as u64)
        .max(1);
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
    /// Its requests in service: those answers are never cut by the cap.
    busy: Arc<Busy>,
    task: AbortHandle,
}

/// What the cap and the response deadline know of one connection's requests.
struct Busy {
    /// Requests in service (0 or 1 in HTTP/1.1), from the head to the answer's last
    /// byte handed to the socket.
    in_service: AtomicUsize,
    /// Answers whose body hyper has taken whole but whose bytes may still sit in its
    /// write buffer: still in service until the next flush completes.
    unflushed: AtomicUsize,
    /// When the answer in service must be written by (rule 3); `None` between requests.
    deadline: watch::Sender<Option<tokio::time::Instant>>,
}

impl Busy {
    fn new() -> Busy {
        Busy {
            in_service: AtomicUsize::new(0),
            unflushed: AtomicUsize::new(0),
            deadline: watch::Sender::new(None),
        }
    }

    /// Relaxed: a count read by the cap's choice, which tolerates a stale view.
    fn in_service(&self) -> usize {
        self.in_service.load(Ordering::Relaxed)
    }

    /// hyper's write buffer reached the socket: the answers ended before are done.
    fn flushed(&self) {
        // Relaxed: written and read on the connection's own task (the cap only reads
        // `in_service`, see above).
        let done = self.unflushed.swap(0, Ordering::Relaxed);
        if done > 0 && self.in_service.fetch_sub(done, Ordering::Relaxed) == done {
            self.deadline.send_replace(None);
        }
    }
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
        let mut health_only = false;
        if conns.len() >= cap {
            // Rule 4: the oldest connection not in service makes room. Relaxed: a
            // request that starts just now is cut like one that came a moment later.
            let idle = conns
                .iter()
                .find(|(_, e)| e.busy.in_service() == 0)
                .map(|(&id, _)| id);
            match idle {
                Some(id) => {
                    if let Some(e) = conns.remove(&id) {
                        e.task.abort();
                    }
                }
                None if conns.len() < cap + HEALTH_RESERVE => health_only = true,
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
        let busy = Arc::new(Busy::new());
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
            busy.clone(),
            health_only,
            stop.clone(),
            gone,
        ));
        conns.insert(
            id,
            Entry {
                busy,
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

/// Serves one connection until it closes, a timeout closes it, or shutdown. A
/// `health_only` connection (beyond the cap) is answered `/health` only.
async fn connection(
    stream: TcpStream,
    router: Router,
    limits: Limits,
    busy: Arc<Busy>,
    health_only: bool,
    mut stop: watch::Receiver<bool>,
    _gone: Departure,
) {
    // Open as long as `conn` (which owns the socket) is.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let io = TokioIo::new(WriteDeadline::new(
        stream,
        limits.write_timeout,
        busy.clone(),
    ));
    let counter = busy.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = InService::enter(&counter, limits.response_timeout);
        let mut router = router.clone();
        async move {
            let resp = if health_only && req.uri().path() != "/health" {
                over_cap()
            } else {
                tower_service::Service::call(&mut router, req.map(Body::new)).await?
            };
            // The guard rides with the body: the request is in service until hyper has
            // taken (or dropped) the whole answer, and then until it is flushed.
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
    let mut deadline = busy.deadline.subscribe();
    loop {
        let until = *deadline.borrow_and_update();
        let overdue = async move {
            match until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = stop.wait_for(|stopping| *stopping) => break,
            // Never fails: `busy` holds the sender.
            _ = deadline.changed() => {}
            () = overdue => {
                // Rule 3: closed mid-answer, which an HTTP/1.1 client sees as cut (no
                // last chunk, or fewer bytes than its length); with a reset, so the
                // kernel frees the queue the slow reader has not read yet.
                zero_linger(fd);
                tracing::warn!(
                    "closed a connection whose answer was not written within the response timeout ({:?})",
                    limits.response_timeout
                );
                return;
            }
        }
    }
    // Shutting down (rule 5): a connection between requests closes now; one with a
    // request in service finishes it, and `serve` aborts it at the deadline.
    if busy.in_service() == 0 {
        return;
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// The answer on a connection beyond the cap to anything but `/health`.
fn over_cap() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONNECTION, "close")],
        "too many connections in service; try again\n",
    )
        .into_response()
}

/// One request in service on a connection, from its head until hyper has its whole
/// answer; [`Busy::flushed`] then ends it once the answer reaches the socket.
struct InService(Arc<Busy>);

impl InService {
    fn enter(busy: &Arc<Busy>, limit: Duration) -> InService {
        // Relaxed: see `Busy::in_service`.
        busy.in_service.fetch_add(1, Ordering::Relaxed);
        busy.deadline
            .send_replace(Some(tokio::time::Instant::now() + limit));
        InService(busy.clone())
    }
}

impl Drop for InService {
    fn drop(&mut self) {
        // Relaxed: see `Busy::flushed`.
        self.0.unflushed.fetch_add(1, Ordering::Relaxed);
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
    busy: Arc<Busy>,
    /// Armed when a write finds the socket full; disarmed by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    fn new(io: TcpStream, timeout: Duration, busy: Arc<Busy>) -> WriteDeadline {
        WriteDeadline {
            io,
            timeout,
            busy,
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
            Poll::Ready(()) => {
                // Closed with a reset, not a FIN: the kernel drops the unread send
                // queue now instead of keeping it (up to megabytes) for minutes.
                zero_linger(std::os::fd::AsRawFd::as_raw_fd(&self.io));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client read nothing for {timeout:?}"),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Sets `SO_LINGER` to zero: the socket's close then resets the connection and frees
/// its send queue at once.
fn zero_linger(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) reads the struct we own; callers pass an fd their socket
    // keeps open.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
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
        // hyper flushes once its write buffer is all written: the answers it ended
        // before are now in the socket (`Busy::flushed`).
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        if let Poll::Ready(Ok(())) = poll {
            self.busy.flushed();
        }
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
        assert_eq!(
            connection_cap(10_000, 1024),
            1024 - FD_RESERVE as usize - HEALTH_RESERVE
        );
        assert_eq!(connection_cap(500, 65_536), 500);
        assert_eq!(connection_cap(500, 10), 1);
    }
}
