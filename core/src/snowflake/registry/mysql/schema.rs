//! The tables of the `mysql` registry: the fork's `leaf_workerid_alloc`, kept exactly as
//! the fork reads it, and leafid's own `leafid_worker_lease` beside it, with the migration
//! that adds the columns a leafid before issue 20 did not have.
//!
//! Two leafid versions may share one database during a rolling upgrade. The new columns
//! are NULL-able with no default, so an older leafid's `INSERT` (which names only the old
//! columns) and its `UPDATE`s (which never touch them) keep working; what an older holder
//! leaves there is only missing information, which the newer one reads as "no floor of
//! leafid's own" (the fork's `max_timestamp`, into which the older one wrote its bound,
//! still is one) and "not released by a leafid of this version" (the full takeover watch).

use sqlx::mysql::MySqlConnection;

use super::MysqlRegistry;
use crate::db::mysql::{create_missing, error_number, ER_DUP_FIELDNAME};
use crate::error::Result;

/// The fork's DDL (`scripts/leaf_workerid_alloc.sql`), created when missing.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS `leaf_workerid_alloc` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `ip` varchar(127) DEFAULT NULL,
  `port` varchar(127) DEFAULT NULL,
  `ip_port` varchar(127) NOT NULL,
  `max_timestamp` bigint(20) DEFAULT NULL,
  `create_time` timestamp NULL DEFAULT NULL,
  `update_time` timestamp NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`),
  UNIQUE KEY `idx_ipport` (`ip_port`) USING BTREE
) ENGINE=InnoDB";

/// leafid's lease table: who holds each worker id of `leaf_workerid_alloc`, until when,
/// and the two values the fork's table cannot hold:
/// - `bound_ms`: the holder's look-ahead bound (the clock plus a few seconds). It may not
///   go into `max_timestamp` (fence rule 4: a fork server reading a future value there
///   falls back to its local cache and never writes again), yet a newcomer's floor must
///   cover it: the floor is `max(max_timestamp, bound_ms)`.
/// - `last_ts`: the value of `max_timestamp` the holder last wrote. With `holder = ''`
///   (released) and `max_timestamp` still equal to it, the last writer was a leafid that
///   let go, and the newcomer's takeover watch is the short one.
const CREATE_LEASE_TABLE: &str = "CREATE TABLE IF NOT EXISTS `leafid_worker_lease` (
  `worker_id` bigint(20) NOT NULL,
  `ip_port` varchar(127) NOT NULL,
  `holder` varchar(64) NOT NULL,
  `holder_info` varchar(255) NOT NULL,
  `expires_at` datetime(3) NOT NULL,
  `bound_ms` bigint(20) NULL,
  `last_ts` bigint(20) NULL,
  PRIMARY KEY (`worker_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/// The columns added to a `leafid_worker_lease` created before issue 20.
const ADDED_COLUMNS: [&str; 2] = ["bound_ms", "last_ts"];

impl MysqlRegistry {
    /// Creates both tables when missing (only then: a user with DML grants alone
    /// starts against tables an administrator made) and adds the new columns to an older lease
    /// table. Portable: `ADD COLUMN IF NOT EXISTS` is MariaDB only, so the columns are
    /// looked up in `information_schema` and a concurrent `ALTER` that won the race is
    /// fine.
    pub(super) async fn ensure_schema(&self, conn: &mut MySqlConnection) -> Result<()> {
        create_missing(conn, "leaf_workerid_alloc", CREATE_TABLE)
            .await
            .map_err(|e| self.db_err("create table leaf_workerid_alloc", e))?;
        create_missing(conn, "leafid_worker_lease", CREATE_LEASE_TABLE)
            .await
            .map_err(|e| self.db_err("create table leafid_worker_lease", e))?;
        let present: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafid_worker_lease'",
        )
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.db_err("read the columns of leafid_worker_lease", e))?;
        for column in ADDED_COLUMNS {
            if present.iter().any(|c| c.eq_ignore_ascii_case(column)) {
                continue;
            }
            // The names are constants of this file: no outside text reaches the DDL.
            let ddl =
                format!("ALTER TABLE `leafid_worker_lease` ADD COLUMN `{column}` bigint(20) NULL");
            match sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
                .execute(&mut *conn)
                .await
            {
                Ok(_) => tracing::info!(column, "added a column to leafid_worker_lease"),
                // "Duplicate column name": a concurrent start added it first.
                Err(e) if error_number(&e) == Some(ER_DUP_FIELDNAME) => {}
                Err(e) => return Err(self.db_err("add a column to leafid_worker_lease", e)),
            }
        }
        Ok(())
    }
}
