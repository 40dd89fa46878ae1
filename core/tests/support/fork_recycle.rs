//! A faithful simulator of the NotFound9 fork's `zk_recycle` server
//! (`RecyclableZookeeperHolder` + `SnowflakeIDGenImpl`), for tests that run leafid
//! beside it (the registry adversary matrix, branch wt-matrix, and
//! `tests/registry/zookeeper_recycle/beside_fork.rs`).
//!
//! What it does, step by step as the fork's `init()` (leaf-spec.md §3.4):
//! 1. If `/snowflake/{name}/recycle/notuse` does not exist, `initAllNode` creates
//!    `notuse/workId:{i}` for i = 0..=max_work_id (the off-by-one included: one node
//!    more than ids), each `{"workId":i,"lastUsedIp":null,…}`, parents as needed; the
//!    first node written under `recycle` is therefore `notuse`. A NodeExists (two
//!    servers bootstrapping at once) fails the start, as in the fork.
//! 2. `keys = getChildren(notuse)`; empty → fails ("no userful Node in /notuse").
//! 3. Takes `keys.get(0)` — whatever order ZooKeeper lists them in, without reading
//!    anyone's leases — and reads it. A `lastUsedTimestamp` ahead of the clock fails the
//!    start (`CheckLastTimeException`); it does not try another node.
//! 4. `delete(notuse/workId:i)`, then `create(inuse/workId:i, same bytes)`: two separate
//!    calls, as in the fork.
//! 5. A worker id above 1023 fails the start (`SnowflakeIDGenImpl`'s range check).
//! 6. Issues ids at full speed on a background thread with Leaf's layout (epoch
//!    1288834974657, 10 worker bits, 12 sequence bits, a random 0..100 first sequence
//!    in each ms, `tilNextMillis` on overflow, a backward step of ≤ 5 ms waited out),
//!    from the moment `init` returns — before its first upload.
//! 7. Uploads `{"workId","lastUsedIp","lastUsedPort","lastUsedTimestamp":now}` to its
//!    `inuse` node 1 s after the start, then 3 s after each upload (fixed delay); the
//!    recycle checker runs after 2 min and every 2 min, moving `inuse` nodes whose
//!    timestamp is older than 1 h + 4 *ms* (the fork's unit bug) back to `notuse`.
//!
//! Stopping it ([`ForkServer::stop`]) is a `kill -9` of the JVM: the `inuse` node stays
//! (the fork never gives an id back; its checker recycles it an hour later).
//!
//! Use: `let mut f = ForkServer::start(&ForkConfig::new(zk, name))?;` …
//! `f.worker_id()`, then `f.stop()` and `f.ids()` (every id it issued, in order).
//! Calls go through leafid's own ZooKeeper client on leafid's background runtime.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leafid::snowflake::registry::zk_client::{Client, CreateMode, ZkError};

/// Leaf's epoch.
pub const TWEPOCH: i64 = 1_288_834_974_657;
const WORKER_BITS: u32 = 10;
const SEQUENCE_BITS: u32 = 12;
const SEQUENCE_MASK: i64 = (1 << SEQUENCE_BITS) - 1;
const MAX_WORKER_ID: u32 = (1 << WORKER_BITS) - 1;
/// `maxUploadFailTime` and the checker's threshold with its unit bug (2*2 ms).
const MAX_UPLOAD_FAIL_MS: i64 = 60 * 60 * 1000;
const RECYCLE_AFTER_MS: i64 = MAX_UPLOAD_FAIL_MS + 2 * 2;
const CHECKER_EVERY: Duration = Duration::from_secs(120);
const FIRST_UPLOAD: Duration = Duration::from_secs(1);
const UPLOAD_EVERY: Duration = Duration::from_secs(3);

/// How to start a fork server.
#[derive(Debug, Clone)]
pub struct ForkConfig {
    /// The ZooKeeper connect string (`zkAddress`).
    pub zk: String,
    /// `leaf.name`.
    pub name: String,
    /// The server's ip and port, recorded in its uploads.
    pub ip: String,
    pub port: String,
    /// `maxWorkId` (1024 with the fork's default constructor; its 4-argument one takes
    /// any value: a small one makes the pick land on a few ids).
    pub max_work_id: u32,
}

impl ForkConfig {
    /// The fork's defaults: `maxWorkId` 1024, ip 10.9.9.9, port 8080.
    pub fn new(zk: &str, name: &str) -> ForkConfig {
        ForkConfig {
            zk: zk.to_string(),
            name: name.to_string(),
            ip: "10.9.9.9".into(),
            port: "8080".into(),
            max_work_id: 1024,
        }
    }
}

