//! Leaf's `leaf_alloc` table on PostgreSQL.
//!
//! An allocation is one statement, one round trip: `UPDATE … RETURNING` raises the
//! row's `max_id` under its row lock and returns the new value in the same breath, so
//! two processes (or a Java Leaf patched for PostgreSQL) sharing the row never receive
//! overlapping ranges. It carries the MySQL store's guards: a step of at least 1, and
//! room below `i64::MAX` for one more step; a row the guard refuses is read once more
//! to say why.
//!
//! Every statement runs through the simple query protocol with its values as escaped
//! literals, never a prepared statement: see `db/postgres.rs` for why (PgBouncer
//! in transaction mode) and how the literals are made safe.
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS leaf_alloc (
//!   biz_tag     varchar(128) NOT NULL DEFAULT '',
//!   max_id      bigint       NOT NULL DEFAULT 1,
//!   step        integer      NOT NULL,
//!   description varchar(256) DEFAULT NULL,
//!   update_time timestamp    NOT NULL DEFAULT CURRENT_TIMESTAMP,
//!   PRIMARY KEY (biz_tag)
//! );
//! ```

use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{Postgres, Row};

use super::{
    bad_row, redact, validate_start, validate_step, Allocation, SegmentStore, TagRow, MAX_TAG_LEN,
};
use crate::db::diagnosis::{Diagnosis, Target};
use crate::db::postgres::{self as pg, literal, sqlstate};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// Leaf's table with PostgreSQL's types (the module docs show it). `update_time` is
/// set by each statement that changes the row, as MySQL's `ON UPDATE` does.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leaf_alloc (
  biz_tag varchar(128) NOT NULL DEFAULT '',
  max_id bigint NOT NULL DEFAULT 1,
  step integer NOT NULL,
  description varchar(256) DEFAULT NULL,
  update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (biz_tag)
)";

/// A `leaf_alloc` table in PostgreSQL.
pub struct PostgresStore {
    url: String,
    options: PgConnectOptions,
    /// "PostgreSQL at host:port", for messages.
    at: String,
    pool: std::sync::OnceLock<PgPool>,
    /// Whether the pool's statements need `SET TRANSACTION` (see [`pg::DefaultIsolation`]).
    isolation: pg::DefaultIsolation,
    /// Why the pool could not connect (see [`crate::db::diagnosis`]).
    diagnosis: Diagnosis,
}

/// By hand: the URL and connect options carry the password.
impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &redact(&self.url))
            .finish_non_exhaustive()
    }
}

/// `tag` as an SQL literal. Tags are validated before they reach a store (no NUL, at
/// most 128 characters); one that slips through is refused, never sent.
fn tag_literal(tag: &str) -> Result<String> {
    let refused = |reason: &str| Error::InvalidTag {
        tag: tag.chars().take(40).collect(),
        reason: reason.into(),
    };
    if tag.chars().count() > MAX_TAG_LEN {
        return Err(refused(
            "it is longer than 128 characters (leaf_alloc.biz_tag is varchar(128))",
        ));
    }
    literal(tag).ok_or_else(|| refused("it contains a NUL byte"))
}

impl PostgresStore {
    /// Parses the URL (`postgres://` or `postgresql://`, `sslmode` honoured); connects
    /// on first use.
    pub fn new(url: &str) -> Result<PostgresStore> {
        let options = pg::connect_options(url)?;
        Ok(PostgresStore {
            url: url.to_string(),
            at: pg::address(&options),
            options,
            pool: std::sync::OnceLock::new(),
            isolation: pg::DefaultIsolation::default(),
            diagnosis: Diagnosis::new(),
        })
    }

    fn pool(&self) -> &PgPool {
        // As the MySQL store: lazy, four connections, and an acquire that gives up in
        // time for a caller's wait to report the cause.
        self.pool.get_or_init(|| {
            pg::lazy_pool(
                &self.options,
                4,
                Duration::from_millis(1500),
                &self.isolation,
            )
        })
    }

    /// A connection from the pool, a refusal (connection refused, login refused,
    /// unknown database) reported within a caller's wait.
    async fn conn(&self) -> Result<PoolConnection<Postgres>> {
        let target = Target {
            options: &self.options,
            at: &self.at,
            connect_error: |e| self.connect_error(e),
        };
        self.diagnosis.acquire(self.pool(), target).await
    }

    /// A failed connection attempt as the user sees it (see the MySQL store's).
    fn connect_error(&self, e: sqlx::Error) -> Error {
        match e {
            sqlx::Error::Io(io) => {
                let text = format!("cannot connect to {}: {io}", self.at);
                Error::store_with(text, pg::cause(sqlx::Error::Io(io)))
            }
            other => db_error(other),
        }
    }
}

/// A PostgreSQL error as the user sees it, the driver's error kept as the source:
/// configuration (a refused login, an unknown database, a missing table, a tag the
/// database's encoding cannot hold) says what to fix; anything else is an outage.
fn db_error(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e {
        let msg = db.message().to_string();
        if let Some(refusal) = crate::db::refusal::refusal(&e) {
            return refusal.error(msg, super::GRANTS, pg::cause(e));
        }
        match sqlstate(&e) {
            Some(pg::UNDEFINED_TABLE) => {
                return Error::TableMissing {
                    table: "leaf_alloc".into(),
                }
            }
            Some(code) if pg::UNTRANSLATABLE.contains(&code) => {
                return Error::InvalidTag {
                    tag: String::new(),
                    reason: format!(
                        "the database's encoding cannot store it ({msg}); use a UTF8 database"
                    ),
                }
            }
            _ => {}
        }
    }
    let text = e.to_string();
    Error::store_with(text, pg::cause(e))
}

