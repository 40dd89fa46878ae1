//! leafid's `mysql` registry beside the NotFound9 fork's Java server
//! (`leaf.snowflake.mode=mysql`, simulated by `support/fork_mysql.rs`) on one
//! `leaf_workerid_alloc` row, on a real MariaDB (`LEAFID_MYSQL_URL`), both issuing at
//! full speed with Leaf's layout (issue 20, row 2):
//! - a fork server running, then leafid with its ip:port: refused, no id issued;
//! - leafid running, then the fork server starts: leafid sees its first upload and
//!   stops; the ids both issued meanwhile (the residual window) are counted and printed;
//! - leafid closed, then the fork server restarts: it takes its normal path and uploads.

use crate::support::fork_mysql;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fork_mysql::{ForkServer, StartPath};
use leafid::{Error, SnowflakeGenerator};

/// A database of this test process's own, with the fork's table.
fn base() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let base = std::env::var("LEAFID_MYSQL_URL")
            .expect("LEAFID_MYSQL_URL is not set: `source .services/env` first");
        fork_mysql::fresh_database(&base, "leafid_fork")
    })
    .clone()
}

/// An ip:port no other test or run uses.
fn unique_ip(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("fork_{tag}_{}_{n}", std::process::id())
}

fn leafid_url(ip: &str) -> String {
    let base = base();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}ip={ip}&port=8080")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn build(ip: &str, cache: &std::path::Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(&leafid_url(ip))?
        .cache_dir(cache)
        .build_blocking()
}

/// The row of `ip`:8080, so a test can seed the fork's local file with it.
fn row_id(ip: &str) -> i64 {
    let (url, ip_port) = (base(), format!("{ip}:8080"));
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT id FROM leaf_workerid_alloc WHERE ip_port = ?")
            .bind(ip_port)
            .fetch_one(&mut c)
            .await
            .unwrap()
    })
}

/// The fork's `workerID.properties`, as left by an earlier run of the fork on this host.
fn seed_local_file(conf: &std::path::Path, worker: i64) {
    let dir = conf.join("leafconf").join("8080");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("workerID.properties"),
        format!("workerID={worker}"),
    )
    .unwrap();
}

