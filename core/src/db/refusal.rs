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
    /// The login: a wrong user or password, an unknown role, `pg_hba.conf`.
    Login,
    /// The database named in the URL does not exist.
    Database,
    /// Logged in, but a statement needs a privilege the user lacks (MySQL 1142, 1143,
    /// 1044; PostgreSQL 42501): `CREATE` for a missing table, `UPDATE` on a row, …
    Grants,
}

/// MySQL error numbers of a refusal (see `db::mysql` for their names).
#[cfg(feature = "mysql")]
fn mysql_refusal(number: u16) -> Option<Refusal> {
    use super::mysql::*;
    match number {
        ER_ACCESS_DENIED | ER_ACCESS_DENIED_NO_PASSWORD => Some(Refusal::Login),
        ER_BAD_DB => Some(Refusal::Database),
        ER_DBACCESS_DENIED | ER_TABLEACCESS_DENIED | ER_COLUMNACCESS_DENIED => {
            Some(Refusal::Grants)
        }
        _ => None,
    }
}

/// PostgreSQL SQLSTATEs of a refusal.
#[cfg(feature = "postgres")]
fn postgres_refusal(code: &str) -> Option<Refusal> {
    use super::postgres::*;
    match code {
        INVALID_PASSWORD | INVALID_AUTHORIZATION => Some(Refusal::Login),
        INVALID_CATALOG_NAME => Some(Refusal::Database),
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
        return postgres_refusal(pg.code());
    }
    None
}

impl Refusal {
    /// The cause kind a refusal is: the login and a missing grant are `LoginRefused`,
    /// an unknown database `NotFound`.
    pub(crate) fn kind(self) -> CauseKind {
        match self {
            Refusal::Login | Refusal::Grants => CauseKind::LoginRefused,
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
                 the URL, the user's grants (and on PostgreSQL the role and pg_hba.conf)"
            ),
            Refusal::Database => {
                format!("{text}; create the database or fix its name in the URL")
            }
            Refusal::Grants => format!(
                "the user lacks a privilege ({text}); grant it {grants} \
                 (docs/errors.md lists the grants of each backend)"
            ),
        };
        Error::access_denied(text, cause)
    }
}
