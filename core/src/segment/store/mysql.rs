//! Leaf's `leaf_alloc` table on MySQL / MariaDB, with Leaf's own SQL.
//!
//! An allocation runs Leaf's two statements in one transaction: the `UPDATE` takes the
//! row lock, the `SELECT` reads the new `max_id` under it, the commit releases it. A
//! Java Leaf server doing the same against the same row therefore never gets an
//! overlapping range.

use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, MySql, Row};

use super::{
    bad_row, db_error, redact, validate_start, validate_step, Allocation, SegmentStore, TagRow,
};
use crate::db::diagnosis::{Diagnosis, Target};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/// A `leaf_alloc` table in MySQL or MariaDB.
pub struct MysqlStore {
    url: String,
    options: MySqlConnectOptions,
    /// "MySQL at host:port", for messages.
    at: String,
    pool: std::sync::OnceLock<MySqlPool>,
    /// Why the pool could not connect: one probe at a time, its answer shared, so a
    /// burst of failing callers opens one extra connection to the server, not one each.
    diagnosis: Diagnosis,
}

/// By hand: the URL and connect options carry the password.
impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("url", &redact(&self.url))
            .finish_non_exhaustive()
    }
}

impl MysqlStore {
    /// Parses the URL; connects on first use.
    pub fn new(url: &str) -> Result<MysqlStore> {
        let options =
            crate::db::mysql::connect_options(url, "mysql://user:password@host:port/database")?;
        Ok(MysqlStore {
            url: url.to_string(),
            at: crate::db::mysql::address(&options),
            options,
            pool: std::sync::OnceLock::new(),
            diagnosis: Diagnosis::new(),
        })
    }

    fn pool(&self) -> &MySqlPool {
        // Lazy so that building the store does no I/O and needs no runtime context; the
        // first caller runs on the background runtime. A down database must fail a
        // refill quickly so callers see the cause within their wait timeout instead of
        // hanging.
        self.pool.get_or_init(|| {
            crate::db::mysql::lazy_pool(&self.options, 4, Duration::from_millis(1500))
        })
    }

    /// A connection from the pool, a refusal (connection refused, access denied,
    /// unknown database) reported within a caller's wait rather than after the pool's
    /// timeout (see [`crate::db::diagnosis`]).
    async fn conn(&self) -> Result<PoolConnection<MySql>> {
        let target = Target {
            options: &self.options,
            at: &self.at,
            connect_error: |e| self.connect_error(e),
        };
        self.diagnosis.acquire(self.pool(), target).await
    }

    /// A failed connection attempt as the user sees it: a refused login or unknown
    /// database is `AccessDenied`, a network error an outage naming the address; the
    /// driver's error is kept as the source either way.
    fn connect_error(&self, e: sqlx::Error) -> Error {
        match e {
            sqlx::Error::Io(io) => {
                let text = format!("cannot connect to {}: {io}", self.at);
                Error::store_with(text, crate::error::Cause::sqlx(sqlx::Error::Io(io)))
            }
            other => db_error(other),
        }
    }
}

