//! The `zookeeper` registry (Leaf's forever mode) against a real ZooKeeper
//! (`LEAFID_ZK`): nodes written by hand exactly as a Java Leaf server writes them are
//! respected, leafid's own nodes are byte-compatible, the clock check goes through the
//! generator, ids stay unique under load, and the id range is enforced.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::clock::ManualClock;
use leafid::{Error, Layout, SnowflakeGenerator};
use zookeeper_client as zk;

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

/// A leaf name no other test (or earlier run) uses.
fn unique_name(tag: &str) -> String {
    format!(
        "leafid_test_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
    .replace('-', "_")
}

fn client() -> zk::Client {
    let addr = zk_addr();
    leafid::runtime::block_on(async move {
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(6))
            .connect(&addr)
            .await
            .expect("connect to LEAFID_ZK")
    })
}

/// Creates a forever node the way Java Leaf does: PERSISTENT_SEQUENTIAL `{ip}:{port}-`
/// with Jackson's `{"ip","port","timestamp"}`. Returns the full path.
fn java_node(c: &zk::Client, name: &str, ip: &str, port: &str, timestamp: i64) -> String {
    let c = c.clone();
    let forever = format!("/snowflake/{name}/forever");
    let data = format!(r#"{{"ip":"{ip}","port":"{port}","timestamp":{timestamp}}}"#);
    let prefix = format!("{forever}/{ip}:{port}-");
    leafid::runtime::block_on(async move {
        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        c.mkdir(&forever, &dir).await.unwrap();
        let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
        let (_, seq) = c.create(&prefix, data.as_bytes(), &opts).await.unwrap();
        format!("{prefix}{seq}")
    })
}

fn raw_node(c: &zk::Client, path: &str, data: &[u8]) {
    let c = c.clone();
    let path = path.to_string();
    let data = data.to_vec();
    leafid::runtime::block_on(async move {
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        c.create(&path, &data, &opts).await.unwrap();
    })
}

fn read(c: &zk::Client, path: &str) -> String {
    let c = c.clone();
    let path = path.to_string();
    leafid::runtime::block_on(async move {
        String::from_utf8(c.get_data(&path).await.unwrap().0).unwrap()
    })
}

fn children(c: &zk::Client, path: &str) -> Vec<String> {
    let c = c.clone();
    let path = path.to_string();
    leafid::runtime::block_on(async move {
        let mut v = c.list_children(&path).await.unwrap();
        v.sort();
        v
    })
}

fn url(name: &str, ip: &str, port: &str) -> String {
    format!("zookeeper://{}/{name}?ip={ip}&port={port}", zk_addr())
}

fn gen(
    name: &str,
    ip: &str,
    port: &str,
    cache: &std::path::Path,
) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(&url(name, ip, port))?
        .cache_dir(cache)
        .build_blocking()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn new_identity_gets_a_fresh_id_beside_java_leaf_nodes_and_writes_javas_format() {
    let c = client();
    let name = unique_name("java");
    let cache = tempfile::tempdir().unwrap();
    let t = now_ms() - 60_000;
    java_node(&c, &name, "10.9.9.1", "8080", t); // id 0
    java_node(&c, &name, "10.9.9.2", "8080", t); // id 1

    let g = gen(&name, "10.9.9.3", "8080", cache.path()).unwrap();
    assert_eq!(g.worker_id(), 2, "a new ip:port takes the next sequence");
    let id = g.next_id().unwrap();
    assert_eq!(g.decode(id).worker_id, 2);

    let forever = format!("/snowflake/{name}/forever");
    let kids = children(&c, &forever);
    assert_eq!(
        kids,
        vec![
            "10.9.9.1:8080-0000000000".to_string(),
            "10.9.9.2:8080-0000000001".to_string(),
            "10.9.9.3:8080-0000000002".to_string()
        ]
    );
    // Exactly Java's Endpoint: ip, port as a string, timestamp; nothing else.
    let data = read(&c, &format!("{forever}/10.9.9.3:8080-0000000002"));
    let v: serde_json::Value = serde_json::from_str(&data).unwrap();
    let obj = v.as_object().unwrap();
    assert_eq!(obj.len(), 3, "{data}");
    assert_eq!(obj["ip"], "10.9.9.3");
    assert_eq!(obj["port"], "8080");
    // Only what Leaf itself would write there: never a time ahead of the clock (the
    // look-ahead bound covering the id is in leafid's own record, issue 20 row 8).
    assert!(obj["timestamp"].as_i64().unwrap() <= now_ms(), "{data}");
    let record = read(&c, &format!("/snowflake/{name}/ids/2"));
    let bound = serde_json::from_str::<serde_json::Value>(&record).unwrap()["bound_ms"]
        .as_i64()
        .unwrap();
    assert!(bound >= g.decode(id).timestamp_ms, "{record}");
    assert!(
        data.starts_with(r#"{"ip":"10.9.9.3","port":"8080","timestamp":"#),
        "{data}"
    );
    // The hand-written Java nodes were not touched.
    assert_eq!(
        read(&c, &format!("{forever}/10.9.9.1:8080-0000000000")),
        format!(r#"{{"ip":"10.9.9.1","port":"8080","timestamp":{t}}}"#)
    );
    g.close();
}

#[test]
fn first_node_of_a_fresh_name_gets_the_id_parsed_from_its_path() {
    let c = client();
    let name = unique_name("first");
    let cache = tempfile::tempdir().unwrap();
    let a = gen(&name, "10.8.0.1", "1", cache.path()).unwrap();
    let b = gen(&name, "10.8.0.2", "1", cache.path()).unwrap();
    assert_eq!((a.worker_id(), b.worker_id()), (0, 1));
    a.close();
    b.close();
    // Restarting an identity brings its own id back, not a new node.
    let a2 = gen(&name, "10.8.0.1", "1", cache.path()).unwrap();
    assert_eq!(a2.worker_id(), 0);
    assert_eq!(children(&c, &format!("/snowflake/{name}/forever")).len(), 2);
    a2.close();
}

#[test]
fn same_ip_port_as_a_java_node_gets_its_id_and_respects_its_timestamp() {
    let c = client();
    let name = unique_name("reuse");
    let t = now_ms() + 2_000; // the Java server uploaded a time ahead of our clock
    java_node(&c, &name, "10.7.0.1", "9090", now_ms() - 1_000); // id 0: someone else
    let path = java_node(&c, &name, "10.7.0.2", "9090", t); // id 1: "us"

    // A clock far behind the stored timestamp (more than any floor may lead it: the
    // longest lookahead, 300 s, plus the skew and 1 s, plus the start-up allowance):
    // the generator refuses.
    let cache = tempfile::tempdir().unwrap();
    let behind = ManualClock::new(t - 400_000);
    let err = SnowflakeGenerator::builder()
        .registry_url(&url(&name, "10.7.0.2", "9090"))
        .unwrap()
        .cache_dir(cache.path())
        .clock(behind)
        .build_blocking()
        .unwrap_err();
    match err {
        Error::ClockBehindRegistry {
            worker_id, last_ms, ..
        } => {
            assert_eq!(worker_id, 1);
            assert_eq!(last_ms, t);
        }
        other => panic!("expected ClockBehindRegistry, got {other:?}"),
    }
    // The refused start wrote nothing to the Java node.
    assert_eq!(
        read(&c, &path),
        format!(r#"{{"ip":"10.7.0.2","port":"9090","timestamp":{t}}}"#)
    );

    // A clock slightly behind: ids start above the stored timestamp at once (the
    // generator's clock leads until the real one catches up).
    let slightly = ManualClock::new(t - 1_500);
    let g = SnowflakeGenerator::builder()
        .registry_url(&url(&name, "10.7.0.2", "9090"))
        .unwrap()
        .cache_dir(cache.path())
        .clock(slightly)
        .build_blocking()
        .unwrap();
    assert_eq!(g.worker_id(), 1);
    let id = g.next_id().unwrap();
    assert!(
        g.decode(id).timestamp_ms > t,
        "issued at or before the floor"
    );
    g.close();
}

#[test]
fn malformed_own_node_is_an_error_and_malformed_foreign_nodes_are_skipped() {
    let c = client();
    let name = unique_name("malformed");
    let forever = format!("/snowflake/{name}/forever");
    java_node(&c, &name, "10.6.0.1", "80", now_ms()); // id 0, makes the dir
    raw_node(&c, &format!("{forever}/garbage"), b"x");
    raw_node(&c, &format!("{forever}/10.6.0.9:80-notanumber"), b"x");
    let cache = tempfile::tempdir().unwrap();

    // A foreign malformed node does not stop a new identity.
    let g = gen(&name, "10.6.0.2", "80", cache.path()).unwrap();
    assert_ne!(g.worker_id(), 0);
    g.close();

    // Our own node with a bad sequence is refused with the path.
    let err = gen(&name, "10.6.0.9", "80", cache.path()).unwrap_err();
    assert!(
        matches!(err, Error::Malformed { ref path, .. } if path.ends_with("10.6.0.9:80-notanumber")),
        "{err:?}"
    );

    // Our own node with bad data is refused too.
    let name2 = unique_name("malformed-data");
    let forever2 = format!("/snowflake/{name2}/forever");
    java_node(&c, &name2, "10.6.0.1", "80", now_ms());
    raw_node(
        &c,
        &format!("{forever2}/10.6.0.3:80-0000000005"),
        b"{\"ip\":1}",
    );
    let err = gen(&name2, "10.6.0.3", "80", cache.path()).unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
}

#[test]
fn heartbeat_writes_a_bound_ahead_and_close_writes_the_last_issued_timestamp() {
    let c = client();
    let name = unique_name("bound");
    let cache = tempfile::tempdir().unwrap();
    let g = SnowflakeGenerator::builder()
        .registry_url(&url(&name, "10.5.0.1", "7"))
        .unwrap()
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(100))
        .lookahead(Duration::from_millis(1_000))
        .build_blocking()
        .unwrap();
    let path = format!("/snowflake/{name}/forever/10.5.0.1:7-0000000000");
    let stamp = |s: String| -> i64 {
        serde_json::from_str::<serde_json::Value>(&s).unwrap()["timestamp"]
            .as_i64()
            .unwrap()
    };
    let mut last = 0;
    for _ in 0..20 {
        last = g.next_id().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    // leafid's look-ahead bound lives in leafid's own record of the worker id; Leaf's
    // field gets only what Leaf would write there: never a time ahead of the clock
    // (issue 20, row 8: a Java server reading a future time goes silent).
    let record = format!("/snowflake/{name}/ids/0");
    let bound = serde_json::from_str::<serde_json::Value>(&read(&c, &record)).unwrap()["bound_ms"]
        .as_i64()
        .unwrap();
    assert!(
        bound >= g.decode(last).timestamp_ms,
        "bound {bound} below an issued id"
    );
    let written = stamp(read(&c, &path));
    assert!(
        written <= now_ms(),
        "a future time {written} in Leaf's field"
    );
    g.close();
    // The close writes the last timestamp issued: exactly into leafid's record, and into
    // Leaf's field no later than the clock (a new identity's ids lead the clock a while).
    let last_ms = g.decode(last).timestamp_ms;
    let closed = serde_json::from_str::<serde_json::Value>(&read(&c, &record)).unwrap()["bound_ms"]
        .as_i64()
        .unwrap();
    assert_eq!(closed, last_ms);
    let written = stamp(read(&c, &path));
    assert!(
        written <= last_ms && written <= now_ms(),
        "{written} in Leaf's field"
    );
}

#[test]
fn two_generators_of_one_identity_in_one_process_are_refused() {
    let name = unique_name("twice");
    let cache = tempfile::tempdir().unwrap();
    let a = gen(&name, "10.4.0.1", "1", cache.path()).unwrap();
    let err = gen(&name, "10.4.0.1", "1", cache.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    a.close();
    // Once closed, the identity is free again.
    let b = gen(&name, "10.4.0.1", "1", cache.path()).unwrap();
    assert_eq!(b.worker_id(), 0);
    b.close();
}

#[test]
fn ids_past_the_layouts_worker_range_are_refused_with_leafs_limit_explained() {
    let name = unique_name("exhaust");
    let cache = tempfile::tempdir().unwrap();
    let layout = Layout::new(41, 2, 20, leafid::snowflake::LEAF_EPOCH_MS).unwrap(); // ids 0..=3
    let mut held = Vec::new();
    for i in 0..4 {
        let g = SnowflakeGenerator::builder()
            .registry_url(&url(&name, &format!("10.3.0.{i}"), "1"))
            .unwrap()
            .layout(layout)
            .cache_dir(cache.path())
            .build_blocking()
            .unwrap();
        assert_eq!(g.worker_id(), i);
        held.push(g);
    }
    let err = SnowflakeGenerator::builder()
        .registry_url(&url(&name, "10.3.0.9", "1"))
        .unwrap()
        .layout(layout)
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap_err();
    match &err {
        Error::WorkerIdExhausted { pool, size } => {
            assert_eq!(*size, 4);
            assert!(pool.contains("never") && pool.contains("reused"), "{pool}");
        }
        other => panic!("expected WorkerIdExhausted, got {other:?}"),
    }
    // Closing a forever holder frees nothing: forever nodes are the identity's for good.
    held.pop().unwrap().close();
    let err = SnowflakeGenerator::builder()
        .registry_url(&url(&name, "10.3.0.10", "1"))
        .unwrap()
        .layout(layout)
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap_err();
    assert!(matches!(err, Error::WorkerIdExhausted { .. }), "{err:?}");
}

#[test]
fn unreachable_zookeeper_fails_promptly_even_with_a_cache_file() {
    let name = unique_name("down");
    let cache = tempfile::tempdir().unwrap();
    // Nothing listens on port 1.
    let down = format!("zookeeper://127.0.0.1:1/{name}?ip=10.2.0.1&port=5&connect_timeout_ms=1000");
    let build = || {
        SnowflakeGenerator::builder()
            .registry_url(&down)
            .unwrap()
            .cache_dir(cache.path())
            .build_blocking()
    };
    let err = build().unwrap_err();
    assert!(matches!(err, Error::RegistryUnavailable { .. }), "{err:?}");

    // A cache file for this identity does not make a start without ZooKeeper safe: once
    // the last holder's session expired, the same identity claimed elsewhere starts
    // above the bound ZooKeeper holds, where a start on the cache file alone would issue
    // too (issue 30; `restart_in_outage.rs`, the adversary row): still refused.
    let probe = leafid::snowflake::registry::ZookeeperRegistry::new(
        "127.0.0.1:1",
        name.clone(),
        "10.2.0.1",
        "5",
        Duration::from_secs(6),
        Duration::from_secs(1),
    );
    use leafid::snowflake::registry::WorkerRegistry;
    let cache_file = leafid::snowflake::registry::WorkerCache::new(cache.path(), &probe.describe());
    cache_file
        .write(leafid::snowflake::registry::CacheEntry {
            worker_id: 9,
            bound_ms: now_ms() - 1_000,
            handover: None,
        })
        .unwrap();
    drop(probe);
    let err = build().unwrap_err();
    assert!(matches!(err, Error::RegistryUnavailable { .. }), "{err:?}");
}

#[test]
fn saturated_generators_on_zookeeper_never_issue_a_duplicate() {
    let name = unique_name("saturate");
    let cache = tempfile::tempdir().unwrap();
    let gens: Vec<SnowflakeGenerator> = (0..4)
        .map(|i| gen(&name, "10.1.0.1", &format!("{}", 100 + i), cache.path()).unwrap())
        .collect();
    let workers: HashSet<u32> = gens.iter().map(|g| g.worker_id()).collect();
    assert_eq!(workers.len(), 4);
    let gens = Arc::new(gens);
    let deadline = Instant::now() + Duration::from_millis(1_500);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let gens = gens.clone();
            std::thread::spawn(move || {
                let g = &gens[t % gens.len()];
                let mut out = Vec::with_capacity(1 << 20);
                let mut buf = [0i64; 64];
                while Instant::now() < deadline {
                    g.fill(&mut buf).unwrap();
                    out.extend_from_slice(&buf);
                }
                out
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut total = 0usize;
    for t in threads {
        for id in t.join().unwrap() {
            total += 1;
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert!(total > 10_000, "only {total} ids issued");
    for g in gens.iter() {
        g.close();
    }
}

/// The other host's clock: the system clock moved by `offset` ms.
#[derive(Debug)]
struct Skewed(i64);

impl leafid::Clock for Skewed {
    fn now_millis(&self) -> i64 {
        leafid::SystemClock.now_millis() + self.0
    }
}

/// Review 4: a Java Leaf server on a host 4 s ahead wrote its forever node (its
/// `timestamp`, by its clock) and went on issuing until its next upload, 3 s later; it
/// never writes leafid's `ids/{id}`. leafid on a host 4 s behind takes the node over.
/// The node's `timestamp` trails what Java issued, so it is no recorded floor: the first
/// id must wait out the skew too. Before, `floor_recorded` was true for any timestamp,
/// and the first id came right after Java's `timestamp`, inside what Java had issued.
#[test]
fn a_java_timestamp_is_no_recorded_floor_the_first_id_waits_out_the_skew() {
    let c = client();
    let name = unique_name("javaskew");
    let written = now_ms();
    // Java's clock, 4 s ahead, at its last upload.
    java_node(&c, &name, "10.97.0.1", "8080", written + 4_000);
    first_id_from_a_host_behind_is_past_java(&name, "10.97.0.1", "8080", written);
}

/// Starts leafid for `ip:port` on a host whose clock is 4 s behind (no cache: another
/// host) and checks that its first id is past what a Java server 4 s ahead, which
/// uploaded its time at `written`, may have issued: up to its next upload, 3 s later.
fn first_id_from_a_host_behind_is_past_java(name: &str, ip: &str, port: &str, written: i64) {
    let cache = tempfile::tempdir().unwrap();
    let gen = SnowflakeGenerator::builder()
        .registry_url(&url(name, ip, port))
        .unwrap()
        .clock(Arc::new(Skewed(-4_000)))
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap();
    let first = gen.decode(gen.next_id().unwrap()).timestamp_ms;
    gen.close();
    let java_last = written + 3_000 + 4_000;
    assert!(
        first > java_last,
        "the first id's time {first} is not above {java_last}, the last Java may have issued"
    );
}

/// Final review: leafid ran on this `ip:port` once (its `ids/{id}` bound is old), then a
/// Java Leaf server on a host 4 s ahead took the node over and wrote a newer `timestamp`.
/// The floor is Java's timestamp, which trails what Java issued: the old leafid bound
/// beside it must not make it count as recorded. Before, the first id came right after
/// Java's `timestamp`, inside what Java had issued.
#[test]
fn an_old_leafid_bound_under_a_newer_java_timestamp_is_no_recorded_floor() {
    let c = client();
    let name = unique_name("javaafter");
    let (ip, port) = ("10.97.0.2", "8080");
    let first_cache = tempfile::tempdir().unwrap();
    let earlier = SnowflakeGenerator::builder()
        .registry_url(&url(&name, ip, port))
        .unwrap()
        .cache_dir(first_cache.path())
        .build_blocking()
        .unwrap();
    earlier.next_id().unwrap();
    earlier.close();
    // Java takes the node over later, its clock 4 s ahead, and uploads its time.
    std::thread::sleep(Duration::from_millis(500));
    let written = now_ms();
    let path = format!("/snowflake/{name}/forever/{ip}:{port}-0000000000");
    let data = format!(
        r#"{{"ip":"{ip}","port":"{port}","timestamp":{}}}"#,
        written + 4_000
    );
    let setter = c.clone();
    leafid::runtime::block_on(async move { setter.set_data(&path, data.as_bytes(), None).await })
        .unwrap();
    // leafid comes back on another host whose clock is 4 s behind.
    first_id_from_a_host_behind_is_past_java(&name, ip, port, written);
}
