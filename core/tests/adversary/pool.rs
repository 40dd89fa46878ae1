//! `mysql://…?pool=`: a worker-id pool on MySQL (issue 23). Every row gets a database
//! of its own (dropped afterwards, swept by `mysql`'s sweep when a run was killed).
//! The pool has one id, so a newcomer can only take the id its holder has (the
//! adversary the fencing must stop), except in the rows of one config in several
//! processes, where it has three: three live holders and one exhaustion error. Its
//! own adversaries: the holder's row deleted, rewritten to look released (a restored
//! dump), and the table dropped, each under a live holder and followed by newcomers.

use std::time::Duration;

use crate::harness::{unique, Registry, Spawn, Target};
use crate::mysql::exec;
use crate::rows::{matrix_rows, outage_rows, restart_newcomer_row, tampered};

/// The pool row set.
pub struct Pool;

/// `LEAFID_MYSQL_URL`.
fn base() -> url::Url {
    let url = std::env::var("LEAFID_MYSQL_URL")
        .expect("LEAFID_MYSQL_URL is not set: source .services/env first");
    url::Url::parse(&url).expect("LEAFID_MYSQL_URL")
}

/// Drops its database when the row ends.
struct Database(String);

impl Drop for Database {
    fn drop(&mut self) {
        exec("", &format!("DROP DATABASE IF EXISTS `{}`", self.0));
    }
}

impl Registry for Pool {
    fn name(&self) -> &'static str {
        "mysql-pool"
    }

    fn target(&self, row: &str) -> Target {
        let name = unique(&format!("pool{row}"));
        exec("", &format!("CREATE DATABASE `{name}`"));
        let size = pool_size(row);
        let mut url = base();
        url.set_path(&name);
        url.set_query(Some(&format!("pool=adv&pool_size={size}")));
        let b = base();
        Target {
            url: url.to_string(),
            upstream: Some(format!(
                "{}:{}",
                b.host_str().unwrap(),
                b.port().unwrap_or(3306)
            )),
            keep: vec![Box::new(Database(name.clone()))],
            name,
        }
    }

    /// The lease runs 15 s past the holder's last renew (the bound, 65 s ahead by
    /// default, plus 5 s, at most `pool::LEASE_TERM`); renews come every 3 s.
    fn lease_life(&self) -> Option<Duration> {
        Some(Duration::from_millis(16_500))
    }

    /// The lease row's term: the bound (up to the reach ahead while the clock leads)
    /// plus 5 s.
    fn lease_after_cut(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// The table truncated.
    fn wipe(&self, t: &Target) {
        exec(&t.name, "TRUNCATE TABLE leafid_worker_pool");
    }
}

/// The pool's size for a row: three where several processes hold ids at once (one
/// config in several processes; a restart or a handover beside another holder), else
/// one, so that a newcomer can only take the id its holder has.
fn pool_size(row: &str) -> u32 {
    if matches!(row, "same" | "dirs" | "restart" | "handover") {
        3
    } else {
        1
    }
}

matrix_rows!(Pool);
outage_rows!(Pool);
restart_newcomer_row!(Pool, false);

/// The holder's row deleted (a cleanup): a newcomer inserts the id afresh, with no
/// floor; another comes through another path.
#[test]
fn row_deleted_under_a_live_holder() {
    let t = Pool.target("delete");
    let alias = t.proxy().unwrap();
    tampered(&Pool, "row DELETEd under holder", &t, |_| {
        exec(&t.name, "DELETE FROM leafid_worker_pool");
        vec![Spawn::url(&t.url), Spawn::url(&t.via(&alias).unwrap())]
    });
}

/// The holder's row rewritten to look released with an old bound (a restored dump).
#[test]
fn row_rewritten_as_released_under_a_live_holder() {
    let t = Pool.target("rewrite");
    let alias = t.proxy().unwrap();
    tampered(&Pool, "row rewritten released, bound 0", &t, |_| {
        exec(
            &t.name,
            "UPDATE leafid_worker_pool SET holder = '', expires_ms = 0, bound_ms = 0",
        );
        vec![Spawn::url(&t.via(&alias).unwrap())]
    });
}

/// The table dropped under a live holder (a restore of a dump without it).
#[test]
fn table_dropped_under_a_live_holder() {
    let t = Pool.target("drop");
    tampered(&Pool, "table DROPped under holder", &t, |_| {
        exec(&t.name, "DROP TABLE leafid_worker_pool");
        vec![Spawn::url(&t.url)]
    });
}

/// The same pool on PostgreSQL (`LEAFID_PG_URL`): the standard rows, a pool name of its
/// own per row in the shared database (its rows deleted afterwards).
mod on_postgres {
    use std::time::Duration;

    use crate::harness::{unique, Registry, Target};
    use crate::rows::{matrix_rows, outage_rows, restart_newcomer_row};

    /// The PostgreSQL pool row set.
    pub struct PgPool;

    fn base() -> url::Url {
        let url = std::env::var("LEAFID_PG_URL")
            .expect("LEAFID_PG_URL is not set: postgres://leafid:leafid@127.0.0.1:5433/leafid");
        url::Url::parse(&url).expect("LEAFID_PG_URL")
    }

    /// Deletes pool `pool`'s rows.
    fn forget(pool: &str) {
        let sql = format!("DELETE FROM leafid_worker_pool WHERE pool = '{pool}'");
        leafid::runtime::block_on(async move {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(base().as_str())
                .await
                .expect("connect");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut c)
                .await
                .expect("sql");
        });
    }

    /// Deletes its pool's rows when the row ends.
    struct Forget(String);

    impl Drop for Forget {
        fn drop(&mut self) {
            forget(&self.0);
        }
    }

    impl Registry for PgPool {
        fn name(&self) -> &'static str {
            "postgres-pool"
        }

        fn target(&self, row: &str) -> Target {
            let name = unique(&format!("pool{row}"));
            let size = super::pool_size(row);
            let mut url = base();
            url.set_query(Some(&format!("pool={name}&pool_size={size}")));
            let b = base();
            Target {
                url: url.to_string(),
                upstream: Some(format!(
                    "{}:{}",
                    b.host_str().unwrap(),
                    b.port().unwrap_or(5432)
                )),
                keep: vec![Box::new(Forget(name.clone()))],
                name,
            }
        }

        fn lease_life(&self) -> Option<Duration> {
            Some(Duration::from_millis(16_500))
        }

        /// As on MySQL.
        fn lease_after_cut(&self) -> Duration {
            Duration::from_secs(10)
        }

        /// The pool's rows deleted.
        fn wipe(&self, t: &Target) {
            forget(&t.name);
        }
    }

    matrix_rows!(PgPool);
    outage_rows!(PgPool);
    restart_newcomer_row!(PgPool, false);
}
