//! The `mysql` registry (the Leaf fork's `leaf_workerid_alloc`) on a real MariaDB
//! (`LEAFID_MYSQL_URL`): one id per ip:port, the same one back on restart, concurrent
//! starts never share an id, the stored bound is a floor, and no id wraps; and the
//! fencing rule (issue 20): the fork's `max_timestamp` never gets a future time, a
//! foreign write or an operator's delete under a live holder stops it at once, and an
//! older lease table is migrated.

use crate::support::fork_mysql;

use std::collections::HashSet;
use std::sync::Arc;

use leafid::clock::ManualClock;
use leafid::snowflake::registry::{IssueLimit, Lease, MysqlRegistry, WorkerRegistry};
use leafid::snowflake::LEAF_EPOCH_MS;
use leafid::{Error, Layout, SnowflakeGenerator};

fn base_url() -> String {
    std::env::var("LEAFID_MYSQL_URL").expect(
        "LEAFID_MYSQL_URL is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

/// A fresh database for this test binary, so AUTO_INCREMENT row ids (worker ids) start
/// low on every run instead of climbing past 1023 over many runs.
fn mysql_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let base = base_url();
        let db = format!("leafid_workers_{}", std::process::id());
        let admin = base.clone();
        let create = db.clone();
        leafid::runtime::block_on(async move {
            use sqlx::Connection;
            let mut c = sqlx::MySqlConnection::connect(&admin)
                .await
                .expect("connect LEAFID_MYSQL_URL");
            // Databases of earlier runs whose process is gone are dropped.
            let old: Vec<String> = sqlx::query_scalar("SHOW DATABASES LIKE 'leafid\\_workers\\_%'")
                .fetch_all(&mut c)
                .await
                .unwrap();
            for name in old {
                let pid = name.trim_start_matches("leafid_workers_");
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS `{name}`"
                    )))
                    .execute(&mut c)
                    .await
                    .unwrap();
                }
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS `{create}`; CREATE DATABASE `{create}`"
            )))
            .execute(&mut c)
            .await
            .unwrap();
        });
        let mut u = url::Url::parse(&base).unwrap();
        u.set_path(&format!("/{db}"));
        u.to_string()
    })
    .clone()
}

/// An ip no other test (or earlier run) uses, so rows never collide.
fn unique_ip(tag: u8) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t{tag}_{}_{n}", std::process::id())
}

fn url(ip: &str, port: &str) -> String {
    let base = mysql_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}ip={ip}&port={port}")
}

fn gen(ip: &str, port: &str, cache: &std::path::Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(&url(ip, port))?
        .cache_dir(cache)
        .build_blocking()
}

fn registry(ip: &str, port: &str) -> Arc<MysqlRegistry> {
    Arc::new(MysqlRegistry::new(&mysql_url(), ip, port).unwrap())
}

fn acquire(r: &Arc<MysqlRegistry>) -> leafid::Result<leafid::snowflake::registry::Lease> {
    let r = r.clone();
    leafid::runtime::block_on(async move { r.acquire(u32::MAX >> 1, IssueLimit::closed()).await })
}

fn release(r: &Arc<MysqlRegistry>, lease: &leafid::snowflake::registry::Lease) {
    let (r, lease) = (r.clone(), lease.clone());
    leafid::runtime::block_on(async move { r.release(&lease).await }).unwrap();
}

#[test]
fn same_ip_port_gets_the_same_id_and_distinct_ones_get_distinct_ids() {
    let ip = unique_ip(1);
    let ra = registry(&ip, "1");
    let a = acquire(&ra).unwrap();
    let b = acquire(&registry(&ip, "2")).unwrap();
    assert_ne!(a.worker_id, b.worker_id);
    // While `a` holds its lease, the same identity is refused; once released, the same
    // id comes back.
    let again = registry(&ip, "1");
    let err = acquire(&again).unwrap_err();
    assert!(
        matches!(err, Error::WorkerIdInUse { worker_id: Some(w), .. } if w == a.worker_id),
        "{err:?}"
    );
    release(&ra, &a);
    let a2 = acquire(&again).unwrap();
    assert_eq!(a.worker_id, a2.worker_id);
}

