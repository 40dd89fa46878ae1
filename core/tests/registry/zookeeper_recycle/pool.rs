//! The `zookeeper-recycle` registry against a real ZooKeeper (`LEAFID_ZK`): live
//! holders never share an id (threads and SIGKILLed child processes), a freed id comes
//! back with its last holder's bound as the floor, a lost session cuts the issue limit
//! at once, the pool runs out cleanly, and saturated generators issue no duplicate.
//!
//! Child processes are this test binary itself, started on an `#[ignore]`d entry point.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::self_exec::test_name;
use leafid::snowflake::registry::zk_client::Client as ZkClient;
use leafid::snowflake::registry::{IssueLimit, WorkerRegistry, ZookeeperRecycleRegistry};
use leafid::snowflake::LEAF_EPOCH_MS;
use leafid::{Error, Layout, SnowflakeGenerator};
use zookeeper_client as zk;

const NAME_VAR: &str = "LEAFID_TEST_RECYCLE_NAME";
const CACHE_VAR: &str = "LEAFID_TEST_CACHE_DIR";

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

fn unique_name(tag: &str) -> String {
    format!(
        "leafid-test-recycle-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Ends the session `reg` holds its lease with, from outside, and returns once ZooKeeper
/// has freed the lease node (gone, or re-taken by another session).
///
/// A twin client attaches to the session and closes it. The holder's own client, kicked
/// off its connection by the attach, may re-attach first and keep the session alive (the
/// twin's close then fails quietly), and attaching can race with the holder's traffic and
/// come back SessionExpired: so repeat until an observer sees the node's owner change.
/// Returns the id of the session it ended.
fn end_held_session(reg: &Arc<ZookeeperRecycleRegistry>, name: &str) -> i64 {
    let r = reg.clone();
    let (id, info) = leafid::runtime::block_on(async move { r.held_session().await }).unwrap();
    let session = info.id;
    let path = format!("/snowflake/{name}/recycle/lease/{id}");
    let addr = zk_addr();
    leafid::runtime::block_on(async move {
        let observer = zk::Client::connect(&addr).await.unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            match observer.check_stat(&path).await.unwrap() {
                Some(stat) if stat.ephemeral_owner == session => {}
                _ => return session,
            }
            assert!(Instant::now() < until, "session {session:#x} never ended");
            let twin = ZkClient::attach(
                &addr,
                info.clone(),
                Duration::from_secs(6),
                Duration::from_secs(3),
            )
            .await;
            // Dropping the twin closes the shared session. An attach that fails (expired,
            // or the server dropping a session already closing) is retried above.
            if let Ok(twin) = twin {
                drop(twin);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Two worker bits: a pool of four ids.
fn small() -> Layout {
    Layout::new(41, 2, 20, LEAF_EPOCH_MS).unwrap()
}

fn url(name: &str) -> String {
    // 1 s: the shortest session the test ZooKeeper grants, so killed holders free fast.
    format!(
        "zookeeper-recycle://{}/{name}?ip=10.0.0.1&port=1&session_timeout_ms=1000",
        zk_addr()
    )
}

fn gen(name: &str, layout: Layout, cache: &std::path::Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(&url(name))?
        .layout(layout)
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(600))
        .build_blocking()
}

/// A generator on a registry the test keeps a handle to, heartbeat every 100 ms.
fn watched_generator(
    name: &str,
    cache: &std::path::Path,
) -> (Arc<ZookeeperRecycleRegistry>, SnowflakeGenerator) {
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name,
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let g = SnowflakeGenerator::builder()
        .custom_registry(reg.clone())
        .layout(small())
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(100))
        .lookahead(Duration::from_millis(500))
        .build_blocking()
        .unwrap();
    (reg, g)
}

/// Retries while the pool is full (ids of killed holders free after their session timeout).
fn gen_when_free(name: &str, layout: Layout, cache: &std::path::Path) -> SnowflakeGenerator {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match gen(name, layout, cache) {
            Ok(g) => return g,
            Err(Error::WorkerIdExhausted { .. }) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("cannot take a worker id: {e}"),
        }
    }
}

#[test]
#[ignore = "child process entry point, started by the tests below"]
fn child_process_entry() {
    let name = std::env::var(NAME_VAR).expect("started as a child with LEAFID_TEST_RECYCLE_NAME");
    let cache = std::env::var(CACHE_VAR).expect("LEAFID_TEST_CACHE_DIR");
    let g = gen_when_free(&name, small(), std::path::Path::new(&cache));
    let ids = g.next_ids(2_000).unwrap();
    let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    println!("LEAFID-CHILD {} {}", g.worker_id(), text.join(","));
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    g.close();
}

// The caller kills and waits for every child.
#[allow(clippy::zombie_processes)]
fn spawn_child(name: &str, cache: &std::path::Path) -> (Child, u32, Vec<i64>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            test_name(module_path!(), "child_process_entry").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NAME_VAR, name)
        .env(CACHE_VAR, cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        // The harness may print "test child_process_entry ... " before it on the same line.
        if let Some(at) = line.find("LEAFID-CHILD ") {
            let rest = &line[at + "LEAFID-CHILD ".len()..];
            let (w, ids) = rest.split_once(' ').unwrap();
            let ids = ids.split(',').map(|s| s.parse().unwrap()).collect();
            return (child, w.parse().unwrap(), ids);
        }
    }
    panic!("child exited without reporting a worker id");
}

fn sigkill(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

#[test]
fn pool_exhaustion_then_a_released_id_comes_back_with_its_floor() {
    let name = unique_name("exhaust");
    let cache = tempfile::tempdir().unwrap();
    let gens: Vec<_> = (0..4)
        .map(|_| gen(&name, small(), cache.path()).unwrap())
        .collect();
    let ids: HashSet<u32> = gens.iter().map(|g| g.worker_id()).collect();
    assert_eq!(ids, HashSet::from([0, 1, 2, 3]));
    let err = gen(&name, small(), cache.path()).unwrap_err();
    assert!(
        matches!(err, Error::WorkerIdExhausted { size: 4, .. }),
        "{err:?}"
    );
    // Close holder of id 2: its id is free at once (the lease node is deleted), and the
    // next holder starts above the last timestamp it issued.
    let g2 = gens.iter().find(|g| g.worker_id() == 2).unwrap();
    let last = g2.next_id().unwrap();
    g2.close();
    let next = gen(&name, small(), cache.path()).unwrap();
    assert_eq!(next.worker_id(), 2);
    assert!(next.decode(next.next_id().unwrap()).timestamp_ms > next.decode(last).timestamp_ms);
    next.close();
    for g in &gens {
        g.close();
    }
}

#[test]
fn killing_the_session_cuts_the_issue_limit_and_the_id_goes_to_the_next_holder_above_its_bound() {
    let name = unique_name("expire");
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name.clone(),
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let limit = IssueLimit::closed();
    limit.set(0);
    let r = reg.clone();
    let l = limit.clone();
    let lease = leafid::runtime::block_on(async move { r.acquire(0, l).await }).unwrap();
    let bound = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 5_000;
    let r = reg.clone();
    let l2 = lease.clone();
    leafid::runtime::block_on(async move { r.renew(&l2, bound).await }).unwrap();
    assert!(limit.raise(bound));

    end_held_session(&reg, &name);
    let until = Instant::now() + Duration::from_secs(30);
    while limit.get() != i64::MIN {
        assert!(
            Instant::now() < until,
            "issue limit never cut after the session ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Renewing on the dead session is refused.
    let r = reg.clone();
    let l2 = lease.clone();
    let err = leafid::runtime::block_on(async move { r.renew(&l2, bound + 1).await }).unwrap_err();
    assert!(
        matches!(
            err,
            Error::LeaseLost { .. } | Error::RegistryUnavailable { .. }
        ),
        "{err:?}"
    );
    // The next holder gets the id with our bound as its floor.
    let other = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name,
        "10.0.0.2",
        "2",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let o = other.clone();
    let next =
        leafid::runtime::block_on(async move { o.acquire(0, IssueLimit::closed()).await }).unwrap();
    assert_eq!(next.worker_id, lease.worker_id);
    assert_eq!(next.floor_ms, bound);
    let o = other.clone();
    leafid::runtime::block_on(async move { o.release(&next).await }).unwrap();
}

#[test]
fn a_free_id_whose_last_bound_is_past_is_taken_before_one_still_ahead() {
    let name = unique_name("rank");
    let registry = |ip: &str| {
        Arc::new(ZookeeperRecycleRegistry::new(
            zk_addr(),
            name.clone(),
            ip,
            "1",
            Duration::from_millis(6000),
            Duration::from_millis(3000),
        ))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Id 0 released with a bound a minute ahead; id 1 never used.
    let first = registry("10.0.0.1");
    let r = first.clone();
    let held = leafid::runtime::block_on(async move {
        let lease = r.acquire(1, IssueLimit::closed()).await?;
        r.renew(&lease, now + 60_000).await?;
        r.release(&lease).await?;
        Ok::<_, Error>(lease)
    })
    .unwrap();
    assert_eq!(held.worker_id, 0);
    // The next holder starts at once on id 1 rather than waiting a minute on id 0.
    let second = registry("10.0.0.2");
    let r = second.clone();
    let next = leafid::runtime::block_on(async move {
        let lease = r.acquire(1, IssueLimit::closed()).await?;
        r.release(&lease).await?;
        Ok::<_, Error>(lease)
    })
    .unwrap();
    assert_eq!((next.worker_id, next.floor_ms), (1, i64::MIN));
}

#[test]
fn a_lease_node_deleted_by_hand_is_noticed_by_the_renew_and_the_generator_moves_on() {
    let name = unique_name("deleted");
    let cache = tempfile::tempdir().unwrap();
    let (reg, g) = watched_generator(&name, cache.path());
    let mut seen: HashSet<i64> = g.next_ids(1_000).unwrap().into_iter().collect();
    let r = reg.clone();
    let (id, before) = leafid::runtime::block_on(async move { r.held_session().await }).unwrap();
    // An operator deletes the lease node; the session itself stays healthy.
    let (addr, path) = (zk_addr(), format!("/snowflake/{name}/recycle/lease/{id}"));
    leafid::runtime::block_on(async move {
        let admin = zk::Client::connect(&addr).await.unwrap();
        admin.delete(&path, None).await.unwrap();
    });
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < until,
            "the generator never took a new lease"
        );
        match g.next_id() {
            Ok(id) => assert!(seen.insert(id), "duplicate id {id}"),
            Err(Error::LeaseLost { .. } | Error::RegistryUnavailable { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        let r = reg.clone();
        let now = leafid::runtime::block_on(async move { r.held_session().await });
        if now.is_some_and(|(_, info)| info.id != before.id) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..1_000 {
        let id = loop {
            match g.next_id() {
                Ok(id) => break id,
                Err(Error::LeaseLost { .. }) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("unexpected error {e}"),
            }
        };
        assert!(seen.insert(id), "duplicate id {id}");
    }
    g.close();
}

#[test]
fn generator_stops_on_a_lost_session_and_resumes_on_a_new_lease_without_duplicates() {
    let name = unique_name("resume");
    let cache = tempfile::tempdir().unwrap();
    let (reg, g) = watched_generator(&name, cache.path());
    let mut seen = HashSet::new();
    for id in g.next_ids(5_000).unwrap() {
        assert!(seen.insert(id));
    }
    let ended = end_held_session(&reg, &name);
    // Issuing stops (LeaseLost) until the heartbeat leased an id again (at once when a
    // free id's last bound is past), then resumes on the new session.
    let until = Instant::now() + Duration::from_secs(30);
    let mut resumed = 0;
    while resumed < 1_000 {
        assert!(Instant::now() < until, "generator never resumed");
        match g.next_id() {
            Ok(id) => {
                assert!(seen.insert(id), "duplicate id {id}");
                resumed += 1;
            }
            Err(Error::LeaseLost { .. }) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    let r = reg.clone();
    let (_, now_held) = leafid::runtime::block_on(async move { r.held_session().await }).unwrap();
    assert_ne!(
        now_held.id, ended,
        "still issuing on the session that ended"
    );
    g.close();
}

#[test]
fn short_lived_holders_in_threads_never_share_an_id() {
    let name = unique_name("churn");
    let cache = tempfile::tempdir().unwrap();
    let live: Arc<Mutex<HashMap<u32, usize>>> = Arc::default();
    let all: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (name, live, all) = (name.clone(), live.clone(), all.clone());
            let cache = cache.path().to_path_buf();
            std::thread::spawn(move || {
                let mut done = 0;
                while done < 8 {
                    let g = gen_when_free(&name, small(), &cache);
                    let w = g.worker_id();
                    if let Some(other) = live.lock().unwrap().insert(w, t) {
                        panic!("worker {w} held by threads {other} and {t} at once");
                    }
                    let ids = g.next_ids(500);
                    live.lock().unwrap().remove(&w);
                    g.close();
                    // A 1 s session on a loaded machine can be lost mid-batch: the holder
                    // stops (fence rule 5), the registry doing its job, not a shared id.
                    let ids = match ids {
                        Ok(ids) => ids,
                        Err(leafid::Error::LeaseLost { .. })
                        | Err(leafid::Error::RegistryUnavailable { .. }) => continue,
                        Err(e) => panic!("thread {t}: {e}"),
                    };
                    done += 1;
                    let mut all = all.lock().unwrap();
                    for id in ids {
                        assert!(all.insert(id), "duplicate id {id}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(all.lock().unwrap().len(), 6 * 8 * 500);
}

#[test]
fn sigkilled_holders_never_share_an_id_and_their_ids_come_back_above_their_ids() {
    let name = unique_name("kill");
    let cache = tempfile::tempdir().unwrap();
    let mut all = HashSet::new();
    let mut last_by_worker: HashMap<u32, i64> = HashMap::new();
    for round in 0..3 {
        // Fill the pool with live child processes: four distinct ids.
        let mut kids: Vec<_> = (0..4).map(|_| spawn_child(&name, cache.path())).collect();
        let workers: HashSet<u32> = kids.iter().map(|k| k.1).collect();
        assert_eq!(workers.len(), 4, "round {round}: live holders share an id");
        for (_, w, ids) in &kids {
            let first = ids[0];
            if let Some(prev) = last_by_worker.get(w) {
                assert!(
                    first > *prev,
                    "worker {w} reissued below its last holder's ids"
                );
            }
            for id in ids {
                assert!(all.insert(*id), "duplicate id {id}");
            }
            last_by_worker.insert(*w, *ids.last().unwrap());
        }
        // SIGKILL them all: no release; ZooKeeper frees the ids after the session timeout.
        for k in kids.iter_mut() {
            sigkill(&mut k.0);
        }
    }
    // An in-process holder gets one of the killed ids back, above its last ids.
    let g = gen_when_free(&name, small(), cache.path());
    let id = g.next_id().unwrap();
    assert!(id > last_by_worker[&g.worker_id()]);
    assert!(all.insert(id));
    g.close();
}

#[test]
fn saturated_generators_on_zookeeper_recycle_never_issue_a_duplicate() {
    let name = unique_name("saturate");
    let cache = tempfile::tempdir().unwrap();
    let gens: Vec<_> = (0..4)
        .map(|_| gen(&name, Layout::default(), cache.path()).unwrap())
        .collect();
    let gens = Arc::new(gens);
    let deadline = Instant::now() + Duration::from_millis(1_500);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let gens = gens.clone();
            std::thread::spawn(move || {
                let g = &gens[t % gens.len()];
                let mut out = Vec::new();
                let mut buf = [0i64; 64];
                while Instant::now() < deadline {
                    match g.fill(&mut buf) {
                        Ok(()) => out.extend_from_slice(&buf),
                        // A starved CI machine can miss pings and lose the session: the
                        // generator then stops issuing until it holds an id again. That is
                        // the designed outcome; what this test checks is uniqueness.
                        Err(Error::LeaseLost { .. } | Error::RegistryUnavailable { .. }) => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
                out
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        for id in t.join().unwrap() {
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert!(all.len() > 10_000);
    for g in gens.iter() {
        g.close();
    }
}

#[test]
fn a_lease_and_each_floor_write_come_with_a_reading_of_zookeepers_clock() {
    let name = unique_name("clock");
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name.clone(),
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    assert_eq!(reg.take_clock_reading(), None);
    let r = reg.clone();
    let lease =
        leafid::runtime::block_on(async move { r.acquire(3, IssueLimit::closed()).await }).unwrap();
    let lease_path = format!("/snowflake/{name}/recycle/lease/{}", lease.worker_id);
    let last_path = format!("/snowflake/{name}/recycle/last/{}", lease.worker_id);
    let addr = zk_addr();
    let stat_of = move |path: String| {
        let addr = addr.clone();
        leafid::runtime::block_on(async move {
            let c = zk::Client::connect(&addr).await.unwrap();
            c.check_stat(&path).await.unwrap().expect("node exists")
        })
    };

    // Acquire: the ctime of the lease node it created.
    let reading = reg.take_clock_reading().expect("a reading after acquire");
    assert_eq!(reading.registry_ms, stat_of(lease_path.clone()).ctime);
    assert!(reading.source.contains(&lease_path), "{}", reading.source);
    assert!(reading.local_before_ms <= reading.local_after_ms);
    // Taken means gone.
    assert_eq!(reg.take_clock_reading(), None);

    // The first renew creates `last/{id}`, the next ones set it: the mtime each time.
    for bound in [1_000, 2_000] {
        let r = reg.clone();
        let l = lease.clone();
        leafid::runtime::block_on(async move { r.renew(&l, bound).await }).unwrap();
        let reading = reg.take_clock_reading().expect("a reading after renew");
        assert_eq!(reading.registry_ms, stat_of(last_path.clone()).mtime);
        assert!(reading.source.contains(&last_path), "{}", reading.source);
        assert!(reading.local_before_ms <= reading.local_after_ms);
    }
    let r = reg.clone();
    leafid::runtime::block_on(async move { r.release(&lease).await }).unwrap();
}

#[test]
fn floors_written_with_credentials_cannot_be_changed_or_deleted_without_them() {
    let chroot = unique_name("chroot").replace('-', "_");
    let name = unique_name("acl");
    let cache = tempfile::tempdir().unwrap();
    // The password needs percent-encoding; it must never show.
    let url = format!(
        "zookeeper-recycle://leafid:n0t%40shown@{}/{chroot}/{name}?ip=10.0.0.1&port=1&session_timeout_ms=1000",
        zk_addr()
    );
    let g = SnowflakeGenerator::builder()
        .registry_url(&url)
        .unwrap()
        .layout(small())
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(600))
        .build_blocking()
        .unwrap();
    // An id is issued only once a bound was written to `last/{id}`.
    g.next_id().unwrap();
    let id = g.worker_id();
    let last_dir = format!("/{chroot}/snowflake/{name}/recycle/last");
    let floor = format!("{last_dir}/{id}");
    let addr = zk_addr();
    leafid::runtime::block_on(async move {
        let nobody = zk::Client::connect(&addr).await.unwrap();
        // Below the chroot, readable by anyone.
        let (data, _) = nobody.get_data(&floor).await.unwrap();
        assert!(String::from_utf8(data).unwrap().contains("bound_ms"));
        // Neither the floor nor its directory takes a write from another identity:
        // no lower floor, no delete-and-recreate.
        for path in [&floor, &last_dir] {
            let (acl, _) = nobody.get_acl(path).await.unwrap();
            assert!(
                acl.iter()
                    .any(|a| a.scheme() == "digest" && a.id().starts_with("leafid:")),
                "{path}: {acl:?}"
            );
        }
        assert_eq!(
            nobody
                .set_data(&floor, br#"{"bound_ms":0}"#, None)
                .await
                .unwrap_err(),
            zk::Error::NoAuth
        );
        assert_eq!(
            nobody.delete(&floor, None).await.unwrap_err(),
            zk::Error::NoAuth
        );
        let sneaky = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        assert_eq!(
            nobody
                .create(&format!("{last_dir}/9"), br#"{"bound_ms":0}"#, &sneaky)
                .await
                .unwrap_err(),
            zk::Error::NoAuth
        );
    });
    g.close();
    // Nor does the password reach the cache file's name.
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!file.contains("n0t"), "{file}");
    }
}

#[test]
fn the_password_never_shows_in_descriptions_leases_or_errors() {
    let name = unique_name("shown");
    let connect = format!("leafid:n0tshown@{}", zk_addr());
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        connect,
        name,
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    assert!(!reg.describe().contains("n0tshown"), "{}", reg.describe());
    assert!(reg.describe().contains("leafid:***@"), "{}", reg.describe());
    assert!(!format!("{reg:?}").contains("n0tshown"));
    let r = reg.clone();
    let lease =
        leafid::runtime::block_on(async move { r.acquire(0, IssueLimit::closed()).await }).unwrap();
    assert!(!lease.location.contains("n0tshown"), "{}", lease.location);
    // A pool of one: a second holder fails, and says where without the password.
    let other = Arc::new(ZookeeperRecycleRegistry::new(
        format!("leafid:n0tshown@{}", zk_addr()),
        reg.lease_dir().split('/').nth(2).unwrap().to_string(),
        "10.0.0.2",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let o = other.clone();
    let err = leafid::runtime::block_on(async move { o.acquire(0, IssueLimit::closed()).await })
        .unwrap_err();
    assert!(matches!(err, Error::WorkerIdExhausted { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("n0tshown"), "{err:?}");
    // An unreachable ensemble: the error names it without the password.
    let down = ZookeeperRecycleRegistry::new(
        "leafid:n0tshown@127.0.0.1:1",
        "x",
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(500),
    );
    let err = leafid::runtime::block_on(async move { down.acquire(0, IssueLimit::closed()).await })
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains("n0tshown"), "{err:?}");
    let r = reg.clone();
    leafid::runtime::block_on(async move { r.release(&lease).await }).unwrap();
}
