//! Adversarial review of issue 20's fencing (reviewer's proofs, not fixes).
//!
//! Each test plays an operator wiping or restoring a registry's records while a live
//! holder's connection to the registry is silently dropped (its session or lease still
//! alive, so it keeps issuing up to its last persisted bound, by design). A newcomer
//! then finds no trace of the holder at all: it takes the same worker id with no floor
//! and, because the record looks fresh, without the takeover watch. The assertion is
//! the invariant (no id twice); a failure is the finding.

use crate::support::delay_proxy;
use crate::support::fork_mysql;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delay_proxy::DelayProxy;
use leafid::snowflake::registry::zk_client::Client;
use leafid::SnowflakeGenerator;

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env")
}

fn unique(tag: &str) -> String {
    format!(
        "leafid_review_fencing_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Issues with `g` at full speed (never waiting on I/O) until stopped.
struct Issuer {
    stop: Arc<AtomicBool>,
    ids: Arc<Mutex<Vec<i64>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Issuer {
    fn start(g: Arc<SnowflakeGenerator>) -> Issuer {
        let stop = Arc::new(AtomicBool::new(false));
        let ids = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), ids.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match g.next_ids_now(256) {
                    Ok(mut v) => out.lock().unwrap().append(&mut v),
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        Issuer {
            stop,
            ids,
            thread: Some(thread),
        }
    }

    fn count(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    fn stop(mut self) -> Vec<i64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.ids.lock().unwrap())
    }
}

fn wait_until(what: &str, guard: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + guard;
    while !f() {
        assert!(Instant::now() < end, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn duplicates(a: &[i64], b: &[i64]) -> usize {
    let a: HashSet<i64> = a.iter().copied().collect();
    b.iter().filter(|id| a.contains(id)).count()
}

fn build(url: &str, cache: &std::path::Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(3_000))
        .lookahead(Duration::from_millis(6_000))
        .startup_wait(Duration::from_secs(20))
        .build_blocking()
}

async fn delete_tree(c: &Client, path: &str) {
    let kids = c.list_children(path).await.unwrap_or_default();
    for k in kids {
        Box::pin(delete_tree(c, &format!("{path}/{k}"))).await;
    }
    let _ = c.delete(path, None).await;
}

/// Holder A issues, its connection is cut, the operator runs `deleteall /snowflake/{name}`,
/// and newcomer B issues; returns (A's ids, B's ids, A's worker, B's worker).
fn zk_wipe_under_cut_holder(scheme: &str, tag: &str) -> (Vec<i64>, Vec<i64>, u32, u32) {
    let name = unique(tag);
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let proxy = DelayProxy::start(zk_addr());
    let a = Arc::new(
        build(
            &format!("{scheme}://{}/{name}?ip=10.97.0.1&port=8080", proxy.addr),
            ca.path(),
        )
        .unwrap(),
    );
    let ia = Issuer::start(a.clone());
    wait_until("A issues", Duration::from_secs(10), || ia.count() > 10_000);

    let wa = a.worker_id();
    // The network drops A's packets; its ZooKeeper session lives on for the timeout.
    proxy.set_blackhole(true);
    // The operator cleans the leaf name up (deleteall /snowflake/{name}).
    let root = format!("/snowflake/{name}");
    leafid::runtime::block_on(async move {
        let c = Client::connect(&zk_addr(), Duration::from_secs(6), Duration::from_secs(3))
            .await
            .unwrap();
        delete_tree(&c, &root).await;
    });
    let b = Arc::new(
        build(
            &format!("{scheme}://{}/{name}?ip=10.97.0.2&port=8080", zk_addr()),
            cb.path(),
        )
        .unwrap(),
    );
    let ib = Issuer::start(b.clone());
    std::thread::sleep(Duration::from_millis(2_000));
    let (ids_b, ids_a) = (ib.stop(), ia.stop());
    let wb = b.worker_id();
    b.close();
    proxy.set_blackhole(false);
    (ids_a, ids_b, wa, wb)
}

/// `zookeeper` (forever): the claim on `ids/{id}/live` and the floor in `ids/{id}` live
/// under `/snowflake/{name}` too, so `deleteall /snowflake/{name}` removes them with the
/// forever tree. A holder whose connection is down (session alive) cannot see its
/// watch fire and keeps issuing up to its bound (6 s); a newcomer with another ip:port
/// creates `forever/…-0000000000` (new-node path: no takeover watch) and gets worker 0
/// with no floor at once.
#[test]
fn forever_deleteall_of_the_name_under_a_cut_off_holder_repeats_ids() {
    let (a, b, wa, wb) = zk_wipe_under_cut_holder("zookeeper", "forever");
    assert_eq!(wa, wb, "B got another worker id: no clash possible");
    let d = duplicates(&a, &b);
    println!(
        "forever: worker {wa}, A {} ids, B {} ids, {d} duplicates",
        a.len(),
        b.len()
    );
    assert_eq!(d, 0, "{d} ids issued twice (worker {wa})");
}

/// `zookeeper-recycle`: the pool record that tells a deleted floor from an unused id
/// lives in `last/`, under the same tree. A holder cut off stops only when its client
/// reports Disconnected (2/5 of the session timeout); a newcomer after
/// `deleteall /snowflake/{name}` takes the lowest id with no floor at once.
#[test]
fn recycle_deleteall_of_the_name_under_a_cut_off_holder_repeats_ids() {
    let (a, b, wa, wb) = zk_wipe_under_cut_holder("zookeeper-recycle", "recycle");
    assert_eq!(wa, wb, "B got another worker id: no clash possible");
    let d = duplicates(&a, &b);
    println!(
        "recycle: worker {wa}, A {} ids, B {} ids, {d} duplicates",
        a.len(),
        b.len()
    );
    assert_eq!(d, 0, "{d} ids issued twice (worker {wa})");
}

/// `mysql`: the database restored from a dump taken before holder A's first start
/// (both `leaf_workerid_alloc` and `leafid_worker_lease` come back without A's rows,
/// and AUTO_INCREMENT with them). A, cut off from the database, issues up to its last
/// bound; newcomer B inserts a row, gets A's row id (AUTO_INCREMENT restarted), and
/// as `inserted` it skips the takeover watch and has no floor.
#[test]
fn mysql_restore_of_both_tables_under_a_cut_off_holder_repeats_ids() {
    mysql_restore(true);
}

/// The same restore with A fully connected: only A's 250 ms poll can stop it, and B
/// (inserted, no watch) issues within a few statements of the restore.
#[test]
fn mysql_restore_of_both_tables_under_a_connected_holder_repeats_ids() {
    mysql_restore(false);
}

fn mysql_restore(cut: bool) {
    let base = std::env::var("LEAFID_MYSQL_URL").expect("LEAFID_MYSQL_URL: source .services/env");
    // A database per test: the two variants run at once, on one identity.
    let prefix = if cut {
        "review_fencing_cut"
    } else {
        "review_fencing_live"
    };
    let db_url = fork_mysql::fresh_database(&base, prefix);
    // The database's host:port, whatever port the services run on.
    let host = db_url
        .rsplit_once('@')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("a mysql://user:pass@host:port/db URL")
        .to_string();
    let host = host.as_str();
    let proxy = DelayProxy::start(host.to_string());
    let via_proxy = db_url.replacen(host, &proxy.addr.to_string(), 1);
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Arc::new(build(&format!("{via_proxy}?ip=10.98.0.1&port=8080"), ca.path()).unwrap());
    let ia = Issuer::start(a.clone());
    wait_until("A issues", Duration::from_secs(10), || ia.count() > 10_000);

    let wa = a.worker_id();
    proxy.set_blackhole(cut);
    let admin = db_url.clone();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&admin).await.unwrap();
        // What a restore of a dump older than A does: DROP TABLE + CREATE TABLE (with the
        // dump's AUTO_INCREMENT) + the rows of then; here there were none.
        sqlx::raw_sql("DROP TABLE leaf_workerid_alloc; DROP TABLE leafid_worker_lease;")
            .execute(&mut c)
            .await
            .unwrap();
    });
    let b = Arc::new(build(&format!("{db_url}?ip=10.98.0.2&port=8080"), cb.path()).unwrap());
    let ib = Issuer::start(b.clone());
    std::thread::sleep(Duration::from_millis(2_000));
    let (ids_b, ids_a) = (ib.stop(), ia.stop());
    let wb = b.worker_id();
    b.close();
    proxy.set_blackhole(false);
    if cut {
        assert_eq!(wa, wb, "B got another worker id: no clash possible");
    }
    // Connected, A sees the restore within a poll and takes a worker id again at once
    // (a lost lease is re-acquired): whether A or B inserts first and gets row id 1 is
    // a race, so only the invariant is asserted.
    let d = duplicates(&ids_a, &ids_b);
    println!(
        "mysql (cut {cut}): worker {wa}, A {} ids, B {} ids, {d} duplicates",
        ids_a.len(),
        ids_b.len()
    );
    assert_eq!(d, 0, "{d} ids issued twice (worker {wa})");
}