impl SegmentStore for PostgresStore {
    /// No: PostgreSQL compares `varchar` case-sensitively, trailing spaces included.
    fn folds_tag_case(&self) -> bool {
        false
    }

    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, Result<Allocation>> {
        Box::pin(async move {
            let t = tag_literal(tag)?;
            // Leaf's UPDATE, guarded: only a row with a step of at least 1 whose max_id
            // has room for one more step below i64::MAX. PostgreSQL does not promise to
            // evaluate `step > 0` first, so GREATEST keeps the subtraction from
            // overflowing (an error) on a row whose step is negative.
            let sql = match step {
                None => format!(
                    "UPDATE leaf_alloc SET max_id = max_id + step, update_time = CURRENT_TIMESTAMP \
                     WHERE biz_tag = {t} AND step > 0 \
                     AND max_id <= 9223372036854775807 - GREATEST(step, 0) \
                     RETURNING max_id::bigint AS max_id, step::bigint AS step"
                ),
                Some(step) => format!(
                    "UPDATE leaf_alloc SET max_id = max_id + ({step}), update_time = CURRENT_TIMESTAMP \
                     WHERE biz_tag = {t} AND step > 0 AND ({step}) > 0 \
                     AND max_id <= 9223372036854775807 - ({}) \
                     RETURNING max_id::bigint AS max_id, step::bigint AS step",
                    step.max(0)
                ),
            };
            let mut conn = self.conn().await?;
            let row = self
                .isolation
                .read_committed(&sql)
                .fetch_optional(&mut *conn)
                .await
                .map_err(db_error)?;
            if let Some(row) = row {
                return Ok(Allocation {
                    max_id: row.try_get("max_id").map_err(db_error)?,
                    step: row.try_get::<i64, _>("step").map_err(db_error)?,
                });
            }
            // Missing, or a row the guard refused: say which.
            let row = self.isolation.read_committed(&format!(
                "SELECT max_id::bigint AS max_id, step::bigint AS step FROM leaf_alloc WHERE biz_tag = {t}"
            ))
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_error)?;
            Err(match row {
                None => Error::TagNotFound { tag: tag.into() },
                Some(r) => bad_row(
                    tag,
                    r.try_get("max_id").map_err(db_error)?,
                    r.try_get::<i64, _>("step").map_err(db_error)?,
                    step,
                ),
            })
        })
    }

    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = self
                .isolation
                .read_committed("SELECT biz_tag FROM leaf_alloc")
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
            // `=` on varchar is exact in PostgreSQL (deterministic collations): only the
            // exact spelling finds the row.
            let sql = format!(
                "SELECT 1 FROM leaf_alloc WHERE biz_tag = {}",
                tag_literal(tag)?
            );
            let row = self
                .isolation
                .read_committed(&sql)
                .fetch_optional(&mut *self.conn().await?)
                .await
                .map_err(db_error)?;
            Ok(row.is_some())
        })
    }

    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>> {
        Box::pin(async move {
            let rows = self
                .isolation
                .read_committed(
                    "SELECT biz_tag, max_id::bigint AS max_id, step::bigint AS step, description, \
                 to_char(update_time, 'YYYY-MM-DD HH24:MI:SS') AS update_time \
                 FROM leaf_alloc ORDER BY biz_tag",
                )
                .fetch_all(&mut *self.conn().await?)
                .await
                .map_err(db_error)?;
            rows.iter()
                .map(|r| {
                    Ok(TagRow {
                        tag: r.try_get("biz_tag")?,
                        max_id: r.try_get("max_id")?,
                        step: r.try_get::<i64, _>("step")?,
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
            pg::create_missing(&mut conn, "leaf_alloc", CREATE_TABLE)
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
            let description = literal(description).ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "tag {tag:?}: the description contains a NUL byte, which PostgreSQL text cannot hold"
                ))
            })?;
            let sql = format!(
                "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
                 VALUES ({}, {start}, {step}, {description})",
                tag_literal(tag)?
            );
            let result = self
                .isolation
                .read_committed(&sql)
                .execute(&mut *self.conn().await?)
                .await;
            super::insert_result(tag, result, db_error)
        })
    }

    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        Ok(Arc::new(PostgresStore::new(&self.url)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_no_row_can_hold_is_refused_before_any_sql() {
        assert_eq!(tag_literal("o'k").unwrap(), "E'o''k'");
        for bad in ["nul\0inside".to_string(), "x".repeat(129)] {
            let e = tag_literal(&bad).unwrap_err();
            assert!(matches!(e, Error::InvalidTag { .. }), "{e:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_password() {
        let s = PostgresStore::new("postgres://leaf:s3cr3t@127.0.0.1:5432/leaf").unwrap();
        assert!(!format!("{s:?}").contains("s3cr3t"), "{s:?}");
        let e = PostgresStore::new("postgres://leaf:s3cr3t@127.0.0.1:99999/leaf").unwrap_err();
        assert!(!format!("{e} {e:?}").contains("s3cr3t"), "{e}");
    }
}
