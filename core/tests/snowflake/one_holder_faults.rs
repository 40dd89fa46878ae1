//! One live holder per worker id under faults (issue 10, from the adversarial review): a
//! holder cut off from its registry (a loopback proxy that drops and refuses) keeps
//! issuing up to the bound its registry holds, and another process that takes its
//! identity starts above that bound, so the two never issue one id (issue 30); a lost
//! and freed MySQL lease is re-taken; a start refused for clock skew leaves no floor
//! behind. Real MariaDB and ZooKeeper (`LEAFID_MYSQL_URL`, `LEAFID_ZK`).

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use leafid::snowflake::registry::{MysqlRegistry, WorkerRegistry, ZookeeperRegistry};
use leafid::{Error, SnowflakeGenerator};

use crate::support::delay_proxy;
use crate::support::self_exec::test_name;

const URL_VAR: &str = "LEAFID_TEST_FAULT_URL";
const CACHE_VAR: &str = "LEAFID_TEST_FAULT_CACHE";

fn mysql() -> String {
    std::env::var("LEAFID_MYSQL_URL").expect("LEAFID_MYSQL_URL is not set: source .services/env")
}

fn zk() -> String {
    std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env")
}

fn unique(tag: &str) -> String {
    format!(
        "flt_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn with_params(base: &str, params: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{params}")
}

fn build(url: &str, cache: &Path, heartbeat_ms: u64) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(heartbeat_ms))
        .build_blocking()
}

/// A generator on a registry built by hand: no host claim (that would keep B, in this
/// same process, out before the registry is ever asked), so the registry's own guard —
/// the one that separates hosts — is what the test exercises.
fn build_on(registry: Arc<dyn WorkerRegistry>, cache: &Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .custom_registry(registry)
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .build_blocking()
}

/// A (through the proxy, then cut off) and B (direct) claim one identity, as two hosts
/// with one ip:port would. A may go on issuing up to its persisted bound while B holds
/// the identity (fence rule 5); whatever each issued, no id is in both.
fn partition(
    a: Arc<dyn WorkerRegistry>,
    claimant: impl Fn() -> Arc<dyn WorkerRegistry>,
    proxy: &delay_proxy::DelayProxy,
) {
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = build_on(a, ca.path()).unwrap();
    let mut ids_a: Vec<i64> = a.next_ids(1_000).unwrap();
    proxy.set_down(true);
    let started = Instant::now();
    let mut b = None;
    let mut last_try = Instant::now() - Duration::from_secs(1);
    // Until B holds the identity for a second: A issues what it may, B keeps trying.
    while b
        .as_ref()
        .is_none_or(|(_, since): &(SnowflakeGenerator, Instant)| {
            since.elapsed() < Duration::from_secs(1)
        })
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "B never took the identity"
        );
        if let Ok(v) = a.next_ids(16) {
            ids_a.extend(v);
        }
        if b.is_none() && last_try.elapsed() > Duration::from_millis(300) {
            last_try = Instant::now();
            match build_on(claimant(), cb.path()) {
                Ok(g) => b = Some((g, Instant::now())),
                Err(Error::WorkerIdInUse { .. } | Error::ClockBehindRegistry { .. }) => {}
                Err(e) => panic!("B: {e:?}"),
            }
        }
    }
    let (gb, _) = b.unwrap();
    let mut ids_b: Vec<i64> = Vec::new();
    for _ in 0..200 {
        ids_b.extend(gb.next_ids(16).unwrap());
        if let Ok(v) = a.next_ids(16) {
            ids_a.extend(v);
        }
    }
    let seen: HashSet<i64> = ids_a.iter().copied().collect();
    let shared = ids_b.iter().filter(|id| seen.contains(id)).count();
    assert_eq!(
        shared,
        0,
        "A issued {} ids, B {}, {shared} by both",
        ids_a.len(),
        ids_b.len()
    );
    gb.close();
    proxy.set_down(false);
    a.close();
}

#[test]
fn mysql_holder_cut_off_from_the_database_never_overlaps_the_next_holder() {
    let base = mysql();
    let u = url::Url::parse(&base).unwrap();
    let proxy =
        delay_proxy::DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()));
    let mut via = u.clone();
    via.set_port(Some(proxy.addr.port())).unwrap();
    let ip = unique("part");
    let a = MysqlRegistry::new(via.as_str(), ip.clone(), "8080").unwrap();
    partition(
        Arc::new(a),
        || Arc::new(MysqlRegistry::new(&base, ip.clone(), "8080").unwrap()),
        &proxy,
    );
}

