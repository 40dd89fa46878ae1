//! Where segments come from: the `leaf_alloc` table.
//!
//! A [`SegmentStore`] reserves a range of ids for a tag by raising the tag's `max_id`
//! by a step, atomically, and reads the new value back: the caller then owns
//! `[max_id - step, max_id)`. Every backend keeps Leaf's table and semantics, so a Java
//! Leaf server and leafid sharing a table never hand out the same id.
//!
//! | URL | backend |
//! |---|---|
//! | `mysql://user:pass@host:3306/db` | [`mysql::MysqlStore`], Leaf's own table and SQL |
//! | `postgres://user:pass@host:5432/db` (or `postgresql://`) | [`postgres::PostgresStore`], Leaf's table with PostgreSQL types, one statement per segment; works behind PgBouncer in transaction mode |
//! | `sqlite://path/to/ids.db` | [`sqlite::SqliteStore`], the embedded default; several processes on one host may share the file |
//! | `memory:` | [`memory::MemoryStore`], for tests of one process |

pub mod memory;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// The longest tag Leaf's `biz_tag varchar(128)` column holds.
pub const MAX_TAG_LEN: usize = 128;

/// What one allocation returned: the tag's new `max_id` and the table's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The exclusive end of the range just reserved.
    pub max_id: i64,
    /// The `step` column (the tag's configured step, Leaf's `minStep`).
    pub step: i64,
}

/// One row of `leaf_alloc`, for admin listings (Leaf's `/db` page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagRow {
    /// `biz_tag`.
    pub tag: String,
    /// `max_id`: the next range starts here.
    pub max_id: i64,
    /// `step`.
    pub step: i64,
    /// `description`.
    pub description: Option<String>,
    /// `update_time`, as the database prints it.
    pub update_time: String,
}

/// A table of tags from which ranges of ids are reserved.
pub trait SegmentStore: Send + Sync + std::fmt::Debug {
    /// Raises `max_id` of `tag` by `step` (or by the row's own step when `None`) and
    /// returns the new `max_id` with the row's step, in one transaction.
    fn allocate<'a>(&'a self, tag: &'a str, step: Option<i64>)
        -> BoxFuture<'a, Result<Allocation>>;

    /// Every tag in the table.
    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>>;

    /// Every row of the table.
    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>>;

    /// Whether `tag` has a row: the cheap check a generator makes before it answers
    /// `TagNotFound` for a tag missing from its cache (one indexed `SELECT` in the
    /// SQL stores). The default lists every tag; a custom store may do better.
    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { Ok(self.tags().await?.iter().any(|t| t == tag)) })
    }

    /// Creates the table if it does not exist.
    fn create_table(&self) -> BoxFuture<'_, Result<()>>;

    /// Inserts a tag whose first id will be `start`; [`Error::TagExists`] if present.
    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> BoxFuture<'a, Result<()>>;

    /// The same store with fresh connections, for a child process after `fork()`
    /// (inherited sockets belong to the parent).
    fn reopen(&self) -> Result<Arc<dyn SegmentStore>>;

    /// Whether the table treats tags that differ only in case or in trailing spaces
    /// (`order`, `Order`, `order `) as one row, as MySQL's default collations do. The
    /// generator keys its high-water marks the same way: a store that folds must say so,
    /// or a row reached under two spellings and lowered could reissue ids; a store that
    /// does not fold must not, or two distinct rows would refuse each other's segments.
    /// The default, `true`, is the safe side for a store that does not say: it can only
    /// refuse more, never reissue.
    fn folds_tag_case(&self) -> bool {
        true
    }
}

/// Opens the store a URL names. No I/O happens here: connections are made on first
/// use, so a bad URL fails at once and a down database fails on the first refill.
pub fn open(url: &str) -> Result<Arc<dyn SegmentStore>> {
    let scheme = url.split_once(':').map(|(s, _)| s).unwrap_or("");
    match scheme {
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(Arc::new(mysql::MysqlStore::new(url)?)),
        #[cfg(not(feature = "mysql"))]
        "mysql" | "mariadb" => Err(Error::feature_left_out(url, "mysql")),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(postgres::PostgresStore::new(url)?)),
        #[cfg(not(feature = "postgres"))]
        "postgres" | "postgresql" => Err(Error::feature_left_out(url, "postgres")),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Arc::new(sqlite::SqliteStore::new(url)?)),
        #[cfg(not(feature = "sqlite"))]
        "sqlite" => Err(Error::feature_left_out(url, "sqlite")),
        "memory" => Ok(Arc::new(memory::MemoryStore::new())),
        _ => Err(Error::invalid_url(
            url,
            "expected mysql://user:pass@host:port/db, postgres://user:pass@host:port/db, \
             sqlite://path/to/file.db or memory:",
        )),
    }
}

/// Refuses tags Leaf's table cannot hold, before any I/O.
pub fn validate_tag(tag: &str) -> Result<()> {
    let reason = if tag.is_empty() {
        "it is empty"
    } else if tag.chars().count() > MAX_TAG_LEN {
        "it is longer than 128 characters (leaf_alloc.biz_tag is varchar(128))"
    } else if tag.contains('\0') {
        "it contains a NUL byte"
    } else {
        return Ok(());
    };
    Err(Error::InvalidTag {
        tag: tag.chars().take(40).collect(),
        reason: reason.into(),
    })
}

/// Refuses steps that cannot form a segment.
pub fn validate_step(step: i64) -> Result<()> {
    if step <= 0 || step > i32::MAX as i64 {
        return Err(Error::InvalidConfig(format!(
            "step {step} out of range; use 1..=2147483647 (leaf_alloc.step is int(11))"
        )));
    }
    Ok(())
}

