//! Starting the built `leafid` binary against the real services, and plain HTTP GETs
//! as Leaf's callers make them.

#![allow(dead_code)] // each test file uses a part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The MariaDB of `scripts/services.sh`.
pub fn mysql_url() -> String {
    std::env::var("LEAFID_MYSQL_URL").expect(
        "LEAFID_MYSQL_URL is not set: start the services (scripts/services.sh start) and \
         source their env",
    )
}

/// The ZooKeeper of `scripts/services.sh` (`host:port`).
pub fn zk() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and source their env",
    )
}

/// A name no other test or run uses (tags, ZooKeeper names): no `-`, which Leaf refuses.
pub fn fresh(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// The `leafid` binary.
pub fn leafid() -> Command {
    Command::new(env!("CARGO_BIN_EXE_leafid"))
}

/// A running `leafid serve` on a loopback port the OS picked; stopped (SIGTERM) on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Every stderr line after start-up, for tests that check the log.
    pub log: mpsc::Receiver<String>,
    /// The stderr lines up to and with the "listening on" line.
    pub startup: Vec<String>,
}

impl Server {
    /// Starts `leafid serve --listen 127.0.0.1:0 ARGS…` and waits for its
    /// "listening on" line.
    pub fn start(args: &[&str]) -> Server {
        let mut cmd = leafid();
        cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
        Server::spawn(cmd)
    }

    /// Starts `cmd` (a `leafid serve` command made by the caller, its flags perhaps in
    /// the environment) and waits for its "listening on" line (text or JSON log).
    pub fn spawn(mut cmd: Command) -> Server {
        let mut child = cmd
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn leafid serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        // Drains stderr for the server's whole life, so its log never blocks it.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    if let Some(at) = line.find("listening on ") {
                        let addr: String = line[at + 13..]
                            .chars()
                            .take_while(|c| c.is_ascii_digit() || ".:[]".contains(*c))
                            .collect();
                        seen.push(line);
                        return Server {
                            child,
                            base: format!("http://{addr}"),
                            log: rx,
                            startup: seen,
                        };
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("leafid serve did not start; its log:\n{}", seen.join("\n"));
                }
            }
        }
    }

    /// `GET path`: (status, content type, body).
    pub fn get(&self, path: &str) -> (u16, String, String) {
        get(&format!("{}{path}", self.base))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `limit` for the exit: its success and how long
    /// it took, or `None` (and a SIGKILL) when it did not exit in time.
    pub fn stop_within(&mut self, limit: Duration) -> Option<(bool, Duration)> {
        let start = std::time::Instant::now();
        // SAFETY: kill(2) on our own child's pid (not yet reaped); no memory is involved.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some((status.success(), start.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// Sends SIGTERM and waits for the exit; returns the exit status's success.
    pub fn stop(mut self) -> bool {
        self.terminate()
    }

    fn terminate(&mut self) -> bool {
        // SAFETY: kill(2) on our own child's pid (not yet reaped, so not reused); no
        // memory is involved.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.child.wait().map(|s| s.success()).unwrap_or(false)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// A plain HTTP GET, as services call Leaf: (status, content type, body). Error
/// statuses are answers, not failures.
pub fn get(url: &str) -> (u16, String, String) {
    get_accepting(url, "*/*")
}

/// [`get`] with an `Accept` header (a browser sends `text/html,…`).
pub fn get_accepting(url: &str, accept: &str) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .header("Accept", accept)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.body_mut().read_to_string().unwrap();
    (status, ctype, body)
}

/// Creates `tag` in the MariaDB table through the core (its first segment then belongs
/// to this process, which drops it).
pub fn create_tag(tag: &str, step: i64) {
    let gen = leafid::SegmentGenerator::connect_blocking(&mysql_url(), Default::default()).unwrap();
    let g = gen.clone();
    let tag = tag.to_string();
    leafid::runtime::block_on(async move {
        // The table too, so a test needs no other to have run first.
        g.create_table().await?;
        g.create_tag(&tag, 1, step, "leafid-server test").await
    })
    .unwrap();
    gen.close();
}

/// The MariaDB server's URL with another database in place of its own.
pub fn mysql_url_for(database: &str) -> String {
    let mut u = url::Url::parse(&mysql_url()).unwrap();
    u.set_path(&format!("/{database}"));
    u.to_string()
}

/// A database of its own on the shared MariaDB (the `mysql` client, as an operator
/// would), dropped on drop: for tests that need a `leaf_alloc` no other test sees, or
/// none at all.
pub struct FreshDatabase {
    /// Its name.
    pub name: String,
    /// Its leafid URL.
    pub url: String,
}

impl FreshDatabase {
    /// Creates an empty database.
    pub fn create(prefix: &str) -> FreshDatabase {
        let name = fresh(prefix);
        mysql_exec(&format!("CREATE DATABASE `{name}`"));
        FreshDatabase {
            url: mysql_url_for(&name),
            name,
        }
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        mysql_exec(&format!("DROP DATABASE IF EXISTS `{}`", self.name));
    }
}

/// Runs one statement with the `mysql` client on the shared MariaDB.
pub fn mysql_exec(sql: &str) {
    let u = url::Url::parse(&mysql_url()).unwrap();
    let out = Command::new("mysql")
        .arg(format!("--host={}", u.host_str().unwrap()))
        .arg(format!("--port={}", u.port().unwrap_or(3306)))
        .arg(format!("--user={}", u.username()))
        .env("MYSQL_PWD", u.password().unwrap_or(""))
        .args(["-e", sql])
        .output()
        .expect("the mysql client (Debian's mariadb-client) runs");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
