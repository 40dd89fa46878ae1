//! PostgreSQL as both modes reach it: the URL read into connect options, the lazily
//! connected pool, what an SQLSTATE means, the server's clock, and the one way values
//! reach a statement.
//!
//! # No session state, for PgBouncer in transaction mode
//!
//! Every statement leafid sends to PostgreSQL goes through the *simple* query protocol
//! (`sqlx::raw_sql`): one `Query` message, one round trip, no prepared statement at
//! all, named or unnamed. A pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor,
//! pgcat) may hand each transaction to another server connection; a named prepared
//! statement made on one is missing on the next (PgBouncer before 1.21, or with
//! `max_prepared_statements = 0`), and sqlx's unnamed ones (`persistent(false)`) are
//! parsed in one round trip and bound in the next, which the pooler may route to
//! another server. sqlx's `statement_cache_capacity(0)` is worse: each statement is
//! still prepared under a new name, never closed. Values therefore travel as SQL
//! literals: [`literal`] for text (an `E'…'` string, every quote and backslash
//! escaped, so `standard_conforming_strings` does not matter; NUL is refused before),
//! Rust integers as digits. Nothing else is interpolated.
//!
//! The connection's own startup parameters are the ones PgBouncer tracks
//! (`client_encoding`, `DateStyle`, `TimeZone`); `extra_float_digits`, which PgBouncer
//! refuses unless told to ignore it, is left out.
//!
//! # TLS
//!
//! `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`) and
//! `sslrootcert` / `sslcert` / `sslkey` in the URL are sqlx's, as libpq reads them.

use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::AssertSqlSafe;
use sqlx::Row;

use crate::error::{Cause, CauseKind, Error, Result};

/// `invalid_password` (28P01): the server refused the password.
pub(crate) const INVALID_PASSWORD: &str = "28P01";

/// `invalid_authorization_specification` (28000): no such role, or `pg_hba.conf`
/// refuses this client.
pub(crate) const INVALID_AUTHORIZATION: &str = "28000";

/// `insufficient_privilege` (42501): the role may not touch the table.
pub(crate) const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// `invalid_catalog_name` (3D000): the URL names a database that does not exist.
pub(crate) const INVALID_CATALOG_NAME: &str = "3D000";

/// `invalid_schema_name` (3F000): here, "no schema has been selected to create in": no
/// schema on the role's `search_path` is one it may use (no `USAGE` on `public`, or a
/// `search_path` naming only schemas that do not exist). leafid names no schema itself.
pub(crate) const INVALID_SCHEMA_NAME: &str = "3F000";

/// `undefined_table` (42P01): a statement named a table that does not exist.
pub(crate) const UNDEFINED_TABLE: &str = "42P01";

/// `duplicate_table` (42P07) and `unique_violation` (23505): what two concurrent
/// `CREATE TABLE IF NOT EXISTS` may answer the one that loses the race (the catalog's
/// own unique index on type names).
pub(crate) const DUPLICATE_TABLE: &str = "42P07";

/// `unique_violation` (23505).
pub(crate) const UNIQUE_VIOLATION: &str = "23505";

/// `untranslatable_character` (22P05) and `character_not_in_repertoire` (22021): text
/// the database's encoding cannot hold (a `LATIN1` or `SQL_ASCII` database).
pub(crate) const UNTRANSLATABLE: [&str; 2] = ["22P05", "22021"];

