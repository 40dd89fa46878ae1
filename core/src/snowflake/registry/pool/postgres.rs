//! The pool's statements on PostgreSQL. Every statement goes through the simple query
//! protocol with values as literals (`db::postgres`: no prepared statement, so a
//! pooler in transaction mode such as PgBouncer can route each statement anywhere);
//! text goes through [`literal`], integers as digits, nothing else is interpolated. The
//! database's clock is `statement_timestamp()` in ms.

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::Row;

use super::rows::{Own, Slot, Taker};
use crate::db::postgres::{self as pg, literal, sqlstate};
use crate::error::{Cause, Result};

/// The database's now in ms.
const NOW_MS: &str = "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint";

const CREATE: &str = "CREATE TABLE IF NOT EXISTS leafid_worker_pool (
  pool varchar(64) NOT NULL,
  worker_id bigint NOT NULL,
  identity varchar(127) NULL,
  holder varchar(64) NOT NULL,
  holder_info varchar(255) NOT NULL,
  expires_ms bigint NOT NULL,
  bound_ms bigint NULL,
  PRIMARY KEY (pool, worker_id),
  UNIQUE (pool, identity)
)";

/// How long a statement waits for a connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(3000);

/// `text` as a literal; text holding a NUL (which no PostgreSQL text can hold) is
/// refused before any I/O.
fn lit(text: &str) -> sqlx::Result<String> {
    literal(text).ok_or_else(|| sqlx::Error::Protocol(format!("{text:?} holds a NUL byte")))
}

/// A pool's PostgreSQL database.
pub(crate) struct Db {
    options: PgConnectOptions,
    pool: OnceLock<PgPool>,
    /// Whether the pool's statements need `SET TRANSACTION` (see [`pg::DefaultIsolation`]).
    isolation: pg::DefaultIsolation,
}

impl Db {
    pub(super) fn new(url: &str) -> Result<Db> {
        Ok(Db {
            options: pg::connect_options(url)?,
            pool: OnceLock::new(),
            isolation: pg::DefaultIsolation::default(),
        })
    }

    fn pool(&self) -> &PgPool {
        self.pool
            .get_or_init(|| pg::lazy_pool(&self.options, 2, ACQUIRE_TIMEOUT, &self.isolation))
    }

