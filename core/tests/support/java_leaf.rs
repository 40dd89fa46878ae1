//! A faithful simulator of one Java Leaf server in snowflake mode, for tests that run
//! leafid beside Java Leaf: `SnowflakeZookeeperHolder.init()` and `SnowflakeIDGenImpl`
//! of Meituan-Dianping/Leaf 1.0.1, step for step, over the project's own ZooKeeper
//! client. Include it with `#[path]` (see `tests/registry/main.rs`).
//!
//! What it does, as Java does it:
//! - `init()`: `exists(/snowflake/{name}/forever)`; when missing, creates the node
//!   `{ip}:{port}-` PERSISTENT_SEQUENTIAL (parents created) with the Endpoint JSON and
//!   keeps worker id **0** whatever the sequence (Java never parses it on this path).
//!   Otherwise lists the children, splits each name on `-` (`parseInt` of the second
//!   part; a name that does not parse throws), and for its own `ip:port` reads the node
//!   and runs `checkInitTimeStamp` (`timestamp <= now`): when that fails, or anything
//!   throws, it falls back to `{tmp}/{name}/leafconf/{port}/workerID.properties`
//!   (`workerID=N`) and **never uploads** (the silent path); with no such file, `init`
//!   fails. A new `ip:port` creates its node and takes the integer after the first
//!   `-` of the full path. Every successful ZooKeeper path writes the properties file.
//! - uploads: `setData` (unconditional, any version) of
//!   `{"ip":"…","port":"…","timestamp":now}` 1 s after `init`, then 3 s after each upload
//!   finished (`scheduleWithFixedDelay(1, 3 s)`), skipped when the clock is behind the
//!   last upload; errors are only logged (a deleted node is never recreated).
//! - issuing: Leaf's layout (twepoch 1288834974657, 10 worker bits, 12 sequence bits), a
//!   random sequence start in 0..100 each new millisecond, a wrap waits for the next
//!   millisecond, a backward step of up to 5 ms is slept out twice, a larger one is an
//!   error (-3). Issuing starts as soon as `init` returns, at full speed on a thread of
//!   its own, into a `Vec<i64>` ([`JavaLeaf::ids`]).
//!
//! API: [`JavaLeaf::start`] (blocks through `init`, like the Java constructor),
//! [`JavaLeaf::worker_id`], [`JavaLeaf::silent`] (started from the local file, never
//! uploads), [`JavaLeaf::uploads`] (successful uploads so far, with the local time of
//! the first), [`JavaLeaf::ids`] (a copy of what it issued), [`JavaLeaf::stop`] (stops
//! issuing and uploading, closes the session; returns every id). Dropping it stops it.
//! [`leaf_worker`] and [`leaf_timestamp_ms`] decode Leaf-layout ids.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leafid::snowflake::registry::zk_client::{Client, CreateMode};

/// Leaf's epoch (Thu Nov 04 2010 09:42:54 GMT+0800).
pub const TWEPOCH: i64 = 1_288_834_974_657;
const WORKER_BITS: u32 = 10;
const SEQUENCE_BITS: u32 = 12;
const SEQUENCE_MASK: i64 = (1 << SEQUENCE_BITS) - 1;

/// The worker id of a Leaf-layout id.
pub fn leaf_worker(id: i64) -> u32 {
    ((id >> SEQUENCE_BITS) & ((1 << WORKER_BITS) - 1)) as u32
}