/// Reads a `postgres://` or `postgresql://` URL (libpq's form, `sslmode` and all). No I/O.
pub(crate) fn connect_options(url: &str) -> Result<PgConnectOptions> {
    if crate::redact::ambiguous_user_info(url) {
        return Err(Error::invalid_url(
            url,
            "the user or password holds a '/' or a '?', which ends the host part of a \
             URL: percent-encode them as %2F and %3F",
        ));
    }
    let options = PgConnectOptions::from_str(url).map_err(|e| {
        Error::invalid_url(
            url,
            format!("{e}; expected postgres://user:password@host:port/database[?sslmode=require]"),
        )
    })?;
    #[cfg(not(feature = "tls"))]
    {
        use sqlx::postgres::PgSslMode;
        let asks = match options.get_ssl_mode() {
            PgSslMode::Require => Some("sslmode=require"),
            PgSslMode::VerifyCa => Some("sslmode=verify-ca"),
            PgSslMode::VerifyFull => Some("sslmode=verify-full"),
            _ => None,
        };
        if let Some(asks) = asks {
            return Err(super::tls_left_out(url, asks));
        }
    }
    // `[::1]` to `::1`: sqlx would resolve the brackets (see `db::unbracketed`).
    let host = super::unbracketed(options.get_host()).to_string();
    // PgBouncer refuses a startup parameter it does not track; leafid reads no floats.
    Ok(options.host(&host).extra_float_digits(None))
}

/// The server as messages name it: "PostgreSQL at host:port".
pub(crate) fn address(options: &PgConnectOptions) -> String {
    format!(
        "PostgreSQL at {}",
        super::host_port(options.get_host(), options.get_port())
    )
}

/// A pool of at most `max` connections that connects on first use, an acquire waiting
/// at most `acquire_timeout`. Lazy so that building a store or registry does no I/O and
/// needs no runtime context; the first statement runs on the background runtime. Each
/// new connection reads its `default_transaction_isolation` into `isolation` (see
/// [`DefaultIsolation`]), whose `read_committed` then builds the pool's statements.
pub(crate) fn lazy_pool(
    options: &PgConnectOptions,
    max: u32,
    acquire_timeout: Duration,
    isolation: &DefaultIsolation,
) -> PgPool {
    let isolation = isolation.clone();
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(acquire_timeout)
        .after_connect(move |conn, _| {
            let isolation = isolation.clone();
            Box::pin(async move { isolation.read(conn).await })
        })
        .connect_lazy_with(options.clone())
}

/// What the `default_transaction_isolation` of a pool's connections asks of each
/// statement leafid runs on its tables: READ COMMITTED is what they need (see
/// [`DefaultIsolation::read_committed`]), and only when a connection's default is
/// something else does a statement carry `SET TRANSACTION ISOLATION LEVEL READ
/// COMMITTED` before it.
///
/// Why not always: that prefix is a `SET` statement, and some poolers (pgcat,
/// pg_doorman; RDS Proxy may pin) take any `SET` for session state and pay a reset
/// round trip after each query, or pin the client to one server connection. Most
/// databases run at READ COMMITTED, PostgreSQL's default, and need nothing.
///
/// The setting is read once per new connection (`SHOW`, one simple query), not per
/// statement, and the pool keeps the strictest answer: a statement goes without the
/// prefix only once every connection read so far said `read committed`, and never
/// before the first was read. Behind PgBouncer in transaction mode the `SHOW` runs on
/// whichever server connection the pooler picks, and a later statement may run on
/// another; that is sound because every source of a default other than a client's own
/// `SET` (the server's configuration, `ALTER DATABASE … SET`, `ALTER ROLE … SET`) is the
/// same on every server connection of one database and user, and leafid never sends a
/// session `SET`. What it does not cover: a DBA changing the default while leafid runs
/// reaches server connections opened afterwards, which this pool sees only when it
/// opens a connection of its own; until then a statement there may fail once with a
/// serialization error (an outage the caller may retry, never a duplicate: row locks
/// still hold at every level).
#[derive(Clone)]
pub(crate) struct DefaultIsolation(Arc<AtomicU8>);

impl Default for DefaultIsolation {
    /// Nothing read yet: every statement carries the prefix until a connection says.
    fn default() -> Self {
        DefaultIsolation(Arc::new(AtomicU8::new(UNREAD)))
    }
}