impl SegmentStore for MysqlStore {
    /// Yes: MySQL's default collations (`utf8mb4_0900_ai_ci`, `utf8_general_ci`, …)
    /// compare `biz_tag` case-insensitively and ignore trailing spaces.
    fn folds_tag_case(&self) -> bool {
        true
    }

    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, Result<Allocation>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            let mut tx = conn.begin().await.map_err(db_error)?;
            // Leaf's UPDATE, guarded: only a row with a step of at least 1 whose max_id
            // has room for one more step below i64::MAX. (GREATEST keeps the subtraction
            // from overflowing, error 1690, on a row whose step is negative.)
            let updated = match step {
                None => {
                    sqlx::query(
                        "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ? \
                     AND step > 0 AND max_id <= 9223372036854775807 - GREATEST(step, 0)",
                    )
                    .bind(tag)
                    .execute(&mut *tx)
                    .await
                }
                Some(step) => {
                    sqlx::query(
                        "UPDATE leaf_alloc SET max_id = max_id + ? WHERE biz_tag = ? \
                     AND step > 0 AND ? > 0 AND max_id <= 9223372036854775807 - ?",
                    )
                    .bind(step)
                    .bind(tag)
                    .bind(step)
                    .bind(step.max(0))
                    .execute(&mut *tx)
                    .await
                }
            }
            .map_err(db_error)?;
            if updated.rows_affected() == 0 {
                // Missing, or a row the guard refused: say which.
                let row = sqlx::query("SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ?")
                    .bind(tag)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
                return Err(match row {
                    None => Error::TagNotFound { tag: tag.into() },
                    Some(r) => bad_row(
                        tag,
                        r.try_get("max_id").map_err(db_error)?,
                        r.try_get::<i32, _>("step").map_err(db_error)? as i64,
                        step,
                    ),
                });
            }
            let row = sqlx::query("SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?")
                .bind(tag)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            Ok(Allocation {
                max_id: row.try_get("max_id").map_err(db_error)?,
                step: row.try_get::<i32, _>("step").map_err(db_error)? as i64,
            })
        })
    }

    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = sqlx::query("SELECT biz_tag FROM leaf_alloc")
                .fetch_all(&mut *self.conn().await?)
                .await
                .map_err(db_error)?;
            rows.iter()
                .map(|r| r.try_get::<String, _>(0).map_err(db_error))
                .collect()
        })
    }

    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            // `=` follows the column's collation (Leaf's table: case-insensitive, trailing
            // spaces ignored), so `ORDER` would find `order`; a generator that cached
            // both spellings would hold two buffers for one row and issue its ids out of
            // order. Only the exact spelling counts.
            let row = sqlx::query("SELECT biz_tag FROM leaf_alloc WHERE biz_tag = ?")
                .bind(tag)
                .fetch_optional(&mut *self.conn().await?)
                .await
                .map_err(db_error)?;
            match row {
                Some(row) => Ok(row.try_get::<String, _>("biz_tag").map_err(db_error)? == tag),
                None => Ok(false),
            }
        })
    }

    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT biz_tag, max_id, step, description, CAST(update_time AS CHAR) AS update_time FROM leaf_alloc ORDER BY biz_tag",
            )
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(db_error)?;
            rows.iter()
                .map(|r| {
                    Ok(TagRow {
                        tag: r.try_get("biz_tag")?,
                        max_id: r.try_get("max_id")?,
                        step: r.try_get::<i32, _>("step")? as i64,
                        description: r.try_get("description")?,
                        update_time: r.try_get("update_time")?,
                    })
                })
                .collect::<std::result::Result<_, sqlx::Error>>()
                .map_err(db_error)
        })
    }

    fn create_table(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            crate::db::mysql::create_missing(&mut conn, "leaf_alloc", CREATE_TABLE)
                .await
                .map_err(db_error)
        })
    }

    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_step(step)?;
            validate_start(tag, start, step)?;
            let result = sqlx::query(
                "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)",
            )
            .bind(tag)
            .bind(start)
            .bind(step)
            .bind(description)
            .execute(&mut *self.conn().await?)
            .await;
            super::insert_result(tag, result, db_error)
        })
    }

    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        Ok(Arc::new(MysqlStore::new(&self.url)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_with_a_slash_is_refused_without_showing_it() {
        // A parser reads host `app`, port `4711`; a message would name them.
        let url = "mysql://app:4711/Kq@127.0.0.1:3306/leafid";
        let e = MysqlStore::new(url).unwrap_err();
        let (text, debug) = (e.to_string(), format!("{e:?}"));
        assert!(matches!(e, Error::InvalidUrl { .. }), "{text}");
        assert!(text.contains("%2F"), "{text}");
        assert!(
            !text.contains("4711") && !debug.contains("4711"),
            "{text} {debug}"
        );
        assert!(MysqlStore::new("mysql://app:4711%2FKq@127.0.0.1:3306/leafid").is_ok());
    }
}
