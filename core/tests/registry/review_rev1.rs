//! Reviewer rev1's proofs: a floor record lost (a pool row deleted, a statefulset floor
//! file deleted) while two hosts' clocks differ by less than the generator's own skew
//! limit. The newcomer's fixed wait (the old rule 5's `unfloored_watch`, 3.5 s; or none at all
//! for `statefulset:`) is real time, but the ids it must not repeat were issued by the
//! previous holder's clock: a host 4 s ahead of the database and a host 4 s behind it
//! both pass the 5 s skew check, and are 8 s apart. Each reissued ids until a lease
//! with no record got the registry's clock plus the allowed skew as its floor (fence
//! rule 5); the controls run the same with the clocks in step.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::snowflake::registry::pool::PoolRegistry;
use leafid::snowflake::registry::statefulset::{StatefulsetConfig, StatefulsetRegistry};
use leafid::{Clock, SnowflakeGenerator};

/// The system clock moved by `offset` ms: another host's clock.
#[derive(Debug)]
pub(crate) struct Skewed(pub(crate) i64);

impl Clock for Skewed {
    fn now_millis(&self) -> i64 {
        leafid::SystemClock.now_millis() + self.0
    }
}

/// Issues bursts of 200 ids every millisecond or so for `run`; every id.
pub(crate) fn issue_for(gen: &SnowflakeGenerator, run: Duration) -> Vec<i64> {
    let mut ids = Vec::new();
    let end = Instant::now() + run;
    while Instant::now() < end {
        for _ in 0..200 {
            ids.push(gen.next_id().expect("issuing"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    ids
}

fn unique_name(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "rev1_{test}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000
    )
}

async fn run_sql(base: String, sql: String) {
    use sqlx::Connection;
    #[cfg(feature = "postgres")]
    if base.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(&base).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("sql");
        return;
    }
    let mut c = sqlx::MySqlConnection::connect(&base)
        .await
        .expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .expect("sql");
}

fn pool_gen(url: &str, cache: &std::path::Path, offset_ms: i64) -> SnowflakeGenerator {
    SnowflakeGenerator::builder()
        .custom_registry(Arc::new(PoolRegistry::from_url(url).unwrap()))
        .clock(Arc::new(Skewed(offset_ms)))
        .cache_dir(cache)
        .build_blocking()
        .unwrap()
}

/// Host A (clock 4 s ahead of the database) holds the pool's one id and closes; an
/// operator deletes the released row (frees the id, a `TRUNCATE`, a dump restored
/// without it); host B (clock 4 s behind, its own cache dir) takes the id, waits the
/// unfloored 3.5 s, and issues A's ids again.
fn deleted_pool_row_and_skewed_hosts_reissue(base: &str, skew_ms: i64) {
    let name = unique_name("skew");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}pool={name}&pool_size=1");
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = pool_gen(&url, da.path(), skew_ms);
    let a_ids = issue_for(&a, Duration::from_millis(1_000));
    a.close();
    let sql = format!("DELETE FROM leafid_worker_pool WHERE pool = '{name}'");
    leafid::runtime::block_on(run_sql(base.to_string(), sql));
    let b = pool_gen(&url, db.path(), -skew_ms);
    assert_eq!(b.worker_id(), a.worker_id());
    let b_ids = issue_for(&b, Duration::from_millis(6_000));
    b.close();
    let a_set: HashSet<i64> = a_ids.iter().copied().collect();
    let dups = b_ids.iter().filter(|i| a_set.contains(i)).count();
    let a_max = *a_ids.iter().max().unwrap();
    let b_min = *b_ids.iter().min().unwrap();
    assert!(
        dups == 0 && b_min > a_max,
        "{dups} of B's {} ids were issued by A already; B's first {b_min} <= A's last {a_max}",
        b_ids.len()
    );
}

#[test]
fn rev1_mysql_deleted_pool_row_and_skewed_hosts_reissue_ids() {
    deleted_pool_row_and_skewed_hosts_reissue(
        &std::env::var("LEAFID_MYSQL_URL").expect("source .services/env"),
        4_000,
    );
}

/// Control: the same with both clocks right passes (the unfloored wait covers it).
#[cfg(feature = "postgres")]
#[test]
fn rev1_control_pg_deleted_pool_row_with_clocks_agreeing_passes() {
    deleted_pool_row_and_skewed_hosts_reissue(
        &std::env::var("LEAFID_PG_URL").expect("source .services/env"),
        0,
    );
}

#[cfg(feature = "postgres")]
#[test]
fn rev1_pg_deleted_pool_row_and_skewed_hosts_reissue_ids() {
    deleted_pool_row_and_skewed_hosts_reissue(
        &std::env::var("LEAFID_PG_URL").expect("source .services/env"),
        4_000,
    );
}

/// Pod orders-<n> on node A writes its floor file and stops; the file is deleted (an
/// operator, a volume restored from a snapshot taken before the file existed); the pod
/// restarts on node B whose clock is 1.5 s behind (no skew check exists for
/// `statefulset:`). With no floor record it issues at once (no unfloored watch, fence
/// rule 5) and repeats A's last ids.
#[test]
fn rev1_statefulset_deleted_floor_file_reissues_ids_without_a_watch() {
    statefulset_deleted_floor_file(917, -1_500);
}

/// Control: the same with both nodes' clocks right passes.
#[test]
fn rev1_control_statefulset_deleted_floor_file_with_clocks_agreeing_passes() {
    statefulset_deleted_floor_file(918, 0);
}

fn statefulset_deleted_floor_file(ordinal: u32, b_offset_ms: i64) {
    let floor = tempfile::tempdir().unwrap();
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = format!("rev1sts-{ordinal}");
    let make = |cache: &std::path::Path, offset: i64| {
        let config = StatefulsetConfig::new(host.clone()).floor_dir(floor.path());
        SnowflakeGenerator::builder()
            .custom_registry(Arc::new(StatefulsetRegistry::new(config).unwrap()))
            .clock(Arc::new(Skewed(offset)))
            .cache_dir(cache)
            .build_blocking()
            .unwrap()
    };
    let a = make(ca.path(), 0);
    let a_ids = issue_for(&a, Duration::from_millis(1_000));
    a.close();
    let file = floor.path().join(format!("worker-{ordinal}.json"));
    assert!(file.exists());
    std::fs::remove_file(&file).unwrap();
    let started = Instant::now();
    let b = make(cb.path(), b_offset_ms);
    let waited = started.elapsed();
    let b_ids = issue_for(&b, Duration::from_millis(2_500));
    b.close();
    let a_set: HashSet<i64> = a_ids.iter().copied().collect();
    let dups = b_ids.iter().filter(|i| a_set.contains(i)).count();
    assert!(
        dups == 0,
        "{dups} of B's {} ids were issued by A already (B waited {waited:?} before its first id)",
        b_ids.len()
    );
}

/// One `PoolRegistry` given to two generators (`custom_registry` takes an `Arc`, and
/// nothing refuses a second generator on it): the second acquire finds the first's row
/// still naming the registry's token, "takes it back" (`choose`'s `mine` branch, a
/// forced take), and both generators hold one worker id, renewing the same row with the
/// same token, neither's poll seeing the other (the second acquire aborted the first's
/// poll, and both renews share one `Written`).
fn one_pool_registry_under_two_generators(base: &str) {
    let name = unique_name("shared");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}pool={name}&pool_size=4");
    let registry = Arc::new(PoolRegistry::from_url(&url).unwrap());
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let build = |dir: &std::path::Path| {
        SnowflakeGenerator::builder()
            .custom_registry(registry.clone())
            .cache_dir(dir)
            .build_blocking()
    };
    let a = build(da.path()).unwrap();
    let b = match build(db.path()) {
        Err(e) => {
            a.close();
            eprintln!("second generator refused: {e}");
            return;
        }
        Ok(b) => b,
    };
    let (wa, wb) = (a.worker_id(), b.worker_id());
    let (ia, ib) = std::thread::scope(|s| {
        let ta = s.spawn(|| issue_for(&a, Duration::from_millis(4_000)));
        let tb = s.spawn(|| issue_for(&b, Duration::from_millis(4_000)));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    a.close();
    b.close();
    let set: HashSet<i64> = ia.iter().copied().collect();
    let dups = ib.iter().filter(|i| set.contains(i)).count();
    assert!(
        wa != wb && dups == 0,
        "two live generators on one registry: worker ids {wa} and {wb}, {dups} of {} ids issued twice",
        ib.len()
    );
}

#[test]
fn rev1_mysql_one_pool_registry_under_two_generators() {
    one_pool_registry_under_two_generators(
        &std::env::var("LEAFID_MYSQL_URL").expect("source .services/env"),
    );
}

#[cfg(feature = "postgres")]
#[test]
fn rev1_pg_one_pool_registry_under_two_generators() {
    one_pool_registry_under_two_generators(
        &std::env::var("LEAFID_PG_URL").expect("source .services/env"),
    );
}
