//! The `postgres://` identity registry (issue 23) against a real PostgreSQL
//! (`LEAFID_PG_URL`): an identity keeps its worker id across restarts, the database
//! refuses a second live holder of it, a SIGKILLed holder's restart on the same host
//! takes its id back above everything it issued, and its row deleted or rewritten
//! under a live holder is `LeaseLost`. Every test uses identities of its own (a port
//! per test and run).
#![cfg(feature = "postgres")]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::snowflake::registry::postgres::PostgresRegistry;
use leafid::snowflake::registry::{IssueLimit, WorkerRegistry};
use leafid::{Error, SnowflakeGenerator};

const CHILD_URL: &str = "LEAFID_TEST_PG_CHILD_URL";
const CHILD_OUT: &str = "LEAFID_TEST_PG_CHILD_OUT";

fn base() -> String {
    std::env::var("LEAFID_PG_URL").expect("LEAFID_PG_URL is not set (postgres://…:5433/leafid)")
}

/// An identity no other test or run uses: ip 127.0.0.1, a port from the pid and time,
/// an ip octet per test.
fn identity_url(test: u8) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let port = 1 + (std::process::id() as u128 * 7919 + nanos / 1000) % 65000;
    format!("{}?port={port}&ip=127.0.{test}.{}", base(), nanos % 250)
}

fn build(url: &str, cache: &std::path::Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .custom_registry(Arc::new(PostgresRegistry::from_url(url)?))
        .cache_dir(cache)
        .build_blocking()
}

fn exec(sql: &str) {
    let sql = sql.to_string();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&base()).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("sql");
    });
}

/// Deletes an identity's row when a test ends, so test identities never pile up
/// towards the 1 024 ids.
struct Forget(String);

impl Drop for Forget {
    fn drop(&mut self) {
        exec(&format!(
            "DELETE FROM leafid_worker_pool WHERE pool = '' AND identity = '{}'",
            ip_port(&self.0)
        ));
    }
}

fn ip_port(url: &str) -> String {
    let u = url::Url::parse(url).unwrap();
    let get = |k: &str| {
        u.query_pairs()
            .find(|(n, _)| n == k)
            .unwrap()
            .1
            .into_owned()
    };
    format!("{}:{}", get("ip"), get("port"))
}

#[test]
fn an_identity_keeps_its_worker_id_across_restarts() {
    let (a, b) = (identity_url(1), identity_url(2));
    let _forget = (Forget(a.clone()), Forget(b.clone()));
    let dir = tempfile::tempdir().unwrap();
    let g = build(&a, dir.path()).unwrap();
    let other = build(&b, dir.path()).unwrap();
    assert_ne!(g.worker_id(), other.worker_id());
    let id = g.worker_id();
    let last = (0..1000).map(|_| g.next_id().unwrap()).max().unwrap();
    g.close();
    other.close();
    let again = build(&a, dir.path()).unwrap();
    assert_eq!(again.worker_id(), id);
    let first = again.next_id().unwrap();
    assert!(first > last, "{first} after {last}");
    again.close();
}

#[test]
fn the_database_refuses_a_second_live_holder_of_an_identity() {
    // Two registries, no generator: no host lock in the way, only the database.
    let url = identity_url(3);
    let _forget = Forget(url.clone());
    let (r1, r2) = (
        PostgresRegistry::from_url(&url).unwrap(),
        PostgresRegistry::from_url(&url).unwrap(),
    );
    let (lease, second) = leafid::runtime::block_on(async move {
        let lease = r1.acquire(1023, IssueLimit::closed()).await.unwrap();
        let second = r2.acquire(1023, IssueLimit::closed()).await;
        r1.release(&lease).await.unwrap();
        (lease, second)
    });
    let e = second.unwrap_err();
    assert!(matches!(e, Error::WorkerIdInUse { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    assert!(
        lease.location.contains(&ip_port(&url)),
        "{}",
        lease.location
    );
}

/// The row deleted or rewritten under a live holder: the lease is lost at once (rule
/// 2). A re-acquire no longer waits (issue 30), so the caller may never see a stop
/// when the identity can be taken again (a deleted row): what matters is that the
/// holder either stops with `LeaseLost` or holds the identity's row again, and that
/// every id it issued is distinct and increasing.
fn row_changed_under_a_live_holder_is_lease_lost(test: u8, change: &str) {
    let url = identity_url(test);
    let _forget = Forget(url.clone());
    let dir = tempfile::tempdir().unwrap();
    let gen = build(&url, dir.path()).unwrap();
    let mut ids = vec![gen.next_id().unwrap()];
    let identity = ip_port(&url);
    exec(&change.replace("{identity}", &identity));
    let retaken = format!(
        "SELECT COUNT(*) FROM leafid_worker_pool WHERE pool = '' AND identity = '{identity}' \
         AND holder <> '' AND holder <> 'operator'"
    );
    // Generous: only catches a holder that keeps issuing on a lost lease.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match gen.next_id() {
            Ok(id) => ids.push(id),
            Err(e) => {
                assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
                break;
            }
        }
        if count(&retaken) > 0 {
            break; // taken again (the generator may install it a moment later)
        }
        assert!(
            Instant::now() < deadline,
            "the holder kept issuing on a lost lease"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids not distinct and increasing"
    );
    gen.close();
}

/// The one number `sql` selects.
fn count(sql: &str) -> i64 {
    let sql = sql.to_string();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&base()).await.expect("connect");
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&mut c)
            .await
            .expect("sql")
    })
}

