//! `mysql` — the Leaf fork's `leaf_workerid_alloc` table: one row per `ip:port`, the
//! row's AUTO_INCREMENT `id` is the worker id, `max_timestamp` the last bound.
//!
//! Get-or-insert is race-free: select by `ip_port`; when absent, a plain insert; when a
//! concurrent process inserted the same `ip_port` first (unique key `idx_ipport`), select
//! again and take its row. (`INSERT IGNORE` / `ON DUPLICATE KEY` would burn an
//! AUTO_INCREMENT value, i.e. a worker id, on every start.) Ids are never reused and
//! never wrapped: a row id past the layout's largest worker id is a clear error.
//!
//! Every heartbeat writes the generator's bound to `max_timestamp`; only the final
//! renew at close writes a smaller value, the exact last timestamp issued, which is safe
//! because the generator has stopped issuing for good before it asks. The row stays
//! this identity's while the database is down, so the generator may continue on its
//! cache file ([`WorkerRegistry::survives_outage`] is true).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::Row;

use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

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

/// How long a statement waits for a connection: a down database fails start-up fast
/// (and the generator falls back to its cache file).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(3000);

/// The `leaf_workerid_alloc` registry. Building it parses the URL; it connects at `acquire`.
#[derive(Debug)]
pub struct MysqlRegistry {
    shown_url: String,
    options: MySqlConnectOptions,
    ip: String,
    port: String,
    pool: std::sync::OnceLock<MySqlPool>,
}

fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

impl MysqlRegistry {
    /// A registry for identity `ip:port` in the database at `url`
    /// (`mysql://user:pass@host:port/db`, without leafid's `ip` / `port` parameters).
    pub fn new(url: &str, ip: impl Into<String>, port: impl Into<String>) -> Result<MysqlRegistry> {
        let normalized = url.replacen("mariadb://", "mysql://", 1);
        let options =
            MySqlConnectOptions::from_str(&normalized).map_err(|e| Error::InvalidUrl {
                url: redact(url),
                reason: format!("{e}; expected mysql://user:password@host:port/database?port=P"),
            })?;
        Ok(MysqlRegistry {
            shown_url: redact(url),
            options,
            ip: ip.into(),
            port: port.into(),
            pool: std::sync::OnceLock::new(),
        })
    }

    fn ip_port(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    fn pool(&self) -> &MySqlPool {
        // Lazy: no I/O and no runtime needed until the first statement, which runs on
        // the background runtime.
        self.pool.get_or_init(|| {
            MySqlPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_lazy_with(self.options.clone())
        })
    }

    fn db_err(&self, what: &str, e: sqlx::Error) -> Error {
        Error::registry(format!("MySQL {}: {what}: {e}", self.shown_url))
    }

    async fn select(&self) -> Result<Option<(i64, Option<i64>)>> {
        let row =
            sqlx::query("SELECT id, max_timestamp FROM leaf_workerid_alloc WHERE ip_port = ?")
                .bind(self.ip_port())
                .fetch_optional(self.pool())
                .await
                .map_err(|e| self.db_err("select leaf_workerid_alloc", e))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let id: i64 = r.try_get("id").map_err(|e| self.db_err("read id", e))?;
                let ts: Option<i64> = r
                    .try_get("max_timestamp")
                    .map_err(|e| self.db_err("read max_timestamp", e))?;
                Ok(Some((id, ts)))
            }
        }
    }

    async fn take(&self, max_worker_id: u32) -> Result<Lease> {
        sqlx::raw_sql(CREATE_TABLE)
            .execute(self.pool())
            .await
            .map_err(|e| self.db_err("create table leaf_workerid_alloc", e))?;
        let (id, stored) = match self.select().await? {
            Some(found) => found,
            None => {
                let now = super::zookeeper::now_ms();
                let inserted = sqlx::query(
                    "INSERT INTO leaf_workerid_alloc (ip_port, ip, port, max_timestamp, create_time, update_time) \
                     VALUES (?, ?, ?, ?, NOW(), NOW())",
                )
                .bind(self.ip_port())
                .bind(&self.ip)
                .bind(&self.port)
                .bind(now)
                .execute(self.pool())
                .await;
                match inserted {
                    Ok(done) => (done.last_insert_id() as i64, Some(now)),
                    // A concurrent start inserted this ip_port first: its row is ours too.
                    Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                        self.select().await?.ok_or_else(|| {
                            Error::registry(format!(
                                "MySQL {}: row for {} vanished right after a duplicate-key insert",
                                self.shown_url,
                                self.ip_port()
                            ))
                        })?
                    }
                    Err(e) => return Err(self.db_err("insert into leaf_workerid_alloc", e)),
                }
            }
        };
        if id < 0 || id > max_worker_id as i64 {
            return Err(Error::WorkerIdExhausted {
                pool: format!(
                    "MySQL {} table leaf_workerid_alloc (row id {id} for {}; rows are never reused and leafid \
                     never wraps ids: delete rows of retired ip:port identities, reuse identities, or add worker bits)",
                    self.shown_url,
                    self.ip_port()
                ),
                size: max_worker_id + 1,
            });
        }
        // A NULL max_timestamp (a row written by hand) means no bound was ever recorded.
        let floor = stored.unwrap_or(i64::MIN);
        tracing::info!(worker_id = id, ip_port = %self.ip_port(), floor, "worker id from leaf_workerid_alloc");
        Ok(Lease {
            worker_id: id as u32,
            floor_ms: floor,
            location: format!(
                "mysql {} leaf_workerid_alloc id={id} ({})",
                self.shown_url,
                self.ip_port()
            ),
        })
    }

    async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        // `ip_port` in the WHERE: a worker id from the cache file never overwrites
        // another identity's row.
        sqlx::query(
            "UPDATE leaf_workerid_alloc SET max_timestamp = ? WHERE id = ? AND ip_port = ?",
        )
        .bind(bound_ms)
        .bind(lease.worker_id as i64)
        .bind(self.ip_port())
        .execute(self.pool())
        .await
        .map_err(|e| self.db_err("update max_timestamp", e))?;
        Ok(())
    }
}

impl WorkerRegistry for MysqlRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // A row cannot be lost, so the limit is never lowered.
        Box::pin(self.take(max_worker_id))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write(lease, bound_ms))
    }

    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        // The row stays this identity's; only the connections close.
        Box::pin(async move {
            if let Some(pool) = self.pool.get() {
                pool.close().await;
            }
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "mysql-{}:{}-{}-{}",
            self.options.get_host(),
            self.options.get_port(),
            self.options.get_database().unwrap_or(""),
            self.ip_port()
        )
    }
}
