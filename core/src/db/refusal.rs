//! A server that answered and refused this client: which refusal it was, decided once
//! for MySQL and PostgreSQL, and the `AccessDenied` that says what to fix.
//!
//! A refusal is configuration, not an outage: the server is up and retrying cannot help
//! until the URL, the accounts or the grants change, so it must never come back as
//! `StoreUnavailable` or `RegistryUnavailable` ("retry once it is back"), which a
//! supervisor retries forever. The segment stores and the database registries all map
//! a driver error through [`refusal`] first; each names the grants its own tables need.

use crate::error::{Cause, CauseKind, Error};

/// How a server refused this client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The login: a wrong user or password, an unknown role, `pg_hba.conf`; or an
    /// account that may not work as it stands: locked, its password expired (MySQL
    /// refuses every statement then, not only the login), not allowed from this host.
    Login,
    /// The database named in the URL does not exist.
    Database,
    /// MySQL 1044: the user has no privilege on the URL's database, which is also what
    /// MySQL answers a user without global privileges about a database that does not
    /// exist (a misspelt name), so the advice names both.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    DatabaseOrItsName,
    /// PostgreSQL 42501 on a database: the role lacks `CONNECT` on it.
    // PostgreSQL's only: a build with MySQL alone never makes it.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Connect,
    /// PostgreSQL: the role lacks `USAGE` (or, for a missing table, `CREATE`) on the
    /// schema (42501 naming a schema), or no schema on its `search_path` is one it may
    /// use (3F000, "no schema has been selected to create in").
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Schema,
    /// Logged in, but a statement needs a privilege on a table the user lacks (MySQL
    /// 1142, 1143; PostgreSQL 42501): `CREATE` for a missing table, `UPDATE` on a row, …
    Grants,
}

/// MySQL error numbers of a refusal (see `db::mysql` for their names).
#[cfg(feature = "mysql")]
fn mysql_refusal(number: u16) -> Option<Refusal> {
    use super::mysql::*;
    match number {
        ER_ACCESS_DENIED
        | ER_ACCESS_DENIED_NO_PASSWORD
        | ER_HOST_NOT_PRIVILEGED
        | ER_MUST_CHANGE_PASSWORD
        | ER_MUST_CHANGE_PASSWORD_LOGIN
        | ER_ACCOUNT_HAS_BEEN_LOCKED
        | ER_ACCOUNT_HAS_BEEN_LOCKED_MARIADB => Some(Refusal::Login),
        ER_BAD_DB => Some(Refusal::Database),
        ER_DBACCESS_DENIED => Some(Refusal::DatabaseOrItsName),
        ER_TABLEACCESS_DENIED | ER_COLUMNACCESS_DENIED => Some(Refusal::Grants),
        _ => None,
    }
}

/// PostgreSQL SQLSTATEs of a refusal; `message` is the server's text, read only to
/// tell what a 42501 is about. It is matched on PostgreSQL's English wording ("permission
/// denied for database", "… for schema"); a server set to another `lc_messages` gets
/// the table-grant advice, which still says it is a grant, never an outage.
#[cfg(feature = "postgres")]
fn postgres_refusal(code: &str, message: &str) -> Option<Refusal> {
    use super::postgres::*;
    match code {
        INVALID_PASSWORD | INVALID_AUTHORIZATION => Some(Refusal::Login),
        INVALID_CATALOG_NAME => Some(Refusal::Database),
        INVALID_SCHEMA_NAME => Some(Refusal::Schema),
        INSUFFICIENT_PRIVILEGE if message.starts_with("permission denied for database") => {
            Some(Refusal::Connect)
        }
        INSUFFICIENT_PRIVILEGE if message.starts_with("permission denied for schema") => {
            Some(Refusal::Schema)
        }
        INSUFFICIENT_PRIVILEGE => Some(Refusal::Grants),
        _ => None,
    }
}

/// The refusal `e` is, when the server answered with one (a network error never is).
pub(crate) fn refusal(e: &sqlx::Error) -> Option<Refusal> {
    let sqlx::Error::Database(_db) = e else {
        return None;
    };
    #[cfg(feature = "mysql")]
    if let Some(my) = _db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return mysql_refusal(my.number());
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = _db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return postgres_refusal(pg.code(), pg.message());
    }
    None
}

/// What a refused `CREATE TABLE IF NOT EXISTS` of a table the lookup just found missing
/// comes to. Refused for a grant (a DML-only user, which may not create tables) while
/// someone else made the table between the lookup and the `CREATE` (a DBA's migration
/// racing a start), the table is there and the start goes on: `found_now`, one more
/// lookup, run only then, says so. Anything else, or the table still missing, is the
/// error `e` as it came (a refusal stays `AccessDenied` naming the grants).
pub(crate) async fn after_create(
    e: sqlx::Error,
    found_now: impl std::future::Future<Output = Result<bool, sqlx::Error>>,
) -> Result<(), sqlx::Error> {
    if matches!(refusal(&e), Some(Refusal::Grants | Refusal::Schema))
        && matches!(found_now.await, Ok(true))
    {
        return Ok(());
    }
    Err(e)
}

impl Refusal {
    /// The cause kind a refusal is: the login and a missing grant are `LoginRefused`,
    /// an unknown database `NotFound`.
    pub(crate) fn kind(self) -> CauseKind {
        match self {
            Refusal::Login
            | Refusal::DatabaseOrItsName
            | Refusal::Connect
            | Refusal::Schema
            | Refusal::Grants => CauseKind::LoginRefused,
            Refusal::Database => CauseKind::NotFound,
        }
    }

    /// `AccessDenied` saying `text` (what failed, the server's message) and what to fix;
    /// `grants` names the privileges the caller's tables need ("SELECT, INSERT, UPDATE
    /// on leaf_alloc"), shown for a missing privilege.
    pub(crate) fn error(self, text: impl std::fmt::Display, grants: &str, cause: Cause) -> Error {
        let text = match self {
            Refusal::Login => format!(
                "the database refused the login ({text}); check the user and password in \
                 the URL, and the account on the server: unlock it if it is locked, set a \
                 new password if it expired, allow it from this client's host (and on \
                 PostgreSQL check the role and pg_hba.conf)"
            ),
            Refusal::Database => {
                format!("{text}; create the database or fix its name in the URL")
            }
            Refusal::DatabaseOrItsName => format!(
                "the user may not use the database ({text}); grant it {grants} on that \
                 database, or fix the database name in the URL (MySQL says the same of a \
                 database that does not exist)"
            ),
            Refusal::Connect => format!(
                "the role may not connect to the database ({text}); grant it CONNECT on \
                 the database (GRANT CONNECT ON DATABASE …)"
            ),
            Refusal::Schema => format!(
                "the role may not use the schema leafid's tables are in ({text}); grant it \
                 USAGE on that schema, and CREATE there while a table is missing, or set \
                 its search_path to a schema it may use; on the tables it needs {grants} \
                 (docs/errors.md)"
            ),
            Refusal::Grants => format!(
                "the user lacks a privilege ({text}); grant it {grants} \
                 (docs/errors.md lists the grants of each backend)"
            ),
        };
        Error::access_denied(text, cause)
    }
}