/// [`DefaultIsolation`]'s states: no connection read yet, all read committed, or one not.
const UNREAD: u8 = 0;
const ALL_READ_COMMITTED: u8 = 1;
const NOT_READ_COMMITTED: u8 = 2;

impl DefaultIsolation {
    /// Reads `conn`'s `default_transaction_isolation`; a connection that is not at
    /// READ COMMITTED, or cannot say (an engine without the setting), makes every later
    /// statement carry the prefix. Never fails the connection: the prefix is the safe
    /// answer, and a broken connection fails its first statement anyway.
    async fn read(&self, conn: &mut PgConnection) -> std::result::Result<(), sqlx::Error> {
        let level = match sqlx::raw_sql("SHOW default_transaction_isolation")
            .fetch_one(&mut *conn)
            .await
        {
            Ok(row) => row.try_get::<String, _>(0).ok(),
            Err(_) => None,
        };
        let seen = match level.as_deref() {
            Some("read committed") => ALL_READ_COMMITTED,
            _ => NOT_READ_COMMITTED,
        };
        // `fetch_max`: NOT_READ_COMMITTED, once seen, stays. Relaxed: the flag orders
        // nothing else; a statement built just before it rises is the case above.
        self.0.fetch_max(seen, Ordering::Relaxed);
        Ok(())
    }

    /// `sql`, leafid's statement on one of its tables (values as [`literal`]s), as one
    /// simple query run at READ COMMITTED whatever the database's or role's
    /// `default_transaction_isolation` says.
    ///
    /// Every statement leafid runs on its tables is a transaction of its own whose
    /// correctness rests on row locks, never on a snapshot spanning statements: an
    /// `UPDATE` waits for a concurrent writer of its row, then (at READ COMMITTED)
    /// checks its `WHERE` again on the row as that writer left it and adds to the value
    /// it finds, so two refills get disjoint ranges and two takers of one worker id
    /// cannot both match `holder = <what they read>`; an `INSERT` loses a race to a
    /// unique index. At REPEATABLE READ or SERIALIZABLE the same `UPDATE` fails instead
    /// with SQLSTATE 40001 ("could not serialize access"), which a refill would report
    /// as an outage.
    ///
    /// When the connections' default is not READ COMMITTED (or not read yet), `SET
    /// TRANSACTION` goes first in the implicit transaction a multi-statement simple
    /// query runs in, so the level holds for that query alone: one `Query` message, no
    /// session state, still safe behind PgBouncer in transaction mode. (`BEGIN …; …;
    /// COMMIT` would leave the connection in a failed transaction when the statement
    /// fails, the `COMMIT` skipped; the implicit block ends with the query.)
    pub(crate) fn read_committed(&self, sql: &str) -> sqlx::RawSql {
        if self.0.load(Ordering::Relaxed) == ALL_READ_COMMITTED {
            return sqlx::raw_sql(AssertSqlSafe(sql.to_string()));
        }
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; {sql}"
        )))
    }
}

/// The SQLSTATE of a statement (or login) the server refused, if it did.
pub(crate) fn sqlstate(e: &sqlx::Error) -> Option<&str> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .map(|pg| pg.code()),
        _ => None,
    }
}

/// What kind of failure a sqlx error against PostgreSQL is: a refused login (bad
/// password, unknown role, `pg_hba.conf`) or privilege, an unknown database, or the
/// network's own refused / timed out / not found.
pub(crate) fn kind(e: &sqlx::Error) -> CauseKind {
    match e {
        sqlx::Error::Io(io) => crate::error::cause::io_kind(io),
        sqlx::Error::PoolTimedOut => CauseKind::TimedOut,
        // A refusal (login, grants, unknown database) as `db::refusal` decides it.
        _ => super::refusal::refusal(e)
            .map(|r| r.kind())
            .unwrap_or(CauseKind::Other),
    }
}

/// A sqlx error against PostgreSQL as a leafid error's source, classified by [`kind`].
pub(crate) fn cause(e: sqlx::Error) -> Cause {
    Cause::new(kind(&e), e)
}

