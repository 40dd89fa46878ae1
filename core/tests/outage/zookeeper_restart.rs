//! ZooKeeper registries while the real ZooKeeper named by the environment is stopped
//! and started (by `scripts/services.sh stop|start zookeeper` with the same `LEAFID_*`
//! variables), in the outage test binary, so no other test sees the outage; the tests here
//! run one at a time through a lock. Develop against a private copy (see
//! notes/common.md: `LEAFID_SERVICES_DIR=/tmp/x LEAFID_ZK_PORT=… scripts/services.sh start zookeeper`).

use std::collections::HashSet;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leafid::{Error, SnowflakeGenerator};

static OUTAGE: Mutex<()> = Mutex::new(());

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

fn services(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services.sh");
    let status = Command::new("bash")
        .arg(script)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "services.sh {args:?} failed");
}

/// Starts ZooKeeper again when a test ends, even by a panic.
struct Restart;
impl Drop for Restart {
    fn drop(&mut self) {
        services(&["start", "zookeeper"]);
    }
}

fn unique_name(tag: &str) -> String {
    format!(
        "leafid_test_fault_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
    .replace('-', "_")
}

/// Issue 10 and 30: a holder cut off from ZooKeeper issues up to the last bound
/// ZooKeeper holds and not past it (once its session expires, another process may take
/// the identity with that bound as floor), and a second generator of the identity in
/// this process is refused while ZooKeeper is down.
#[test]
fn forever_holder_stops_at_its_last_zookeeper_bound_while_zookeeper_is_down() {
    let _one = OUTAGE.lock().unwrap_or_else(|p| p.into_inner());
    let name = unique_name("forever");
    let cache = tempfile::tempdir().unwrap();
    let url = format!(
        "zookeeper://{}/{name}?ip=10.0.0.1&port=1&connect_timeout_ms=1500",
        zk_addr()
    );
    let build = || {
        SnowflakeGenerator::builder()
            .registry_url(&url)
            .unwrap()
            .cache_dir(cache.path())
            .heartbeat(Duration::from_millis(200))
            // Short, so the bound passes soon (65 s by default: a minute ridden through).
            .lookahead(Duration::from_secs(1))
            .build_blocking()
    };
    let g = build().unwrap();
    let worker = g.worker_id();
    let ids = g.next_ids(1_000).unwrap();
    let last_before = *ids.last().unwrap();

    services(&["stop", "zookeeper"]);
    let restart = Restart;
    // Within the lookahead ids still come; after it, none.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut during = Vec::new();
    let err = loop {
        match g.next_id() {
            Ok(id) => during.push(id),
            Err(e) => break e,
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never stopped issuing"
        );
    };
    assert!(matches!(err, Error::RegistryUnavailable { .. }), "{err:?}");
    // A second generator of the identity while ZooKeeper is down: refused (this
    // process holds the identity).
    let again = build().unwrap_err();
    assert!(
        matches!(
            again,
            Error::RegistryUnavailable { .. } | Error::WorkerIdInUse { .. }
        ),
        "{again:?}"
    );
    drop(restart);
    // Back: issuing resumes above everything issued before.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let resumed = loop {
        if let Ok(id) = g.next_id() {
            break id;
        }
        assert!(std::time::Instant::now() < deadline, "never resumed");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(resumed > last_before && during.iter().all(|&d| resumed > d));
    assert_eq!(g.worker_id(), worker);
    g.close();
    let all: HashSet<i64> = ids.iter().chain(&during).copied().collect();
    assert_eq!(all.len(), ids.len() + during.len());
}

#[test]
fn recycle_holder_stops_at_its_bound_while_zookeeper_is_down_and_resumes_after_without_duplicates()
{
    let _one = OUTAGE.lock().unwrap_or_else(|p| p.into_inner());
    let name = unique_name("recycle");
    let cache = tempfile::tempdir().unwrap();
    let url = format!(
        "zookeeper-recycle://{}/{name}?ip=10.0.0.1&port=1&session_timeout_ms=2000&connect_timeout_ms=1000",
        zk_addr()
    );
    let g = SnowflakeGenerator::builder()
        .registry_url(&url)
        .unwrap()
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(600))
        .build_blocking()
        .unwrap();
    let mut seen: HashSet<i64> = g.next_ids(1_000).unwrap().into_iter().collect();

    services(&["stop", "zookeeper"]);
    let restart = Restart;
    // Issuing goes on up to the bound ZooKeeper holds (600 ms ahead), then stops.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < until, "kept issuing without ZooKeeper");
        match g.next_id() {
            Ok(id) => assert!(seen.insert(id), "duplicate id {id}"),
            Err(Error::LeaseLost { .. } | Error::RegistryUnavailable { .. }) => break,
            Err(e) => panic!("unexpected error {e}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Still stopped a while later (no lease can be taken without ZooKeeper).
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(g.next_id().is_err(), "issued without a lease");

    drop(restart); // ZooKeeper back
    let until = Instant::now() + Duration::from_secs(60);
    let mut resumed = 0;
    while resumed < 1_000 {
        assert!(
            Instant::now() < until,
            "never resumed after ZooKeeper came back"
        );
        match g.next_id() {
            Ok(id) => {
                assert!(seen.insert(id), "duplicate id {id}");
                resumed += 1;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    g.close();
}