    pub(super) fn name(&self) -> &'static str {
        "PostgreSQL"
    }

    pub(super) fn place(&self) -> String {
        format!(
            "{}/{}",
            crate::db::host_port(self.options.get_host(), self.options.get_port()),
            self.options.get_database().unwrap_or("")
        )
    }

    pub(super) async fn ensure_schema(&self) -> sqlx::Result<()> {
        let mut conn = self.pool().acquire().await?;
        pg::create_missing(&mut conn, "leafid_worker_pool", CREATE).await
    }

    pub(super) async fn list(&self, pool: &str) -> sqlx::Result<(Vec<Slot>, i64)> {
        let now = self.now_ms().await?;
        let sql = format!(
            "SELECT worker_id, identity, holder, holder_info, expires_ms \
             FROM leafid_worker_pool WHERE pool = {} ORDER BY worker_id",
            lit(pool)?
        );
        let rows = self
            .isolation
            .read_committed(&sql)
            .fetch_all(self.pool())
            .await?;
        let slots = rows
            .iter()
            .map(|r| {
                Ok(Slot {
                    worker_id: r.try_get("worker_id")?,
                    identity: r.try_get("identity")?,
                    holder: r.try_get("holder")?,
                    holder_info: r.try_get("holder_info")?,
                    expires_ms: r.try_get("expires_ms")?,
                })
            })
            .collect::<sqlx::Result<Vec<Slot>>>()?;
        Ok((slots, now))
    }

    pub(super) async fn take(
        &self,
        pool: &str,
        slot: &Slot,
        force: bool,
        t: &Taker<'_>,
    ) -> sqlx::Result<bool> {
        // As on MySQL: conditional on the holder read and on the row being free now.
        let sql = format!(
            "UPDATE leafid_worker_pool SET holder = {token}, holder_info = {info}, \
             expires_ms = {NOW_MS} + {term} WHERE pool = {pool} AND worker_id = {id} \
             AND holder = {old} AND ({force} OR holder = '' OR \
             expires_ms < {NOW_MS})",
            token = lit(t.token)?,
            info = lit(t.info)?,
            term = t.term_ms,
            pool = lit(pool)?,
            id = slot.worker_id,
            old = lit(&slot.holder)?,
            force = if force { "TRUE" } else { "FALSE" },
        );
        let done = self
            .isolation
            .read_committed(&sql)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn insert(
        &self,
        pool: &str,
        id: i64,
        identity: Option<&str>,
        t: &Taker<'_>,
    ) -> sqlx::Result<bool> {
        let identity = match identity {
            Some(i) => lit(i)?,
            None => "NULL".to_string(),
        };
        let sql = format!(
            "INSERT INTO leafid_worker_pool (pool, worker_id, identity, holder, holder_info, \
             expires_ms, bound_ms) VALUES ({}, {id}, {identity}, {}, {}, {NOW_MS} + {}, NULL)",
            lit(pool)?,
            lit(t.token)?,
            lit(t.info)?,
            t.term_ms,
        );
        match self
            .isolation
            .read_committed(&sql)
            .execute(self.pool())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if sqlstate(&e) == Some(pg::UNIQUE_VIOLATION) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn read_own(&self, pool: &str, id: i64) -> sqlx::Result<Option<Own>> {
        let sql = format!(
            "SELECT holder, bound_ms FROM leafid_worker_pool WHERE pool = {} AND worker_id = {id}",
            lit(pool)?
        );
        let row = self
            .isolation
            .read_committed(&sql)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| {
            Ok(Own {
                holder: r.try_get("holder")?,
                bound_ms: r.try_get("bound_ms")?,
            })
        })
        .transpose()
    }

    pub(super) async fn renew(
        &self,
        pool: &str,
        id: i64,
        token: &str,
        term_ms: i64,
        bound_ms: i64,
    ) -> sqlx::Result<bool> {
        // PostgreSQL counts every row the WHERE matched, changed or not.
        let sql = format!(
            "UPDATE leafid_worker_pool SET expires_ms = {NOW_MS} + {term_ms}, bound_ms = {bound_ms} \
             WHERE pool = {} AND worker_id = {id} AND holder = {}",
            lit(pool)?,
            lit(token)?
        );
        let done = self
            .isolation
            .read_committed(&sql)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn release(&self, pool: &str, id: i64, token: &str) -> sqlx::Result<()> {
        let sql = format!(
            "UPDATE leafid_worker_pool SET holder = '', expires_ms = 0 \
             WHERE pool = {} AND worker_id = {id} AND holder = {}",
            lit(pool)?,
            lit(token)?
        );
        self.isolation
            .read_committed(&sql)
            .execute(self.pool())
            .await
            .map(drop)
    }

    pub(super) async fn now_ms(&self) -> sqlx::Result<i64> {
        pg::now_ms(self.pool()).await
    }

    pub(super) fn table_gone(&self, e: &sqlx::Error) -> bool {
        sqlstate(e) == Some(pg::UNDEFINED_TABLE)
    }

    pub(super) fn cause(&self, e: sqlx::Error) -> Cause {
        pg::cause(e)
    }

    /// One direct connection attempt after a pool time-out: the driver's reason when it
    /// failed, `None` when the server answers or stays silent.
    pub(super) async fn probe(&self) -> Option<sqlx::Error> {
        let at = pg::address(&self.options);
        match crate::db::probe::probe(&self.options, at).await {
            crate::db::probe::Probe::Failed(e) => Some(e),
            _ => None,
        }
    }
}
