//! The embedded default: `leaf_alloc` in a SQLite file.
//!
//! An allocation is a single `UPDATE … RETURNING` statement, which SQLite runs under
//! its database write lock, so several processes on one host sharing the file never
//! receive overlapping ranges. WAL mode and a busy timeout let them queue instead of
//! failing.
//!
//! The connection, its busy retries and its fork safety are the backend layer's
//! (`crate::db::sqlite`, internal); this file is the table and its statements.

use std::sync::Arc;

use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

use super::{bad_row, db_error, validate_start, validate_step, Allocation, SegmentStore, TagRow};
use crate::db::sqlite::SqliteFile;
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leaf_alloc (
  biz_tag TEXT NOT NULL DEFAULT '' PRIMARY KEY,
  max_id INTEGER NOT NULL DEFAULT 1,
  step INTEGER NOT NULL,
  description TEXT DEFAULT NULL,
  update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

/// Rows whose `biz_tag` is text valid as UTF-8. SQLite's dynamic typing lets a hand-made
/// table (or a BLOB insert) hold another type there; such a row is no tag anyone can
/// ask for, and is skipped (and reported) rather than failing the listing of all tags.
macro_rules! text_tag {
    () => {
        "typeof(biz_tag) = 'text'"
    };
}

/// A `leaf_alloc` table in a SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    file: SqliteFile,
}

impl SqliteStore {
    /// Takes `sqlite://relative/path.db` or `sqlite:///absolute/path.db`; the file is
    /// created on first use.
    pub fn new(url: &str) -> Result<SqliteStore> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or("");
        let path = path.split('?').next().unwrap_or("");
        if path.is_empty() || path == ":memory:" {
            return Err(Error::invalid_url(
                url,
                "expected sqlite://path/to/file.db (a file shared by the processes of one host)",
            ));
        }
        Ok(SqliteStore::at(path.to_string()))
    }

    fn at(path: String) -> SqliteStore {
        SqliteStore {
            file: SqliteFile::new(path),
        }
    }

    /// Runs `op` on the file's connection (see [`SqliteFile::run`]), a failed statement
    /// mapped to what it means for `leaf_alloc`.
    async fn run<T, F>(&self, op: F) -> Result<T>
    where
        F: for<'c> Fn(
            &'c mut SqliteConnection,
        ) -> BoxFuture<'c, std::result::Result<T, sqlx::Error>>,
    {
        self.file.run(op).await?.map_err(db_error)
    }

    /// Logs the rows `text_tag!` leaves out of a listing, once per listing, so the
    /// operator learns why a row is missing.
    async fn report_untagged(&self) -> Result<()> {
        let row = self
            .run(|c| {
                Box::pin(
                    sqlx::query(concat!(
                        "SELECT COUNT(*), GROUP_CONCAT(DISTINCT typeof(biz_tag)) \
                         FROM leaf_alloc WHERE NOT (",
                        text_tag!(),
                        ")"
                    ))
                    .fetch_one(c),
                )
            })
            .await?;
        let count: i64 = row.try_get(0).unwrap_or(0);
        if count > 0 {
            let types: Option<String> = row.try_get(1).unwrap_or(None);
            tracing::warn!(
                rows = count,
                types = types.as_deref().unwrap_or(""),
                path = %self.file.path(),
                "leaf_alloc rows whose biz_tag is not text are skipped; fix or delete them"
            );
        }
        Ok(())
    }
}