#[test]
fn concurrent_acquires_never_share_an_id() {
    let ip = unique_ip(2);
    // 16 identities, each started by 3 threads at once: one row per identity, exactly
    // one thread per identity holds it (the others get WorkerIdInUse), no two
    // identities share.
    let threads: Vec<_> = (0..48)
        .map(|i| {
            let ip = ip.clone();
            std::thread::spawn(move || {
                let port = format!("{}", i % 16);
                (port.clone(), acquire(&registry(&ip, &port)))
            })
        })
        .collect();
    let mut by_port = std::collections::HashMap::new();
    for t in threads {
        match t.join().unwrap() {
            (port, Ok(lease)) => {
                let prev = by_port.insert(port.clone(), lease.worker_id);
                assert!(prev.is_none(), "identity {port} held twice");
            }
            (_, Err(Error::WorkerIdInUse { .. })) => {}
            (_, Err(e)) => panic!("{e:?}"),
        }
    }
    assert_eq!(by_port.len(), 16, "every identity has one holder");
    let ids: HashSet<u32> = by_port.values().copied().collect();
    assert_eq!(ids.len(), 16, "two identities share an id: {by_port:?}");
}

#[test]
fn stored_bound_is_the_floor_and_a_clock_behind_it_is_refused() {
    let ip = unique_ip(3);
    let cache = tempfile::tempdir().unwrap();
    let g = gen(&ip, "1", cache.path()).unwrap();
    let worker = g.worker_id();
    let last = g.next_id().unwrap();
    g.close();
    let last_ms = g.decode(last).timestamp_ms;
    // The final renew stored the exact last timestamp.
    let r = registry(&ip, "1");
    let lease = acquire(&r).unwrap();
    assert_eq!(lease.worker_id, worker);
    assert_eq!(lease.floor_ms, last_ms);
    release(&r, &lease);

    // Restart with a clock ten minutes behind (more than the reach, the lookahead plus
    // the skew, plus the start-up allowance): refused.
    let cache2 = tempfile::tempdir().unwrap(); // no help from the cache file
    let err = SnowflakeGenerator::builder()
        .registry_url(&url(&ip, "1"))
        .unwrap()
        .cache_dir(cache2.path())
        .clock(ManualClock::new(last_ms - 600_000))
        .build_blocking()
        .unwrap_err();
    assert!(
        matches!(err, Error::ClockBehindRegistry { worker_id, last_ms: l, .. } if worker_id == worker && l == last_ms),
        "{err:?}"
    );
    // A clock a little behind: the first id comes above the floor at once.
    let g = SnowflakeGenerator::builder()
        .registry_url(&url(&ip, "1"))
        .unwrap()
        .cache_dir(cache2.path())
        .clock(ManualClock::new(last_ms - 500))
        .build_blocking()
        .unwrap();
    assert_eq!(g.worker_id(), worker);
    assert!(g.decode(g.next_id().unwrap()).timestamp_ms > last_ms);
    g.close();
}

#[test]
fn row_ids_past_the_worker_range_are_refused_not_wrapped() {
    let ip = unique_ip(4);
    let cache = tempfile::tempdir().unwrap();
    // One worker bit: ids 0..=1. Row ids only grow, so a fresh row is past it.
    let layout = Layout::new(41, 1, 21, LEAF_EPOCH_MS).unwrap();
    acquire(&registry(&ip, "a")).unwrap();
    acquire(&registry(&ip, "b")).unwrap();
    let r = registry(&ip, "1");
    let lease = acquire(&r).unwrap();
    release(&r, &lease);
    assert!(
        lease.worker_id > 1,
        "the third row of a table has id 3 or more"
    );
    let err = SnowflakeGenerator::builder()
        .registry_url(&url(&ip, "1"))
        .unwrap()
        .layout(layout)
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap_err();
    match err {
        Error::WorkerIdExhausted { pool, size } => {
            assert_eq!(size, 2);
            assert!(
                pool.contains("UPDATE leaf_workerid_alloc SET ip_port"),
                "{pool}"
            );
        }
        other => panic!("expected WorkerIdExhausted, got {other:?}"),
    }
}

#[test]
fn saturated_generators_on_mysql_never_issue_a_duplicate() {
    let ip = unique_ip(5);
    let cache = tempfile::tempdir().unwrap();
    let gens: Vec<_> = (0..3)
        .map(|p| gen(&ip, &p.to_string(), cache.path()).unwrap())
        .collect();
    let gens = Arc::new(gens);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1_000);
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let gens = gens.clone();
            std::thread::spawn(move || {
                let g = &gens[t % gens.len()];
                let mut out = Vec::new();
                let mut buf = [0i64; 64];
                while std::time::Instant::now() < deadline {
                    g.fill(&mut buf).unwrap();
                    out.extend_from_slice(&buf);
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

/// Runs `sql` with `binds` (as strings) on the test database.
fn exec(sql: &'static str, binds: Vec<String>) -> u64 {
    let url = mysql_url();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(b);
        }
        q.execute(&mut c).await.unwrap().rows_affected()
    })
}

