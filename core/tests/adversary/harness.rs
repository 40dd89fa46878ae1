//! The matrix's machinery: a [`Registry`] row set's fresh configs and [`Worker`]
//! processes (this test binary re-run, see [`crate::worker`]). What they issued is
//! counted by [`crate::tally`].

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::delay_proxy::DelayProxy;
pub use crate::tally::{now_ms, Tally};
use crate::worker;

/// One registry's place in the matrix.
pub trait Registry: Sync {
    /// The name in the report (`zookeeper-recycle`).
    fn name(&self) -> &'static str;

    /// A config no other row (nor run, nor test) uses.
    fn target(&self, row: &str) -> Target;

    /// The same config as spelled for processes started from different working
    /// directories: `local` gives a relative directory (the typo of issue 20 #1).
    fn cwd_target(&self, row: &str) -> Target {
        self.target(row)
    }

    /// How long a frozen holder must stay stopped to outlive its session or lease:
    /// `None` when nothing it holds expires (`fixed`, `local`: the row then checks that
    /// a newcomer cannot take its id at all).
    fn lease_life(&self) -> Option<Duration>;

    /// The outage rows ([`crate::rows::outage_rows!`]): how long a holder run with the
    /// rows' settings ([`crate::rows::SHORT`]) keeps its id once cut off (its ZooKeeper
    /// session expires; its lease row passes its term: the bound, led by up to the
    /// reach, plus 5 s). Newcomers start then, and again each second until one has it.
    fn lease_after_cut(&self) -> Duration {
        self.lease_life().unwrap_or(Duration::from_secs(2))
    }

    /// The outage rows: deletes every record of `t`'s name, as an operator's cleanup
    /// does (`deleteall`, the rows deleted or the table truncated).
    fn wipe(&self, _t: &Target) {
        unimplemented!("{}: no records to wipe", self.name())
    }

    /// The outage rows: the URL of the `i`th other process of `t`'s name that may be
    /// handed a worker id the holder had: another identity (what it leaves behind goes
    /// into `t.keep`), or, for a pool, the same URL.
    fn other(&self, t: &mut Target, _i: usize) -> String {
        t.url.clone()
    }
}

/// A fresh config: the URL every process of a row is given.
pub struct Target {
    /// The registry URL.
    pub url: String,
    /// The name of the records (ZooKeeper leaf name, database, directory).
    pub name: String,
    /// The service's `host:port` inside `url`, when there is a service.
    pub upstream: Option<String>,
    /// What lives as long as the row (temporary directories, a database dropped on drop).
    #[allow(dead_code)] // held for its Drop
    pub keep: Vec<Box<dyn std::any::Any>>,
}

impl Target {
    /// The same records reached through a loopback proxy: leafid takes that for another
    /// host (its host lock is keyed by the service address), so two processes of one
    /// identity can both try, as two hosts of a fleet with one typo would.
    pub fn via(&self, proxy: &DelayProxy) -> Option<String> {
        let up = self.upstream.as_ref()?;
        Some(self.url.replacen(up, &proxy.addr.to_string(), 1))
    }

    /// A proxy to this target's service (`None` without a service).
    pub fn proxy(&self) -> Option<DelayProxy> {
        self.upstream.clone().map(DelayProxy::start)
    }
}

/// A name no other row, run or concurrent test uses; no `-` (Java Leaf splits on it).
pub fn unique(row: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "adv_{row}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

/// A temporary directory every user may write (workers may run as `nobody`).
pub fn open_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// True when this test runs as root (it can then start workers as another user).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Writes past libtest's capture, so every row's line shows in a passing run too.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// How to start one worker.
#[derive(Default, Clone)]
pub struct Spawn {
    /// The registry URL.
    pub url: String,
    /// The working directory (else the test's).
    pub cwd: Option<PathBuf>,
    /// Run as `nobody` (uid/gid 65534) through `setpriv`; only when root.
    pub as_nobody: bool,
    /// Extra environment (libfaketime).
    pub env: Vec<(String, String)>,
    /// The cache directory (else one of its own, beside its id file).
    pub cache: Option<PathBuf>,
}

impl Spawn {
    /// A worker of `url` with the defaults.
    pub fn url(url: &str) -> Spawn {
        Spawn {
            url: url.to_string(),
            ..Spawn::default()
        }
    }
}

/// How a worker's start ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// Holds a worker id and issues.
    Live(u32),
    /// Refused: the error's code and message.
    Refused(String, String),
}

