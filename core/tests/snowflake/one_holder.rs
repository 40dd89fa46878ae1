//! One live holder per worker id, in every registry (issue 10): processes and generators
//! started from ONE configuration never share a worker id; they get a distinct id where
//! the registry can give one, else `WorkerIdInUse`. Also: a live Java Leaf server's node
//! is not taken, a lock file unlinked under its holder stops the holder, and a clock
//! skewed against the registry is refused at start-up. Real ZooKeeper and MariaDB
//! (`LEAFID_ZK`, `LEAFID_MYSQL_URL`); children are this test binary re-run.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::self_exec::test_name;
use leafid::snowflake::RegistryConfig;
use leafid::{Error, SnowflakeGenerator};

const URL_VAR: &str = "LEAFID_TEST_ONE_HOLDER_URL";
const CACHE_VAR: &str = "LEAFID_TEST_ONE_HOLDER_CACHE";
const IDS_PER_CHILD: usize = 2_000;

fn zk() -> String {
    std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env first")
}

fn mysql() -> String {
    std::env::var("LEAFID_MYSQL_URL")
        .expect("LEAFID_MYSQL_URL is not set: source .services/env first")
}

/// A name (and ip) no other test or run uses; no '-' (Java Leaf splits on it).
fn unique(tag: &str) -> String {
    format!(
        "one_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn build(url: &str, cache: &Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .build_blocking()
}

/// Entry point of a child: builds a generator from the URL, prints
/// `LEAFID-CHILD ok <worker> <ids>` or `LEAFID-CHILD err <code> <message>`, then holds
/// its generator until stdin closes.
#[test]
#[ignore = "run as a child process by the tests below"]
fn one_holder_child_entry() {
    let url = std::env::var(URL_VAR).expect("started as a child");
    let cache = std::env::var(CACHE_VAR).unwrap();
    match build(&url, Path::new(&cache)) {
        Ok(gen) => {
            let ids = gen.next_ids(IDS_PER_CHILD).unwrap();
            let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            println!("LEAFID-CHILD ok {} {}", gen.worker_id(), text.join(","));
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            gen.close();
        }
        Err(e) => {
            println!(
                "LEAFID-CHILD err {} {}",
                e.code(),
                e.to_string().replace('\n', " ")
            );
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        }
    }
}

enum Outcome {
    Live { worker_id: u32, ids: Vec<i64> },
    Refused { code: String, message: String },
}

impl Outcome {
    /// Reads the child's remaining output in the background, so it never writes into a
    /// closed pipe.
    fn drain(self, rest: impl Iterator + Send + 'static) -> Outcome {
        std::thread::spawn(move || rest.for_each(drop));
        self
    }
}

struct ChildRun {
    child: Child,
    outcome: Outcome,
}

// The caller ends the child through its stdin and waits for it.
#[allow(clippy::zombie_processes)]
fn spawn(mut command: Command, url: &str, cache: &Path) -> Child {
    command
        .args([
            "--ignored",
            "--exact",
            test_name(module_path!(), "one_holder_child_entry").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(URL_VAR, url)
        .env(CACHE_VAR, cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the test binary as a child")
}

fn outcome(child: &mut Child) -> Outcome {
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    loop {
        let line = lines
            .next()
            .expect("child exited without a LEAFID-CHILD line")
            .unwrap();
        // libtest may print "test … ... " before it on the same line.
        let Some(at) = line.find("LEAFID-CHILD ") else {
            continue;
        };
        let rest = &line[at + "LEAFID-CHILD ".len()..];
        let mut parts = rest.splitn(3, ' ');
        return match (parts.next(), parts.next(), parts.next()) {
            (Some("ok"), Some(w), Some(ids)) => Outcome::Live {
                worker_id: w.parse().unwrap(),
                ids: ids.split(',').map(|i| i.parse().unwrap()).collect(),
            },
            (Some("err"), Some(code), msg) => Outcome::Refused {
                code: code.to_string(),
                message: msg.unwrap_or("").to_string(),
            },
            _ => panic!("bad child line {line:?}"),
        }
        .drain(lines);
    }
}

/// Starts `n` children from ONE url at once; `shared_cache` gives them one cache
/// directory (else one each). Returns them once each has reported.
fn start_many(url: &str, n: usize, shared_cache: bool) -> (Vec<ChildRun>, tempfile::TempDir) {
    let caches = tempfile::tempdir().unwrap();
    let children: Vec<Child> = (0..n)
        .map(|i| {
            let cache = if shared_cache {
                caches.path().to_path_buf()
            } else {
                caches.path().join(i.to_string())
            };
            spawn(Command::new(std::env::current_exe().unwrap()), url, &cache)
        })
        .collect();
    let runs = children
        .into_iter()
        .map(|mut child| ChildRun {
            outcome: outcome(&mut child),
            child,
        })
        .collect();
    (runs, caches)
}

fn finish(runs: Vec<ChildRun>) {
    for mut run in runs {
        drop(run.child.stdin.take());
        assert!(run.child.wait().unwrap().success());
    }
}

/// Every live child has its own worker id, the others were refused with
/// `WorkerIdInUse`, and no id was issued twice. Returns (live, refused).
fn check(runs: &[ChildRun], what: &str) -> (usize, usize) {
    let mut workers = HashSet::new();
    let mut ids = HashSet::new();
    let (mut live, mut refused) = (0, 0);
    for run in runs {
        match &run.outcome {
            Outcome::Live {
                worker_id,
                ids: got,
            } => {
                live += 1;
                assert!(
                    workers.insert(*worker_id),
                    "{what}: worker id {worker_id} held twice"
                );
                for id in got {
                    assert!(ids.insert(*id), "{what}: duplicate id {id}");
                }
            }
            Outcome::Refused { code, message } => {
                refused += 1;
                assert_eq!(code, "LEAF_WORKER_ID_IN_USE", "{what}: {message}");
                assert!(
                    message.contains("zookeeper-recycle://") && message.contains("in use by"),
                    "{what}: the message says who and what to do: {message}"
                );
            }
        }
    }
    (live, refused)
}

#[test]
fn zookeeper_same_url_in_four_processes_has_one_live_holder() {
    let url = format!(
        "zookeeper://{}/{}?port=8080&ip=127.0.0.1",
        zk(),
        unique("zk")
    );
    for shared in [false, true] {
        let (runs, _caches) = start_many(&url, 4, shared);
        assert_eq!(check(&runs, &url), (1, 3), "shared cache: {shared}");
        finish(runs);
    }
}

#[test]
fn mysql_same_url_in_four_processes_has_one_live_holder() {
    let base = mysql();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}port=8080&ip={}", unique("my"));
    for shared in [false, true] {
        let (runs, _caches) = start_many(&url, 4, shared);
        assert_eq!(check(&runs, &url), (1, 3), "shared cache: {shared}");
        finish(runs);
    }
}

#[test]
fn fixed_same_url_in_four_processes_has_one_live_holder() {
    let (runs, _caches) = start_many("fixed:7", 4, true);
    assert_eq!(check(&runs, "fixed:7"), (1, 3));
    finish(runs);
}

#[test]
fn local_same_url_in_four_processes_gives_four_worker_ids() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("local://{}", dir.path().display());
    let (runs, _caches) = start_many(&url, 4, true);
    assert_eq!(check(&runs, &url), (4, 0));
    finish(runs);
}

#[test]
fn two_fixed_generators_in_one_process_are_refused() {
    let cache = tempfile::tempdir().unwrap();
    let a = build("fixed:7", cache.path()).unwrap();
    let err = build("fixed:7", cache.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    a.close();
    // Closed: the id is free again.
    build("fixed:7", cache.path()).unwrap().close();
}

#[test]
fn two_zookeeper_generators_in_one_process_are_refused_even_with_two_cache_dirs() {
    let url = format!(
        "zookeeper://{}/{}?port=8080&ip=127.0.0.1",
        zk(),
        unique("zk2")
    );
    let (c1, c2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = build(&url, c1.path()).unwrap();
    let err = build(&url, c2.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    a.close();
    // A quick restart after a clean close does not wait: the release is recorded.
    let started = Instant::now();
    let b = build(&url, c2.path()).unwrap();
    assert_eq!(b.worker_id(), a.worker_id());
    b.close();
    eprintln!("restart after close took {:?}", started.elapsed());
}

/// A Java Leaf server's forever node: `{ip}:{port}-{seq}` with Leaf's JSON, written by an
/// independent client and refreshed every 3 s as Leaf does.
#[test]
fn live_java_leaf_node_refreshed_every_three_seconds_is_not_taken() {
    use zookeeper_client as zkc;
    let name = unique("java");
    let (ip, port) = ("127.0.0.1", "8181");
    let addr = zk();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let data = move |ts: i64| format!(r#"{{"ip":"{ip}","port":"{port}","timestamp":{ts}}}"#);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let (client, path) = {
        let name = name.clone();
        leafid::runtime::block_on(async move {
            let client = zkc::Client::connector()
                .with_session_timeout(Duration::from_secs(6))
                .connect(&addr)
                .await
                .expect("connect to LEAFID_ZK");
            let forever = format!("/snowflake/{name}/forever");
            let dir = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
            client.mkdir(&forever, &dir).await.unwrap();
            let prefix = format!("{forever}/{ip}:{port}-");
            let opts = zkc::CreateMode::PersistentSequential.with_acls(zkc::Acls::anyone_all());
            let (_, seq) = client
                .create(&prefix, data(now()).as_bytes(), &opts)
                .await
                .unwrap();
            (client, format!("{prefix}{seq}"))
        })
    };
    let refresher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(3));
                let (c, p, d) = (client.clone(), path.clone(), data(now()));
                leafid::runtime::block_on(async move {
                    c.set_data(&p, d.as_bytes(), None).await.unwrap();
                });
            }
        })
    };
    let url = format!("zookeeper://{}/{name}?port={port}&ip={ip}", zk());
    let cache = tempfile::tempdir().unwrap();
    let err = build(&url, cache.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    assert!(err.to_string().contains("Java Leaf"), "{err}");
    // The server stops; once its node has aged past the live window, the identity is free.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    refresher.join().unwrap();
    let gen = build(&url, cache.path()).unwrap();
    gen.next_id().unwrap();
    gen.close();
}

#[test]
fn lock_file_unlinked_under_a_holder_makes_it_take_its_lease_again() {
    let dir = tempfile::tempdir().unwrap();
    let caches = tempfile::tempdir().unwrap();
    // One worker bit: ids 0 and 1, so the newcomer below has no other id to take.
    let layout = leafid::Layout::new(41, 1, 21, leafid::snowflake::LEAF_EPOCH_MS).unwrap();
    let local = |cache: &str| {
        SnowflakeGenerator::builder()
            .registry(RegistryConfig::Local {
                dir: dir.path().to_path_buf(),
            })
            .layout(layout)
            .cache_dir(caches.path().join(cache))
            .heartbeat(Duration::from_millis(50))
            .build_blocking()
    };
    let first = local("a").unwrap();
    let other = local("c").unwrap();
    let worker = first.worker_id();
    std::fs::remove_file(dir.path().join(format!("worker-{worker}.lock"))).unwrap();
    // A newcomer would lock a new file at the same path, but the id's identity claim
    // (issue 20) is still the first holder's: no id for the newcomer.
    match local("b") {
        Err(Error::WorkerIdExhausted { size: 2, .. }) => {}
        other => panic!("the newcomer took a live holder's id: {other:?}"),
    }
    // The first loses its lease at its next heartbeat and takes it again at once (a
    // new lock file at the path; issue 30: a re-acquire no longer waits, so a caller
    // may never see it stop). What matters: the lease is taken again, and every id
    // issued, before and after, is distinct.
    let lock = dir.path().join(format!("worker-{worker}.lock"));
    let mut seen = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut issued = 0;
    while issued < 10_000 || !lock.exists() {
        match first.next_id() {
            Ok(id) => {
                assert!(seen.insert(id));
                issued += 1;
            }
            Err(e) => {
                assert!(matches!(e, Error::LeaseLost { .. }), "{e:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert!(
            Instant::now() < deadline,
            "the first holder never took its lease again"
        );
    }
    for _ in 0..10_000 {
        assert!(seen.insert(other.next_id().unwrap()));
    }
    first.close();
    other.close();
}

#[test]
fn fixed_generators_with_two_cache_dirs_are_still_one_holder() {
    // The claim is per host, not per cache directory (a lock file beside the cache
    // would let two users or two HOMEs hold one id).
    let (c1, c2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = build("fixed:9", c1.path()).unwrap();
    let err = build("fixed:9", c2.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    a.close();
    build("fixed:9", c2.path()).unwrap().close();
}

#[test]
fn fixed_in_four_processes_with_their_own_cache_dirs_has_one_live_holder() {
    let (runs, _caches) = start_many("fixed:11", 4, false);
    assert_eq!(check(&runs, "fixed:11"), (1, 3));
    finish(runs);
}

/// Runs one child under libfaketime with its clock `offset` off and returns its outcome.
fn skewed_child(url: &str, offset: &str) -> Outcome {
    let faketime = Path::new("/usr/bin/faketime");
    assert!(
        faketime.exists(),
        "this test needs faketime (Debian package `faketime`): apt-get install faketime"
    );
    let cache = tempfile::tempdir().unwrap();
    let mut command = Command::new(faketime);
    command
        .arg("-f")
        .arg(offset)
        .arg(std::env::current_exe().unwrap());
    let mut child = spawn(command, url, cache.path());
    let got = outcome(&mut child);
    drop(child.stdin.take());
    child.wait().unwrap();
    got
}

#[test]
fn clock_skewed_against_zookeeper_is_refused_at_start_up() {
    let url = format!(
        "zookeeper://{}/{}?port=8080&ip=127.0.0.1",
        zk(),
        unique("skew")
    );
    match skewed_child(&url, "+30s") {
        Outcome::Refused { code, message } => {
            assert_eq!(code, "LEAF_CLOCK_SKEW", "{message}");
            assert!(message.contains("ahead of"), "{message}");
        }
        Outcome::Live { .. } => panic!("a clock 30 s ahead of ZooKeeper's was accepted"),
    }
}

#[test]
fn clock_skewed_against_mysql_is_refused_at_start_up() {
    let base = mysql();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}port=8080&ip={}", unique("skew"));
    match skewed_child(&url, "-30s") {
        Outcome::Refused { code, message } => {
            assert_eq!(code, "LEAF_CLOCK_SKEW", "{message}");
            assert!(message.contains("behind"), "{message}");
        }
        Outcome::Live { .. } => panic!("a clock 30 s behind the database's was accepted"),
    }
}

#[test]
fn mysql_row_deleted_under_a_holder_moves_it_to_a_new_row() {
    let base = mysql();
    let sep = if base.contains('?') { '&' } else { '?' };
    let ip = unique("del");
    let url = format!("{base}{sep}port=8080&ip={ip}");
    let cache = tempfile::tempdir().unwrap();
    let gen = SnowflakeGenerator::builder()
        .registry_url(&url)
        .unwrap()
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(50))
        .build_blocking()
        .unwrap();
    let worker = gen.worker_id();
    let first = gen.next_id().unwrap();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&base).await.unwrap();
        sqlx::query("DELETE FROM leaf_workerid_alloc WHERE ip_port = ?")
            .bind(format!("{ip}:8080"))
            .execute(&mut c)
            .await
            .unwrap();
    });
    // Its lease is lost at the next poll and it takes a new row at once (issue 30: a
    // re-acquire no longer waits, so a caller may never see it stop): a new worker id,
    // and every id distinct and increasing.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ids = vec![first];
    while gen.worker_id() == worker || ids.len() < 1_000 {
        match gen.next_id() {
            Ok(id) => ids.push(id),
            Err(e) => assert!(matches!(e, Error::LeaseLost { .. }), "{e:?}"),
        }
        assert!(Instant::now() < deadline, "the holder never took a new row");
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    gen.close();
}

#[test]
fn custom_fixed_registries_are_one_holder_too() {
    use leafid::snowflake::registry::FixedRegistry;
    let (c1, c2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let custom = |cache: &Path| {
        SnowflakeGenerator::builder()
            .custom_registry(std::sync::Arc::new(FixedRegistry::new(23)))
            .cache_dir(cache)
            .build_blocking()
    };
    let a = custom(c1.path()).unwrap();
    let err = custom(c2.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    // The same id from configuration is the same identity.
    let err = build("fixed:23", c2.path()).unwrap_err();
    assert!(matches!(err, Error::WorkerIdInUse { .. }), "{err:?}");
    a.close();
}
