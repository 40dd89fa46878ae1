//! Reviewer rev2: fence rule 5 across clocks (179c5db) was applied only when a lease's
//! `floor_ms` was `i64::MIN`; two "no trusted record of the last holder" cases reached the
//! generator with another floor, and reissued ids until `Lease::floor_recorded` said so.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use leafid::snowflake::registry::statefulset::{StatefulsetConfig, StatefulsetRegistry};
use leafid::snowflake::registry::MysqlRegistry;
use leafid::SnowflakeGenerator;

// The other host's clock and the issuing loop, as review 1's proofs use them.
use crate::review_rev1::{issue_for, Skewed};

fn dups(a: &[i64], b: &[i64]) -> usize {
    let set: HashSet<i64> = a.iter().copied().collect();
    b.iter().filter(|i| set.contains(i)).count()
}

/// A statefulset volume restored from a snapshot taken while pod A ran: the bound file
/// is there, holding an OLD bound (not `i64::MIN`), so no skew floor. The pod restarts
/// on node B, 1.5 s behind (within the 5 s the skew floor assumes).
#[test]
fn rev2_statefulset_old_floor_file_restored_reissues_ids() {
    sts_restored(921, -1_500);
}

#[test]
fn rev2_control_statefulset_old_floor_file_clocks_in_step() {
    sts_restored(922, 0);
}

/// `ordinal`: one per test, as the tests run at once and an ordinal is one identity.
fn sts_restored(ordinal: u32, b_offset: i64) {
    let floor = tempfile::tempdir().unwrap();
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = format!("rev2sts-{ordinal}");
    let make = |cache: &std::path::Path, offset: i64| {
        let config = StatefulsetConfig::new(host.clone()).floor_dir(floor.path());
        SnowflakeGenerator::builder()
            .custom_registry(Arc::new(StatefulsetRegistry::new(config).unwrap()))
            .clock(Arc::new(Skewed(offset)))
            .heartbeat(Duration::from_millis(200))
            .lookahead(Duration::from_millis(500))
            .cache_dir(cache)
            .build_blocking()
            .unwrap()
    };
    let a = make(ca.path(), 0);
    let file = floor.path().join(format!("worker-{ordinal}.json"));
    let mut a_ids = issue_for(&a, Duration::from_millis(500));
    let snapshot = std::fs::read(&file).unwrap();
    a_ids.extend(issue_for(&a, Duration::from_millis(2_500)));
    a.close();
    std::fs::write(&file, &snapshot).unwrap(); // the volume snapshot restored
    let b = make(cb.path(), b_offset);
    let b_ids = issue_for(&b, Duration::from_millis(2_500));
    b.close();
    let d = dups(&a_ids, &b_ids);
    assert!(
        d == 0,
        "{d} of B's {} ids were issued by A already",
        b_ids.len()
    );
}

/// The `mysql` identity registry: a dump restored from before host A's row (A's row and
/// lease row gone, AUTO_INCREMENT back at A's id). Host B (a new ip:port) inserts a row,
/// gets A's id, and its floor is `LEAST(NOW(3), local now)`, not `i64::MIN`: no skew
/// floor, only the 3.5 s unfloored watch. A at +4 s, B at -4 s, as in review_rev1.
#[test]
fn rev2_mysql_identity_restored_dump_reissues_ids() {
    let base = std::env::var("LEAFID_MYSQL_URL").expect("source .services/env");
    let url = crate::support::fork_mysql::fresh_database(&base, "rev2_ident");
    let make = |ip: &str, cache: &std::path::Path, offset: i64| {
        SnowflakeGenerator::builder()
            .custom_registry(Arc::new(MysqlRegistry::new(&url, ip, "8080").unwrap()))
            .clock(Arc::new(Skewed(offset)))
            .cache_dir(cache)
            .build_blocking()
            .unwrap()
    };
    let (ca, cb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = make("10.9.9.1", ca.path(), 4_000);
    let wid = a.worker_id();
    let a_ids = issue_for(&a, Duration::from_millis(1_000));
    a.close();
    let sql = format!(
        "DELETE FROM leafid_worker_lease WHERE worker_id = {wid}; \
         DELETE FROM leaf_workerid_alloc WHERE id = {wid}; \
         ALTER TABLE leaf_workerid_alloc AUTO_INCREMENT = {wid}"
    );
    let u = url.clone();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&u).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .unwrap();
    });
    let b = make("10.9.9.2", cb.path(), -4_000);
    assert_eq!(b.worker_id(), wid);
    let b_ids = issue_for(&b, Duration::from_millis(6_000));
    b.close();
    let d = dups(&a_ids, &b_ids);
    assert!(
        d == 0,
        "{d} of B's {} ids were issued by A already",
        b_ids.len()
    );
}
