//! The database registries under a user with the DML grants alone (issue 28, item 4),
//! and the PostgreSQL ones at REPEATABLE READ and SERIALIZABLE (item 5), each in a
//! database of the test's own (`support::own_database`).
//!
//! Least privilege: once the admin's first start has made the tables, a user with
//! `SELECT, INSERT, UPDATE` only starts every database registry (`mysql://?port=`,
//! `mysql://?pool=`, `postgres://?pool=`, `postgres://?port=`); with the tables missing
//! it is told, at once, to grant CREATE, as `AccessDenied`, never as an outage to retry.
//!
//! Isolation: with `default_transaction_isolation` set on the database, eight
//! generators starting at once on one pool all get a worker id of their own. Each start watches a few seconds before its first id (fence rule 5),
//! which is why these live in this binary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use leafid::error::CauseKind;
use leafid::{Error, ErrorKind, SnowflakeGenerator};

use crate::support::own_database::{OwnDatabase, Server};

/// A generator on `url`, its cache files in a directory of this test process's.
fn build(url: &str) -> leafid::Result<SnowflakeGenerator> {
    static CACHE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| tempfile::tempdir().unwrap());
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache.path())
        .build_blocking()
}

/// The admin's first start makes the tables; then the DML-only user starts and issues.
fn dml_only_user_starts(server: Server, label: &str, query: &str) {
    let db = OwnDatabase::new(server, label);
    build(&format!("{}{query}", db.admin_url)).unwrap().close();
    let gen = build(&format!("{}{query}", db.dml_url))
        .unwrap_or_else(|e| panic!("{server:?} {query}: {e}"));
    assert!(gen.next_id().unwrap() > 0);
    gen.close();
}

/// No tables yet, and a user that may not create them: `AccessDenied` naming CREATE
/// and the registry's tables, nothing saying to retry.
fn missing_tables_without_create(server: Server, label: &str, query: &str, table: &str) {
    let db = OwnDatabase::new(server, label);
    let e = build(&format!("{}{query}", db.dml_url)).unwrap_err();
    assert!(matches!(e, Error::AccessDenied { .. }), "{query}: {e:?}");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert_eq!(e.cause_kind(), Some(CauseKind::LoginRefused), "{e}");
    let text = e.to_string();
    assert!(text.contains("CREATE") && text.contains(table), "{text}");
    assert!(!text.contains("retry"), "{text}");
}

#[test]
fn a_dml_only_user_starts_the_mysql_identity_registry() {
    dml_only_user_starts(Server::Mysql, "reg_my_port", "?port=8001&ip=10.0.0.1");
}

#[test]
fn a_dml_only_user_starts_the_mysql_pool_registry() {
    dml_only_user_starts(Server::Mysql, "reg_my_pool", "?pool=p&pool_size=4");
}

#[test]
fn a_dml_only_user_starts_the_postgres_pool_registry() {
    dml_only_user_starts(Server::Postgres, "reg_pg_pool", "?pool=p&pool_size=4");
}

#[test]
fn a_dml_only_user_starts_the_postgres_identity_registry() {
    dml_only_user_starts(Server::Postgres, "reg_pg_port", "?port=8001&ip=10.0.0.1");
}

#[test]
fn a_mysql_identity_registry_without_create_is_told_the_grants() {
    missing_tables_without_create(
        Server::Mysql,
        "reg_my_port_nc",
        "?port=8001&ip=10.0.0.1",
        "leaf_workerid_alloc",
    );
}

#[test]
fn a_mysql_pool_registry_without_create_is_told_the_grants() {
    missing_tables_without_create(
        Server::Mysql,
        "reg_my_pool_nc",
        "?pool=p&pool_size=4",
        "leafid_worker_pool",
    );
}

#[test]
fn a_postgres_pool_registry_without_create_is_told_the_grants() {
    missing_tables_without_create(
        Server::Postgres,
        "reg_pg_pool_nc",
        "?pool=p&pool_size=4",
        "leafid_worker_pool",
    );
}

#[test]
fn a_postgres_identity_registry_without_create_is_told_the_grants() {
    missing_tables_without_create(
        Server::Postgres,
        "reg_pg_port_nc",
        "?port=8001&ip=10.0.0.1",
        "leafid_worker_pool",
    );
}

/// Eight generators start at once on a database whose transactions default to `level`,
/// its pool's rows all released (as after a restart of the fleet), while other
/// transactions keep writing those rows: each start's conditional `UPDATE` waits for a
/// writer and then meets a row changed since its snapshot, as when starters race for
/// one row. Every one gets a worker id, all distinct.
fn eight_start_at_once(level: &str, label: &str) {
    let db = OwnDatabase::new(Server::Postgres, label);
    let url = format!("{}?pool=p&pool_size=8", db.admin_url);
    // The table, made by a first start that then lets its id go; then every id of the
    // pool as a released row.
    build(&url).unwrap().close();
    db.admin(
        "INSERT INTO leafid_worker_pool (pool, worker_id, identity, holder, holder_info, \
         expires_ms, bound_ms) \
         SELECT 'p', i, NULL, '', '', 0, NULL FROM generate_series(0, 7) AS i \
         ON CONFLICT DO NOTHING",
    );
    db.admin(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = '{level}'",
        db.name()
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = write_rows_under_the_starts(db.admin_url.clone(), stop.clone());
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || build(&url))
        })
        .collect();
    let gens: Vec<_> = starts.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let errors: Vec<String> = gens
        .iter()
        .filter_map(|g| g.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(
        errors.is_empty(),
        "{level}: {} of 8 failed: {errors:#?}",
        errors.len()
    );
    let mut ids: Vec<u32> = gens.iter().flatten().map(|g| g.worker_id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8, "{level}: worker ids {ids:?}");
    gens.into_iter().flatten().for_each(|g| g.close());
}

/// Transactions (at READ COMMITTED), one after another until `stop`, each writing
/// every row of pool `p` (values unchanged) and committing once a session waits for its
/// row locks (or after 1 s, well within a registry call's 3 s). Starts of one pool in
/// one process take turns (the host lock), so each in turn meets the writer.
fn write_rows_under_the_starts(
    admin: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        leafid::runtime::block_on(async move {
            use sqlx::Connection;
            let mut writer = sqlx::PgConnection::connect(&admin).await.unwrap();
            let mut watcher = sqlx::PgConnection::connect(&admin).await.unwrap();
            while !stop.load(Ordering::SeqCst) {
                sqlx::raw_sql(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; \
                     UPDATE leafid_worker_pool SET holder_info = holder_info WHERE pool = 'p'",
                )
                .execute(&mut writer)
                .await
                .unwrap();
                let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
                while std::time::Instant::now() < until {
                    let waiting: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity \
                         WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    )
                    .fetch_one(&mut watcher)
                    .await
                    .unwrap();
                    if waiting > 0 {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                sqlx::raw_sql("COMMIT").execute(&mut writer).await.unwrap();
            }
        })
    })
}

#[test]
fn eight_postgres_pool_generators_start_at_once_at_serializable() {
    eight_start_at_once("serializable", "iso_pool_ser");
}

#[test]
fn eight_postgres_pool_generators_start_at_once_at_repeatable_read() {
    eight_start_at_once("repeatable read", "iso_pool_rr");
}
