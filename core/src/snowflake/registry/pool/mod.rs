//! Worker-id pools on the database: `mysql://…/db?pool=orders[&pool_size=64]` and
//! `postgres://…/db?pool=orders` lease any free worker id of the pool `orders` by the
//! database's clock, for fleets whose members come and go (pods, autoscaling,
//! preforked workers) and that have a database but no ZooKeeper.
//!
//! One table, `leafid_worker_pool`, one row per `(pool, worker_id)`: the holder's random
//! token, who it is (host, pid), when its lease ends (`expires_ms`, the database's
//! clock) and its last persisted bound (`bound_ms`). The same table holds the
//! PostgreSQL identity registry's rows (`postgres://…?port=P`, [`super::postgres`]):
//! there `identity` is the `ip:port` that owns the row and the pool name is empty.
//!
//! - **Acquire** (`acquire.rs`): a free row (released, or its lease passed by the
//!   database's clock) is taken by an `UPDATE` conditional on the holder read and on the
//!   row still being free; otherwise a missing id is inserted (the primary key settles
//!   a race). The previous holder's bound, read once the row is ours, is the floor: the
//!   generator issues above it at once (its clock leads until the real one catches up).
//!   Every id held: [`Error::WorkerIdExhausted`] naming the pool size and the live
//!   holders (host, pid, how long their leases run).
//! - **Renew**: one `UPDATE` conditional on this holder's token extends the lease to
//!   [`LEASE_TERM`] past now and records the bound (fence rule 1); zero rows is
//!   [`Error::LeaseLost`].
//! - **Release**: the row's holder is cleared; its bound, the exact last timestamp of the
//!   final renew, stays as the next holder's floor.
//! - **Rule 2** (`watch.rs`): the holder's poll task reads its row every 250 ms and
//!   lowers the issue limit at once when the row is deleted, names another holder or
//!   holds a bound this holder did not write, or the table is gone.
//! - **Rule 3**: no foreign server writes this table, so nothing is watched before the
//!   first id.
//! - **Rule 5**: a holder cut off from the database keeps issuing up to the bound the
//!   row holds (the generator's limit) and stops there; nothing suspends it earlier. A
//!   newcomer never waits for it: a row with a bound floors the newcomer at that bound,
//!   and a row without one (new, or rewritten by hand, or a wiped table) floors it at the
//!   database's clock plus the reach, above any bound a holder could have written
//!   (`generator/session.rs`).
//!
//! **Why a lease may end long before its bound.** The lease only says who may write the
//! row; what keeps ids apart is the bound, which the next holder floors at. A holder's
//! renews are conditional on its token, and the next holder reads the bound only after
//! its take committed, so the bound it floors at is the last one the old holder can
//! ever have persisted, and the old holder's limit never passes that bound. So a lease
//! runs [`LEASE_TERM`] (five 3 s heartbeats) past its last renew, or to its bound when
//! that is nearer, and a crashed holder's id is free then, not a 65 s lookahead later.
//! A holder whose renews stop for longer (an outage) keeps issuing to its bound
//! meanwhile; if a newcomer took the row, its next renew finds the token gone and it
//! re-acquires. A heartbeat longer than `LEASE_TERM` lets leases lapse between renews:
//! still safe for the same reason, but a newcomer may then take a live holder's id.
//!
//! No foreign writer (Java Leaf, the fork) knows this table, so rule 4 has nothing to
//! do here. While the database is down a holder issues only up to the last bound
//! written here ([`WorkerRegistry::survives_outage`] is false).
//!
//! ```no_run
//! # async fn run() -> leafid::Result<()> {
//! use std::sync::Arc;
//! use leafid::snowflake::registry::pool::PoolRegistry;
//! let registry = PoolRegistry::from_url("mysql://leaf:pw@127.0.0.1:3306/app?pool=orders&pool_size=64")?;
//! let gen = leafid::SnowflakeGenerator::builder()
//!     .custom_registry(Arc::new(registry))
//!     .build()
//!     .await?;
//! println!("worker {}", gen.worker_id());
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{fence, system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

mod acquire;
mod backend;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod rows;
mod url;
mod watch;

use backend::Backend;
pub(crate) use url::{is_pool_url, parse};
pub use url::{Dialect, PoolConfig};
use watch::{lock, Written};

/// How long a lease runs past its holder's last renew (or to its bound, when nearer,
/// plus a grace of 5 s): five of Leaf's 3 s heartbeats, so a late renew keeps the id,
/// and a crashed holder's id is free this long after its last renew. The next holder
/// floors at the bound whenever the lease ends (see the module doc).
pub const LEASE_TERM: Duration = Duration::from_secs(15);

/// How long a lease taken at acquire lasts before the first renew.
const FIRST_TERM: Duration = LEASE_TERM;

/// How long one statement may take once sent (see `mysql::CALL_TIMEOUT`: a silent
/// network must not hold the generator's lease state for minutes).
pub const CALL_TIMEOUT: Duration = Duration::from_millis(3000);

/// What a registry claims: any free id of a named pool, or the one id of an identity.
#[derive(Debug, Clone)]
pub(crate) enum Claim {
    /// Any free id of `pool`, ids `0..size` (default: every id of the layout).
    Any { pool: String, size: Option<u32> },
    /// The id owned by `ip_port` (the PostgreSQL identity registry), pool name "".
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Identity { ip_port: String },
}

/// The lease held now and the task that polls it.
struct Held {
    worker_id: u32,
    written: Arc<Mutex<Written>>,
    poll: tokio::task::JoinHandle<()>,
}

/// A worker-id pool on MySQL or PostgreSQL. Building it parses the URL; it connects at
/// `acquire`.
pub struct PoolRegistry {
    backend: Arc<Backend>,
    shown_url: String,
    claim: Claim,
    /// This registry's lease token (random, per registry).
    token: String,
    reading: Mutex<Option<ClockReading>>,
    held: Mutex<Option<Held>>,
}

/// By hand: the URL's password and the lease token never show.
impl std::fmt::Debug for PoolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolRegistry")
            .field("url", &self.shown_url)
            .field("claim", &self.claim)
            .finish_non_exhaustive()
    }
}