/// `text` as a PostgreSQL string literal: `E'…'` with every `\` and `'` doubled, read
/// the same whatever `standard_conforming_strings` says. `None` for text holding a
/// NUL, which no PostgreSQL text can hold.
pub(crate) fn literal(text: &str) -> Option<String> {
    if text.contains('\0') {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    Some(out)
}

/// Runs `ddl`, the `CREATE TABLE IF NOT EXISTS` of table `name`, only when no such
/// table is on the search path. PostgreSQL checks the privilege to create in the schema
/// before `IF NOT EXISTS`, and from 15 on no role but the owner has it on `public`, so a
/// role with DML grants alone could not start at all; looked up first, it needs
/// `CREATE` only while the table is missing. Two processes finding it missing at once
/// both create: `IF NOT EXISTS` is checked before the catalog's own unique index, so
/// the loser may be told `duplicate_table` or `unique_violation`; the table is there
/// either way. A `CREATE` refused for a grant after someone else (a DBA's migration)
/// made the table since the lookup is no refusal either: see [`super::refusal::after_create`].
pub(crate) async fn create_missing(
    conn: &mut PgConnection,
    name: &'static str,
    ddl: &'static str,
) -> std::result::Result<(), sqlx::Error> {
    if found(conn, name).await? {
        return Ok(());
    }
    match sqlx::raw_sql(ddl).execute(&mut *conn).await {
        Err(e) if matches!(sqlstate(&e), Some(DUPLICATE_TABLE | UNIQUE_VIOLATION)) => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => super::refusal::after_create(e, found(conn, name)).await,
    }
}

/// Whether table `name` is on the search path. `to_regclass` resolves the name as the
/// `CREATE` would, and needs no privilege on the table. `name` is a constant of
/// leafid's (no quote).
async fn found(
    conn: &mut PgConnection,
    name: &'static str,
) -> std::result::Result<bool, sqlx::Error> {
    let sql = format!("SELECT to_regclass('{name}') IS NOT NULL AS found");
    let row = sqlx::raw_sql(AssertSqlSafe(sql))
        .fetch_one(&mut *conn)
        .await?;
    row.try_get::<bool, _>("found")
}

/// The database's clock in ms since the Unix epoch: `statement_timestamp()`, the start
/// of this statement (as MySQL's `NOW(3)`; `now()` would be the transaction's start),
/// truncated to the millisecond. One simple-protocol round trip.
pub(crate) async fn now_ms<'c, E>(conn: E) -> std::result::Result<i64, sqlx::Error>
where
    E: sqlx::PgExecutor<'c>,
{
    let row = sqlx::raw_sql(
        "SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS now_ms",
    )
    .fetch_one(conn)
    .await?;
    row.try_get("now_ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_escapes_quotes_and_backslashes_and_refuses_nul() {
        assert_eq!(literal("order").unwrap(), "E'order'");
        assert_eq!(literal("o'k").unwrap(), "E'o''k'");
        assert_eq!(literal(r"a\'; DROP").unwrap(), r"E'a\\''; DROP'");
        assert_eq!(literal("宅配").unwrap(), "E'宅配'");
        assert!(literal("a\0b").is_none());
    }

    #[test]
    fn a_password_with_a_slash_is_refused_without_showing_it() {
        let e = connect_options("postgres://app:4711/Kq@127.0.0.1:5432/leafid").unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{e}");
        assert!(!format!("{e} {e:?}").contains("4711"), "{e}");
        for url in [
            "postgres://app:s3cr3t@127.0.0.1:5432/leafid?sslmode=prefer",
            "postgresql://app:s3cr3t@127.0.0.1/leafid",
        ] {
            let o = connect_options(url).unwrap();
            assert_eq!(address(&o), "PostgreSQL at 127.0.0.1:5432");
        }
    }
}
