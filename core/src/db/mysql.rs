//! MySQL and MariaDB as both modes reach them: the URL read into connect options, the
//! lazily connected pool, the server's error numbers, and the server's clock.
//!
//! The segment store (`leaf_alloc`) and the worker registry (`leaf_workerid_alloc`)
//! each own their statements and messages; what a connection is, and what an error
//! number means, is the same for both and lives here.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::Row;

use crate::error::{Error, Result};

/// `ER_ACCESS_DENIED_ERROR`: wrong user or password.
pub(crate) const ER_ACCESS_DENIED: u16 = 1045;

/// `ER_DBACCESS_DENIED_ERROR`: the user may not use the database, or (to a user without
/// global privileges, who may not learn which databases exist) no such database.
pub(crate) const ER_DBACCESS_DENIED: u16 = 1044;

/// `ER_ACCESS_DENIED_NO_PASSWORD_ERROR`: a password-less login refused.
pub(crate) const ER_ACCESS_DENIED_NO_PASSWORD: u16 = 1698;

/// `ER_HOST_NOT_PRIVILEGED`: no account of this user may log in from the client's host.
pub(crate) const ER_HOST_NOT_PRIVILEGED: u16 = 1130;

/// `ER_MUST_CHANGE_PASSWORD`: the account's password expired (`PASSWORD EXPIRE`); the
/// login went through but every statement is refused until a new password is set.
pub(crate) const ER_MUST_CHANGE_PASSWORD: u16 = 1820;

/// `ER_MUST_CHANGE_PASSWORD_LOGIN`: the same, refused at the login (for clients that do
/// not say they handle expired passwords, or `disconnect_on_expired_password`).
pub(crate) const ER_MUST_CHANGE_PASSWORD_LOGIN: u16 = 1862;

/// `ER_ACCOUNT_HAS_BEEN_LOCKED` of MySQL (`ACCOUNT LOCK`).
pub(crate) const ER_ACCOUNT_HAS_BEEN_LOCKED: u16 = 3118;

/// `ER_ACCOUNT_HAS_BEEN_LOCKED` of MariaDB (`ACCOUNT LOCK`), numbered apart from MySQL's.
pub(crate) const ER_ACCOUNT_HAS_BEEN_LOCKED_MARIADB: u16 = 4151;

/// `ER_TABLEACCESS_DENIED_ERROR`: the user lacks a privilege on a table (`CREATE`,
/// `UPDATE`, …).
pub(crate) const ER_TABLEACCESS_DENIED: u16 = 1142;

/// `ER_COLUMNACCESS_DENIED_ERROR`: the user lacks a privilege on a column.
pub(crate) const ER_COLUMNACCESS_DENIED: u16 = 1143;

/// `ER_BAD_DB_ERROR`: the URL names a database that does not exist.
pub(crate) const ER_BAD_DB: u16 = 1049;

/// `ER_TRUNCATED_WRONG_VALUE_FOR_FIELD`: a value the column's character set cannot hold
/// (a tag in a latin1 table).
pub(crate) const ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: u16 = 1366;

/// `ER_NO_SUCH_TABLE`: a statement named a table that does not exist.
pub(crate) const ER_NO_SUCH_TABLE: u16 = 1146;

/// `ER_DUP_FIELDNAME`: an `ALTER TABLE … ADD COLUMN` of a column already there.
pub(crate) const ER_DUP_FIELDNAME: u16 = 1060;

/// Reads a `mysql://` or `mariadb://` URL; `expected` is the form the error shows
/// ("mysql://user:password@host:port/database"). No I/O.
pub(crate) fn connect_options(url: &str, expected: &str) -> Result<MySqlConnectOptions> {
    let normalized = url.replacen("mariadb://", "mysql://", 1);
    if crate::redact::ambiguous_user_info(url) {
        return Err(Error::invalid_url(
            url,
            "the user or password holds a '/' or a '?', which ends the host part of a \
             URL: percent-encode them as %2F and %3F",
        ));
    }
    let options = MySqlConnectOptions::from_str(&normalized)
        .map_err(|e| Error::invalid_url(url, format!("{e}; expected {expected}")))?;
    #[cfg(not(feature = "tls"))]
    {
        use sqlx::mysql::MySqlSslMode;
        let asks = match options.get_ssl_mode() {
            MySqlSslMode::Required => Some("ssl-mode=REQUIRED"),
            MySqlSslMode::VerifyCa => Some("ssl-mode=VERIFY_CA"),
            MySqlSslMode::VerifyIdentity => Some("ssl-mode=VERIFY_IDENTITY"),
            _ => None,
        };
        if let Some(asks) = asks {
            return Err(super::tls_left_out(url, asks));
        }
    }
    // `[::1]` to `::1`: sqlx would resolve the brackets (see `db::unbracketed`).
    let host = super::unbracketed(options.get_host()).to_string();
    Ok(options.host(&host))
}

/// The server as messages name it: "MySQL at host:port".
pub(crate) fn address(options: &MySqlConnectOptions) -> String {
    format!(
        "MySQL at {}",
        super::host_port(options.get_host(), options.get_port())
    )
}

/// A pool of at most `max` connections that connects on first use, an acquire waiting
/// at most `acquire_timeout`. Lazy so that building a store or registry does no I/O and
/// needs no runtime context; the first statement runs on the background runtime.
pub(crate) fn lazy_pool(
    options: &MySqlConnectOptions,
    max: u32,
    acquire_timeout: Duration,
) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(acquire_timeout)
        .connect_lazy_with(options.clone())
}

/// The server's error number of a statement that failed there, if it did.
pub(crate) fn error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

/// Runs `ddl`, the `CREATE TABLE IF NOT EXISTS` of table `name`, only when the URL's
/// database has no such table. MySQL refuses even a `CREATE … IF NOT EXISTS` of a table
/// that exists to a user without `CREATE`, so a user with DML grants alone (as shops
/// run servers) could not start at all; looked up first, it needs `CREATE` only while
/// the table is missing. Two processes finding it missing at once both run `ddl`, and
/// `IF NOT EXISTS` makes the second a no-op. A `CREATE` refused for a grant after
/// someone else (a DBA's migration) made the table since the lookup is no refusal
/// either: see [`super::refusal::after_create`].
pub(crate) async fn create_missing(
    conn: &mut MySqlConnection,
    name: &str,
    ddl: &'static str,
) -> std::result::Result<(), sqlx::Error> {
    if found(conn, name).await? {
        return Ok(());
    }
    match sqlx::raw_sql(ddl).execute(&mut *conn).await {
        Ok(_) => Ok(()),
        Err(e) => super::refusal::after_create(e, found(conn, name)).await,
    }
}

/// Whether the URL's database has table `name`. information_schema lists the tables
/// the user has any privilege on: a DML user sees its tables.
async fn found(conn: &mut MySqlConnection, name: &str) -> std::result::Result<bool, sqlx::Error> {
    let found: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(name)
    .fetch_one(&mut *conn)
    .await?;
    Ok(found > 0)
}

/// The database's clock, `NOW(3)`, in ms since the Unix epoch.
pub(crate) async fn now_ms<'c, E>(conn: E) -> std::result::Result<i64, sqlx::Error>
where
    E: sqlx::MySqlExecutor<'c>,
{
    let row = sqlx::query("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS now_ms")
        .fetch_one(conn)
        .await?;
    row.try_get("now_ms")
}
