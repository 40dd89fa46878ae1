//! A TCP proxy on 127.0.0.1 that keeps what clients send (to count the statements a
//! generator sends a real server) and can run a hook, once, just before it passes on
//! the first chunk holding a given text (to act between two statements of leafid's, as
//! a DBA's migration would). Plain threads and blocking sockets, so a hook may call
//! leafid's blocking API. The servers the tests use speak without TLS on loopback, so
//! statements cross it as text.

#![allow(dead_code)] // each test binary that includes this file uses part of it

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

type Hook = Box<dyn FnOnce() + Send>;

/// A running proxy; its threads live until the process ends.
#[derive(Clone)]
pub struct WatchProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl WatchProxy {
    /// A proxy in front of the server of `url`; `hook`, when given, runs once before
    /// the first client chunk holding its text is passed on.
    pub fn start(url: &str, hook: Option<(&'static str, Hook)>) -> WatchProxy {
        let u = url::Url::parse(url).unwrap();
        let upstream = format!("{}:{}", u.host_str().unwrap(), u.port().unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = WatchProxy {
            addr: listener.local_addr().unwrap(),
            sent: Arc::default(),
        };
        let hook = Arc::new(Mutex::new(hook));
        let sent = proxy.sent.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || drop(std::io::copy(&mut s2, &mut c2)));
                let (sent, hook) = (sent.clone(), hook.clone());
                std::thread::spawn(move || forward(client, server, &sent, &hook));
            }
        });
        proxy
    }

    /// `url` with its host and port turned to this proxy's.
    pub fn url(&self, url: &str) -> String {
        let mut u = url::Url::parse(url).unwrap();
        u.set_host(Some("127.0.0.1")).unwrap();
        u.set_port(Some(self.addr.port())).unwrap();
        u.to_string()
    }

    /// How many times clients have sent `text` since the last [`WatchProxy::clear`].
    pub fn count(&self, text: &str) -> usize {
        let sent = self.sent.lock().unwrap();
        sent.windows(text.len())
            .filter(|w| *w == text.as_bytes())
            .count()
    }

    /// Forgets what was sent so far.
    pub fn clear(&self) {
        self.sent.lock().unwrap().clear();
    }
}

/// Client to server: each chunk kept, the hook run before the chunk that holds its text.
fn forward(
    mut client: TcpStream,
    mut server: TcpStream,
    sent: &Mutex<Vec<u8>>,
    hook: &Mutex<Option<(&'static str, Hook)>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        sent.lock().unwrap().extend_from_slice(chunk);
        let mut hook = hook.lock().unwrap();
        let due = matches!(&*hook, Some((text, _))
            if chunk.windows(text.len()).any(|w| w == text.as_bytes()));
        if due {
            let (_, run) = hook.take().unwrap();
            drop(hook);
            run();
        } else {
            drop(hook);
        }
        if server.write_all(chunk).is_err() {
            break;
        }
    }
    drop(server.shutdown(std::net::Shutdown::Both));
}