impl SegmentStore for SqliteStore {
    /// No: SQLite compares `biz_tag` byte for byte (BINARY collation).
    fn folds_tag_case(&self) -> bool {
        false
    }

    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, Result<Allocation>> {
        Box::pin(async move {
            // Leaf's UPDATE, guarded: only an integer row with a step of at least 1 whose
            // max_id has room for one more step, so max_id never overflows into a REAL.
            let row = self
                .run(|c| {
                    let tag = tag.to_string();
                    Box::pin(async move {
                        match step {
                            None => {
                                sqlx::query(
                                    "UPDATE leaf_alloc SET max_id = max_id + step, \
                                 update_time = CURRENT_TIMESTAMP \
                                 WHERE biz_tag = ?1 AND typeof(max_id) = 'integer' \
                                 AND typeof(step) = 'integer' AND step > 0 \
                                 AND max_id <= 9223372036854775807 - step \
                                 RETURNING max_id, step",
                                )
                                .bind(tag)
                                .fetch_optional(c)
                                .await
                            }
                            Some(step) => {
                                sqlx::query(
                                    "UPDATE leaf_alloc SET max_id = max_id + ?1, \
                                 update_time = CURRENT_TIMESTAMP \
                                 WHERE biz_tag = ?2 AND typeof(max_id) = 'integer' \
                                 AND typeof(step) = 'integer' AND step > 0 AND ?1 > 0 \
                                 AND max_id <= 9223372036854775807 - ?1 \
                                 RETURNING max_id, step",
                                )
                                .bind(step)
                                .bind(tag)
                                .fetch_optional(c)
                                .await
                            }
                        }
                    })
                })
                .await?;
            if let Some(row) = row {
                return Ok(Allocation {
                    max_id: row.try_get("max_id").map_err(db_error)?,
                    step: row.try_get("step").map_err(db_error)?,
                });
            }
            // Missing, or a row the guard refused: say which.
            let row = self
                .run(|c| {
                    let tag = tag.to_string();
                    Box::pin(async move {
                        sqlx::query(
                            "SELECT CAST(max_id AS INTEGER) AS max_id, CAST(step AS INTEGER) AS step, \
                             typeof(max_id) AS max_type, typeof(step) AS step_type \
                             FROM leaf_alloc WHERE biz_tag = ?",
                        )
                        .bind(tag)
                        .fetch_optional(c)
                        .await
                    })
                })
                .await?;
            let Some(row) = row else {
                return Err(Error::TagNotFound { tag: tag.into() });
            };
            let (max_type, step_type): (String, String) = (
                row.try_get("max_type").map_err(db_error)?,
                row.try_get("step_type").map_err(db_error)?,
            );
            if max_type != "integer" || step_type != "integer" {
                return Err(Error::Malformed {
                    what: "leaf_alloc row",
                    path: format!("biz_tag {tag:?}"),
                    reason: format!(
                        "max_id is stored as {max_type} and step as {step_type}; both must be integers"
                    ),
                });
            }
            Err(bad_row(
                tag,
                row.try_get("max_id").map_err(db_error)?,
                row.try_get("step").map_err(db_error)?,
                step,
            ))
        })
    }

    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = self
                .run(|c| {
                    Box::pin(
                        sqlx::query(concat!(
                            "SELECT biz_tag FROM leaf_alloc WHERE ",
                            text_tag!()
                        ))
                        .fetch_all(c),
                    )
                })
                .await?;
            self.report_untagged().await?;
            // A text that is not UTF-8 (a CAST of a BLOB) fails alone, not the listing.
            Ok(rows
                .iter()
                .filter_map(|r| match r.try_get::<String, _>(0) {
                    Ok(tag) => Some(tag),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %self.file.path(), "a leaf_alloc row's biz_tag is unreadable; skipped");
                        None
                    }
                })
                .collect())
        })
    }

    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let row = self
                .run(|c| {
                    Box::pin(
                        sqlx::query("SELECT 1 FROM leaf_alloc WHERE biz_tag = ?")
                            .bind(tag)
                            .fetch_optional(c),
                    )
                })
                .await?;
            Ok(row.is_some())
        })
    }

    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>> {
        Box::pin(async move {
            // CAST: a row written by hand with a REAL still lists (clamped).
            let rows = self
                .run(|c| {
                    Box::pin(
                        sqlx::query(concat!(
                            "SELECT biz_tag, CAST(max_id AS INTEGER) AS max_id, \
                             CAST(step AS INTEGER) AS step, description, update_time \
                             FROM leaf_alloc WHERE ",
                            text_tag!(),
                            " ORDER BY biz_tag"
                        ))
                        .fetch_all(c),
                    )
                })
                .await?;
            self.report_untagged().await?;
            // A row that does not decode (a tag or description that is not UTF-8) is
            // skipped alone, as in `tags`.
            Ok(rows
                .iter()
                .filter_map(|r| {
                    let row = (|| {
                        Ok::<_, sqlx::Error>(TagRow {
                            tag: r.try_get("biz_tag")?,
                            max_id: r.try_get("max_id")?,
                            step: r.try_get("step")?,
                            description: r.try_get("description")?,
                            update_time: r.try_get("update_time")?,
                        })
                    })();
                    row.map_err(|e| {
                        tracing::warn!(error = %e, path = %self.file.path(), "a leaf_alloc row is unreadable; skipped");
                    })
                    .ok()
                })
                .collect())
        })
    }

    fn create_table(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.run(|c| {
                Box::pin(async move { sqlx::raw_sql(CREATE_TABLE).execute(c).await.map(drop) })
            })
            .await
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
            let inserted = self
                .run(|c| {
                    let (tag, description) = (tag.to_string(), description.to_string());
                    Box::pin(async move {
                        let result = sqlx::query(
                            "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)",
                        )
                        .bind(tag)
                        .bind(start)
                        .bind(step)
                        .bind(description)
                        .execute(c)
                        .await;
                        match result {
                            Ok(_) => Ok(true),
                            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                                Ok(false)
                            }
                            Err(e) => Err(e),
                        }
                    })
                })
                .await?;
            if inserted {
                Ok(())
            } else {
                Err(Error::TagExists { tag: tag.into() })
            }
        })
    }

    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        crate::db::sqlite_fork::check_child()?;
        Ok(Arc::new(SqliteStore::at(self.file.path().to_string())))
    }
}
