//! The database under a pool: one enum over the dialects, each of which runs the same
//! few statements on `leafid_worker_pool` (`mysql.rs`, `postgres.rs`). Apart from the
//! lease logic (`acquire.rs`, `watch.rs`) so that the logic is written once and a
//! dialect is only its SQL.

use super::rows::{Own, Slot, Taker};
use crate::error::{Error, Result};

/// The database of a pool.
pub(super) enum Backend {
    #[cfg(feature = "mysql")]
    Mysql(super::mysql::Db),
    #[cfg(feature = "postgres")]
    Postgres(super::postgres::Db),
}

/// Runs `$e` with `$db` bound to the dialect's `Db`.
macro_rules! each {
    ($self:expr, $db:ident => $e:expr) => {
        match $self {
            #[cfg(feature = "mysql")]
            Backend::Mysql($db) => $e,
            #[cfg(feature = "postgres")]
            Backend::Postgres($db) => $e,
        }
    };
}

impl Backend {
    /// The database's name in messages ("MySQL", "PostgreSQL").
    pub(super) fn name(&self) -> &'static str {
        each!(self, _db => _db.name())
    }

    /// `host:port/database`, for the cache file's name and the host identity.
    pub(super) fn place(&self) -> String {
        each!(self, db => db.place())
    }

    /// Creates the table when missing.
    pub(super) async fn ensure_schema(&self) -> sqlx::Result<()> {
        each!(self, db => db.ensure_schema().await)
    }

    /// Every row of `pool`, and the database's now.
    pub(super) async fn list(&self, pool: &str) -> sqlx::Result<(Vec<Slot>, i64)> {
        each!(self, db => db.list(pool).await)
    }

    /// Takes `slot` when it is still as read and still free (or `force`: its holder,
    /// unchanged, is a dead process of this host). True when taken.
    pub(super) async fn take(
        &self,
        pool: &str,
        slot: &Slot,
        force: bool,
        t: &Taker<'_>,
    ) -> sqlx::Result<bool> {
        each!(self, db => db.take(pool, slot, force, t).await)
    }

    /// Inserts worker `id` held by `t`; false when another process inserted it (or the
    /// identity) first.
    pub(super) async fn insert(
        &self,
        pool: &str,
        id: i64,
        identity: Option<&str>,
        t: &Taker<'_>,
    ) -> sqlx::Result<bool> {
        each!(self, db => db.insert(pool, id, identity, t).await)
    }

    /// The held row of worker `id`, `None` when deleted.
    pub(super) async fn read_own(&self, pool: &str, id: i64) -> sqlx::Result<Option<Own>> {
        each!(self, db => db.read_own(pool, id).await)
    }

    /// Extends the lease and records `bound_ms` where the row is still `token`'s; false
    /// when it is not.
    pub(super) async fn renew(
        &self,
        pool: &str,
        id: i64,
        token: &str,
        term_ms: i64,
        bound_ms: i64,
    ) -> sqlx::Result<bool> {
        each!(self, db => db.renew(pool, id, token, term_ms, bound_ms).await)
    }

    /// Gives the id back where the row is still `token`'s; `bound_ms` stays as the
    /// next holder's floor.
    pub(super) async fn release(&self, pool: &str, id: i64, token: &str) -> sqlx::Result<()> {
        each!(self, db => db.release(pool, id, token).await)
    }

    /// The database's clock.
    pub(super) async fn now_ms(&self) -> sqlx::Result<i64> {
        each!(self, db => db.now_ms().await)
    }

    /// True when `e` says the table does not exist (dropped, restored from a dump): for
    /// a holder, its record missing (fence rule 2).
    pub(super) fn table_gone(&self, e: &sqlx::Error) -> bool {
        each!(self, _db => _db.table_gone(e))
    }

    /// A failed statement of `what` as the user sees it, the driver's error kept as its
    /// source: a refusal (login, grants, unknown database) is `AccessDenied`; a pool time-out
    /// is explained by one direct connection attempt; anything else is
    /// `RegistryUnavailable`.
    pub(super) async fn error(&self, shown_url: &str, what: &str, e: sqlx::Error) -> Error {
        let e = match e {
            sqlx::Error::PoolTimedOut => match each!(self, db => db.probe().await) {
                Some(e) => e,
                None => {
                    return Error::registry_with(
                        format!(
                            "{} {shown_url}: {what}: no connection within the connect timeout",
                            self.name()
                        ),
                        crate::db::probe::Probe::timed_out_cause(),
                    )
                }
            },
            e => e,
        };
        let text = format!("{} {shown_url}: {what}: {e}", self.name());
        let refusal = crate::db::refusal::refusal(&e);
        let cause = each!(self, _db => _db.cause(e));
        match refusal {
            Some(refusal) => refusal.error(text, GRANTS, cause),
            None => Error::registry_with(text, cause),
        }
    }
}

/// The privileges a pool's database user needs, as an `AccessDenied` names them
/// (docs/errors.md shows the `GRANT` statements).
const GRANTS: &str =
    "SELECT, INSERT, UPDATE on leafid_worker_pool (and CREATE, only while it is missing)";

/// Builds the backend of `dialect` for `url` (no I/O).
pub(super) fn open(dialect: super::Dialect, url: &str) -> Result<Backend> {
    match dialect {
        #[cfg(feature = "mysql")]
        super::Dialect::Mysql => Ok(Backend::Mysql(super::mysql::Db::new(url)?)),
        #[cfg(not(feature = "mysql"))]
        super::Dialect::Mysql => Err(Error::feature_left_out(url, "mysql")),
        #[cfg(feature = "postgres")]
        super::Dialect::Postgres => Ok(Backend::Postgres(super::postgres::Db::new(url)?)),
        #[cfg(not(feature = "postgres"))]
        super::Dialect::Postgres => Err(Error::feature_left_out(url, "postgres")),
    }
}
