//! The `zookeeper` registry beside foreign writers (issue 20 rows 3, 4, 8), against the
//! real ZooKeeper (`LEAFID_ZK`), with a faithful Java Leaf simulator
//! (`support/java_leaf.rs`) issuing at full speed with Leaf's layout:
//! - row 8: a Java server restarted on an identity a live leafid holds finds only what
//!   Leaf would write in its node, takes its normal path (uploads), and leafid stops;
//!   the residual window (both issuing until Java's first upload) is measured and printed;
//! - row 3: a Java server started just before leafid on a node carrying a leafid
//!   release marker, or last written by Java long ago, is seen by the takeover watch;
//! - row 4: the forever tree deleted under a live holder is seen at once (it takes an id
//!   again) and a new identity from the restarted sequence issues no duplicate.

use crate::support::java_leaf;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use java_leaf::{leaf_timestamp_ms, JavaLeaf};
use leafid::snowflake::registry::zk_client::Client;
use leafid::{Error, SnowflakeGenerator};

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env")
}

fn unique(tag: &str) -> String {
    format!(
        "leafid_test_foreign_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn url(name: &str, ip: &str) -> String {
    format!("zookeeper://{}/{name}?ip={ip}&port=8080", zk_addr())
}

fn build(
    name: &str,
    ip: &str,
    cache: &std::path::Path,
    heartbeat_ms: u64,
) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(&url(name, ip))?
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(heartbeat_ms))
        .lookahead(Duration::from_millis(heartbeat_ms * 2))
        .startup_wait(Duration::from_secs(20))
        .build_blocking()
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

/// Waits (a guard against a hang, no timing asserted) until `f` holds.
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

/// Row 8, and the residual window: leafid holds the identity; a Java server restarting
/// on it (with a workerID.properties from an earlier run) must find no future time in
/// its node, take its normal path and upload, and leafid must stop when it does.
#[test]
fn a_java_server_restarted_beside_a_live_leafid_takes_its_normal_path_and_leafid_stops() {
    let name = unique("row8");
    let (cache, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let g = Arc::new(build(&name, "10.20.0.1", cache.path(), 200).unwrap());
    // Java ran here before with this worker id: its fallback file is there.
    let props = tmp.path().join(&name).join("leafconf/8080");
    std::fs::create_dir_all(&props).unwrap();
    std::fs::write(
        props.join("workerID.properties"),
        format!("workerID={}", g.worker_id()),
    )
    .unwrap();
    let ours = Issuer::start(g.clone());
    wait_until("leafid issues", Duration::from_secs(10), || {
        ours.count() > 10_000
    });
    std::thread::sleep(Duration::from_millis(500)); // a few heartbeats written

    let java = JavaLeaf::start(&zk_addr(), &name, "10.20.0.1", "8080", tmp.path()).unwrap();
    assert!(
        !java.silent(),
        "Java found a future time in its node and fell back to its local file: it will never \
         write ZooKeeper again, so nobody can see it"
    );
    assert_eq!(java.worker_id(), g.worker_id());
    wait_until("Java uploads", Duration::from_secs(10), || {
        java.uploads().0 >= 1
    });
    // leafid saw the upload (its watch) and stopped: nothing more for a while.
    let mut last = ours.count();
    wait_until("leafid stops issuing", Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(300));
        let now = ours.count();
        std::mem::replace(&mut last, now) == now
    });
    let settled = ours.count();
    std::thread::sleep(Duration::from_millis(4_000)); // past Java's next upload
    assert_eq!(
        ours.count(),
        settled,
        "leafid issued again beside a live Java server"
    );
    let java_started = java.started_ms();
    let java_ids = java.stop();
    let ours_ids = ours.stop();
    let last_ours = ours_ids
        .iter()
        .map(|&id| leaf_timestamp_ms(id))
        .max()
        .unwrap();
    eprintln!(
        "RESIDUAL WINDOW: both issued for {} ms (Java start to leafid's last id); {} duplicates \
         ({} leafid ids, {} Java ids)",
        last_ours - java_started,
        duplicates(&ours_ids, &java_ids),
        ours_ids.len(),
        java_ids.len()
    );
    g.close();
}

