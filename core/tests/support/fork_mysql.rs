//! A simulator of the NotFound9 fork's Java server in `leaf.snowflake.mode=mysql`
//! (`SnowflakeMySQLHolder` + `WorkerIdAllocDaoImpl` + `SnowflakeIDGenImpl`), for the tests
//! that run leafid beside it, and for the registry adversary matrix (branch wt-matrix).
//!
//! What it does, step for step as the fork:
//! - **start** (`SnowflakeMySQLHolder.init`): `SELECT * FROM leaf_workerid_alloc WHERE
//!   ip_port = ?`; when absent, `INSERT` a row with `max_timestamp = now` and take the
//!   generated id (no retry: a concurrent insert's duplicate key is an exception). Then
//!   `max_timestamp > now` is a `CheckLastTimeException` (a NULL one a
//!   NullPointerException). On success the worker id is the row id, it is written to
//!   `{conf_dir}/leafconf/{port}/workerID.properties`, and the upload task starts. On
//!   **any** exception the server reads `workerID` from that file instead and starts
//!   with it, silently, with **no upload task ever** ([`StartPath::LocalFallback`]); with
//!   no file the server fails to start (`Err`). A worker id outside 0..=1023 fails too.
//! - **upload** (`ScheduledUploadData`): 1 s after start, then 3 s after each upload
//!   ended (`scheduleWithFixedDelay`), `UPDATE leaf_workerid_alloc SET max_timestamp =
//!   now WHERE id = ?`, errors ignored, skipped while the clock is behind the last upload.
//! - **issue** (`SnowflakeIDGenImpl.get`): on a background thread at full speed, Leaf's
//!   layout (epoch 1288834974657, 41 + 10 + 12 bits); a new millisecond starts its
//!   sequence at a random value below 100, a sequence wrapping past 4095 restarts at a
//!   random value in the next millisecond, a clock behind by up to 5 ms is waited out
//!   (twice the step), by more is an error (no id).
//!
//! The ids of one millisecond are consecutive, so they are kept as runs (first id,
//! count): full speed is millions of ids a second. [`ForkServer::issued`] tests one id,
//! [`ForkServer::count_issued`] counts a set, [`ForkServer::ids`] expands them all.
//!
//! Usage (`url` is a `mysql://` URL of the database, without leafid's `ip`/`port`):
//! ```ignore
//! let fork = ForkServer::start(&url, "10.1.2.3", "8080", conf_dir.path())?;
//! assert_eq!(fork.path(), StartPath::Normal);
//! let (worker, dups) = (fork.worker_id(), fork.count_issued(&leafid_ids));
//! let runs = fork.stop();
//! ```
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Leaf's epoch (`twepoch`).
pub const TWEPOCH: i64 = 1_288_834_974_657;
const WORKER_BITS: u32 = 10;
const SEQ_BITS: u32 = 12;
const SEQ_MASK: i64 = (1 << SEQ_BITS) - 1;
const MAX_WORKER: i64 = (1 << WORKER_BITS) - 1;

/// How the server started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPath {
    /// The row's id, checked against `max_timestamp`; uploads every 3 s.
    Normal,
    /// An exception at start (a future `max_timestamp`, a NULL, a lost insert race): the
    /// worker id from `workerID.properties`, and never an upload.
    LocalFallback,
}

