//! `mysql` — the Leaf fork's `leaf_workerid_alloc` table: one row per `ip:port`, the
//! row's AUTO_INCREMENT `id` is the worker id, `max_timestamp` the time the row's holder
//! last reported. Beside the fork's Java servers (`leaf.snowflake.mode=mysql`) it follows
//! the fencing rule of [`fence`]:
//!
//! Get-or-insert is race-free: select by `ip_port`; when absent, a plain insert; when a
//! concurrent process inserted the same `ip_port` first (unique key `idx_ipport`), select
//! again and take its row. (`INSERT IGNORE` / `ON DUPLICATE KEY` would burn an
//! AUTO_INCREMENT value, i.e. a worker id, on every start.) Ids are never reused and
//! never wrapped: a row id past the layout's largest worker id is a clear error.
//!
//! **One live holder per row among leafids.** A lease lives beside the fork's table
//! (which stays as the fork reads it) in `leafid_worker_lease` (`schema.rs`): one row per
//! worker id with a random holder token and an expiry by the database's clock (`NOW(3)`),
//! [`LEASE_TERM`] past the last renew (or to the bound, when nearer). Acquire takes the
//! lease only when it has expired, was released, or its holder is a dead process of
//! this host (exited, or not reaped yet: the generator holds this host's identity
//! lock, so no live generator here holds it). Every renew is one transaction: extend
//! the lease where the token is still ours, then write `max_timestamp`; zero rows in
//! either is [`Error::LeaseLost`]. The lease need not last to the bound: the next
//! holder floors at `max(max_timestamp, bound_ms)`, read once its take committed, which
//! is the last bound the old holder can have persisted (its renews are conditional on
//! its token); the old holder's limit never passes that bound. So a crashed holder's
//! id is free [`LEASE_TERM`] after its last renew, not a 65 s lookahead later.
//!
//! **The fork's server, which knows nothing of leases** (`lease.rs`, `watch.rs`):
//! - Rule 4: every heartbeat's bound (the clock plus the look-ahead) goes into the lease
//!   row's `bound_ms`; `max_timestamp` gets only [`fence::foreign_timestamp`] of it,
//!   never a future time (a fork server reading one falls back to its local
//!   `workerID.properties` and never writes again, invisible). A newcomer's floor is
//!   `max(max_timestamp, bound_ms)`. The final renew at close writes the exact last
//!   timestamp issued to both.
//! - Rule 1: the write of `max_timestamp` is conditional on the value this holder last
//!   wrote (`max_timestamp <=> ?`); zero rows is `LeaseLost` (sqlx counts matched rows,
//!   see `MysqlRegistry::write`).
//! - Rule 3: a newcomer watches `max_timestamp` before its first id only where a fork
//!   server could be live on the row and still unseen: never on a row it has just
//!   inserted (a fork server inserts its row before it issues); for
//!   [`fence::TAKEOVER_WATCH_AFTER_RELEASE`] (1.5 s) when the value there is a leafid's
//!   last (a fork server can only have started since, and uploads 1 s after its
//!   start); otherwise until [`fence::TAKEOVER_WATCH`] after the fork's own stamp, at
//!   least 1.5 s and at most 3.5 s. A change is `WorkerIdInUse`.
//! - Rule 2, at once: a live holder's poll task reads the row every `watch::POLL` and
//!   lowers the generator's limit when `max_timestamp` holds a value it did not write,
//!   the row is deleted or handed to another `ip_port`, or the lease row is deleted or
//!   rewritten. A fork server started on a live holder's row issues from its start and
//!   writes only [`fence::FOREIGN_FIRST_UPLOAD`]
//!   later: both issue until that write is seen (the residual window, measured in
//!   `tests/registry/mysql/beside_fork.rs`). A table that no longer exists (`ER_NO_SUCH_TABLE`, a
//!   restore from a dump) is the same: `LeaseLost` in the poll and in the renew, never
//!   "unavailable" and never ignored.
//! - Rule 5: a holder cut off from the database keeps issuing up to the bound the lease
//!   row holds and stops there; a failed poll changes nothing. A newcomer never waits
//!   for it: it floors at the row's bound, or, finding no `leafid_worker_lease` row for
//!   its worker id (a wiped table, or a dump older than a live holder restored, which
//!   restarts AUTO_INCREMENT at that holder's id), at the database's clock plus the
//!   reach (`generator/session.rs`), above any bound a cut-off holder can have.
//!
//! While the database is down the generator issues only up to the last bound written
//! here, never on its cache file alone ([`WorkerRegistry::survives_outage`] is false).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlPool};
use sqlx::pool::PoolConnection;