/// A running simulated fork server.
pub struct ForkServer {
    worker_id: u32,
    inuse_path: String,
    stop: Arc<AtomicBool>,
    issuer: Option<JoinHandle<Vec<i64>>>,
    services: Option<JoinHandle<()>>,
    ids: Vec<i64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn endpoint(work_id: u32, ip: Option<&str>, port: Option<&str>, ts: Option<i64>) -> Vec<u8> {
    serde_json::json!({
        "workId": work_id,
        "lastUsedIp": ip,
        "lastUsedPort": port,
        "lastUsedTimestamp": ts,
    })
    .to_string()
    .into_bytes()
}

fn on_runtime<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    leafid::runtime::block_on(f)
}

impl ForkServer {
    /// Runs the fork's `init()`; on success the server issues at once. Errors are the
    /// fork's start-up failures, as text.
    pub fn start(cfg: &ForkConfig) -> Result<ForkServer, String> {
        let cfg2 = cfg.clone();
        let (client, worker_id, inuse_path) = on_runtime(async move { init(&cfg2).await })?;
        let stop = Arc::new(AtomicBool::new(false));
        let issuer = {
            let stop = stop.clone();
            std::thread::spawn(move || issue(worker_id, &stop))
        };
        let services = {
            let stop = stop.clone();
            let cfg = cfg.clone();
            let path = inuse_path.clone();
            std::thread::spawn(move || services(client, cfg, worker_id, path, &stop))
        };
        Ok(ForkServer {
            worker_id,
            inuse_path,
            stop,
            issuer: Some(issuer),
            services: Some(services),
            ids: Vec::new(),
        })
    }

    /// The worker id it took.
    pub fn worker_id(&self) -> u32 {
        self.worker_id
    }

    /// Its `inuse` node.
    pub fn inuse_path(&self) -> &str {
        &self.inuse_path
    }

    /// Stops issuing and uploading (a `kill -9`: the `inuse` node stays).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.issuer.take() {
            self.ids = t.join().expect("the fork's issuer panicked");
        }
        if let Some(t) = self.services.take() {
            let _ = t.join();
        }
    }

    /// Every id it issued, in order (after [`ForkServer::stop`]).
    pub fn ids(&self) -> &[i64] {
        &self.ids
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn init(cfg: &ForkConfig) -> Result<(Client, u32, String), String> {
    let fail = |what: &str, e: ZkError| format!("Connect Zookeeper failed ({what}: {e})");
    // Curator: connection timeout 10 s, session timeout 6 s.
    let client = Client::connect(&cfg.zk, Duration::from_secs(6), Duration::from_secs(10))
        .await
        .map_err(|e| fail("connect", e))?;
    let base = format!("/snowflake/{}/recycle", cfg.name);
    let notuse = format!("{base}/notuse");
    let inuse = format!("{base}/inuse");
    if client
        .check_stat(&notuse)
        .await
        .map_err(|e| fail("checkExists", e))?
        .is_none()
    {
        // initAllNode: creatingParentsIfNeeded on each create; the parents come with
        // the first one, `notuse` first of all under `recycle`.
        client.mkdir(&notuse).await.map_err(|e| fail("create", e))?;
        for i in 0..=cfg.max_work_id {
            client
                .create(
                    &format!("{notuse}/workId:{i}"),
                    &endpoint(i, None, None, None),
                    CreateMode::Persistent,
                )
                .await
                .map_err(|e| fail("initAllNode", e))?;
        }
    }
    let keys = client
        .list_children(&notuse)
        .await
        .map_err(|e| fail("getChildren", e))?;
    let Some(first) = keys.first() else {
        return Err("NoUserfulWorkIdException: no userful Node in /notuse".into());
    };
    let (bytes, _) = client
        .get_data(&format!("{notuse}/{first}"))
        .await
        .map_err(|e| fail("getData", e))?;
    let ep: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("Connect Zookeeper failed ({e})"))?;
    let Some(work_id) = ep["workId"].as_u64() else {
        return Err("NoUserfulWorkIdException: no userful Node in /notuse".into());
    };
    if let Some(ts) = ep["lastUsedTimestamp"].as_i64() {
        if ts > now_ms() {
            return Err("CheckLastTimeException: init timestamp check error".into());
        }
    }
    client
        .delete(&format!("{notuse}/{first}"), None)
        .await
        .map_err(|e| fail("delete", e))?;
    client.mkdir(&inuse).await.map_err(|e| fail("create", e))?;
    let path = format!("{inuse}/{first}");
    client
        .create(&path, &bytes, CreateMode::Persistent)
        .await
        .map_err(|e| fail("create", e))?;
    let work_id = work_id as u32;
    if work_id > MAX_WORKER_ID {
        return Err(format!("workerID must gte 0 and lte 1023 (got {work_id})"));
    }
    Ok((client, work_id, path))
}

