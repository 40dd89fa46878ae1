//! The pool's statements on MySQL and MariaDB. Values are bound (prepared statements),
//! as the `mysql` registry does; the database's clock is `NOW(3)` in ms. Pool names and
//! identities are compared byte for byte (`utf8mb4_bin`), as PostgreSQL compares them.

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::Row;

use super::rows::{Own, Slot, Taker};
use crate::db::mysql::{error_number, ER_NO_SUCH_TABLE};
use crate::error::{Cause, Result};

/// The database's now in ms.
const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

const CREATE: &str = "CREATE TABLE IF NOT EXISTS `leafid_worker_pool` (
  `pool` varchar(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `worker_id` bigint(20) NOT NULL,
  `identity` varchar(127) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `holder` varchar(64) NOT NULL,
  `holder_info` varchar(255) NOT NULL,
  `expires_ms` bigint(20) NOT NULL,
  `bound_ms` bigint(20) NULL,
  PRIMARY KEY (`pool`, `worker_id`),
  UNIQUE KEY `idx_pool_identity` (`pool`, `identity`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/// How long a statement waits for a connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(3000);

/// A pool's MySQL database.
pub(crate) struct Db {
    options: MySqlConnectOptions,
    pool: OnceLock<MySqlPool>,
}

impl Db {
    pub(super) fn new(url: &str) -> Result<Db> {
        let options = crate::db::mysql::connect_options(
            url,
            "mysql://user:password@host:port/database?pool=NAME",
        )?
        .timezone(Some("+00:00".to_string()));
        Ok(Db {
            options,
            pool: OnceLock::new(),
        })
    }

    fn pool(&self) -> &MySqlPool {
        self.pool
            .get_or_init(|| crate::db::mysql::lazy_pool(&self.options, 2, ACQUIRE_TIMEOUT))
    }

    pub(super) fn name(&self) -> &'static str {
        "MySQL"
    }

    pub(super) fn place(&self) -> String {
        format!(
            "{}/{}",
            crate::db::host_port(self.options.get_host(), self.options.get_port()),
            self.options.get_database().unwrap_or("")
        )
    }

    pub(super) async fn ensure_schema(&self) -> sqlx::Result<()> {
        let mut conn = self.pool().acquire().await?;
        crate::db::mysql::create_missing(&mut conn, "leafid_worker_pool", CREATE).await
    }

    pub(super) async fn list(&self, pool: &str) -> sqlx::Result<(Vec<Slot>, i64)> {
        let now: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {NOW_MS}")))
            .fetch_one(self.pool())
            .await?;
        let rows = sqlx::query(
            "SELECT worker_id, identity, holder, holder_info, expires_ms \
             FROM leafid_worker_pool WHERE pool = ? ORDER BY worker_id",
        )
        .bind(pool)
        .fetch_all(self.pool())
        .await?;
        let slots = rows
            .iter()
            .map(|r| {
                Ok(Slot {
                    worker_id: r.try_get("worker_id")?,
                    identity: r.try_get("identity")?,
                    holder: r.try_get("holder")?,
                    holder_info: r.try_get("holder_info")?,
                    expires_ms: r.try_get("expires_ms")?,
                })
            })
            .collect::<sqlx::Result<Vec<Slot>>>()?;
        Ok((slots, now))
    }

    pub(super) async fn take(
        &self,
        pool: &str,
        slot: &Slot,
        force: bool,
        t: &Taker<'_>,
    ) -> sqlx::Result<bool> {
        // Conditional on the holder read (so two takers of one row: one wins) and on the
        // row being free by the database's clock now, unless its holder is known dead.
        let sql = format!(
            "UPDATE leafid_worker_pool SET holder = ?, holder_info = ?, expires_ms = {NOW_MS} + ? \
             WHERE pool = ? AND worker_id = ? AND holder = ? AND (? OR holder = '' OR \
             expires_ms < {NOW_MS})"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(t.token)
            .bind(t.info)
            .bind(t.term_ms)
            .bind(pool)
            .bind(slot.worker_id)
            .bind(&slot.holder)
            .bind(force)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn insert(
        &self,
        pool: &str,
        id: i64,
        identity: Option<&str>,
        t: &Taker<'_>,
    ) -> sqlx::Result<bool> {
        let sql = format!(
            "INSERT INTO leafid_worker_pool (pool, worker_id, identity, holder, holder_info, \
             expires_ms, bound_ms) VALUES (?, ?, ?, ?, ?, {NOW_MS} + ?, NULL)"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(pool)
            .bind(id)
            .bind(identity)
            .bind(t.token)
            .bind(t.info)
            .bind(t.term_ms)
            .execute(self.pool())
            .await;
        match done {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn read_own(&self, pool: &str, id: i64) -> sqlx::Result<Option<Own>> {
        let row = sqlx::query(
            "SELECT holder, bound_ms FROM leafid_worker_pool WHERE pool = ? AND worker_id = ?",
        )
        .bind(pool)
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(Own {
                holder: r.try_get("holder")?,
                bound_ms: r.try_get("bound_ms")?,
            })
        })
        .transpose()
    }

    pub(super) async fn renew(
        &self,
        pool: &str,
        id: i64,
        token: &str,
        term_ms: i64,
        bound_ms: i64,
    ) -> sqlx::Result<bool> {
        // sqlx connects with CLIENT_FOUND_ROWS: a renew that writes the values already
        // there (two renews in one ms) still counts its row.
        let sql = format!(
            "UPDATE leafid_worker_pool SET expires_ms = {NOW_MS} + ?, bound_ms = ? \
             WHERE pool = ? AND worker_id = ? AND holder = ?"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(term_ms)
            .bind(bound_ms)
            .bind(pool)
            .bind(id)
            .bind(token)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn release(&self, pool: &str, id: i64, token: &str) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE leafid_worker_pool SET holder = '', expires_ms = 0 \
             WHERE pool = ? AND worker_id = ? AND holder = ?",
        )
        .bind(pool)
        .bind(id)
        .bind(token)
        .execute(self.pool())
        .await
        .map(drop)
    }

    pub(super) async fn now_ms(&self) -> sqlx::Result<i64> {
        crate::db::mysql::now_ms(self.pool()).await
    }

    pub(super) fn table_gone(&self, e: &sqlx::Error) -> bool {
        error_number(e) == Some(ER_NO_SUCH_TABLE)
    }

    pub(super) fn cause(&self, e: sqlx::Error) -> Cause {
        Cause::sqlx(e)
    }

    /// One direct connection attempt after a pool time-out: the driver's reason when it
    /// failed, `None` when the server answers or stays silent.
    pub(super) async fn probe(&self) -> Option<sqlx::Error> {
        let at = crate::db::mysql::address(&self.options);
        match crate::db::probe::probe(&self.options, at).await {
            crate::db::probe::Probe::Failed(e) => Some(e),
            _ => None,
        }
    }
}
