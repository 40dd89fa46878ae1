//! Leaf's `leaf_alloc` table on MySQL / MariaDB, with Leaf's own SQL.
//!
//! An allocation runs Leaf's two statements in one transaction: the `UPDATE` takes the
//! row lock, the `SELECT` reads the new `max_id` under it, the commit releases it. A
//! Java Leaf server doing the same against the same row therefore never gets an
//! overlapping range.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, MySql, Row};

use super::{
    bad_row, db_error, redact, validate_start, validate_step, Allocation, SegmentStore, TagRow,
};
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

/// How long the one direct connection attempt that explains a pool time-out may take.
const DIAGNOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a pool acquire may take before a direct attempt runs beside it to learn
/// why. Well under a caller's default wait (1 s): a refused connection or login is
/// known in a few ms, and the pool alone would retry a refusal until its acquire
/// timeout and then say only "timed out". A healthy pool answers far sooner; a busy
/// one makes at most one extra attempt per [`DIAGNOSE_TIMEOUT`] (shared verdict).
const EARLY_PROBE_AFTER: Duration = Duration::from_millis(100);

/// What one direct connection attempt says about a server the pool could not reach.
/// The pool retries a refused connection until its acquire timeout and then reports
/// only "pool timed out"; this recovers why. Shared with the MySQL worker registry.
pub(crate) enum Probe {
    /// The server answers now: the pool was busy, or the server just came back.
    Answers(String),
    /// The attempt failed, with the driver's reason (refused, access denied, …).
    Failed(sqlx::Error),
    /// No answer within [`DIAGNOSE_TIMEOUT`].
    Silent(String),
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Answers(at) => write!(
                f,
                "no free connection to MySQL at {at} in time (all pooled connections busy, \
                 or the server was just unreachable)"
            ),
            Probe::Failed(e) => write!(f, "{e}"),
            Probe::Silent(at) => write!(
                f,
                "cannot connect to MySQL at {at}: no answer within {DIAGNOSE_TIMEOUT:?} \
                 (host down, or a firewall dropping packets?)"
            ),
        }
    }
}

impl Probe {
    /// The cause of a pool time-out this probe explains, when the probe itself did not
    /// fail with a driver error: the pool's `PoolTimedOut`, kind `TimedOut` (the
    /// server was silent, or every connection stayed busy).
    pub(crate) fn timed_out_cause() -> crate::error::Cause {
        crate::error::Cause::sqlx(sqlx::Error::PoolTimedOut)
    }
}

/// One direct connection attempt to the server `options` name, bounded by
/// [`DIAGNOSE_TIMEOUT`].
pub(crate) async fn probe(options: &MySqlConnectOptions) -> Probe {
    let at = format!("{}:{}", options.get_host(), options.get_port());
    match tokio::time::timeout(DIAGNOSE_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            drop(conn.close().await);
            Probe::Answers(at)
        }
        Ok(Err(e)) => Probe::Failed(e),
        Err(_) => Probe::Silent(at),
    }
}

/// Whether a direct attempt's failure is the server refusing (nothing listens, the
/// login or the database refused), which no retry within a caller's wait can change.
fn is_refusal(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        sqlx::Error::Database(_) => true,
        _ => false,
    }
}

/// A shared probe's verdict, kept for [`DIAGNOSE_TIMEOUT`].
enum Verdict {
    /// The server refused (connection, login, database): the error to report.
    Refused(Error),
    /// The server answers, or is silent: the pool's own outcome decides; this is the
    /// error to give if the pool then times out.
    Undecided(Error),
}