/// Sleeps up to `d`, returning early (false) when stopped.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
    }
    !stop.load(Ordering::SeqCst)
}

/// The upload task and the recycle checker, on one thread.
fn services(client: Client, cfg: ForkConfig, worker_id: u32, path: String, stop: &AtomicBool) {
    let mut last_update: Option<i64> = None;
    let mut next_upload = Instant::now() + FIRST_UPLOAD;
    let mut next_check = Instant::now() + CHECKER_EVERY;
    let inuse = format!("/snowflake/{}/recycle/inuse", cfg.name);
    let notuse = format!("/snowflake/{}/recycle/notuse", cfg.name);
    loop {
        let next = next_upload.min(next_check);
        if !nap(next.saturating_duration_since(Instant::now()), stop) {
            return;
        }
        if Instant::now() >= next_upload {
            if last_update.is_none_or(|t| now_ms() >= t) {
                let data = endpoint(worker_id, Some(&cfg.ip), Some(&cfg.port), Some(now_ms()));
                let (c, p) = (client.clone(), path.clone());
                match on_runtime(async move { c.set_data(&p, &data, None).await }) {
                    Ok(_) => last_update = Some(now_ms()),
                    Err(_) if last_update.is_some_and(|t| now_ms() - t > MAX_UPLOAD_FAIL_MS) => {
                        // The fork stops serving for good (-4); a simulator just stops.
                        return;
                    }
                    Err(_) => {}
                }
            }
            next_upload = Instant::now() + UPLOAD_EVERY;
        }
        if Instant::now() >= next_check {
            let (c, inuse, notuse) = (client.clone(), inuse.clone(), notuse.clone());
            on_runtime(async move { recycle(&c, &inuse, &notuse).await });
            next_check = Instant::now() + CHECKER_EVERY;
        }
    }
}

/// `checkWorkIdUploadStatus`: inuse nodes silent for 1 h + 4 ms go back to notuse.
async fn recycle(client: &Client, inuse: &str, notuse: &str) {
    let Ok(keys) = client.list_children(inuse).await else {
        return;
    };
    for k in keys {
        let p = format!("{inuse}/{k}");
        let Ok((bytes, _)) = client.get_data(&p).await else {
            return;
        };
        let ts = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["lastUsedTimestamp"].as_i64());
        if ts.is_some_and(|t| now_ms() - t > RECYCLE_AFTER_MS) {
            if client.delete(&p, None).await.is_err() {
                return;
            }
            let _ = client
                .create(&format!("{notuse}/{k}"), &bytes, CreateMode::Persistent)
                .await;
        }
    }
}

/// `SnowflakeIDGenImpl.get()` in a loop until stopped.
fn issue(worker_id: u32, stop: &AtomicBool) -> Vec<i64> {
    let mut ids = Vec::with_capacity(1 << 20);
    let mut last: i64 = -1;
    let mut seq: i64 = 0;
    let mut n: u32 = 0;
    loop {
        n = n.wrapping_add(1);
        if n.is_multiple_of(1024) && stop.load(Ordering::Relaxed) {
            return ids;
        }
        let mut ts = now_ms();
        if ts < last {
            let offset = last - ts;
            if offset > 5 {
                continue; // the fork answers an error; nothing is issued
            }
            std::thread::sleep(Duration::from_millis((offset << 1) as u64));
            ts = now_ms();
            if ts < last {
                continue;
            }
        }
        if ts == last {
            seq = (seq + 1) & SEQUENCE_MASK;
            if seq == 0 {
                seq = fastrand::i64(0..100);
                while ts <= last {
                    ts = now_ms();
                }
            }
        } else {
            seq = fastrand::i64(0..100);
        }
        last = ts;
        ids.push(
            ((ts - TWEPOCH) << (WORKER_BITS + SEQUENCE_BITS))
                | ((worker_id as i64) << SEQUENCE_BITS)
                | seq,
        );
    }
}
