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
//! because the generator has stopped issuing for good before it asks. While the
//! database is down the generator issues only up to the last bound written here (the
//! lookahead), never on its cache file alone ([`WorkerRegistry::survives_outage`] is
//! false): once the lease lapses, another process may take the row with that bound as
//! its floor.
//!
//! **One live holder per row.** Leaf could assume one process per `ip:port`; a library
//! inside gunicorn or Node `cluster` cannot. A lease lives beside the fork's table (which
//! stays as the fork reads it) in `leafid_worker_lease`: one row per worker id with a
//! random holder token and an expiry by the database's clock (`NOW(3)`), which lasts until
//! the holder's persisted bound has passed plus [`LEASE_GRACE`]. Acquire takes the lease
//! only when it has expired (or its holder is a dead process of this host), then reads
//! `max_timestamp` as the floor. Every renew is one transaction: extend the lease where
//! the token is still ours, then write `max_timestamp`; zero rows in either (lease taken,
//! row deleted) is [`Error::LeaseLost`] and issuing stops. No two holders can both renew,
//! and a new holder's floor is the last bound the previous one persisted.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Row};

use super::host_lock::{host_name, Holder};
use super::{system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
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

/// leafid's lease table: who holds each worker id of `leaf_workerid_alloc`, until when.
const CREATE_LEASE_TABLE: &str = "CREATE TABLE IF NOT EXISTS `leafid_worker_lease` (
  `worker_id` bigint(20) NOT NULL,
  `ip_port` varchar(127) NOT NULL,
  `holder` varchar(64) NOT NULL,
  `holder_info` varchar(255) NOT NULL,
  `expires_at` datetime(3) NOT NULL,
  PRIMARY KEY (`worker_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/// How long a lease outlives its holder's last persisted bound, so a holder whose renew
/// is late keeps its id; a crashed holder's id is free this long after its bound passed.
pub const LEASE_GRACE: Duration = Duration::from_secs(5);

/// How long a lease taken at acquire lasts before the first renew extends it.
const FIRST_TERM: Duration = Duration::from_secs(15);

/// How long a statement waits for a connection: a down database fails start-up fast
/// (and the generator reports the registry unavailable).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(3000);

/// How long one registry call (acquire, renew, release: a few statements) may take once
/// it has a connection. Without it a statement on a connection the network silently
/// dropped waits for the kernel to give up (many minutes), holding the generator's lease
/// state all along: the blocking `next_id` after a blackhole hung that long (issue 12).
pub const CALL_TIMEOUT: Duration = Duration::from_millis(3000);

/// The `leaf_workerid_alloc` registry. Building it parses the URL; it connects at `acquire`.
pub struct MysqlRegistry {
    shown_url: String,
    options: MySqlConnectOptions,
    ip: String,
    port: String,
    pool: std::sync::OnceLock<MySqlPool>,
    /// This registry's lease token (random, per registry).
    token: String,
    /// The database's clock at the last acquire or renew.
    reading: std::sync::Mutex<Option<ClockReading>>,
}

/// By hand: the connect options (and the lease token) must never show.
impl std::fmt::Debug for MysqlRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlRegistry")
            .field("url", &self.shown_url)
            .field("ip_port", &self.ip_port())
            .finish_non_exhaustive()
    }
}

impl MysqlRegistry {
    /// A registry for identity `ip:port` in the database at `url`
    /// (`mysql://user:pass@host:port/db`, without leafid's `ip` / `port` parameters).
    pub fn new(url: &str, ip: impl Into<String>, port: impl Into<String>) -> Result<MysqlRegistry> {
        let normalized = url.replacen("mariadb://", "mysql://", 1);
        if crate::redact::ambiguous_user_info(url) {
            return Err(Error::invalid_url(
                url,
                "the user or password holds a '/', which ends the host part of a URL: \
                 percent-encode it as %2F",
            ));
        }
        let options = MySqlConnectOptions::from_str(&normalized)
            // Leases and clock readings are compared by the database's clock: UTC always,
            // whatever the URL or the server says, so DST never moves them.
            .map(|o| o.timezone(Some("+00:00".to_string())))
            .map_err(|e| {
                Error::invalid_url(
                    url,
                    format!("{e}; expected mysql://user:password@host:port/database?port=P"),
                )
            })?;
        Ok(MysqlRegistry {
            shown_url: crate::redact::url(url),
            options,
            ip: ip.into(),
            port: port.into(),
            pool: std::sync::OnceLock::new(),
            token: format!("{:032x}", fastrand::u128(..)),
            reading: std::sync::Mutex::new(None),
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

    /// A connection from the pool (waiting at most [`ACQUIRE_TIMEOUT`]). When the pool
    /// only says "timed out", one direct attempt tells why (refused, silent, access
    /// denied), so the message keeps the root cause.
    async fn conn(&self) -> Result<PoolConnection<MySql>> {
        match self.pool().acquire().await {
            Ok(conn) => Ok(conn),
            Err(sqlx::Error::PoolTimedOut) => {
                use crate::segment::store::mysql::{probe, Probe};
                Err(match probe(&self.options).await {
                    Probe::Failed(e) => self.db_err("connect", e),
                    other => Error::registry(format!("MySQL {}: connect: {other}", self.shown_url)),
                })
            }
            Err(e) => Err(self.db_err("connect", e)),
        }
    }

    /// For a call that passed [`CALL_TIMEOUT`]: closes `conn` rather than returning it
    /// to the pool (sqlx would ping it on return, and a ping over a silent network
    /// waits as long as the statement did) and says what timed out.
    fn timed_out(&self, conn: &mut PoolConnection<MySql>, what: &str) -> Error {
        conn.close_on_drop();
        Error::registry(format!(
            "MySQL {}: {what}: no answer within {CALL_TIMEOUT:?}",
            self.shown_url
        ))
    }

    fn db_err(&self, what: &str, e: sqlx::Error) -> Error {
        Error::registry(format!("MySQL {}: {what}: {e}", self.shown_url))
    }

    async fn select(&self, conn: &mut MySqlConnection) -> Result<Option<(i64, Option<i64>)>> {
        let row =
            sqlx::query("SELECT id, max_timestamp FROM leaf_workerid_alloc WHERE ip_port = ?")
                .bind(self.ip_port())
                .fetch_optional(&mut *conn)
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

    async fn take(&self, conn: &mut MySqlConnection, max_worker_id: u32) -> Result<Lease> {
        sqlx::raw_sql(CREATE_TABLE)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.db_err("create table leaf_workerid_alloc", e))?;
        sqlx::raw_sql(CREATE_LEASE_TABLE)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.db_err("create table leafid_worker_lease", e))?;
        let (id, _) = match self.select(conn).await? {
            Some(found) => found,
            None => {
                // The database's clock, not ours: a local clock far ahead (refused by the
                // skew check right after) must not become the floor.
                let inserted = sqlx::query(
                    "INSERT INTO leaf_workerid_alloc (ip_port, ip, port, max_timestamp, create_time, update_time) \
                     VALUES (?, ?, ?, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), NOW(), NOW())",
                )
                .bind(self.ip_port())
                .bind(&self.ip)
                .bind(&self.port)
                .execute(&mut *conn)
                .await;
                match inserted {
                    Ok(done) => (done.last_insert_id() as i64, None),
                    // A concurrent start inserted this ip_port first: its row is ours too.
                    Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                        self.select(conn).await?.ok_or_else(|| {
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
                    "MySQL {} table leaf_workerid_alloc (row id {id} for {ip_port}; AUTO_INCREMENT never reuses \
                     an id, so deleting rows frees nothing: hand a retired identity's row to this one with \
                     UPDATE leaf_workerid_alloc SET ip_port='{ip_port}', ip='{ip}', port='{port}' WHERE ip_port='<retired ip:port>' \
                     (its max_timestamp stays as the floor), or use zookeeper-recycle:// whose ids come back)",
                    self.shown_url,
                    ip_port = self.ip_port(),
                    ip = self.ip,
                    port = self.port,
                ),
                size: max_worker_id + 1,
            });
        }
        self.take_lease(conn, id).await?;
        // The floor is read after the lease is ours: any earlier holder's last renew
        // committed before, and no later one can commit.
        let stored = match self.select(conn).await? {
            Some((row_id, ts)) if row_id == id => ts,
            _ => {
                let _ = self.drop_lease(conn, id).await;
                return Err(Error::LeaseLost {
                    worker_id: id as u32,
                    cause: format!(
                        "the leaf_workerid_alloc row of {} changed while it was being taken",
                        self.ip_port()
                    ),
                });
            }
        };
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

    /// The database's clock in ms since the Unix epoch, as a [`ClockReading`].
    async fn read_clock<'c, E>(&self, conn: E) -> Result<ClockReading>
    where
        E: sqlx::MySqlExecutor<'c>,
    {
        let before = system_now_ms();
        let row = sqlx::query("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS now_ms")
            .fetch_one(conn)
            .await
            .map_err(|e| self.db_err("read NOW(3)", e))?;
        let now: i64 = row
            .try_get("now_ms")
            .map_err(|e| self.db_err("read NOW(3)", e))?;
        Ok(ClockReading {
            registry_ms: now,
            local_before_ms: before,
            local_after_ms: system_now_ms(),
            source: format!("MySQL {} NOW(3)", self.shown_url),
        })
    }

    fn keep_reading(&self, reading: ClockReading) {
        *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(reading);
    }

    /// Takes the lease on worker `id`, or fails with `WorkerIdInUse` naming its holder.
    async fn take_lease(&self, conn: &mut MySqlConnection, id: i64) -> Result<()> {
        let me = serde_json::to_string(&Holder::this_process()).expect("a holder serializes");
        sqlx::query(
            "INSERT IGNORE INTO leafid_worker_lease (worker_id, ip_port, holder, holder_info, expires_at) \
             VALUES (?, ?, '', '', '1970-01-02 00:00:00')",
        )
        .bind(id)
        .bind(self.ip_port())
        .execute(&mut *conn)
        .await
        .map_err(|e| self.db_err("insert into leafid_worker_lease", e))?;
        let taken = sqlx::query(
            "UPDATE leafid_worker_lease SET holder = ?, holder_info = ?, ip_port = ?, \
             expires_at = NOW(3) + INTERVAL ? MICROSECOND \
             WHERE worker_id = ? AND (expires_at < NOW(3) OR holder = '')",
        )
        .bind(&self.token)
        .bind(&me)
        .bind(self.ip_port())
        .bind(FIRST_TERM.as_micros() as i64)
        .bind(id)
        .execute(&mut *conn)
        .await
        .map_err(|e| self.db_err("take leafid_worker_lease", e))?;
        if taken.rows_affected() == 1 {
            let reading = self.read_clock(&mut *conn).await?;
            self.keep_reading(reading);
            return Ok(());
        }
        let row = sqlx::query(
            "SELECT holder, holder_info, CAST(TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) / 1000 AS SIGNED) AS left_ms \
             FROM leafid_worker_lease WHERE worker_id = ?",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| self.db_err("read leafid_worker_lease", e))?;
        let (token, info, left_ms) = match row {
            Some(r) => (
                r.try_get::<String, _>("holder").unwrap_or_default(),
                r.try_get::<String, _>("holder_info").unwrap_or_default(),
                r.try_get::<i64, _>("left_ms").unwrap_or(0),
            ),
            None => (String::new(), String::new(), 0),
        };
        let holder: Option<Holder> = serde_json::from_str(&info).ok();
        // A holder of this host that has died (SIGKILL, crash): its lease is stale now.
        if let Some(h) = &holder {
            if h.host == host_name() && !super::host_lock::pid_alive(h.pid) && !token.is_empty() {
                let stolen = sqlx::query(
                    "UPDATE leafid_worker_lease SET holder = ?, holder_info = ?, \
                     expires_at = NOW(3) + INTERVAL ? MICROSECOND WHERE worker_id = ? AND holder = ?",
                )
                .bind(&self.token)
                .bind(&me)
                .bind(FIRST_TERM.as_micros() as i64)
                .bind(id)
                .bind(&token)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.db_err("take leafid_worker_lease", e))?;
                if stolen.rows_affected() == 1 {
                    tracing::info!(
                        worker_id = id,
                        dead_pid = h.pid,
                        "took over the lease of a process of this host that has exited"
                    );
                    let reading = self.read_clock(&mut *conn).await?;
                    self.keep_reading(reading);
                    return Ok(());
                }
            }
        }
        let who = match &holder {
            Some(h) => h.to_string(),
            None => "another process".into(),
        };
        Err(Error::WorkerIdInUse {
            identity: format!(
                "MySQL {} leaf_workerid_alloc row {id} ({})",
                self.shown_url,
                self.ip_port()
            ),
            worker_id: u32::try_from(id).ok(),
            holder: format!("{who}, whose lease runs {left_ms} ms more unless renewed"),
            advice: super::IN_USE_ADVICE.into(),
        })
    }

    /// Ends this registry's lease on worker `id` (if it still holds it).
    async fn drop_lease(&self, conn: &mut MySqlConnection, id: i64) -> Result<()> {
        sqlx::query(
            "UPDATE leafid_worker_lease SET holder = '', expires_at = '1970-01-02 00:00:00' \
             WHERE worker_id = ? AND holder = ?",
        )
        .bind(id)
        .bind(&self.token)
        .execute(&mut *conn)
        .await
        .map_err(|e| self.db_err("release leafid_worker_lease", e))?;
        Ok(())
    }

    async fn write(&self, conn: &mut MySqlConnection, lease: &Lease, bound_ms: i64) -> Result<()> {
        let lost = |cause: String| Error::LeaseLost {
            worker_id: lease.worker_id,
            cause,
        };
        // The lease lasts until the bound has passed, plus the grace.
        let term_us = (bound_ms - system_now_ms())
            .saturating_add(LEASE_GRACE.as_millis() as i64)
            .saturating_mul(1000);
        let mut tx = conn.begin().await.map_err(|e| self.db_err("begin", e))?;
        let extended = sqlx::query(
            "UPDATE leafid_worker_lease SET expires_at = NOW(3) + INTERVAL ? MICROSECOND \
             WHERE worker_id = ? AND holder = ?",
        )
        .bind(term_us)
        .bind(lease.worker_id as i64)
        .bind(&self.token)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.db_err("renew leafid_worker_lease", e))?;
        if extended.rows_affected() == 0 {
            return Err(lost(format!(
                "the lease in leafid_worker_lease (MySQL {}) was taken by another process or deleted",
                self.shown_url
            )));
        }
        // `ip_port` in the WHERE: a worker id from the cache file never overwrites
        // another identity's row. Zero rows: the row was deleted or handed to another
        // identity, so this id is no longer ours.
        let written = sqlx::query(
            "UPDATE leaf_workerid_alloc SET max_timestamp = ?, update_time = NOW() WHERE id = ? AND ip_port = ?",
        )
        .bind(bound_ms)
        .bind(lease.worker_id as i64)
        .bind(self.ip_port())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.db_err("update max_timestamp", e))?;
        if written.rows_affected() == 0 {
            return Err(lost(format!(
                "row id={} ip_port={} of leaf_workerid_alloc (MySQL {}) is gone or belongs to another identity",
                lease.worker_id,
                self.ip_port(),
                self.shown_url
            )));
        }
        let reading = self.read_clock(&mut *tx).await?;
        tx.commit().await.map_err(|e| self.db_err("commit", e))?;
        self.keep_reading(reading);
        Ok(())
    }
}

impl WorkerRegistry for MysqlRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // A row cannot be lost, so the limit is never lowered.
        Box::pin(async move {
            let mut conn = self.conn().await?;
            let r = tokio::time::timeout(CALL_TIMEOUT, self.take(&mut conn, max_worker_id)).await;
            r.unwrap_or_else(|_| Err(self.timed_out(&mut conn, "acquire")))
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            let r =
                tokio::time::timeout(CALL_TIMEOUT, self.write(&mut conn, lease, bound_ms)).await;
            r.unwrap_or_else(|_| Err(self.timed_out(&mut conn, "renew")))
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        // The row stays this identity's; the lease ends. The pool stays open (and
        // closes when the registry is dropped): a re-acquire after a lost lease uses it.
        Box::pin(async move {
            if self.pool.get().is_some() {
                let ended = async {
                    let mut conn = self.conn().await?;
                    let id = lease.worker_id as i64;
                    let r =
                        tokio::time::timeout(CALL_TIMEOUT, self.drop_lease(&mut conn, id)).await;
                    r.unwrap_or_else(|_| Err(self.timed_out(&mut conn, "release")))
                };
                if let Err(e) = ended.await {
                    tracing::warn!(error = %e, "cannot end the worker-id lease; it lapses on its own");
                }
            }
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        // No: once this holder's lease has lapsed (it cannot renew), another process may
        // take the row with the last bound written HERE as its floor; a bound kept only
        // in the local cache file would let this holder issue above it.
        false
    }

    fn host_identity(&self) -> Option<String> {
        Some(format!(
            "mysql/{}:{}/{}/{}",
            self.options.get_host(),
            self.options.get_port(),
            self.options.get_database().unwrap_or(""),
            self.ip_port()
        ))
    }

    fn take_clock_reading(&self) -> Option<ClockReading> {
        self.reading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_errors_never_show_the_password() {
        let r = MysqlRegistry::new(
            "mysql://leaf:s3cr3t%40x@127.0.0.1:3306/leaf",
            "10.0.0.1",
            "80",
        )
        .unwrap();
        let shown = format!("{r:?} {}", r.describe());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        let err = MysqlRegistry::new("mysql://leaf:s3cr3t@127.0.0.1:99999/leaf", "10.0.0.1", "80")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cr3t"), "{err}");
    }
}