use super::{fence, system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::db::probe::{probe, Probe};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

mod lease;
mod schema;
mod watch;

/// How long a lease runs past its holder's last renew (or to its bound plus 5 s, when
/// nearer); the same as the pools' (see the module doc).
pub use super::pool::LEASE_TERM;
use watch::Written;

/// The privileges the registry's database user needs, as an `AccessDenied` names them
/// (docs/errors.md shows the `GRANT` statements).
const GRANTS: &str = "SELECT, INSERT, UPDATE on leaf_workerid_alloc and leafid_worker_lease \
     (and CREATE or ALTER, only while a table or a column is missing)";

/// How long a lease taken at acquire lasts before the first renew extends it.
const FIRST_TERM: Duration = LEASE_TERM;

/// How long a statement waits for a connection: a down database fails start-up fast
/// (and the generator reports the registry unavailable).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(3000);

/// How long one registry call (acquire, renew, release: a few statements) may take once
/// it has a connection. Without it a statement on a connection the network silently
/// dropped waits for the kernel to give up (many minutes), holding the generator's lease
/// state all along: the blocking `next_id` after a blackhole hung that long (issue 12).
pub const CALL_TIMEOUT: Duration = Duration::from_millis(3000);

/// The lease this registry holds: what its renews may find in `max_timestamp`, and the
/// task that polls for another writer.
struct Held {
    worker_id: u32,
    written: Arc<Mutex<Written>>,
    poll: tokio::task::JoinHandle<()>,
}

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
    /// The lease held now, if any.
    held: Mutex<Option<Held>>,
}

impl Drop for MysqlRegistry {
    fn drop(&mut self) {
        self.stop_poll();
    }
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
        // Leases and clock readings are compared by the database's clock: UTC always,
        // whatever the URL or the server says, so DST never moves them.
        let options = crate::db::mysql::connect_options(
            url,
            "mysql://user:password@host:port/database?port=P",
        )?
        .timezone(Some("+00:00".to_string()));
        Ok(MysqlRegistry {
            shown_url: crate::redact::url(url),
            options,
            ip: ip.into(),
            port: port.into(),
            pool: std::sync::OnceLock::new(),
            token: format!("{:032x}", fastrand::u128(..)),
            reading: std::sync::Mutex::new(None),
            held: Mutex::new(None),
        })
    }

    pub(super) fn ip_port(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub(super) fn pool(&self) -> &MySqlPool {
        // Lazy: no I/O and no runtime needed until the first statement, which runs on
        // the background runtime.
        self.pool
            .get_or_init(|| crate::db::mysql::lazy_pool(&self.options, 2, ACQUIRE_TIMEOUT))
    }

    /// A connection from the pool (waiting at most [`ACQUIRE_TIMEOUT`]). When the pool
    /// only says "timed out", one direct attempt tells why (refused, silent, access
    /// denied), so the message keeps the root cause.
    async fn conn(&self) -> Result<PoolConnection<MySql>> {
        match self.pool().acquire().await {
            Ok(conn) => Ok(conn),
            Err(sqlx::Error::PoolTimedOut) => {
                let at = crate::db::mysql::address(&self.options);
                Err(match probe(&self.options, at).await {
                    Probe::Failed(e) => self.db_err("connect", e),
                    other => Error::registry_with(
                        format!("MySQL {}: connect: {other}", self.shown_url),
                        Probe::timed_out_cause(),
                    ),
                })
            }
            Err(e) => Err(self.db_err("connect", e)),
        }
    }

    /// For a call that passed [`CALL_TIMEOUT`]: closes `conn` rather than returning it
    /// to the pool (sqlx would ping it on return, and a ping over a silent network
    /// waits as long as the statement did) and says what timed out.
    pub(super) fn timed_out(&self, conn: &mut PoolConnection<MySql>, what: &str) -> Error {
        conn.close_on_drop();
        let text = format!(
            "MySQL {}: {what}: no answer within {CALL_TIMEOUT:?}",
            self.shown_url
        );
        Error::registry_with(&text, crate::error::Cause::timed_out(text.clone()))
    }

    /// A driver error of `what` as the user sees it, the driver's error kept as the
    /// source: a refusal (login, grants, unknown database) is `AccessDenied`, since
    /// retrying cannot help; anything else `RegistryUnavailable`.
    pub(super) fn db_err(&self, what: &str, e: sqlx::Error) -> Error {
        let text = format!("MySQL {}: {what}: {e}", self.shown_url);
        match crate::db::refusal::refusal(&e) {
            Some(refusal) => refusal.error(text, GRANTS, crate::error::Cause::sqlx(e)),
            None => Error::registry_with(text, crate::error::Cause::sqlx(e)),
        }
    }

    /// The database's clock in ms since the Unix epoch, as a [`ClockReading`].
    pub(super) async fn read_clock<'c, E>(&self, conn: E) -> Result<ClockReading>
    where
        E: sqlx::MySqlExecutor<'c>,
    {
        let before = system_now_ms();
        let now = crate::db::mysql::now_ms(conn)
            .await
            .map_err(|e| self.db_err("read NOW(3)", e))?;
        Ok(ClockReading {
            registry_ms: now,
            local_before_ms: before,
            local_after_ms: system_now_ms(),
            source: format!("MySQL {} NOW(3)", self.shown_url),
        })
    }

    pub(super) fn keep_reading(&self, reading: ClockReading) {
        *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(reading);
    }

    /// Ends the poll task of the lease held, if any.
    fn stop_poll(&self) {
        if let Some(h) = self.held.lock().unwrap_or_else(|p| p.into_inner()).take() {
            h.poll.abort();
        }
    }

    /// What renews of worker `id` may find in `max_timestamp`, when this registry holds it.
    fn written(&self, id: u32) -> Option<Arc<Mutex<Written>>> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.as_ref()
            .filter(|h| h.worker_id == id)
            .map(|h| h.written.clone())
    }

    async fn acquire_inner(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
        self.stop_poll();
        let taken = {
            let mut conn = self.conn().await?;
            let r = tokio::time::timeout(CALL_TIMEOUT, self.take(&mut conn, max_worker_id)).await;
            r.unwrap_or_else(|_| Err(self.timed_out(&mut conn, "acquire")))?
        };
        let id = taken.lease.worker_id as i64;
        if let Some(watch) = taken.watch {
            // Outside the call timeout: the watch is longer than one call, and its reads
            // are bounded one by one. The lease (FIRST_TERM) outlasts it.
            if let Err(e) = self.watch_takeover(id, taken.seen, watch).await {
                self.end_lease(id).await;
                return Err(e);
            }
        }
        let written = Written::new(taken.seen);
        let poll = crate::runtime::spawn(watch::poll_held(watch::Poll {
            pool: self.pool().clone(),
            worker_id: taken.lease.worker_id,
            ip_port: self.ip_port(),
            token: self.token.clone(),
            shown_url: self.shown_url.clone(),
            written: written.clone(),
            limit,
        }));
        let previous = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(Held {
                worker_id: taken.lease.worker_id,
                written,
                poll,
            });
        if let Some(p) = previous {
            p.poll.abort();
        }
        Ok(taken.lease)
    }

    /// Ends this registry's lease on worker `id`, bounded; a failure only logs (the
    /// lease lapses on its own).
    async fn end_lease(&self, id: i64) {
        let ended = async {
            let mut conn = self.conn().await?;
            let r = tokio::time::timeout(CALL_TIMEOUT, self.drop_lease(&mut conn, id)).await;
            r.unwrap_or_else(|_| Err(self.timed_out(&mut conn, "release")))
        };
        if let Err(e) = ended.await {
            tracing::warn!(error = %e, "cannot end the worker-id lease; it lapses on its own");
        }
    }
}

