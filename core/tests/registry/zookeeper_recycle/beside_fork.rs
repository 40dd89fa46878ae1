//! `zookeeper-recycle` beside the NotFound9 fork's `zk_recycle` servers on the same
//! `/snowflake/{name}/recycle` tree (issue 20, row 6), against a real ZooKeeper
//! (`LEAFID_ZK`), with the fork simulated faithfully (`support/fork_recycle.rs`).
//!
//! The fork picks a worker id without reading leafid's leases, so leafid cannot share
//! the pool: it refuses to start beside the fork's layout, and live holders stop the
//! moment the fork's `notuse` appears. Both sides issue at full speed; every id is
//! collected and no id may appear twice.

use crate::support::fork_recycle;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fork_recycle::{ForkConfig, ForkServer};
use leafid::snowflake::registry::ZookeeperRecycleRegistry;
use leafid::{Error, Layout, SnowflakeGenerator};

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

fn unique_name(tag: &str) -> String {
    format!(
        "leafid-test-recycle-fork-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// A leafid generator with Leaf's layout on the pool `name`.
fn leafid_gen(name: &str, cache: &std::path::Path) -> leafid::Result<SnowflakeGenerator> {
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name,
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    SnowflakeGenerator::builder()
        .custom_registry(reg)
        .layout(Layout::default())
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(100))
        .lookahead(Duration::from_millis(500))
        .build_blocking()
}

/// Issues with `g` at full speed (never waiting) until `stop`; returns what it issued
/// and when it issued the last one (ms since the Unix epoch).
fn issue_until(
    g: SnowflakeGenerator,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<i64>, Option<i64>)> {
    std::thread::spawn(move || {
        let mut ids = Vec::with_capacity(1 << 20);
        let mut last = None;
        while !stop.load(Ordering::Relaxed) {
            match g.next_id_now() {
                Ok(id) => {
                    ids.push(id);
                    last = Some(now_ms());
                }
                Err(_) => std::thread::yield_now(),
            }
        }
        g.close();
        (ids, last)
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn duplicates(a: &[i64], b: &[i64]) -> usize {
    let set: HashSet<i64> = a.iter().copied().collect();
    b.iter().filter(|id| set.contains(id)).count()
}

#[test]
fn leafid_refuses_a_pool_where_the_forks_layout_exists_and_says_what_to_do() {
    let name = unique_name("before");
    let cache = tempfile::tempdir().unwrap();
    let mut fork = ForkServer::start(&ForkConfig::new(&zk_addr(), &name)).unwrap();
    let err = leafid_gen(&name, cache.path()).expect_err("leafid must refuse beside the fork");
    fork.stop();
    let msg = err.to_string();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(
        msg.contains(&format!("/snowflake/{name}/recycle/notuse")),
        "the message says what was found: {msg}"
    );
    assert!(
        msg.contains("must use a distinct leaf.name / name in the URL"),
        "the message says what to do: {msg}"
    );
}

#[test]
fn a_fork_started_beside_live_leafid_holders_stops_every_holder_and_no_id_is_issued_twice() {
    let name = unique_name("after");
    let cache = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let gens: Vec<SnowflakeGenerator> = (0..2)
        .map(|_| leafid_gen(&name, cache.path()).unwrap())
        .collect();
    let held: HashSet<u32> = gens.iter().map(|g| g.worker_id()).collect();
    let issuers: Vec<_> = gens
        .into_iter()
        .map(|g| issue_until(g, stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // The fork's 4-argument constructor with maxWorkId 1: its pick lands on id 0 or 1,
    // both held by a leafid holder right now (the pool of a fleet the fork has cycled).
    let mut cfg = ForkConfig::new(&zk_addr(), &name);
    cfg.max_work_id = 1;
    let mut fork = ForkServer::start(&cfg).unwrap();
    assert!(
        held.contains(&fork.worker_id()),
        "the fork took {} while leafid holds {held:?}",
        fork.worker_id()
    );
    // Past the fork's first upload, so its whole start is covered.
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    let issued: Vec<(Vec<i64>, Option<i64>)> =
        issuers.into_iter().map(|t| t.join().unwrap()).collect();
    let leafid_ids: Vec<&Vec<i64>> = issued.iter().map(|(ids, _)| ids).collect();
    fork.stop();
    let fork_ids = fork.ids();
    assert!(!fork_ids.is_empty(), "the fork issued nothing");
    let mut all = Vec::new();
    for ids in leafid_ids {
        assert!(
            !ids.is_empty(),
            "a leafid holder issued nothing before the fork came"
        );
        all.extend_from_slice(ids);
    }
    let dups = duplicates(&all, fork_ids);
    assert_eq!(
        dups,
        0,
        "{dups} ids issued by both the fork ({} ids, worker {}) and leafid ({} ids)",
        fork_ids.len(),
        fork.worker_id(),
        all.len()
    );
    // Every leafid holder stopped: none issued after the millisecond of the fork's first
    // id, by the wall clock (leafid's ids of a fresh pool lead the clock, so their own
    // time part cannot tell; the fork's follows the clock).
    let fork_first = (fork_ids[0] >> 22) + 1288834974657;
    for (_, last) in &issued {
        assert!(
            last.is_some_and(|l| l <= fork_first),
            "a leafid holder issued {:?} ms after the fork's first id",
            last.map(|l| l - fork_first)
        );
    }
    // And no new leafid holder starts beside it.
    let err = leafid_gen(&name, cache.path()).expect_err("a new holder beside the fork");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("distinct leaf.name"), "{err}");
}