#[test]
fn its_row_deleted_under_a_live_holder_is_lease_lost() {
    row_changed_under_a_live_holder_is_lease_lost(
        4,
        "DELETE FROM leafid_worker_pool WHERE pool = '' AND identity = '{identity}'",
    );
}

#[test]
fn its_row_rewritten_under_a_live_holder_is_lease_lost() {
    row_changed_under_a_live_holder_is_lease_lost(
        5,
        "UPDATE leafid_worker_pool SET holder = 'operator', bound_ms = 0 \
         WHERE pool = '' AND identity = '{identity}'",
    );
}

#[test]
fn a_killed_holders_restart_issues_above_everything_it_issued() {
    let url = identity_url(6);
    let _forget = Forget(url.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("child.ids");
    let mut child = spawn_child(&url, &out);
    wait_ready(&mut child);
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let mut bytes = Vec::new();
    std::fs::File::open(&out)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    let last = bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .max()
        .expect("the child issued");
    // Issue 30: the dead predecessor's lease is taken at once (this process holds the
    // host's identity lock), its bound the floor. A hang-catcher only (2 s): before,
    // the restart watched the row 2.5 s.
    let (gen, first, took) = first_id(&url, dir.path());
    println!("restart after SIGKILL: first id after {took:?}");
    assert!(first > last, "{first} after the killed holder's {last}");
    gen.close();
}

/// The first id of a generator built on `url`, retried for at most 2 s (a hang-catcher);
/// returns it and how long it took from the start of the build.
fn first_id(url: &str, cache: &std::path::Path) -> (SnowflakeGenerator, i64, Duration) {
    let started = Instant::now();
    let g = build(url, cache).unwrap();
    loop {
        match g.next_id() {
            Ok(id) => {
                let took = started.elapsed();
                assert!(took < Duration::from_secs(2), "first id after {took:?}");
                return (g, id, took);
            }
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(2),
                "no first id within 2 s: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Issue 30 goal 2: a new identity's first id comes at once (no foreign writer to
/// watch for). A hang-catcher only (2 s): before, a new row was watched 3.5 s.
#[test]
fn a_new_identitys_first_id_comes_at_once() {
    let url = identity_url(7);
    let _forget = Forget(url.clone());
    let dir = tempfile::tempdir().unwrap();
    let (g, _, took) = first_id(&url, dir.path());
    println!("new identity: first id after {took:?}");
    g.close();
}

// The caller kills and waits for the child.
#[allow(clippy::zombie_processes)]
fn spawn_child(url: &str, out: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            &crate::support::self_exec::test_name(module_path!(), "pg_child_entry"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL, url)
        .env(CHILD_OUT, out)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the test binary as a child")
}

fn wait_ready(child: &mut Child) {
    let out = child.stdout.take().unwrap();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if line.contains("PG-CHILD ready") {
            return;
        }
        assert!(!line.contains("PG-CHILD refused"), "{line}");
    }
    panic!("child exited before it held an id");
}

/// The child: holds its identity's id and issues, every id flushed, until killed.
#[test]
#[ignore = "run as a child process by the kill test"]
fn pg_child_entry() {
    use std::io::Write;
    let (Ok(url), Ok(out)) = (std::env::var(CHILD_URL), std::env::var(CHILD_OUT)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gen = match build(&url, dir.path()) {
        Ok(g) => g,
        Err(e) => {
            println!("PG-CHILD refused {e}");
            return;
        }
    };
    println!("PG-CHILD ready {}", gen.worker_id());
    let mut f = std::fs::File::create(out).unwrap();
    loop {
        if let Ok(id) = gen.next_id() {
            f.write_all(&id.to_le_bytes()).unwrap();
            f.flush().unwrap();
        }
    }
}