/// Starts leafid on `ip` right after a Java server started on it, issuing at full speed
/// if it starts at all; returns leafid's ids (none when refused) and Java's.
fn leafid_right_after_java(name: &str, ip: &str, tmp: &std::path::Path) -> (Vec<i64>, Vec<i64>) {
    let cache = tempfile::tempdir().unwrap();
    let java = JavaLeaf::start(&zk_addr(), name, ip, "8080", tmp).unwrap();
    assert!(!java.silent());
    let ours = match build(name, ip, cache.path(), 3_000) {
        Ok(g) => {
            let g = Arc::new(g);
            let issuer = Issuer::start(g.clone());
            std::thread::sleep(Duration::from_millis(4_000));
            let ids = issuer.stop();
            g.close();
            ids
        }
        Err(Error::WorkerIdInUse { .. }) => Vec::new(),
        Err(e) => panic!("expected a refusal or a start, got {e:?}"),
    };
    (ours, java.stop())
}

/// Row 3 (a): the node's last write is a leafid release marker.
#[test]
fn a_java_server_started_just_before_leafid_on_a_released_node_is_seen() {
    let name = unique("row3a");
    let (cache, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let g = build(&name, "10.21.0.1", cache.path(), 200).unwrap();
    g.next_ids_now(100).unwrap();
    g.close(); // writes the release marker
    let (ours, java) = leafid_right_after_java(&name, "10.21.0.1", tmp.path());
    assert_eq!(duplicates(&ours, &java), 0, "{} leafid ids", ours.len());
}

/// Row 3 (b): the node was last written by Java more than `fence::TAKEOVER_WATCH` (3.5 s)
/// ago (a JVM restart), so the newcomer watches only 1.5 s: the new Java server's first
/// upload, 1 s after its start, still falls inside it.
#[test]
fn a_java_server_started_just_before_leafid_on_an_aged_node_is_seen() {
    let name = unique("row3b");
    let tmp = tempfile::tempdir().unwrap();
    let first = JavaLeaf::start(&zk_addr(), &name, "10.22.0.1", "8080", tmp.path()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    first.stop();
    std::thread::sleep(Duration::from_millis(4_000)); // past fence::TAKEOVER_WATCH
    let (ours, java) = leafid_right_after_java(&name, "10.22.0.1", tmp.path());
    assert_eq!(duplicates(&ours, &java), 0, "{} leafid ids", ours.len());
}

async fn delete_tree(c: &Client, path: &str) {
    let kids = c.list_children(path).await.unwrap_or_default();
    for k in kids {
        Box::pin(delete_tree(c, &format!("{path}/{k}"))).await;
    }
    let _ = c.delete(path, None).await;
}

/// Row 4: `deleteall /snowflake/{name}/forever` under a live holder: it sees the deletion
/// at once and takes a worker id again (from the restarted sequence, above its bound);
/// a new identity started right after gets the next one; no id repeats.
#[test]
fn the_forever_tree_deleted_under_a_live_holder_stops_it_at_once_and_no_id_repeats() {
    let name = unique("row4");
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A heartbeat far away: only the watch can stop the holder in time.
    let a = Arc::new(build(&name, "10.23.0.1", ca.path(), 6_000).unwrap());
    assert_eq!(a.worker_id(), 0);
    let ia = Issuer::start(a.clone());
    wait_until("A issues", Duration::from_secs(10), || ia.count() > 10_000);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = Client::connect(&zk_addr(), Duration::from_secs(6), Duration::from_secs(3))
            .await
            .unwrap();
        delete_tree(&c, &format!("/snowflake/{name}/forever")).await;
    });
    // Well inside the heartbeat: the watch, not the next renew, sees the deletion, and A
    // takes a worker id again at once (a new node, floored by its `ids/0` bound).
    let forever = format!("/snowflake/{name}/forever");
    wait_until("A re-acquires", Duration::from_secs(4), || {
        std::thread::sleep(Duration::from_millis(50));
        rt.block_on(async {
            let c = Client::connect(&zk_addr(), Duration::from_secs(6), Duration::from_secs(3))
                .await
                .unwrap();
            !c.list_children(&forever)
                .await
                .unwrap_or_default()
                .is_empty()
        })
    });

    let b = Arc::new(build(&name, "10.23.0.2", cb.path(), 6_000).unwrap());
    let ib = Issuer::start(b.clone());
    std::thread::sleep(Duration::from_millis(1_500));
    let (ids_b, ids_a) = (ib.stop(), ia.stop());
    assert!(!ids_b.is_empty());
    assert_eq!(duplicates(&ids_a, &ids_b), 0, "B worker {}", b.worker_id());
    b.close();
    a.close();
}
