//! A TCP proxy on 127.0.0.1 (or another loopback address, `[::1]`) that holds every
//! chunk of data for a set delay before passing it on, and can play a dead server. Test
//! support: it puts a slow or absent database between a generator and a real MariaDB.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy; it lives on leafid's background runtime until the process ends.
#[derive(Clone)]
pub struct DelayProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
    /// Accept connections but pass nothing on, as a network that drops every packet.
    blackhole: Arc<AtomicBool>,
    /// Bumped on `set_down(true)`, so open connections notice and close.
    era: Arc<AtomicU64>,
}

impl DelayProxy {
    /// Starts a proxy in front of `upstream` (`host:port`).
    pub fn start(upstream: String) -> DelayProxy {
        Self::start_on("127.0.0.1:0", upstream).unwrap()
    }

    /// Starts a proxy listening on `bind` (`[::1]:0` for an IPv6 listener), or the
    /// error binding it (no IPv6 on this host).
    pub fn start_on(bind: &str, upstream: String) -> std::io::Result<DelayProxy> {
        let bind = bind.to_string();
        let listener = leafid::runtime::block_on(async move { TcpListener::bind(bind).await })?;
        let proxy = DelayProxy {
            addr: listener.local_addr().unwrap(),
            delay_ms: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicBool::new(false)),
            blackhole: Arc::new(AtomicBool::new(false)),
            era: Arc::new(AtomicU64::new(0)),
        };
        let p = proxy.clone();
        leafid::runtime::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                // The era is read before `down`, and `set_down` stores `down` before it
                // moves the era: a connection accepted as `set_down` runs is either
                // refused here or carries the old era and is dropped at its first byte.
                // (Read after the upstream connect, a connection accepted just before
                // `set_down` got the new era and served on while the proxy was "down".)
                let era = p.era.load(Ordering::SeqCst);
                if p.down.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let p = p.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        _ = pump(cr, sw, p.clone(), era) => {}
                        _ = pump(sr, cw, p.clone(), era) => {}
                    }
                });
            }
        });
        Ok(proxy)
    }

    /// Delays every chunk by `delay` from now on.
    #[allow(dead_code)] // not every test binary that includes this file delays
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// `true`: open connections and new ones stay open but nothing passes in either
    /// direction (a silent network, not a refusal); `false`: what was held passes on.
    #[allow(dead_code)] // not every test binary that includes this file blackholes
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }

    /// `true`: drop open connections and refuse new ones; `false`: serve again.
    #[allow(dead_code)] // not every test binary that includes this file refuses
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        if down {
            self.era.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    p: DelayProxy,
    era: u64,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match tokio::time::timeout(Duration::from_millis(100), from.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
            Err(_) => {
                if p.era.load(Ordering::SeqCst) != era {
                    return;
                }
                continue;
            }
        };
        while p.blackhole.load(Ordering::SeqCst) {
            if p.era.load(Ordering::SeqCst) != era {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let delay = p.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if p.era.load(Ordering::SeqCst) != era || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