impl Drop for PoolRegistry {
    fn drop(&mut self) {
        self.stop_poll();
    }
}

impl PoolRegistry {
    /// A registry for a parsed pool URL (no I/O).
    pub fn new(config: &PoolConfig) -> Result<PoolRegistry> {
        url::check_name(&config.url, &config.pool)?;
        Self::build(
            config.dialect,
            &config.url,
            Claim::Any {
                pool: config.pool.clone(),
                size: config.size,
            },
        )
    }

    /// A registry from a pool URL, `mysql://…/db?pool=NAME[&pool_size=N]` or
    /// `postgres://…/db?pool=NAME[&pool_size=N]` (no I/O).
    pub fn from_url(url: &str) -> Result<PoolRegistry> {
        Self::new(&parse(url)?)
    }

    pub(crate) fn build(dialect: Dialect, url: &str, claim: Claim) -> Result<PoolRegistry> {
        Ok(PoolRegistry {
            backend: Arc::new(backend::open(dialect, url)?),
            shown_url: crate::redact::url(url),
            claim,
            token: format!("{:032x}", fastrand::u128(..)),
            reading: Mutex::new(None),
            held: Mutex::new(None),
        })
    }

    /// The pool's name in the table ("" for identities).
    fn pool_name(&self) -> &str {
        match &self.claim {
            Claim::Any { pool, .. } => pool,
            Claim::Identity { .. } => "",
        }
    }

    /// Where, for messages: "pool orders in MySQL mysql://…".
    fn shown(&self) -> String {
        match &self.claim {
            Claim::Any { pool, .. } => {
                format!("pool {pool} in {} {}", self.backend.name(), self.shown_url)
            }
            Claim::Identity { ip_port } => {
                format!(
                    "identity {ip_port} in {} {}",
                    self.backend.name(),
                    self.shown_url
                )
            }
        }
    }