#[test]
fn a_fork_server_running_refuses_leafid_on_its_row() {
    let ip = unique_ip("first");
    let conf = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    // leafid starts right after the fork server, before its first upload: the hardest
    // case (the row holds the fork's insert time only).
    let mut fork = ForkServer::start(&base(), &ip, "8080", conf.path()).unwrap();
    assert_eq!(fork.path(), StartPath::Normal);
    match build(&ip, cache.path()) {
        Err(Error::WorkerIdInUse {
            holder, worker_id, ..
        }) => {
            assert_eq!(worker_id, Some(fork.worker_id() as u32));
            assert!(holder.contains("fork's Java server"), "{holder}");
        }
        Err(e) => panic!("expected WorkerIdInUse, got {e:?}"),
        Ok(g) => {
            let ids: Vec<i64> = (0..10_000).filter_map(|_| g.next_id_now().ok()).collect();
            let dups = fork.count_issued(&ids);
            g.close();
            panic!(
                "leafid took worker {} beside a live fork server; {dups} duplicates in {} ids",
                g.worker_id(),
                ids.len()
            );
        }
    }
    // Once the fork server has uploaded, the same.
    while fork.uploads() == 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = build(&ip, cache.path()).map(|g| g.worker_id()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    assert_eq!(fork.path(), StartPath::Normal);
    fork.stop();
}

#[test]
fn a_fork_server_started_beside_leafid_stops_it_within_the_residual_window() {
    let ip = unique_ip("after");
    let conf = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let g = Arc::new(build(&ip, cache.path()).unwrap());
    let worker = g.worker_id();
    // The fork ran on this host before: its local file names the row's id.
    seed_local_file(conf.path(), row_id(&ip));
    // leafid at full speed; ids kept from just before the fork's start.
    let keep_from = Arc::new(AtomicI64::new(i64::MAX));
    let done = Arc::new(AtomicBool::new(false));
    let issuer = {
        let (g, keep_from, done) = (g.clone(), keep_from.clone(), done.clone());
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut last_ok_ms = 0i64;
            while !done.load(Ordering::Acquire) {
                match g.next_id_now() {
                    Ok(id) => {
                        let ts = g.decode(id).timestamp_ms;
                        last_ok_ms = now_ms();
                        if ts >= keep_from.load(Ordering::Acquire) {
                            kept.push(id);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            (kept, last_ok_ms)
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    keep_from.store(now_ms() - 5, Ordering::Release);
    let mut fork = ForkServer::start(&base(), &ip, "8080", conf.path()).unwrap();
    // The fork reads what leafid wrote into max_timestamp: never a future time, so the
    // fork takes its normal path (with a future one it would fall back to its local file
    // silently and never write again: invisible).
    assert_eq!(
        fork.path(),
        StartPath::Normal,
        "fork fell back to its local file"
    );
    assert_eq!(fork.worker_id(), worker as i64);
    // Long enough for the first upload, the stop, and two refused re-acquires, with
    // room for a loaded machine (CI: the fork's first upload at +1.6 s, leafid's stop
    // about 6 s after the fork's start, beside the release builds).
    std::thread::sleep(Duration::from_millis(12_000));
    done.store(true, Ordering::Release);
    let (kept, last_ok_ms) = issuer.join().unwrap();
    fork.stop();
    let dups = fork.count_issued(&kept);
    let window_ms = kept
        .last()
        .map_or(0, |&id| g.decode(id).timestamp_ms - fork.started_ms());
    let first_upload = fork.first_upload_ms().map(|t| t - fork.started_ms());
    println!(
        "residual window: leafid's last id {window_ms} ms after the fork's start \
         (fork's first upload at +{first_upload:?} ms); {dups} duplicates among {} leafid ids \
         and {} fork ids issued",
        kept.len(),
        fork.issued_count()
    );
    assert!(
        last_ok_ms < now_ms() - 4000,
        "leafid still issued {} ms before the end: it never stopped beside the fork",
        now_ms() - last_ok_ms
    );
    assert!(fork.uploads() > 0);
    g.close();
}

#[test]
fn a_fork_server_restarted_after_leafid_closed_takes_its_normal_path() {
    let ip = unique_ip("restart");
    let conf = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    // A new row: the ids start above the database's clock plus the reach and lead the
    // clock (issue 30), so `close` waits until the clock passes the last id before it
    // lets go; a short lookahead and skew keep that wait (the reach) at 2.5 s.
    let g = SnowflakeGenerator::builder()
        .registry_url(&leafid_url(&ip))
        .unwrap()
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(300))
        .lookahead(Duration::from_secs(1))
        .max_skew(Duration::from_millis(500))
        .build_blocking()
        .unwrap();
    let worker = g.worker_id();
    // A local file from an earlier fork run with a wrong id: a fallback would show.
    seed_local_file(conf.path(), (worker as i64 + 1) % 1024);
    let mut last = 0;
    let deadline = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < deadline {
        last = g.next_id().unwrap();
    }
    g.close();
    let mut fork = ForkServer::start(&base(), &ip, "8080", conf.path()).unwrap();
    assert_eq!(fork.path(), StartPath::Normal);
    assert_eq!(fork.worker_id(), worker as i64);
    let deadline = Instant::now() + Duration::from_secs(10);
    while fork.uploads() == 0 {
        assert!(Instant::now() < deadline, "the fork server never uploaded");
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "fork's first upload {} ms after its start",
        fork.first_upload_ms().unwrap() - fork.started_ms()
    );
    fork.stop();
    assert!(
        fork.ids().iter().all(|&id| id > last),
        "the fork reissued below leafid's last id"
    );
}

/// The other host's clock: the system clock moved by `offset` ms.
#[derive(Debug)]
struct Skewed(i64);

impl leafid::Clock for Skewed {
    fn now_millis(&self) -> i64 {
        leafid::SystemClock.now_millis() + self.0
    }
}

/// Issue 28 #1: leafid held this `ip:port` once (its lease row keeps its bound), then a
/// fork server on a host 1.5 s ahead ran on the row and uploaded `max_timestamp` by its
/// clock, issuing up to its next upload (3 s later) past it. leafid comes back on a host
/// 1.5 s behind (both within a 2 s `max_skew`). `max_timestamp` is the floor, and the
/// old bound in the lease row beside it must not make it count as recorded: the first id
/// waits out the skew too. Before, the floor counted as recorded, and the first id came
/// right after `max_timestamp`, inside what the fork had issued.
#[test]
fn an_old_leafid_bound_under_a_newer_fork_max_timestamp_is_no_recorded_floor() {
    let ip = unique_ip("forkafter");
    let earlier = build(&ip, tempfile::tempdir().unwrap().path()).unwrap();
    let worker = earlier.worker_id();
    earlier.next_id().unwrap();
    earlier.close();
    // The fork takes the row over later, its clock 1.5 s ahead, and uploads its time.
    std::thread::sleep(Duration::from_millis(500));
    let written = now_ms();
    let (url, stamp) = (base(), written + 1_500);
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
        sqlx::query("UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?")
            .bind(stamp)
            .bind(worker as i64)
            .execute(&mut c)
            .await
            .unwrap();
    });
    let cache = tempfile::tempdir().unwrap();
    let gen = SnowflakeGenerator::builder()
        .registry_url(&leafid_url(&ip))
        .unwrap()
        .clock(Arc::new(Skewed(-1_500)))
        .max_skew(Duration::from_secs(2))
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap();
    assert_eq!(gen.worker_id(), worker);
    let first = gen.decode(gen.next_id().unwrap()).timestamp_ms;
    gen.close();
    // The fork issued up to its clock at its next upload: (written + 3 s) + 1.5 s.
    let fork_last = written + 3_000 + 1_500;
    assert!(
        first > fork_last,
        "the first id's time {first} is not above {fork_last}, the last the fork may have issued"
    );
}
