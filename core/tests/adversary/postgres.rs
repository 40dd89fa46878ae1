//! `postgres://…?port=`: the identity registry on PostgreSQL (issue 23), against
//! `LEAFID_PG_URL`. Every row gets an identity of its own (`127.0.0.1:<port>`, deleted
//! afterwards, so test identities never use up the 1 024 ids). Its own adversaries:
//! the holder's row deleted or rewritten under it, then its identity started again
//! through another path (another host, for the host lock).

use std::time::Duration;

use crate::harness::{unique, Registry, Spawn, Target};
use crate::rows::{matrix_rows, outage_rows, restart_newcomer_row, tampered};

/// The `postgres` row set.
pub struct Postgres;

/// `LEAFID_PG_URL`.
fn base() -> url::Url {
    let url = std::env::var("LEAFID_PG_URL")
        .expect("LEAFID_PG_URL is not set: postgres://leafid:leafid@127.0.0.1:5433/leafid");
    url::Url::parse(&url).expect("LEAFID_PG_URL")
}

/// Runs `sql` on `LEAFID_PG_URL`.
fn exec(sql: &str) {
    exec_on(&base(), sql);
}

/// Runs `sql` on the database of `url` (its query dropped).
fn exec_on(url: &url::Url, sql: &str) {
    let mut url = url.clone();
    url.set_query(None);
    let sql = sql.to_string();
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(url.as_str())
            .await
            .expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("sql");
    });
}

/// Deletes its identity's row when the row ends.
struct Identity(String);

impl Drop for Identity {
    fn drop(&mut self) {
        exec(&format!(
            "DELETE FROM leafid_worker_pool WHERE pool = '' AND identity = '{}'",
            self.0
        ));
    }
}

/// A database of a row's own, dropped when the row ends: the wipe row fills it (see
/// [`Postgres::wipe`]).
struct Database(String);

impl Database {
    fn create(row: &str) -> Database {
        let name = unique(row).to_lowercase();
        exec(&format!("CREATE DATABASE {name}"));
        Database(name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        exec(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

impl Registry for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn target(&self, row: &str) -> Target {
        let port = unique_port(row);
        let mut url = base();
        let mut keep: Vec<Box<dyn std::any::Any>> =
            vec![Box::new(Identity(format!("127.0.0.1:{port}")))];
        if row == "wipe" {
            let db = Database::create(row);
            url.set_path(&db.0);
            keep.push(Box::new(db));
        }
        url.set_query(Some(&format!("port={port}&ip=127.0.0.1")));
        let b = base();
        Target {
            url: url.to_string(),
            upstream: Some(format!(
                "{}:{}",
                b.host_str().unwrap(),
                b.port().unwrap_or(5432)
            )),
            keep,
            name: format!("127.0.0.1:{port}"),
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

    /// The identity's row deleted. In the row's own database every other id then gets a
    /// released row of another identity (a busy fleet's), so a newcomer's new row takes
    /// the holder's id: a new identity takes one of the first few free ids at random.
    fn wipe(&self, t: &Target) {
        exec_on(
            &url::Url::parse(&t.url).unwrap(),
            &format!(
                "WITH gone AS (DELETE FROM leafid_worker_pool \
                   WHERE pool = '' AND identity = '{}' RETURNING worker_id) \
                 INSERT INTO leafid_worker_pool \
                   (pool, worker_id, identity, holder, holder_info, expires_ms, bound_ms) \
                 SELECT '', i, 'filler:' || i, '', '', 0, NULL \
                   FROM generate_series(0, 1023) AS i \
                   WHERE i NOT IN (SELECT worker_id FROM gone) \
                 ON CONFLICT DO NOTHING",
                t.name
            ),
        );
    }

    /// An identity of its own in `t`'s database (deleted when the row ends).
    fn other(&self, t: &mut Target, i: usize) -> String {
        let port = unique_port(&format!("other{i}"));
        t.keep.push(Box::new(Identity(format!("127.0.0.1:{port}"))));
        let mut url = url::Url::parse(&t.url).unwrap();
        url.set_query(Some(&format!("port={port}&ip=127.0.0.1")));
        url.to_string()
    }
}

/// A port from a unique name: no other row or run has it.
fn unique_port(row: &str) -> u32 {
    1 + unique(row)
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
        % 65000
}

matrix_rows!(Postgres);
outage_rows!(Postgres);
restart_newcomer_row!(Postgres, true);

/// The holder's row deleted: its identity on another path inserts it afresh.
#[test]
fn row_deleted_under_a_live_holder() {
    let t = Postgres.target("delete");
    let alias = t.proxy().unwrap();
    tampered(&Postgres, "row DELETEd under holder", &t, |_| {
        exec(&format!(
            "DELETE FROM leafid_worker_pool WHERE pool = '' AND identity = '{}'",
            t.name
        ));
        vec![Spawn::url(&t.via(&alias).unwrap())]
    });
}

/// The holder's row rewritten to look released with an old bound (a restored dump).
#[test]
fn row_rewritten_as_released_under_a_live_holder() {
    let t = Postgres.target("rewrite");
    let alias = t.proxy().unwrap();
    tampered(&Postgres, "row rewritten released, bound 0", &t, |_| {
        exec(&format!(
            "UPDATE leafid_worker_pool SET holder = '', expires_ms = 0, bound_ms = 0 \
             WHERE pool = '' AND identity = '{}'",
            t.name
        ));
        vec![Spawn::url(&t.via(&alias).unwrap())]
    });
}