    /// One statement (or a few), bounded by [`CALL_TIMEOUT`], its error as the user sees it.
    async fn call<'a, T, F, Fut>(&'a self, what: &str, f: F) -> Result<T>
    where
        F: FnOnce(&'a Backend) -> Fut,
        Fut: Future<Output = sqlx::Result<T>> + 'a,
    {
        match tokio::time::timeout(CALL_TIMEOUT, f(&self.backend)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.backend.error(&self.shown_url, what, e).await),
            Err(_) => {
                let text = format!(
                    "{} {}: {what}: no answer within {CALL_TIMEOUT:?}",
                    self.backend.name(),
                    self.shown_url
                );
                Err(Error::registry_with(
                    &text,
                    crate::error::Cause::timed_out(text.clone()),
                ))
            }
        }
    }

    /// Reads the database's clock for the generator's skew check.
    async fn keep_clock(&self) -> Result<()> {
        let before = system_now_ms();
        let now = self.call("read the clock", |b| b.now_ms()).await?;
        *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(ClockReading {
            registry_ms: now,
            local_before_ms: before,
            local_after_ms: system_now_ms(),
            source: format!("{} {} clock", self.backend.name(), self.shown_url),
        });
        Ok(())
    }

    fn stop_poll(&self) {
        if let Some(h) = self.held.lock().unwrap_or_else(|p| p.into_inner()).take() {
            h.poll.abort();
        }
    }

    fn written(&self, id: u32) -> Option<Arc<Mutex<Written>>> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.as_ref()
            .filter(|h| h.worker_id == id)
            .map(|h| h.written.clone())
    }

    async fn acquire_inner(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
        self.stop_poll();
        let taken = self.take(max_worker_id).await?;
        let id = taken.worker_id;
        // The database's clock, read after the row was found: an unrecorded floor is
        // this reading plus the reach (rule 5). No watch: no foreign writer (rule 3).
        if let Err(e) = self.keep_clock().await {
            self.end_lease(id).await;
            return Err(e);
        }
        let written = Written::new(taken.bound_ms);
        let poll = crate::runtime::spawn(watch::poll_held(watch::Poll {
            backend: self.backend.clone(),
            pool: self.pool_name().to_string(),
            worker_id: id,
            token: self.token.clone(),
            shown: self.shown(),
            written: written.clone(),
            limit,
        }));
        let held = Held {
            worker_id: id,
            written,
            poll,
        };
        if let Some(p) = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(held)
        {
            p.poll.abort();
        }
        Ok(Lease {
            worker_id: id,
            floor_ms: taken.bound_ms.unwrap_or(i64::MIN),
            // No foreign writer knows this table: no foreign stamp.
            floor_recorded: fence::floor_recorded(taken.bound_ms, None),
            location: self.shown(),
        })
    }

    /// Gives worker `id` back where this registry still holds it; a failure only logs
    /// (the lease lapses on its own).
    async fn end_lease(&self, id: u32) {
        let pool = self.pool_name();
        let ended = self.call("release", |b| b.release(pool, id as i64, &self.token));
        if let Err(e) = ended.await {
            tracing::warn!(error = %e, "cannot end the worker-id lease; it lapses on its own");
        }
    }

    async fn renew_inner(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let id = lease.worker_id;
        let Some(written) = self.written(id) else {
            return Err(fence::lost(
                id,
                "this registry does not hold the lease (released, or never taken through it)",
            ));
        };
        let term_ms = lease_term_ms(bound_ms, system_now_ms());
        lock(&written).begin(bound_ms);
        let pool = self.pool_name();
        let r = tokio::time::timeout(
            CALL_TIMEOUT,
            self.backend
                .renew(pool, id as i64, &self.token, term_ms, bound_ms),
        )
        .await;
        lock(&written).end(bound_ms, matches!(r, Ok(Ok(true))));
        match r {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                return Err(fence::lost(
                    id,
                    format!(
                        "the row of worker {id} in {} was taken by another process or deleted",
                        self.shown()
                    ),
                ))
            }
            Ok(Err(e)) if self.backend.table_gone(&e) => {
                return Err(fence::lost(
                    id,
                    format!(
                        "the table of {} is gone ({e}): dropped or restored from a dump",
                        self.shown()
                    ),
                ))
            }
            Ok(Err(e)) => return Err(self.backend.error(&self.shown_url, "renew", e).await),
            Err(_) => {
                return Err(Error::registry(format!(
                    "{}: renew: no answer within {CALL_TIMEOUT:?}",
                    self.shown()
                )))
            }
        }
        self.keep_clock().await
    }
}

