//! The matrix's machinery: a [`Registry`] row set's fresh configs, [`Worker`] processes
//! (this test binary re-run, see [`crate::worker`]), and the [`Tally`] of everything
//! issued.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::delay_proxy::DelayProxy;
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

/// Leaf's layout: 41 bits of time, 10 of worker id, 12 of sequence.
pub fn worker_of(id: i64) -> i64 {
    (id >> 12) & 0x3ff
}

/// The wall-clock ms an id of Leaf's layout was issued at.
pub fn time_of(id: i64) -> i64 {
    (id >> 22) + leafid::snowflake::LEAF_EPOCH_MS
}

/// Wall-clock ms now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Everything a row issued, from every source, and what went wrong.
pub struct Tally {
    registry: &'static str,
    row: String,
    sources: Vec<String>,
    seen: HashMap<i64, u16>,
    ids: u64,
    foreign: u64,
    duplicates: u64,
    /// (worker id, first source, second source) -> count.
    dup_by: HashMap<(i64, u16, u16), u64>,
    not_increasing: Vec<String>,
    notes: Vec<String>,
    refused: usize,
    /// `label: CODE` of each refused worker.
    refusals: Vec<String>,
    live: usize,
    /// Foreign writers' ids as sorted runs of consecutive ids (first, last), with their
    /// source: a simulator issues millions a second, too many for the map.
    foreign_runs: Vec<(Vec<(i64, i64)>, u16)>,
    /// The residual window (`fence.rs`): duplicates with a foreign writer issued at
    /// these times are measured and reported, not failed.
    window: Option<(i64, i64)>,
    /// Duplicates inside it, and the latest of their times.
    in_window: u64,
    window_last_ms: i64,
}

impl Tally {
    /// An empty tally for `row` of `registry`.
    pub fn new(registry: &dyn Registry, row: &str) -> Tally {
        Tally {
            registry: registry.name(),
            row: row.to_string(),
            sources: Vec::new(),
            seen: HashMap::new(),
            ids: 0,
            foreign: 0,
            duplicates: 0,
            dup_by: HashMap::new(),
            not_increasing: Vec::new(),
            notes: Vec::new(),
            refused: 0,
            refusals: Vec::new(),
            live: 0,
            foreign_runs: Vec::new(),
            window: None,
            in_window: 0,
            window_last_ms: i64::MIN,
        }
    }

    /// A remark for the report line.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Stops `w` and counts its ids.
    pub fn stop(&mut self, w: Worker) {
        let (label, ids, how) = w.stop();
        if let Some(code) = how.strip_prefix("refused ") {
            self.refused += 1;
            let code = code.split(';').next().unwrap_or("?");
            self.refusals.push(format!("{label}: {code}"));
        } else {
            self.live += 1;
        }
        self.add(&format!("{label} ({how})"), &ids);
    }

    /// Stops every worker (all told at once) and counts their ids.
    pub fn stop_all(&mut self, mut ws: Vec<Worker>) {
        ws.iter_mut().for_each(Worker::begin_stop);
        for w in ws {
            self.stop(w);
        }
    }

    /// Counts a foreign writer's ids (a Java Leaf or fork simulator), in issue order.
    /// They are checked against every leafid id when the row finishes.
    pub fn foreign(&mut self, label: &str, ids: &[i64]) {
        let me = self.sources.len() as u16;
        self.sources.push(label.to_string());
        if let Some(w) = ids.windows(2).find(|w| w[1] <= w[0]) {
            self.not_increasing
                .push(format!("{label}: {} then {}", w[0], w[1]));
        }
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for &id in ids {
            match runs.last_mut() {
                Some(last) if last.1 + 1 == id => last.1 = id,
                _ => runs.push((id, id)),
            }
        }
        runs.sort_unstable();
        self.foreign += ids.len() as u64;
        self.foreign_runs.push((runs, me));
    }

    /// Tolerates duplicates with a foreign writer issued between `from_ms` and `to_ms`
    /// (wall clock): fence.rs's residual window, where a foreign server started beside
    /// a live leafid issues before its first upload and no protocol can see it.
    pub fn residual_window(&mut self, from_ms: i64, to_ms: i64) {
        self.window = Some((from_ms, to_ms));
    }

    /// Every leafid id that a foreign writer issued too.
    fn check_foreign(&mut self) {
        for (runs, f) in &self.foreign_runs {
            for (&id, &src) in &self.seen {
                let i = runs.partition_point(|r| r.0 <= id);
                if i > 0 && runs[i - 1].1 >= id {
                    let at = time_of(id);
                    if self.window.is_some_and(|(a, b)| (a..=b).contains(&at)) {
                        self.in_window += 1;
                        self.window_last_ms = self.window_last_ms.max(at);
                        continue;
                    }
                    self.duplicates += 1;
                    *self.dup_by.entry((worker_of(id), *f, src)).or_default() += 1;
                }
            }
        }
    }

    fn add(&mut self, label: &str, ids: &[i64]) {
        let me = self.sources.len() as u16;
        self.sources.push(label.to_string());
        if let Some(w) = ids.windows(2).find(|w| w[1] <= w[0]) {
            self.not_increasing
                .push(format!("{label}: {} then {}", w[0], w[1]));
        }
        for &id in ids {
            if let Some(&first) = self.seen.get(&id) {
                self.duplicates += 1;
                *self.dup_by.entry((worker_of(id), first, me)).or_default() += 1;
            } else {
                self.seen.insert(id, me);
            }
        }
        self.ids += ids.len() as u64;
    }

    /// Prints the row's line and asserts: no duplicate, every source increasing.
    pub fn finish(mut self) {
        self.check_foreign();
        let verdict = if self.duplicates == 0 && self.not_increasing.is_empty() {
            "PASS"
        } else {
            "FAIL"
        };
        say(&format!(
            "ADVERSARY {:<17} {:<40} live={} refused={} ids={} foreign={} duplicates={} {verdict}{}",
            self.registry,
            self.row,
            self.live,
            self.refused,
            self.ids,
            self.foreign,
            self.duplicates,
            if self.notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.notes.join("; "))
            }
        ));
        if let Some((from, _)) = self.window.filter(|_| self.in_window > 0) {
            say(&format!(
                "    residual window: {} duplicates with the foreign writer, the last {} ms \
                 after it started (before its first upload; fence.rs)",
                self.in_window,
                self.window_last_ms - from
            ));
        }
        if !self.refusals.is_empty() {
            say(&format!("    refused: {}", self.refusals.join(", ")));
        }
        let mut detail = Vec::new();
        let mut by: Vec<_> = self.dup_by.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        for ((worker, a, b), n) in by.iter().take(6) {
            detail.push(format!(
                "{n} ids of worker {worker} issued by both {} and {}",
                self.sources[*a as usize], self.sources[*b as usize]
            ));
        }
        for d in &detail {
            say(&format!("    {d}"));
        }
        if verdict == "FAIL" {
            for s in &self.sources {
                say(&format!("    source {s}"));
            }
        }
        assert!(
            self.duplicates == 0,
            "{} / {}: {} duplicates: {}",
            self.registry,
            self.row,
            self.duplicates,
            detail.join("; ")
        );
        assert!(
            self.not_increasing.is_empty(),
            "{} / {}: ids went down: {:?}",
            self.registry,
            self.row,
            self.not_increasing
        );
    }
}

/// Sleeps `secs` seconds (the rows' pacing).
pub fn pause(secs: f64) {
    std::thread::sleep(Duration::from_secs_f64(secs));
}