/// A `leaf_alloc` table in MySQL or MariaDB.
pub struct MysqlStore {
    url: String,
    options: MySqlConnectOptions,
    pool: std::sync::OnceLock<MySqlPool>,
    /// The last diagnosis of a pool time-out and when it was made: one probe at a time,
    /// its answer shared for [`DIAGNOSE_TIMEOUT`], so a burst of failing callers opens
    /// one extra connection to the server, not one each.
    diagnosis: tokio::sync::Mutex<Option<(std::time::Instant, Verdict)>>,
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
        let normalized = url.replacen("mariadb://", "mysql://", 1);
        if crate::redact::ambiguous_user_info(url) {
            return Err(Error::invalid_url(
                url,
                "the user or password holds a '/', which ends the host part of a URL: \
                 percent-encode it as %2F",
            ));
        }
        let options = MySqlConnectOptions::from_str(&normalized).map_err(|e| {
            Error::invalid_url(
                url,
                format!("{e}; expected mysql://user:password@host:port/database"),
            )
        })?;
        Ok(MysqlStore {
            url: url.to_string(),
            options,
            pool: std::sync::OnceLock::new(),
            diagnosis: tokio::sync::Mutex::new(None),
        })
    }

    fn pool(&self) -> &MySqlPool {
        // Lazy so that building the store does no I/O and needs no runtime context; the
        // first caller runs on the background runtime.
        self.pool.get_or_init(|| {
            MySqlPoolOptions::new()
                .max_connections(4)
                // A down database must fail a refill quickly so callers see the cause
                // within their wait timeout instead of hanging.
                .acquire_timeout(Duration::from_millis(1500))
                .connect_lazy_with(self.options.clone())
        })
    }

    /// A connection from the pool. The pool retries a refused connection until its
    /// acquire timeout and then reports only "pool timed out", losing why; so when the
    /// acquire takes longer than [`EARLY_PROBE_AFTER`], one direct attempt runs beside
    /// it, and a refusal it meets (connection refused, access denied, unknown database)
    /// is returned at once, within a caller's wait, instead of after the pool's
    /// timeout. Silent or answering: the pool's outcome stands.
    async fn conn(&self) -> Result<PoolConnection<MySql>> {
        let acquire = self.pool().acquire();
        tokio::pin!(acquire);
        tokio::select! {
            r = &mut acquire => return self.acquired(r).await,
            _ = tokio::time::sleep(EARLY_PROBE_AFTER) => {}
        }
        tokio::select! {
            r = &mut acquire => self.acquired(r).await,
            verdict = self.diagnose() => match verdict {
                Verdict::Refused(e) => Err(e),
                Verdict::Undecided(_) => self.acquired(acquire.await).await,
            },
        }
    }

    /// The pool's answer as the user sees it (a time-out explained by a probe).
    async fn acquired(
        &self,
        r: std::result::Result<PoolConnection<MySql>, sqlx::Error>,
    ) -> Result<PoolConnection<MySql>> {
        match r {
            Ok(conn) => Ok(conn),
            Err(sqlx::Error::PoolTimedOut) => Err(match self.diagnose().await {
                Verdict::Refused(e) | Verdict::Undecided(e) => e,
            }),
            Err(e) => Err(self.connect_error(e)),
        }
    }

    /// Why no connection could be had, from one direct connection attempt; one at a
    /// time, its verdict shared for [`DIAGNOSE_TIMEOUT`].
    async fn diagnose(&self) -> Verdict {
        let mut last = self.diagnosis.lock().await;
        if let Some((at, verdict)) = &*last {
            if at.elapsed() < DIAGNOSE_TIMEOUT {
                return match verdict {
                    Verdict::Refused(e) => Verdict::Refused(e.copy()),
                    Verdict::Undecided(e) => Verdict::Undecided(e.copy()),
                };
            }
        }
        let (verdict, kept) = match probe(&self.options).await {
            Probe::Failed(e) if is_refusal(&e) => {
                let e = self.connect_error(e);
                (Verdict::Refused(e.copy()), Verdict::Refused(e))
            }
            // A connection cut or reset (a proxy or failover switching over): not a
            // refusal; the pool, still trying, may connect now. Its outcome stands.
            Probe::Failed(e) => {
                let e = self.connect_error(e);
                (Verdict::Undecided(e.copy()), Verdict::Undecided(e))
            }
            other => {
                let e = Error::store_with(other.to_string(), Probe::timed_out_cause());
                (Verdict::Undecided(e.copy()), Verdict::Undecided(e))
            }
        };
        *last = Some((std::time::Instant::now(), kept));
        verdict
    }

    /// A failed connection attempt as the user sees it: a refused login or unknown
    /// database is `AccessDenied`, a network error an outage naming the address; the
    /// driver's error is kept as the source either way.
    fn connect_error(&self, e: sqlx::Error) -> Error {
        match e {
            sqlx::Error::Io(io) => {
                let text = format!(
                    "cannot connect to MySQL at {}:{}: {io}",
                    self.options.get_host(),
                    self.options.get_port()
                );
                Error::store_with(text, crate::error::Cause::sqlx(sqlx::Error::Io(io)))
            }
            other => db_error(other),
        }
    }
}

impl SegmentStore for MysqlStore {
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
            sqlx::raw_sql(CREATE_TABLE)
                .execute(&mut *self.conn().await?)
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
            match result {
                Ok(_) => Ok(()),
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    Err(Error::TagExists { tag: tag.into() })
                }
                Err(e) => Err(match db_error(e) {
                    Error::InvalidTag { reason, .. } => Error::InvalidTag {
                        tag: tag.into(),
                        reason,
                    },
                    other => other,
                }),
            }
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
        let e = crate::snowflake::registry::mysql::MysqlRegistry::new(url, "h", "1").unwrap_err();
        assert!(!e.to_string().contains("4711"), "{e}");
        assert!(MysqlStore::new("mysql://app:4711%2FKq@127.0.0.1:3306/leafid").is_ok());
    }
}