/// Refuses a first id from which the first segment (`start..start + step`) would pass
/// `i64::MAX`, or a negative one; call after [`validate_step`].
pub fn validate_start(tag: &str, start: i64, step: i64) -> Result<()> {
    if start < 0 {
        return Err(Error::InvalidConfig(format!(
            "tag {tag:?}: start {start} is negative; ids start at 0 or above"
        )));
    }
    if step <= 0 || start > i64::MAX - step {
        return Err(Error::InvalidConfig(format!(
            "tag {tag:?}: start {start} with step {step} would pass the largest id {}; use a start of at most {}",
            i64::MAX,
            i64::MAX.saturating_sub(step.max(1))
        )));
    }
    Ok(())
}

/// The error for a `leaf_alloc` row no segment can be reserved from: a step below 1,
/// or a `max_id` so close to `i64::MAX` that one more step would pass it. Permanent:
/// retrying does not help until the row is fixed.
pub(crate) fn bad_row(tag: &str, max_id: i64, step: i64, request: Option<i64>) -> Error {
    let reason = if step <= 0 {
        format!("step is {step}; leafid needs a step of at least 1")
    } else {
        let by = request.unwrap_or(step);
        format!(
            "max_id {max_id} + step {by} would pass the largest id {}; the tag has no ids left (move it to a new tag)",
            i64::MAX
        )
    };
    Error::Malformed {
        what: "leaf_alloc row",
        path: format!("biz_tag {tag:?}"),
        reason,
    }
}

/// The URL with any password replaced, for messages (see [`crate::redact`]).
pub fn redact(url: &str) -> String {
    crate::redact::url(url)
}

#[cfg(any(feature = "mysql", feature = "postgres"))]
/// The result of a tag's `INSERT` as `create_tag` reports it: a unique-key violation is
/// [`Error::TagExists`] (sqlx knows each database's code for it), any other error
/// `db_error`'s (the store's own mapping), with an `InvalidTag` naming this tag.
pub(crate) fn insert_result<T>(
    tag: &str,
    result: std::result::Result<T, sqlx::Error>,
    db_error: fn(sqlx::Error) -> Error,
) -> Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
            Err(Error::TagExists { tag: tag.into() })
        }
        Err(e) => Err(match db_error(e) {
            Error::InvalidTag { reason, .. } => Error::InvalidTag {
                tag: tag.into(),
                reason,
            },
            other => other,
        }),
    }
}

/// The privileges a database store's user needs, as an `AccessDenied` names them
/// (docs/errors.md shows the `GRANT` statements).
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) const GRANTS: &str = "SELECT, INSERT, UPDATE on leaf_alloc \
     (and CREATE, only while the table is missing, for create_table)";

/// Maps a database error to what the user sees, keeping it as the error's source
/// (classified by [`crate::error::cause`]).
#[cfg(any(feature = "mysql", feature = "sqlite"))]
pub(crate) fn db_error(e: sqlx::Error) -> Error {
    use crate::error::Cause;
    if let sqlx::Error::Database(db) = &e {
        let msg = db.message().to_string();
        // Configuration, not an outage: retrying cannot help, so say what to fix.
        #[cfg(feature = "mysql")]
        {
            use crate::db::mysql::{error_number, ER_TRUNCATED_WRONG_VALUE_FOR_FIELD};
            if let Some(refusal) = crate::db::refusal::refusal(&e) {
                return refusal.error(msg, GRANTS, Cause::sqlx(e));
            }
            // A tag the column's character set cannot hold (a latin1 table).
            if error_number(&e) == Some(ER_TRUNCATED_WRONG_VALUE_FOR_FIELD) {
                return Error::InvalidTag {
                    tag: String::new(),
                    reason: format!(
                        "the leaf_alloc table cannot store it ({msg}); convert the table to utf8mb4 \
                         (ALTER TABLE leaf_alloc CONVERT TO CHARACTER SET utf8mb4)"
                    ),
                };
            }
        }
        // MySQL/MariaDB: ER_NO_SUCH_TABLE (1146, SQLSTATE 42S02); SQLite: "no such table".
        if db.code().as_deref() == Some("42S02") || msg.contains("no such table") {
            return Error::TableMissing {
                table: "leaf_alloc".into(),
            };
        }
    }
    let text = e.to_string();
    Error::store_with(text, Cause::sqlx(e))
}

#[cfg(test)]
mod tests {
    /// Both spellings libpq takes open the PostgreSQL store, with no I/O.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_and_postgresql_urls_open_the_postgres_store() {
        for url in [
            "postgres://leaf:pw@127.0.0.1:5432/leaf",
            "postgresql://leaf:pw@127.0.0.1/leaf?sslmode=disable",
        ] {
            let store = super::open(url).unwrap();
            assert!(
                format!("{store:?}").starts_with("PostgresStore"),
                "{store:?}"
            );
        }
    }

    /// Found by the `urls` fuzz target: a reason that quoted a piece of the URL.
    #[test]
    fn invalid_url_reasons_never_quote_the_password() {
        for u in [
            "fixed:user:s3cret99@",
            "fixed:\u{0}user:s3cret99@x://1",
            "mysql://user:s3cret99@host:notaport/db",
            "redis://user:s3cret99@h",
            "zookeeper://user:s3cret99@/leaf?port=1",
        ] {
            if let Err(e) = super::open(u) {
                let shown = format!("{e} {e:?}");
                assert!(!shown.contains("s3cret99"), "{u}: {shown}");
            }
        }
    }
}