fn max_timestamp(id: u32) -> Option<i64> {
    let url = mysql_url();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = ?")
            .bind(id as i64)
            .fetch_one(&mut c)
            .await
            .unwrap()
    })
}

fn renew(r: &Arc<MysqlRegistry>, lease: &Lease, bound: i64) -> leafid::Result<()> {
    let (r, lease) = (r.clone(), lease.clone());
    leafid::runtime::block_on(async move { r.renew(&lease, bound).await })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Acquires with a limit the test can watch, opened as a generator would.
fn acquire_watched(r: &Arc<MysqlRegistry>) -> (Lease, Arc<IssueLimit>) {
    let limit = IssueLimit::closed();
    let (r2, l2) = (r.clone(), limit.clone());
    let lease =
        leafid::runtime::block_on(async move { r2.acquire(u32::MAX >> 1, l2).await }).unwrap();
    limit.set(i64::MAX - 1);
    (lease, limit)
}

/// Waits (bounded) for the registry to lower `limit`; false when it never does.
fn lowered(limit: &IssueLimit) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if limit.get() == i64::MIN {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn max_timestamp_never_gets_a_future_time_and_the_bound_stays_the_floor() {
    let ip = unique_ip(6);
    let r = registry(&ip, "1");
    let lease = acquire(&r).unwrap();
    let bound = now_ms() + 5_000;
    renew(&r, &lease, bound).unwrap();
    let stored = max_timestamp(lease.worker_id).unwrap();
    assert!(
        stored <= now_ms(),
        "max_timestamp {stored} is in the future: a fork server reading it falls back silently"
    );
    // A holder that crashed with that bound: the next holder's floor is the bound, kept
    // in leafid's own table.
    exec(
        "UPDATE leafid_worker_lease SET expires_at = '1970-01-02 00:00:00' WHERE worker_id = ?",
        vec![lease.worker_id.to_string()],
    );
    let r2 = registry(&ip, "1");
    let next = acquire(&r2).unwrap();
    assert_eq!(next.worker_id, lease.worker_id);
    assert_eq!(next.floor_ms, bound);
    release(&r2, &next);
}

#[test]
fn the_same_value_written_twice_is_not_a_foreign_write() {
    // sqlx sets CLIENT_FOUND_ROWS: an UPDATE that matches but changes nothing counts 1.
    let ip = unique_ip(7);
    let r = registry(&ip, "1");
    let lease = acquire(&r).unwrap();
    let bound = now_ms() - 1_000; // foreign_timestamp keeps a past bound exactly
    renew(&r, &lease, bound).unwrap();
    renew(&r, &lease, bound).unwrap();
    assert_eq!(max_timestamp(lease.worker_id), Some(bound));
    release(&r, &lease);
}

#[test]
fn a_foreign_write_of_max_timestamp_under_a_live_holder_stops_it_at_once() {
    let ip = unique_ip(8);
    let r = registry(&ip, "1");
    let (lease, limit) = acquire_watched(&r);
    renew(&r, &lease, now_ms() + 3_000).unwrap();
    // What the fork's server does 1 s after its start.
    exec(
        "UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ?",
        vec![(now_ms() + 1).to_string(), lease.worker_id.to_string()],
    );
    assert!(
        lowered(&limit),
        "the holder never noticed the foreign write"
    );
    let err = renew(&r, &lease, now_ms() + 3_000).unwrap_err();
    assert!(
        matches!(&err, Error::LeaseLost { cause, .. } if cause.contains("fork's Java server")),
        "{err:?}"
    );
    release(&r, &lease);
    // The value is the fork's now: a newcomer watches the row (it does not change any
    // more here, so it is taken after the watch).
    let r2 = registry(&ip, "1");
    let next = acquire(&r2).unwrap();
    assert_eq!(next.worker_id, lease.worker_id);
    release(&r2, &next);
}

#[test]
fn lease_row_deleted_or_rewritten_under_a_holder_is_a_lost_lease_at_once() {
    for (n, sql) in [
        "DELETE FROM leafid_worker_lease WHERE worker_id = ?",
        "UPDATE leafid_worker_lease SET holder = 'operator' WHERE worker_id = ?",
    ]
    .into_iter()
    .enumerate()
    {
        let ip = unique_ip(9 + n as u8);
        let r = registry(&ip, "1");
        let (lease, limit) = acquire_watched(&r);
        exec(sql, vec![lease.worker_id.to_string()]);
        assert!(lowered(&limit), "{sql}: the holder never noticed");
        let err = renew(&r, &lease, now_ms() + 3_000).unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{sql}: {err:?}");
        release(&r, &lease);
    }
}

#[test]
fn a_lease_table_of_an_older_leafid_is_migrated() {
    let url = fork_mysql::fresh_database(&base_url(), "leafid_migrate");
    let u = url.clone();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&u).await.unwrap();
        // The table as leafid created it before issue 20.
        sqlx::raw_sql(
            "CREATE TABLE `leafid_worker_lease` (`worker_id` bigint(20) NOT NULL, \
             `ip_port` varchar(127) NOT NULL, `holder` varchar(64) NOT NULL, \
             `holder_info` varchar(255) NOT NULL, `expires_at` datetime(3) NOT NULL, \
             PRIMARY KEY (`worker_id`)) ENGINE=InnoDB",
        )
        .execute(&mut c)
        .await
        .unwrap();
    });
    let r = Arc::new(MysqlRegistry::new(&url, "10.0.0.9", "80").unwrap());
    let lease = acquire(&r).unwrap();
    let bound = now_ms() + 2_000;
    renew(&r, &lease, bound).unwrap();
    release(&r, &lease);
    let again = acquire(&Arc::new(
        MysqlRegistry::new(&url, "10.0.0.9", "80").unwrap(),
    ))
    .unwrap();
    assert_eq!(again.floor_ms, bound, "the bound went to the added column");
}