/// The timestamp (ms since the Unix epoch) of a Leaf-layout id.
pub fn leaf_timestamp_ms(id: i64) -> i64 {
    (id >> (SEQUENCE_BITS + WORKER_BITS)) + TWEPOCH
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One simulated Java Leaf server.
pub struct JavaLeaf {
    worker_id: u32,
    silent: bool,
    node: Option<String>,
    stop: Arc<AtomicBool>,
    ids: Arc<Mutex<Vec<i64>>>,
    uploads: Arc<AtomicU64>,
    first_upload_ms: Arc<Mutex<Option<i64>>>,
    started_ms: i64,
    issuer: Option<std::thread::JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

fn endpoint(ip: &str, port: &str, now: i64) -> Vec<u8> {
    format!(r#"{{"ip":"{ip}","port":"{port}","timestamp":{now}}}"#).into_bytes()
}

fn props_path(tmp: &Path, name: &str, port: &str) -> PathBuf {
    tmp.join(name)
        .join("leafconf")
        .join(port)
        .join("workerID.properties")
}

/// The ZooKeeper part of `init()`: `Ok((worker id, own node))`, or `Err` where Java throws.
async fn zk_init(
    c: &Client,
    name: &str,
    ip: &str,
    port: &str,
    ahead_ms: i64,
) -> Result<(u32, String), String> {
    let now_ms = move || now_ms() + ahead_ms;
    let forever = format!("/snowflake/{name}/forever");
    let listen = format!("{ip}:{port}");
    let create = || async {
        c.mkdir(&forever).await.map_err(|e| e.to_string())?;
        c.create(
            &format!("{forever}/{listen}-"),
            &endpoint(ip, port, now_ms()),
            CreateMode::PersistentSequential,
        )
        .await
        .map_err(|e| e.to_string())
    };
    if c.check_stat(&forever)
        .await
        .map_err(|e| e.to_string())?
        .is_none()
    {
        let node = create().await?;
        return Ok((0, node)); // Java's workerID stays at its default, 0
    }
    let keys = c.list_children(&forever).await.map_err(|e| e.to_string())?;
    let mut own = None;
    for key in keys {
        let mut parts = key.split('-');
        let addr = parts.next().unwrap_or_default().to_string();
        let seq: i32 = parts
            .next()
            .ok_or("ArrayIndexOutOfBounds")?
            .parse()
            .map_err(|e| format!("NumberFormatException: {e}"))?;
        if addr == listen {
            own = Some((seq as u32, format!("{forever}/{key}")));
        }
    }
    match own {
        Some((id, node)) => {
            let (data, _) = c.get_data(&node).await.map_err(|e| e.to_string())?;
            let v: serde_json::Value = serde_json::from_slice(&data).map_err(|e| e.to_string())?;
            let stamp = v["timestamp"].as_i64().ok_or("no timestamp")?;
            if stamp > now_ms() {
                return Err(
                    "init timestamp check error,forever node timestamp gt this node time".into(),
                );
            }
            Ok((id, node))
        }
        None => {
            let node = create().await?;
            let seq = node.split('-').nth(1).ok_or("no '-' in the new node")?;
            Ok((
                seq.parse()
                    .map_err(|e| format!("NumberFormatException: {e}"))?,
                node,
            ))
        }
    }
}

impl JavaLeaf {
    /// Runs `init()` for `ip:port` under `leaf.name` `name` on ZooKeeper `connect`, with
    /// `tmp` as `java.io.tmpdir`, then starts issuing (and uploading, on the ZooKeeper
    /// path). `Err` where Java's constructor fails (no ZooKeeper path and no local file).
    pub fn start(
        connect: &str,
        name: &str,
        ip: &str,
        port: &str,
        tmp: &Path,
    ) -> Result<JavaLeaf, String> {
        Self::start_ahead(connect, name, ip, port, tmp, 0)
    }

    /// [`JavaLeaf::start`] on a host whose clock is `ahead_ms` ahead of this one's: it
    /// checks, uploads and issues by that clock.
    pub fn start_ahead(
        connect: &str,
        name: &str,
        ip: &str,
        port: &str,
        tmp: &Path,
        ahead_ms: i64,
    ) -> Result<JavaLeaf, String> {
        let now_ms = move || now_ms() + ahead_ms;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let props = props_path(tmp, name, port);
        let session = runtime.block_on(async {
            let c = Client::connect(
                connect,
                Duration::from_millis(6000),
                Duration::from_millis(10_000),
            )
            .await
            .map_err(|e| e.to_string())?;
            let r = zk_init(&c, name, ip, port, ahead_ms).await;
            Ok::<_, String>((c, r))
        });
        let (client, outcome) = match session {
            Ok((c, r)) => (Some(c), r),
            Err(e) => (None, Err(e)),
        };
        let (worker_id, node, silent) = match outcome {
            Ok((id, node)) => {
                // updateLocalWorkerID
                let _ = std::fs::create_dir_all(props.parent().unwrap());
                let _ = std::fs::write(&props, format!("workerID={id}"));
                (id, Some(node), false)
            }
            Err(_) => {
                let text = std::fs::read_to_string(&props)
                    .map_err(|e| format!("START FAILED and no local workerID.properties: {e}"))?;
                let id = text
                    .lines()
                    .find_map(|l| l.strip_prefix("workerID="))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or("workerID.properties without workerID")?;
                (id, None, true)
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let uploads = Arc::new(AtomicU64::new(0));
        let first_upload_ms = Arc::new(Mutex::new(None));
        if let (Some(c), Some(node)) = (client.clone(), node.clone()) {
            let (stop, uploads, first) = (stop.clone(), uploads.clone(), first_upload_ms.clone());
            let (ip, port) = (ip.to_string(), port.to_string());
            runtime.spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let mut last_update = 0i64;
                while !stop.load(Ordering::Acquire) {
                    // Skipped while the clock is behind the last upload, as in Java.
                    if now_ms() >= last_update
                        && c.set_data(&node, &endpoint(&ip, &port, now_ms()), None)
                            .await
                            .is_ok()
                    {
                        last_update = now_ms();
                        first.lock().unwrap().get_or_insert(last_update);
                        uploads.fetch_add(1, Ordering::AcqRel);
                    }
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                drop(c);
            });
        }
        drop(client);
        let ids = Arc::new(Mutex::new(Vec::new()));
        let started_ms = now_ms();
        let issuer = {
            let (stop, ids) = (stop.clone(), ids.clone());
            std::thread::spawn(move || issue(worker_id as i64, &stop, &ids, ahead_ms))
        };
        Ok(JavaLeaf {
            worker_id,
            silent,
            node,
            stop,
            ids,
            uploads,
            first_upload_ms,
            started_ms,
            issuer: Some(issuer),
            runtime: Some(runtime),
        })
    }

    /// The worker id this server issues with.
    pub fn worker_id(&self) -> u32 {
        self.worker_id
    }

    /// True when `init` fell back to `workerID.properties`: this server never writes
    /// ZooKeeper.
    pub fn silent(&self) -> bool {
        self.silent
    }

    /// Its forever node (`None` on the silent path).
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// When it started issuing (local ms since the Unix epoch).
    pub fn started_ms(&self) -> i64 {
        self.started_ms
    }

    /// Successful uploads so far, and the local time of the first.
    pub fn uploads(&self) -> (u64, Option<i64>) {
        (
            self.uploads.load(Ordering::Acquire),
            *self.first_upload_ms.lock().unwrap(),
        )
    }

    /// A copy of every id issued so far.
    pub fn ids(&self) -> Vec<i64> {
        self.ids.lock().unwrap().clone()
    }

    /// Stops issuing and uploading and closes the session; returns every id issued.
    pub fn stop(mut self) -> Vec<i64> {
        self.halt();
        std::mem::take(&mut *self.ids.lock().unwrap())
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.issuer.take() {
            let _ = t.join();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for JavaLeaf {
    fn drop(&mut self) {
        self.halt();
    }
}

/// `SnowflakeIDGenImpl.get` in a loop, in chunks so the lock is not taken per id.
fn issue(worker: i64, stop: &AtomicBool, out: &Mutex<Vec<i64>>, ahead_ms: i64) {
    let now_ms = move || now_ms() + ahead_ms;
    let mut last = -1i64;
    let mut sequence = 0i64;
    let mut chunk = Vec::with_capacity(4096);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1024 {
            let mut ts = now_ms();
            if ts < last {
                let offset = last - ts;
                if offset > 5 {
                    continue; // Result(-3, EXCEPTION)
                }
                std::thread::sleep(Duration::from_millis((offset << 1) as u64));
                ts = now_ms();
                if ts < last {
                    continue; // Result(-1, EXCEPTION)
                }
            }
            if ts == last {
                sequence = (sequence + 1) & SEQUENCE_MASK;
                if sequence == 0 {
                    sequence = fastrand::i64(0..100);
                    while ts <= last {
                        ts = now_ms();
                    }
                }
            } else {
                sequence = fastrand::i64(0..100);
            }
            last = ts;
            chunk.push(
                ((ts - TWEPOCH) << (SEQUENCE_BITS + WORKER_BITS))
                    | (worker << SEQUENCE_BITS)
                    | sequence,
            );
        }
        out.lock().unwrap().append(&mut chunk);
    }
}