/// One running fork server.
pub struct ForkServer {
    worker_id: i64,
    path: StartPath,
    started_ms: i64,
    stop: Arc<AtomicBool>,
    stop_upload: Option<mpsc::Sender<()>>,
    issuer: Option<JoinHandle<()>>,
    uploader: Option<JoinHandle<()>>,
    runs: Arc<Mutex<Vec<(i64, u32)>>>,
    uploads: Arc<AtomicU64>,
    first_upload_ms: Arc<AtomicI64>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn conf_file(conf_dir: &Path, port: &str) -> PathBuf {
    conf_dir
        .join("leafconf")
        .join(port)
        .join("workerID.properties")
}

/// `WorkerIdAllocDaoImpl.getOrCreateLeafWorkerId`: (id, max_timestamp).
async fn get_or_create(url: &str, ip: &str, port: &str) -> Result<(i64, Option<i64>), sqlx::Error> {
    use sqlx::{Connection, Row};
    let mut c = sqlx::MySqlConnection::connect(url).await?;
    let ip_port = format!("{ip}:{port}");
    let row = sqlx::query("SELECT * FROM leaf_workerid_alloc WHERE ip_port = ?")
        .bind(&ip_port)
        .fetch_optional(&mut c)
        .await?;
    if let Some(r) = row {
        return Ok((r.try_get("id")?, r.try_get("max_timestamp")?));
    }
    let now = now_ms();
    let done = sqlx::query(
        "INSERT INTO leaf_workerid_alloc (ip_port, ip, port, max_timestamp, create_time, update_time) \
         VALUES (?, ?, ?, ?, NOW(), NOW())",
    )
    .bind(&ip_port)
    .bind(ip)
    .bind(port)
    .bind(now)
    .execute(&mut c)
    .await?;
    Ok((done.last_insert_id() as i64, Some(now)))
}

impl ForkServer {
    /// Starts a fork server for `ip:port` on the database at `url`, with its local
    /// `workerID.properties` under `conf_dir` (the fork's `java.io.tmpdir/{leaf.name}`).
    /// `Err` is a server that fails to start.
    pub fn start(url: &str, ip: &str, port: &str, conf_dir: &Path) -> Result<ForkServer, String> {
        Self::start_ahead(url, ip, port, conf_dir, 0)
    }