/// The first id of `g`'s build, retried until `within`; how long from `started`.
fn first_id_within(
    g: &SnowflakeGenerator,
    started: std::time::Instant,
    within: std::time::Duration,
) -> (i64, std::time::Duration) {
    loop {
        match g.next_id() {
            Ok(id) => {
                let took = started.elapsed();
                assert!(took < within, "first id after {took:?}");
                return (id, took);
            }
            Err(e) => assert!(
                started.elapsed() < within,
                "no first id within {within:?}: {e}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Issue 30 goal 2: a row leafid has just inserted had no fork server on it (a fork
/// server inserts its row before it issues), so its first id comes at once. A
/// hang-catcher only (2 s): before, a new row was watched 3.5 s.
#[test]
fn a_new_rows_first_id_comes_at_once() {
    let ip = unique_ip(11);
    let cache = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let g = gen(&ip, "1", cache.path()).unwrap();
    let (_, took) = first_id_within(&g, started, std::time::Duration::from_secs(2));
    println!("new ?port= row: first id after {took:?}");
    g.close();
}

/// Issue 30 goal 5: a restart right after a SIGKILL finds the lease row still naming
/// its dead predecessor of this host, here one its supervisor has not reaped yet (a
/// zombie still answers `kill(pid, 0)`). It takes the lease at once, the row's bound
/// its floor, and watches only the 1.5 s a fork server started since could take to
/// upload. Before, the zombie counted as live: `WorkerIdInUse` naming it until the
/// lease ran out (its bound plus 5 s). The hang-catcher (3 s) only catches that.
#[test]
fn a_restart_takes_the_lease_of_its_sigkilled_predecessor_at_once() {
    use leafid::snowflake::registry::host_lock::Holder;
    let ip = unique_ip(12);
    let cache = tempfile::tempdir().unwrap();
    let g = gen(&ip, "1", cache.path()).unwrap();
    let worker = g.worker_id();
    let last = *g.next_ids(100).unwrap().last().unwrap();
    let last_ms = g.decode(last).timestamp_ms;
    g.close();
    // The predecessor as a SIGKILL leaves it: the lease live for a minute, its bound
    // its last id's time (it issued up to it), its pid a process of this host that
    // exited and is not reaped.
    let mut zombie = std::process::Command::new("true").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut dead = Holder::this_process();
    dead.pid = zombie.id();
    let bound = last_ms;
    exec(
        "UPDATE leafid_worker_lease SET holder = 'killed', holder_info = ?, bound_ms = ?, \
         expires_at = NOW(3) + INTERVAL 60 SECOND WHERE worker_id = ?",
        vec![
            serde_json::to_string(&dead).unwrap(),
            bound.to_string(),
            worker.to_string(),
        ],
    );
    let started = std::time::Instant::now();
    let g = gen(&ip, "1", tempfile::tempdir().unwrap().path()).unwrap();
    let (first, took) = first_id_within(&g, started, std::time::Duration::from_secs(3));
    println!("restart after SIGKILL on ?port=: first id after {took:?}");
    assert_eq!(g.worker_id(), worker);
    assert!(first > last);
    assert!(
        g.decode(first).timestamp_ms > bound,
        "first id at or below the dead one's bound"
    );
    g.close();
    zombie.wait().unwrap();
}