/// A worker process and the file its ids go to.
pub struct Worker {
    /// Who it is, in the report (`a`, `newcomer`, …).
    pub label: String,
    child: Child,
    out: PathBuf,
    /// Its generator's cache directory.
    pub cache: PathBuf,
    lines: Receiver<String>,
    /// How its start ended, once known.
    pub start: Option<Start>,
    /// `ADV done …` once stopped.
    pub done: String,
}

/// Starts a worker; `dir` holds its id file and cache directory.
// A worker is always waited for in `stop`.
#[allow(clippy::zombie_processes)]
pub fn spawn(label: &str, dir: &Path, how: Spawn) -> Worker {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = if how.as_nobody && is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let out = dir.join(format!("{label}.ids"));
    let cache = how
        .cache
        .clone()
        .unwrap_or_else(|| dir.join(format!("{label}.cache")));
    cmd.args(["--ignored", "--exact", "adversary_worker", "--nocapture"])
        .args(["--test-threads=1"])
        .env(worker::URL, &how.url)
        .env(worker::OUT, &out)
        .env(worker::CACHE, &cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(cwd) = &how.cwd {
        cmd.current_dir(cwd);
    }
    for (k, v) in &how.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn a worker (this test binary)");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            // libtest may print "test … ... " before it on the same line.
            if let Some(at) = line.find("ADV ") {
                if tx.send(line[at + 4..].to_string()).is_err() {
                    return;
                }
            }
        }
    });
    Worker {
        label: label.to_string(),
        child,
        out,
        cache,
        lines,
        start: None,
        done: String::new(),
    }
}

impl Worker {
    /// Waits (at most 60 s) until the worker holds a worker id or was refused.
    pub fn started(&mut self) -> Start {
        if let Some(s) = &self.start {
            return s.clone();
        }
        let line = match self.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => "refused TEST_TIMEOUT no answer in 60 s".into(),
            Err(RecvTimeoutError::Disconnected) => "refused TEST_EXIT exited silently".into(),
        };
        let mut parts = line.splitn(3, ' ');
        let start = match (parts.next(), parts.next(), parts.next()) {
            (Some("ready"), Some(w), _) => Start::Live(w.parse().unwrap()),
            (_, code, msg) => Start::Refused(
                code.unwrap_or("?").to_string(),
                msg.unwrap_or("").to_string(),
            ),
        };
        self.start = Some(start.clone());
        start
    }

    /// How many ids it has written so far (up to the last few it has not flushed).
    pub fn issued(&self) -> u64 {
        std::fs::metadata(&self.out).map_or(0, |m| m.len() / 8)
    }

    /// True when it holds a worker id.
    pub fn live(&mut self) -> bool {
        matches!(self.started(), Start::Live(_))
    }

    /// Sends `sig` (SIGSTOP, SIGCONT) to the worker (through `setpriv`, which execs).
    pub fn signal(&self, sig: i32) {
        // SAFETY: a plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Tells it to stop (SIGCONT first, in case it is frozen; then its stdin closes),
    /// without waiting.
    pub fn begin_stop(&mut self) {
        self.started();
        self.signal(libc::SIGCONT);
        drop(self.child.stdin.take());
    }

    /// Stops it, waits for its exit (SIGKILL after 20 s) and returns every id it
    /// issued, in issue order.
    pub fn stop(mut self) -> (String, Vec<i64>, String) {
        self.begin_stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.done = "killed after 20 s".into();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The reader thread ends with the pipe; what it forwarded is all there is.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            if let Some(d) = line.strip_prefix("done ") {
                self.done = d.to_string();
            }
        }
        let bytes = std::fs::read(&self.out).unwrap_or_default();
        let ids = bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let start = match &self.start {
            Some(Start::Live(w)) => format!("worker {w}"),
            Some(Start::Refused(code, _)) => format!("refused {code}"),
            None => "?".into(),
        };
        (
            self.label.clone(),
            ids,
            format!("{start}; done {}", self.done),
        )
    }
}

/// Sleeps `secs` seconds (the rows' pacing).
pub fn pause(secs: f64) {
    std::thread::sleep(Duration::from_secs_f64(secs));
}