impl WorkerRegistry for MysqlRegistry {
    fn acquire(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // `limit` is kept by the poll task, which lowers it the moment another writer
        // shows up (fence rule 2).
        Box::pin(self.acquire_inner(max_worker_id, limit))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let Some(written) = self.written(lease.worker_id) else {
                return Err(fence::lost(
                    lease.worker_id,
                    "this registry does not hold the lease (released, or never taken through it)",
                ));
            };
            let mut conn = self.conn().await?;
            let r = tokio::time::timeout(
                CALL_TIMEOUT,
                self.write(&mut conn, lease, bound_ms, &written),
            )
            .await;
            r.unwrap_or_else(|_| Err(self.timed_out(&mut conn, "renew")))
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        // The row stays this identity's; the lease ends and so does the poll. The pool
        // stays open (and closes when the registry is dropped): a re-acquire after a
        // lost lease uses it.
        Box::pin(async move {
            self.stop_poll();
            if self.pool.get().is_some() {
                self.end_lease(lease.worker_id as i64).await;
            }
            Ok(())
        })
    }

    fn shared_with_foreign_servers(&self) -> bool {
        true
    }

    fn identity_is_configured(&self) -> bool {
        true
    }

    fn survives_outage(&self) -> bool {
        // No: once this holder's lease has lapsed (it cannot renew), another process may
        // take the row with the last bound written HERE as its floor; a bound kept only
        // in the local cache file would let this holder issue above it.
        false
    }

    fn host_identity(&self) -> Option<String> {
        Some(format!(
            "mysql/{}/{}/{}",
            crate::db::host_port(self.options.get_host(), self.options.get_port()),
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
            "mysql-{}-{}-{}",
            crate::db::host_port(self.options.get_host(), self.options.get_port()),
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

    #[test]
    fn a_password_with_a_slash_is_refused_without_showing_it() {
        // A parser reads host `app`, port `4711`; a message would name them.
        let url = "mysql://app:4711/Kq@127.0.0.1:3306/leafid";
        let e = MysqlRegistry::new(url, "h", "1").unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{e}");
        assert!(!e.to_string().contains("4711"), "{e}");
    }
}