#[test]
fn zookeeper_holder_cut_off_from_the_ensemble_never_overlaps_the_next_holder() {
    let proxy = delay_proxy::DelayProxy::start(zk());
    let name = unique("zkpart");
    let params = "port=8080&ip=127.0.0.1&session_timeout_ms=1500&connect_timeout_ms=1000";
    let url_b = format!("zookeeper://{}/{name}?{params}", zk());
    // A on a registry built by hand (no host claim), B a child process from the URL:
    // only ZooKeeper's live node stands between them, as between two hosts.
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let registry = ZookeeperRegistry::new(
        proxy.addr.to_string(),
        name.clone(),
        "127.0.0.1",
        "8080",
        Duration::from_millis(1500),
        Duration::from_millis(1000),
    );
    let a = build_on(Arc::new(registry), ca.path()).unwrap();
    let mut ids_a = a.next_ids(1_000).unwrap();
    proxy.set_down(true);
    let started = Instant::now();
    let ids_b = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "B never took the identity"
        );
        if let Ok(v) = a.next_ids(16) {
            ids_a.extend(v);
        }
        if let Some(ids) = child_issue(&url_b, cb.path()) {
            break ids;
        }
    };
    let seen: HashSet<i64> = ids_a.iter().copied().collect();
    let shared = ids_b.iter().filter(|id| seen.contains(id)).count();
    assert_eq!(
        shared,
        0,
        "A issued {}, B {}, {shared} by both",
        ids_a.len(),
        ids_b.len()
    );
    proxy.set_down(false);
    a.close();
}

/// Entry point of a child: builds a generator from the URL and prints its ids, or
/// `ERR <code>`.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn fault_child_entry() {
    let url = std::env::var(URL_VAR).expect("started as a child");
    let cache = std::env::var(CACHE_VAR).unwrap();
    match build(&url, Path::new(&cache), 200) {
        Ok(g) => {
            let ids: Vec<String> = g
                .next_ids(5_000)
                .unwrap()
                .iter()
                .map(i64::to_string)
                .collect();
            println!("LEAFID-FAULT-CHILD OK {}", ids.join(","));
            g.close();
        }
        Err(e) => println!("LEAFID-FAULT-CHILD ERR {} {e}", e.code()),
    }
}

fn run_child(mut command: Command, url: &str, cache: &Path) -> String {
    let out = command
        .args([
            "--ignored",
            "--exact",
            test_name(module_path!(), "fault_child_entry").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(URL_VAR, url)
        .env(CACHE_VAR, cache)
        .stdin(Stdio::null())
        .output()
        .expect("run the test binary as a child");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = text
        .find("LEAFID-FAULT-CHILD ")
        .expect("child printed no result");
    text[at + "LEAFID-FAULT-CHILD ".len()..]
        .lines()
        .next()
        .unwrap()
        .to_string()
}

/// Ids from a child that held the identity, or `None` when it was refused as in use.
fn child_issue(url: &str, cache: &Path) -> Option<Vec<i64>> {
    let line = run_child(Command::new(std::env::current_exe().unwrap()), url, cache);
    if let Some(ids) = line.strip_prefix("OK ") {
        return Some(ids.split(',').map(|i| i.parse().unwrap()).collect());
    }
    assert!(
        line.starts_with("ERR LEAF_WORKER_ID_IN_USE")
            || line.starts_with("ERR LEAF_CLOCK_BEHIND_REGISTRY"),
        "{line}"
    );
    None
}

#[test]
fn mysql_lease_taken_and_freed_is_re_acquired() {
    let base = mysql();
    let ip = unique("lost");
    let url = with_params(&base, &format!("port=8080&ip={ip}"));
    let cache = tempfile::tempdir().unwrap();
    let gen = build(&url, cache.path(), 100).unwrap();
    let w = gen.worker_id();
    let before = gen.next_id().unwrap();
    let admin = base.clone();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&admin).await.unwrap();
        sqlx::query("UPDATE leafid_worker_lease SET holder = 'someone' WHERE worker_id = ?")
            .bind(w as i64)
            .execute(&mut c)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        sqlx::query(
            "UPDATE leafid_worker_lease SET holder = '', expires_at = '1970-01-02 00:00:00' WHERE worker_id = ?",
        )
        .bind(w as i64)
        .execute(&mut c)
        .await
        .unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        if let Ok(id) = gen.next_id() {
            break id;
        }
        assert!(Instant::now() < deadline, "never re-acquired its lease");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(after > before);
    gen.close();
}

#[test]
fn a_start_refused_for_clock_skew_leaves_no_floor_behind() {
    let faketime = Path::new("/usr/bin/faketime");
    assert!(
        faketime.exists(),
        "this test needs faketime: apt-get install faketime"
    );
    for url in [
        with_params(&mysql(), &format!("port=8080&ip={}", unique("strand"))),
        format!(
            "zookeeper://{}/{}?port=8080&ip=10.7.7.7",
            zk(),
            unique("strand")
        ),
    ] {
        let c1 = tempfile::tempdir().unwrap();
        let mut ahead = Command::new(faketime);
        ahead
            .args(["-f", "+120s"])
            .arg(std::env::current_exe().unwrap());
        let line = run_child(ahead, &url, c1.path());
        assert!(line.starts_with("ERR LEAF_CLOCK_SKEW"), "{url}: {line}");
        // The correct clock starts at once: the refused start wrote no floor 2 min ahead.
        let c2 = tempfile::tempdir().unwrap();
        let g = build(&url, c2.path(), 200).unwrap_or_else(|e| panic!("{url}: {e}"));
        g.next_id().unwrap();
        g.close();
    }
}