    /// [`ForkServer::start`] on a host whose clock is `ahead_ms` ahead of this one's: it
    /// checks, uploads and issues by that clock.
    pub fn start_ahead(
        url: &str,
        ip: &str,
        port: &str,
        conf_dir: &Path,
        ahead_ms: i64,
    ) -> Result<ForkServer, String> {
        let now_ms = move || now_ms() + ahead_ms;
        let started_ms = now_ms();
        let (u, i, p) = (url.to_string(), ip.to_string(), port.to_string());
        let found = leafid::runtime::block_on(async move { get_or_create(&u, &i, &p).await });
        let checked = match found {
            Ok((_, None)) => Err("NullPointerException: max_timestamp is NULL".to_string()),
            Ok((_, Some(ts))) if ts > now_ms() => Err(format!(
                "CheckLastTimeException: max_timestamp {ts} is after this node's time"
            )),
            Ok((id, Some(_))) => Ok(id),
            Err(e) => Err(e.to_string()),
        };
        let file = conf_file(conf_dir, port);
        let (worker_id, path) = match checked {
            Ok(id) => {
                // updateLocalWorkerID: best effort, as the fork.
                if let Some(dir) = file.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::write(&file, format!("workerID={id}"));
                (id, StartPath::Normal)
            }
            Err(cause) => {
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    format!("start failed ({cause}) and no local workerID file: {e}")
                })?;
                let id = text
                    .trim()
                    .strip_prefix("workerID=")
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .ok_or_else(|| format!("start failed ({cause}); bad local file {text:?}"))?;
                (id, StartPath::LocalFallback)
            }
        };
        if !(0..=MAX_WORKER).contains(&worker_id) {
            return Err(format!(
                "workerID must gte 0 and lte 1023 (got {worker_id})"
            ));
        }
        let mut server = ForkServer {
            worker_id,
            path,
            started_ms,
            stop: Arc::new(AtomicBool::new(false)),
            stop_upload: None,
            issuer: None,
            uploader: None,
            runs: Arc::new(Mutex::new(Vec::new())),
            uploads: Arc::new(AtomicU64::new(0)),
            first_upload_ms: Arc::new(AtomicI64::new(0)),
        };
        if path == StartPath::Normal {
            let (tx, rx) = mpsc::channel::<()>();
            server.stop_upload = Some(tx);
            let (url, uploads, first) = (
                url.to_string(),
                server.uploads.clone(),
                server.first_upload_ms.clone(),
            );
            server.uploader = Some(std::thread::spawn(move || {
                upload_loop(url, worker_id, rx, uploads, first, ahead_ms)
            }));
        }
        let (stop, runs) = (server.stop.clone(), server.runs.clone());
        server.issuer = Some(std::thread::spawn(move || {
            issue_loop(worker_id, stop, runs, ahead_ms)
        }));
        Ok(server)
    }

    /// The worker id the server issues with.
    pub fn worker_id(&self) -> i64 {
        self.worker_id
    }

    /// How it started.
    pub fn path(&self) -> StartPath {
        self.path
    }

    /// When `start` was called (ms since the Unix epoch).
    pub fn started_ms(&self) -> i64 {
        self.started_ms
    }

    /// Uploads of `max_timestamp` that succeeded so far.
    pub fn uploads(&self) -> u64 {
        self.uploads.load(Ordering::Acquire)
    }

    /// When the first upload succeeded (ms since the Unix epoch), if it has.
    pub fn first_upload_ms(&self) -> Option<i64> {
        Some(self.first_upload_ms.load(Ordering::Acquire)).filter(|&t| t > 0)
    }

    /// How many ids it has issued so far.
    pub fn issued_count(&self) -> u64 {
        let runs = self.runs.lock().unwrap();
        runs.iter().map(|&(_, n)| n as u64).sum()
    }

    /// Whether it has issued `id` so far.
    pub fn issued(&self, id: i64) -> bool {
        let runs = self.runs.lock().unwrap();
        // Runs are in issuing order, so their first ids increase.
        let i = runs.partition_point(|&(first, _)| first <= id);
        i > 0 && {
            let (first, n) = runs[i - 1];
            id < first + n as i64
        }
    }

    /// How many of `ids` it has issued so far.
    pub fn count_issued(&self, ids: &[i64]) -> usize {
        ids.iter().filter(|&&id| self.issued(id)).count()
    }

    /// Every id issued so far, expanded (8 bytes an id: mind the memory at full speed).
    pub fn ids(&self) -> Vec<i64> {
        let runs = self.runs.lock().unwrap();
        runs.iter()
            .flat_map(|&(first, n)| first..first + n as i64)
            .collect()
    }

    /// Stops issuing and uploading, as a killed server: the row stays as last written.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        drop(self.stop_upload.take());
        if let Some(t) = self.issuer.take() {
            let _ = t.join();
        }
        if let Some(t) = self.uploader.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `scheduleWithFixedDelay(updateNewData, 1 s, 3 s)` until the sender is dropped.