/// True when `h` was a process of this host and pid namespace that has exited
/// ([`Holder::exited_here`]), or that has exited and not been reaped yet (a zombie
/// still answers `kill(pid, 0)`: a supervisor that restarts a SIGKILLed child before
/// it reaps it would otherwise be refused naming its own dead predecessor).
pub(crate) fn dead_here(h: &super::host_lock::Holder) -> bool {
    let here = super::host_lock::Holder::this_process();
    h.exited_here()
        || (h.host == here.host
            && h.pid_space.is_some()
            && h.pid_space == here.pid_space
            && zombie(h.pid))
}

/// Whether process `pid` is a zombie (exited, not reaped) by `/proc/{pid}/stat`.
fn zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the name may hold spaces and parentheses; the state follows
    // the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

/// How long a renew at `now_ms` (this host's clock) of `bound_ms` makes the lease
/// last: [`LEASE_TERM`], or to the bound plus 5 s when that is nearer (a short
/// lookahead), so the next holder of a crashed holder's id waits at most that.
pub(super) fn lease_term_ms(bound_ms: i64, now_ms: i64) -> i64 {
    let to_bound = bound_ms.saturating_sub(now_ms).max(0).saturating_add(5_000);
    to_bound.min(LEASE_TERM.as_millis() as i64)
}

impl WorkerRegistry for PoolRegistry {
    fn acquire(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        Box::pin(self.acquire_inner(max_worker_id, limit))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.renew_inner(lease, bound_ms))
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.stop_poll();
            self.end_lease(lease.worker_id).await;
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        // Once the lease lapses another process may take the id with the bound written
        // HERE as its floor; a bound kept only in the cache file would let this holder
        // issue above it.
        false
    }

    fn identity_is_configured(&self) -> bool {
        // `postgres://?port=`: an `ip:port`'s id. A pool's processes share a cache file
        // but each has a host identity of its own.
        matches!(self.claim, Claim::Identity { .. })
    }

    fn host_identity(&self) -> Option<String> {
        match &self.claim {
            // The registry's own token: each registry object holds at most one lease, so
            // a second generator built on the same object (`custom_registry` takes an
            // `Arc`) is refused by the host claim instead of taking its own row back and
            // sharing the id (review 1). Other processes' registries have other tokens.
            Claim::Any { pool, .. } => Some(format!(
                "pool/{}/{}/{pool}/{}",
                self.backend.name().to_ascii_lowercase(),
                self.backend.place(),
                self.token
            )),
            Claim::Identity { ip_port } => Some(format!(
                "{}/{}/{ip_port}",
                self.backend.name().to_ascii_lowercase(),
                self.backend.place()
            )),
        }
    }

    fn take_clock_reading(&self) -> Option<ClockReading> {
        self.reading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn describe(&self) -> String {
        let db = self.backend.name().to_ascii_lowercase();
        match &self.claim {
            Claim::Any { pool, .. } => format!("pool-{db}-{}-{pool}", self.backend.place()),
            Claim::Identity { ip_port } => format!("{db}-{}-{ip_port}", self.backend.place()),
        }
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use super::*;

    #[test]
    fn debug_describe_and_errors_never_show_the_password() {
        let r =
            PoolRegistry::from_url("mysql://leaf:s3cr3t@127.0.0.1:3306/leaf?pool=orders").unwrap();
        let shown = format!("{r:?} {} {}", r.describe(), r.shown());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        // The host claim names the pool, never the password.
        let claim = r.host_identity().expect("a pool registry claims its lease");
        assert!(
            claim.contains("orders") && !claim.contains("s3cr3t"),
            "{claim}"
        );
        let e = PoolRegistry::from_url("mysql://leaf:s3cr3t@127.0.0.1:99999/leaf?pool=orders")
            .unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }
}
