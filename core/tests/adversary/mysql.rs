//! `mysql://`: the fork's `leaf_workerid_alloc` rows (and leafid's lease rows beside
//! them). Every row of the matrix gets a database of its own, dropped afterwards, so
//! worker ids start at 1 and no other test's rows are touched. Its adversaries: the
//! fork's `SnowflakeMySQLHolder` on the same `ip:port` (issue 20 #2), the holder's row
//! updated or deleted under it.

use std::time::Duration;

use crate::foreign::{foreign_rows, When};
use crate::harness::{open_dir, unique, Registry, Spawn, Target};
use crate::rows::{matrix_rows, outage_rows, restart_newcomer_row, tampered};

/// The `mysql` row set.
pub struct Mysql;

/// `LEAFID_MYSQL_URL`.
fn base() -> url::Url {
    let url = std::env::var("LEAFID_MYSQL_URL")
        .expect("LEAFID_MYSQL_URL is not set: source .services/env first");
    url::Url::parse(&url).expect("LEAFID_MYSQL_URL")
}

/// The database's `host:port`.
fn upstream() -> String {
    let b = base();
    format!("{}:{}", b.host_str().unwrap(), b.port().unwrap_or(3306))
}

/// Runs `sql` on database `db` ("" for none).
pub fn exec(db: &str, sql: &str) {
    let mut url = base();
    url.set_path(db);
    let (url, sql) = (url.to_string(), sql.to_string());
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("sql");
    });
}

/// Drops the databases that earlier runs killed before their rows ended left behind
/// (`adv_{row}_{pid}_{nanos}` of a pid that is gone).
fn sweep() {
    let mut url = base();
    url.set_path("");
    let url = url.to_string();
    let names: Vec<String> = leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        sqlx::query_scalar("SHOW DATABASES LIKE 'adv\\_%'")
            .fetch_all(&mut c)
            .await
            .unwrap_or_default()
    });
    for name in names {
        let pid = name.rsplit('_').nth(1).unwrap_or("");
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            exec("", &format!("DROP DATABASE IF EXISTS `{name}`"));
        }
    }
}

/// Drops its database when the row ends.
struct Database(String);

impl Drop for Database {
    fn drop(&mut self) {
        exec("", &format!("DROP DATABASE IF EXISTS `{}`", self.0));
    }
}

impl Registry for Mysql {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn target(&self, row: &str) -> Target {
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(sweep);
        let name = unique(row);
        exec("", &format!("CREATE DATABASE `{name}`"));
        Target {
            url: url_of(&name, "8080"),
            upstream: Some(upstream()),
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

    /// Both tables truncated (their `AUTO_INCREMENT` back to 1).
    fn wipe(&self, t: &Target) {
        exec(
            &t.name,
            "TRUNCATE TABLE leaf_workerid_alloc; TRUNCATE TABLE leafid_worker_lease",
        );
    }

    /// Identity 127.0.0.1:{9091+i}: after a wipe its row is the first again.
    fn other(&self, t: &mut Target, i: usize) -> String {
        url_of(&t.name, &(9091 + i).to_string())
    }
}

/// The URL of database `db` with identity 127.0.0.1:`port`.
pub fn url_of(db: &str, port: &str) -> String {
    let mut url = base();
    url.set_path(db);
    url.set_query(Some(&format!("port={port}&ip=127.0.0.1")));
    url.to_string()
}

matrix_rows!(Mysql);
outage_rows!(Mysql);
restart_newcomer_row!(Mysql, false);
foreign_rows!(fork_row);

/// The fork's `SnowflakeMySQLHolder` on the identity a leafid uses (issue 20 #2).
fn fork_row(when: When) {
    let t = Mysql.target(&format!("fork{when:?}").to_lowercase());
    let mut db = base();
    db.set_path(&t.name);
    let db = db.to_string();
    let conf = open_dir();
    crate::foreign::row(
        &Mysql,
        "fork mysql server",
        when,
        &t,
        (1, true),
        move || {
            let mut f =
                crate::fork_mysql::ForkServer::start(&db, "127.0.0.1", "8080", conf.path())?;
            Ok(Box::new(move || {
                f.stop();
                drop(conf);
                let what = format!("worker {}, {:?}", f.worker_id(), f.path());
                (what, f.ids())
            }))
        },
    );
}

/// Issue 28 #1: the fork's server on a host 4.5 s ahead, after an older leafid holder.
#[test]
fn foreign_server_skewed_ahead_after_an_older_leafid_holder() {
    let t = Mysql.target("forkahead");
    let mut db = base();
    db.set_path(&t.name);
    let db = db.to_string();
    crate::foreign::skewed_after_older_leafid(&Mysql, "fork mysql server", &t, move |ahead| {
        let conf = open_dir();
        let mut f = crate::fork_mysql::ForkServer::start_ahead(
            &db,
            "127.0.0.1",
            "8080",
            conf.path(),
            ahead,
        )?;
        Ok(Box::new(move || {
            f.stop();
            drop(conf);
            (format!("worker {}, {:?}", f.worker_id(), f.path()), f.ids())
        }))
    });
}

/// The holder's row renamed to another identity (an operator "moving" a worker id):
/// that identity's newcomer finds the holder's id.
#[test]
fn row_updated_under_a_live_holder() {
    let t = Mysql.target("update");
    tampered(&Mysql, "row UPDATEd to another ip:port", &t, |_| {
        exec(
            &t.name,
            "UPDATE leaf_workerid_alloc SET port='9090', ip_port='127.0.0.1:9090' \
             WHERE ip_port='127.0.0.1:8080'",
        );
        vec![Spawn::url(&url_of(&t.name, "9090"))]
    });
}

/// The holder's row and lease deleted (a cleanup), then its identity started on another
/// host (through a proxy) and a new identity.
#[test]
fn rows_deleted_under_a_live_holder() {
    let t = Mysql.target("delete");
    let alias = t.proxy().unwrap();
    tampered(&Mysql, "row + lease DELETEd under holder", &t, |_| {
        exec(
            &t.name,
            "DELETE FROM leaf_workerid_alloc; DELETE FROM leafid_worker_lease; \
             ALTER TABLE leaf_workerid_alloc AUTO_INCREMENT = 1",
        );
        vec![
            Spawn::url(&t.via(&alias).unwrap()),
            Spawn::url(&url_of(&t.name, "9091")),
        ]
    });
}

/// The holder's `max_timestamp` rewritten to 0 and its lease deleted (a restored
/// backup), then its identity on another host.
#[test]
fn floor_rewritten_under_a_live_holder() {
    let t = Mysql.target("floor");
    let alias = t.proxy().unwrap();
    tampered(
        &Mysql,
        "max_timestamp rewritten + lease deleted",
        &t,
        |_| {
            exec(
                &t.name,
                "UPDATE leaf_workerid_alloc SET max_timestamp = 0; DELETE FROM leafid_worker_lease",
            );
            vec![Spawn::url(&t.via(&alias).unwrap())]
        },
    );
}