fn upload_loop(
    url: String,
    worker_id: i64,
    stop: mpsc::Receiver<()>,
    uploads: Arc<AtomicU64>,
    first: Arc<AtomicI64>,
    ahead_ms: i64,
) {
    let now_ms = move || now_ms() + ahead_ms;
    let mut delay = Duration::from_secs(1);
    let mut last_update = 0i64;
    loop {
        if stop.recv_timeout(delay) != Err(mpsc::RecvTimeoutError::Timeout) {
            return;
        }
        delay = Duration::from_secs(3);
        let current = now_ms();
        if current < last_update {
            continue;
        }
        let u = url.clone();
        let done = leafid::runtime::block_on(async move {
            use sqlx::Connection;
            let mut c = sqlx::MySqlConnection::connect(&u).await?;
            sqlx::query("UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?")
                .bind(current)
                .bind(worker_id)
                .execute(&mut c)
                .await
        });
        if done.is_ok() {
            last_update = now_ms();
            let _ = first.compare_exchange(0, current, Ordering::AcqRel, Ordering::Acquire);
            uploads.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// `SnowflakeIDGenImpl.get` in a loop, each millisecond's ids kept as one run.
fn issue_loop(
    worker_id: i64,
    stop: Arc<AtomicBool>,
    runs: Arc<Mutex<Vec<(i64, u32)>>>,
    ahead_ms: i64,
) {
    let now_ms = move || now_ms() + ahead_ms;
    let mut last_ts = -1i64;
    let mut sequence = 0i64;
    let mut run: Option<(i64, u32)> = None;
    let mut pending: Vec<(i64, u32)> = Vec::new();
    let flush = |pending: &mut Vec<(i64, u32)>| runs.lock().unwrap().append(pending);
    while !stop.load(Ordering::Acquire) {
        let mut ts = now_ms();
        if ts < last_ts {
            let offset = last_ts - ts;
            if offset > 5 {
                continue; // Result(-3): no id
            }
            std::thread::sleep(Duration::from_millis((offset << 1) as u64));
            ts = now_ms();
            if ts < last_ts {
                continue; // Result(-1)
            }
        }
        if ts == last_ts {
            sequence = (sequence + 1) & SEQ_MASK;
            if sequence == 0 {
                sequence = fastrand::i64(0..100);
                while ts <= last_ts {
                    ts = now_ms();
                }
            }
        } else {
            sequence = fastrand::i64(0..100);
        }
        last_ts = ts;
        let id = ((ts - TWEPOCH) << (WORKER_BITS + SEQ_BITS)) | (worker_id << SEQ_BITS) | sequence;
        run = match run {
            Some((first, n)) if first + n as i64 == id => Some((first, n + 1)),
            other => {
                if let Some(done) = other {
                    pending.push(done);
                    if pending.len() >= 64 {
                        flush(&mut pending);
                    }
                }
                Some((id, 1))
            }
        };
    }
    pending.extend(run);
    flush(&mut pending);
}

/// The fork's `scripts/leaf_workerid_alloc.sql`, as an operator runs it before the first
/// fork server starts (the fork never creates its table).
pub const FORK_DDL: &str = "CREATE TABLE IF NOT EXISTS `leaf_workerid_alloc` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `ip` varchar(127) DEFAULT NULL,
  `port` varchar(127) DEFAULT NULL,
  `ip_port` varchar(127) NOT NULL,
  `max_timestamp` bigint(20) DEFAULT NULL,
  `create_time` timestamp NULL DEFAULT NULL,
  `update_time` timestamp NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`),
  UNIQUE KEY `idx_ipport` (`ip_port`) USING BTREE
) ENGINE=InnoDB";

/// A database of its own for this test process, named `{prefix}_{pid}`, with the fork's
/// table: row ids (worker ids) start at 1 on every run instead of climbing past 1023.
/// Databases of `prefix` left by processes that are gone are dropped. Returns its URL.
pub fn fresh_database(base_url: &str, prefix: &str) -> String {
    let db = format!("{prefix}_{}", std::process::id());
    let (admin, pattern, prefix_owned, create) = (
        base_url.to_string(),
        format!("{}\\_%", prefix.replace('_', "\\_")),
        format!("{prefix}_"),
        db.clone(),
    );
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&admin).await.unwrap();
        let old: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SHOW DATABASES LIKE '{pattern}'"
        )))
        .fetch_all(&mut c)
        .await
        .unwrap();
        for name in old {
            let pid = name.trim_start_matches(&prefix_owned);
            let gone = pid.chars().all(|c| c.is_ascii_digit())
                && !Path::new(&format!("/proc/{pid}")).exists();
            if gone {
                let drop = format!("DROP DATABASE IF EXISTS `{name}`");
                let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                    .execute(&mut c)
                    .await;
            }
        }
        let ddl = format!("DROP DATABASE IF EXISTS `{create}`; CREATE DATABASE `{create}`");
        sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
            .execute(&mut c)
            .await
            .unwrap();
    });
    let mut u = url::Url::parse(base_url).unwrap();
    u.set_path(&format!("/{db}"));
    let url = u.to_string();
    let u2 = url.clone();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&u2).await.unwrap();
        sqlx::raw_sql(FORK_DDL).execute(&mut c).await.unwrap();
    });
    url
}
