//! The embedded default: `leaf_alloc` in a SQLite file.
//!
//! An allocation is a single `UPDATE … RETURNING` statement, which SQLite runs under
//! its database write lock, so several processes on one host sharing the file never
//! receive overlapping ranges. WAL mode and a busy timeout let them queue instead of
//! failing.

use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::Row;

use super::{db_error, Allocation, SegmentStore, TagRow};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leaf_alloc (
  biz_tag TEXT NOT NULL DEFAULT '' PRIMARY KEY,
  max_id INTEGER NOT NULL DEFAULT 1,
  step INTEGER NOT NULL,
  description TEXT DEFAULT NULL,
  update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

/// A `leaf_alloc` table in a SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    path: String,
    pool: std::sync::OnceLock<SqlitePool>,
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
            return Err(Error::InvalidUrl {
                url: url.into(),
                reason:
                    "expected sqlite://path/to/file.db (a file shared by the processes of one host)"
                        .into(),
            });
        }
        Ok(SqliteStore {
            path: path.to_string(),
            pool: std::sync::OnceLock::new(),
        })
    }

    fn pool(&self) -> &SqlitePool {
        self.pool.get_or_init(|| {
            let options = SqliteConnectOptions::new()
                .filename(&self.path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                // Other processes hold the write lock only for one statement; wait for it.
                .busy_timeout(Duration::from_secs(10));
            SqlitePoolOptions::new()
                .max_connections(2)
                .acquire_timeout(Duration::from_secs(10))
                .connect_lazy_with(options)
        })
    }
}

/// Runs `op` again while SQLite reports the file busy. The busy timeout covers most
/// waits, but SQLite returns `SQLITE_BUSY` at once in a few cases (two processes opening
/// a new file and switching it to WAL together, a read transaction that must become a
/// write one); those are retried here for up to the same 10 s.
async fn retry_busy<T, F, Fut>(mut op: F) -> std::result::Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut pause = Duration::from_millis(2);
    loop {
        match op().await {
            Err(sqlx::Error::Database(db))
                // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with any extended code bits.
                if db
                    .code()
                    .and_then(|c| c.parse::<i32>().ok())
                    .is_some_and(|c| matches!(c & 0xff, 5 | 6))
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

impl SegmentStore for SqliteStore {
    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, Result<Allocation>> {
        Box::pin(async move {
            let row = retry_busy(|| {
                match step {
                None => sqlx::query(
                    "UPDATE leaf_alloc SET max_id = max_id + step, update_time = CURRENT_TIMESTAMP \
                     WHERE biz_tag = ? RETURNING max_id, step",
                )
                .bind(tag)
                .fetch_optional(self.pool()),
                Some(step) => sqlx::query(
                    "UPDATE leaf_alloc SET max_id = max_id + ?, update_time = CURRENT_TIMESTAMP \
                     WHERE biz_tag = ? RETURNING max_id, step",
                )
                .bind(step)
                .bind(tag)
                .fetch_optional(self.pool()),
            }
            })
            .await
            .map_err(db_error)?;
            let row = row.ok_or_else(|| Error::TagNotFound { tag: tag.into() })?;
            Ok(Allocation {
                max_id: row.try_get("max_id").map_err(db_error)?,
                step: row.try_get("step").map_err(db_error)?,
            })
        })
    }

    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let rows =
                retry_busy(|| sqlx::query("SELECT biz_tag FROM leaf_alloc").fetch_all(self.pool()))
                    .await
                    .map_err(db_error)?;
            rows.iter()
                .map(|r| r.try_get::<String, _>(0).map_err(db_error))
                .collect()
        })
    }

    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc ORDER BY biz_tag",
            )
            .fetch_all(self.pool())
            .await
            .map_err(db_error)?;
            rows.iter()
                .map(|r| {
                    Ok(TagRow {
                        tag: r.try_get("biz_tag")?,
                        max_id: r.try_get("max_id")?,
                        step: r.try_get("step")?,
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
            retry_busy(|| sqlx::raw_sql(CREATE_TABLE).execute(self.pool()))
                .await
                .map_err(db_error)?;
            Ok(())
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
            let result = retry_busy(|| {
                sqlx::query(
                    "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)",
                )
                .bind(tag)
                .bind(start)
                .bind(step)
                .bind(description)
                .execute(self.pool())
            })
            .await;
            match result {
                Ok(_) => Ok(()),
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    Err(Error::TagExists { tag: tag.into() })
                }
                Err(e) => Err(db_error(e)),
            }
        })
    }

    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        Ok(Arc::new(SqliteStore {
            path: self.path.clone(),
            pool: std::sync::OnceLock::new(),
        }))
    }
}
