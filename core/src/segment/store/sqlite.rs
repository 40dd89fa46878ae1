//! The embedded default: `leaf_alloc` in a SQLite file.
//!
//! An allocation is a single `UPDATE … RETURNING` statement, which SQLite runs under
//! its database write lock, so several processes on one host sharing the file never
//! receive overlapping ranges. WAL mode and a busy timeout let them queue instead of
//! failing.
//!
//! # Fork
//!
//! SQLite keeps process-global state (its mutexes, the table of open files and their
//! POSIX locks), and sqlx runs each connection on a thread of its own. A `fork()` while
//! such a thread is inside SQLite would copy a mutex locked by a thread the child does
//! not have, and the child's first statement would wait forever. So every statement
//! runs inside a `quiet::Pass`, and a `pthread_atfork` handler waits, before the
//! fork, until no statement is running (new ones wait meanwhile). A statement counts
//! as finished only once its connection's thread answered a ping, that is, went back
//! to waiting for commands, with the statement reset. The store keeps one connection
//! and never closes it in the background, so no SQLite call happens outside a pass. A
//! forked child opens its own connection ([`SegmentStore::reopen`]) and never touches
//! the parent's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};
use sqlx::{ConnectOptions, Connection, Row};

use super::{bad_row, db_error, validate_start, validate_step, Allocation, SegmentStore, TagRow};
use crate::error::{Error, Result};
use crate::runtime::{self, BoxFuture};

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leaf_alloc (
  biz_tag TEXT NOT NULL DEFAULT '' PRIMARY KEY,
  max_id INTEGER NOT NULL DEFAULT 1,
  step INTEGER NOT NULL,
  description TEXT DEFAULT NULL,
  update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

/// Rows whose `biz_tag` is text valid as UTF-8. SQLite's dynamic typing lets a hand-made
/// table (or a BLOB insert) hold another type there; such a row is no tag anyone can
/// ask for, and is skipped (and reported) rather than failing the listing of all tags.
macro_rules! text_tag {
    () => {
        "typeof(biz_tag) = 'text'"
    };
}

/// How long SQLite waits for another process's write lock, and how long `SQLITE_BUSY`
/// answers that the busy timeout does not cover are retried.
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// A `leaf_alloc` table in a SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    path: String,
    /// The fork epoch this store was opened under.
    epoch: u64,
    /// The one connection, opened on first use. Statements of one process are
    /// serialised by SQLite's write lock anyway.
    conn: tokio::sync::Mutex<Option<SqliteConnection>>,
}

impl SqliteStore {
    /// Takes `sqlite://relative/path.db` or `sqlite:///absolute/path.db`; the file is
    /// created on first use.
    pub fn new(url: &str) -> Result<SqliteStore> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or("");
        let path = path.split('?').next().unwrap_or("");
        if path.is_empty() || path == ":memory:" {
            return Err(Error::invalid_url(
                url,
                "expected sqlite://path/to/file.db (a file shared by the processes of one host)",
            ));
        }
        Ok(SqliteStore::at(path.to_string()))
    }

    fn at(path: String) -> SqliteStore {
        // Before any statement: a fork racing with the first one is covered too.
        quiet::install();
        SqliteStore {
            path,
            epoch: runtime::fork_epoch(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    fn options(&self) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // Other processes hold the write lock only for one statement; wait for it.
            .busy_timeout(BUSY_WAIT)
    }

    /// Logs the rows `text_tag!` leaves out of a listing, once per listing, so the
    /// operator learns why a row is missing.
    async fn report_untagged(&self) -> Result<()> {
        let row = self
            .run(|c| {
                Box::pin(
                    sqlx::query(concat!(
                        "SELECT COUNT(*), GROUP_CONCAT(DISTINCT typeof(biz_tag)) \
                         FROM leaf_alloc WHERE NOT (",
                        text_tag!(),
                        ")"
                    ))
                    .fetch_one(c),
                )
            })
            .await?;
        let count: i64 = row.try_get(0).unwrap_or(0);
        if count > 0 {
            let types: Option<String> = row.try_get(1).unwrap_or(None);
            tracing::warn!(
                rows = count,
                types = types.as_deref().unwrap_or(""),
                path = %self.path,
                "leaf_alloc rows whose biz_tag is not text are skipped; fix or delete them"
            );
        }
        Ok(())
    }

    /// Refuses a database on a network filesystem: SQLite's own locking is unreliable
    /// over NFS and its kin (SQLite's documentation says so), and two processes could
    /// then receive overlapping segments. The directory is checked (the file may not
    /// exist yet).
    fn refuse_network_fs(&self) -> Result<()> {
        // The file itself when it exists, resolved: a symlink to a file on NFS would
        // pass a check of the link's own directory.
        let resolved = std::fs::canonicalize(&self.path).ok();
        if let Some(real) = &resolved {
            if let Ok(Some(kind)) = crate::snowflake::registry::host_lock::network_fs(real) {
                return Err(network_fs_refusal(&self.path, kind));
            }
        }
        let file = std::path::Path::new(&self.path);
        let dir = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        match crate::snowflake::registry::host_lock::network_fs(dir) {
            // A directory that does not exist yet: the open reports it.
            Err(_) | Ok(None) => Ok(()),
            Ok(Some(kind)) => Err(network_fs_refusal(&self.path, kind)),
        }
    }

    /// Runs `op` on the connection inside a fork pass, opening the connection first if
    /// needed, and again while SQLite reports the file busy. The busy timeout covers
    /// most waits, but SQLite returns `SQLITE_BUSY` at once in a few cases (two
    /// processes opening a new file and switching it to WAL together, a read
    /// transaction that must become a write one); those are retried here for up to
    /// the same 10 s. The pass is let go between tries, so a fork waits for one
    /// statement at most.
    async fn run<T, F>(&self, op: F) -> Result<T>
    where
        F: for<'c> Fn(
            &'c mut SqliteConnection,
        ) -> BoxFuture<'c, std::result::Result<T, sqlx::Error>>,
    {
        let deadline = Instant::now() + BUSY_WAIT;
        let mut pause = Duration::from_millis(2);
        let mut slot = self.conn.lock().await;
        loop {
            let outcome = {
                let _pass = quiet::enter().await?;
                if slot.is_none() {
                    self.refuse_network_fs()?;
                    let conn = self.options().connect().await.map_err(|e| {
                        Error::store(format!("cannot open SQLite database {:?}: {e}", self.path))
                    })?;
                    *slot = Some(conn);
                }
                let conn = slot.as_mut().expect("opened above");
                let outcome = op(&mut *conn).await;
                // The answer to a ping comes once the connection's thread took the next
                // command, so the statement is reset and SQLite idle: only then may a
                // fork happen.
                match conn.ping().await {
                    Ok(()) => outcome,
                    Err(e) => {
                        // The connection's thread is gone; open a new one next time.
                        if let Some(conn) = slot.take() {
                            drop(conn.close_hard().await);
                        }
                        outcome.and(Err(e))
                    }
                }
            };
            match outcome {
                Err(sqlx::Error::Database(db))
                    // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with any extended code bits.
                    if db
                        .code()
                        .and_then(|c| c.parse::<i32>().ok())
                        .is_some_and(|c| matches!(c & 0xff, 5 | 6))
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other.map_err(db_error),
            }
        }
    }
}

/// The error for a SQLite database on a network filesystem of kind `kind`.
fn network_fs_refusal(path: &str, kind: &str) -> Error {
    Error::InvalidConfig(format!(
        "SQLite database {path:?} is on a network filesystem ({kind}): SQLite's file locking \
         is unreliable there, so two processes could receive the same segment; put the file \
         on a local disk, or use mysql:// for processes on several hosts"
    ))
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let Some(conn) = self.conn.get_mut().take() else {
            return;
        };
        if self.epoch != runtime::fork_epoch() {
            // The parent's connection: its thread is not in this process.
            std::mem::forget(conn);
            return;
        }
        // Closing runs SQLite on the connection's thread: inside a pass, like any
        // statement, so that a fork cannot catch it halfway.
        let close = async move {
            if quiet::enter().await.is_ok() {
                drop(conn.close().await);
            }
        };
        drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            || drop(runtime::spawn(close)),
        )));
    }
}

impl SegmentStore for SqliteStore {
    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, Result<Allocation>> {
        Box::pin(async move {
            // Leaf's UPDATE, guarded: only an integer row with a step of at least 1 whose
            // max_id has room for one more step, so max_id never overflows into a REAL.
            let row = self
                .run(|c| {
                    let tag = tag.to_string();
                    Box::pin(async move {
                        match step {
                            None => {
                                sqlx::query(
                                    "UPDATE leaf_alloc SET max_id = max_id + step, \
                                 update_time = CURRENT_TIMESTAMP \
                                 WHERE biz_tag = ?1 AND typeof(max_id) = 'integer' \
                                 AND typeof(step) = 'integer' AND step > 0 \
                                 AND max_id <= 9223372036854775807 - step \
                                 RETURNING max_id, step",
                                )
                                .bind(tag)
                                .fetch_optional(c)
                                .await
                            }
                            Some(step) => {
                                sqlx::query(
                                    "UPDATE leaf_alloc SET max_id = max_id + ?1, \
                                 update_time = CURRENT_TIMESTAMP \
                                 WHERE biz_tag = ?2 AND typeof(max_id) = 'integer' \
                                 AND typeof(step) = 'integer' AND step > 0 AND ?1 > 0 \
                                 AND max_id <= 9223372036854775807 - ?1 \
                                 RETURNING max_id, step",
                                )
                                .bind(step)
                                .bind(tag)
                                .fetch_optional(c)
                                .await
                            }
                        }
                    })
                })
                .await?;
            if let Some(row) = row {
                return Ok(Allocation {
                    max_id: row.try_get("max_id").map_err(db_error)?,
                    step: row.try_get("step").map_err(db_error)?,
                });
            }
            // Missing, or a row the guard refused: say which.
            let row = self
                .run(|c| {
                    let tag = tag.to_string();
                    Box::pin(async move {
                        sqlx::query(
                            "SELECT CAST(max_id AS INTEGER) AS max_id, CAST(step AS INTEGER) AS step, \
                             typeof(max_id) AS max_type, typeof(step) AS step_type \
                             FROM leaf_alloc WHERE biz_tag = ?",
                        )
                        .bind(tag)
                        .fetch_optional(c)
                        .await
                    })
                })
                .await?;
            let Some(row) = row else {
                return Err(Error::TagNotFound { tag: tag.into() });
            };
            let (max_type, step_type): (String, String) = (
                row.try_get("max_type").map_err(db_error)?,
                row.try_get("step_type").map_err(db_error)?,
            );
            if max_type != "integer" || step_type != "integer" {
                return Err(Error::Malformed {
                    what: "leaf_alloc row",
                    path: format!("biz_tag {tag:?}"),
                    reason: format!(
                        "max_id is stored as {max_type} and step as {step_type}; both must be integers"
                    ),
                });
            }
            Err(bad_row(
                tag,
                row.try_get("max_id").map_err(db_error)?,
                row.try_get("step").map_err(db_error)?,
                step,
            ))
        })
    }

    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = self
                .run(|c| {
                    Box::pin(
                        sqlx::query(concat!(
                            "SELECT biz_tag FROM leaf_alloc WHERE ",
                            text_tag!()
                        ))
                        .fetch_all(c),
                    )
                })
                .await?;
            self.report_untagged().await?;
            // A text that is not UTF-8 (a CAST of a BLOB) fails alone, not the listing.
            Ok(rows
                .iter()
                .filter_map(|r| match r.try_get::<String, _>(0) {
                    Ok(tag) => Some(tag),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %self.path, "a leaf_alloc row's biz_tag is unreadable; skipped");
                        None
                    }
                })
                .collect())
        })
    }

    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let row = self
                .run(|c| {
                    Box::pin(
                        sqlx::query("SELECT 1 FROM leaf_alloc WHERE biz_tag = ?")
                            .bind(tag)
                            .fetch_optional(c),
                    )
                })
                .await?;
            Ok(row.is_some())
        })
    }

    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>> {
        Box::pin(async move {
            // CAST: a row written by hand with a REAL still lists (clamped).
            let rows = self
                .run(|c| {
                    Box::pin(
                        sqlx::query(concat!(
                            "SELECT biz_tag, CAST(max_id AS INTEGER) AS max_id, \
                             CAST(step AS INTEGER) AS step, description, update_time \
                             FROM leaf_alloc WHERE ",
                            text_tag!(),
                            " ORDER BY biz_tag"
                        ))
                        .fetch_all(c),
                    )
                })
                .await?;
            self.report_untagged().await?;
            // A row that does not decode (a tag or description that is not UTF-8) is
            // skipped alone, as in `tags`.
            Ok(rows
                .iter()
                .filter_map(|r| {
                    let row = (|| {
                        Ok::<_, sqlx::Error>(TagRow {
                            tag: r.try_get("biz_tag")?,
                            max_id: r.try_get("max_id")?,
                            step: r.try_get("step")?,
                            description: r.try_get("description")?,
                            update_time: r.try_get("update_time")?,
                        })
                    })();
                    row.map_err(|e| {
                        tracing::warn!(error = %e, path = %self.path, "a leaf_alloc row is unreadable; skipped");
                    })
                    .ok()
                })
                .collect())
        })
    }

    fn create_table(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.run(|c| {
                Box::pin(async move { sqlx::raw_sql(CREATE_TABLE).execute(c).await.map(drop) })
            })
            .await
        })
    }

    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_step(step)?;
            validate_start(tag, start, step)?;
            let inserted = self
                .run(|c| {
                    let (tag, description) = (tag.to_string(), description.to_string());
                    Box::pin(async move {
                        let result = sqlx::query(
                            "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)",
                        )
                        .bind(tag)
                        .bind(start)
                        .bind(step)
                        .bind(description)
                        .execute(c)
                        .await;
                        match result {
                            Ok(_) => Ok(true),
                            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                                Ok(false)
                            }
                            Err(e) => Err(e),
                        }
                    })
                })
                .await?;
            if inserted {
                Ok(())
            } else {
                Err(Error::TagExists { tag: tag.into() })
            }
        })
    }

    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        quiet::check_child()?;
        Ok(Arc::new(SqliteStore::at(self.path.clone())))
    }
}

/// Keeps `fork()` out of SQLite: statements hold a pass, and the fork waits until none
/// is held (see the module docs).
mod quiet {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Once;
    use std::time::{Duration, Instant};

    use crate::error::{Error, Result};

    /// Statements running now.
    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    /// A fork is being prepared: no statement may start.
    static FORKING: AtomicBool = AtomicBool::new(false);
    /// The last fork did not wait for every statement (see `before_fork`).
    static UNCLEAN: AtomicBool = AtomicBool::new(false);
    static INSTALLED: Once = Once::new();

    /// How long a fork waits for running statements. Longer than one statement can
    /// take (the busy timeout); past it the fork goes ahead and the child refuses to
    /// use SQLite rather than risk a lock held by a thread it does not have.
    const FORK_WAIT: Duration = Duration::from_secs(30);

    /// Held while a statement runs.
    pub(super) struct Pass(());

    impl Drop for Pass {
        fn drop(&mut self) {
            // SeqCst: see `enter`.
            RUNNING.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Waits (asynchronously) while a fork is being prepared, then counts a statement in.
    pub(super) async fn enter() -> Result<Pass> {
        check_child()?;
        install();
        loop {
            // SeqCst on both flags, here and in `before_fork` (Dekker): either the fork
            // sees this statement counted, or this statement sees the fork coming.
            if !FORKING.load(Ordering::SeqCst) {
                RUNNING.fetch_add(1, Ordering::SeqCst);
                if !FORKING.load(Ordering::SeqCst) {
                    return Ok(Pass(()));
                }
                RUNNING.fetch_sub(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// In a child forked while a statement was still running: refuse SQLite.
    pub(super) fn check_child() -> Result<()> {
        // Relaxed: written by the child's only thread in `after_fork_in_child`.
        if UNCLEAN.load(Ordering::Relaxed) {
            return Err(Error::InvalidConfig(format!(
                "this process was forked while a SQLite statement of its parent ran for more than {FORK_WAIT:?}; SQLite cannot be used in it safely. Fork before using leafid, or open the generator after the fork"
            )));
        }
        Ok(())
    }

    pub(super) fn install() {
        INSTALLED.call_once(|| {
            // The runtime's handler first, so this one is registered after it: prepare
            // handlers run in reverse order, so the fork waits for statements before
            // it takes the generators' locks (a statement may need a runtime thread
            // that would otherwise block on one of them).
            crate::runtime::watch_forks();
            // SAFETY: plain extern "C" fns touching only the atomics above.
            unsafe {
                libc::pthread_atfork(
                    Some(before_fork),
                    Some(after_fork_in_parent),
                    Some(after_fork_in_child),
                );
            }
        });
    }

    extern "C" fn before_fork() {
        FORKING.store(true, Ordering::SeqCst);
        let give_up = Instant::now() + FORK_WAIT;
        while RUNNING.load(Ordering::SeqCst) != 0 {
            if Instant::now() >= give_up {
                UNCLEAN.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        UNCLEAN.store(false, Ordering::SeqCst);
    }

    extern "C" fn after_fork_in_parent() {
        UNCLEAN.store(false, Ordering::SeqCst);
        FORKING.store(false, Ordering::SeqCst);
    }

    extern "C" fn after_fork_in_child() {
        // The parent's statements did not come along.
        RUNNING.store(0, Ordering::SeqCst);
        FORKING.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 20: `local:` refused network filesystems, the SQLite store did not,
    /// although SQLite's locking is no more reliable there.
    #[test]
    fn a_database_on_a_network_filesystem_is_refused_with_the_reason() {
        let e = network_fs_refusal("/mnt/nfs/ids.db", "NFS");
        let Error::InvalidConfig(msg) = e else {
            panic!("{e:?}")
        };
        assert!(
            msg.contains("/mnt/nfs/ids.db") && msg.contains("NFS"),
            "{msg}"
        );
        assert!(msg.contains("locking is unreliable"), "{msg}");
        // A local directory (and a relative path, checked in the working directory)
        // passes, and so does one that does not exist yet (the open reports it).
        let dir = tempfile::tempdir().unwrap();
        for path in [
            format!("{}/ids.db", dir.path().display()),
            "ids.db".to_string(),
            format!("{}/missing/ids.db", dir.path().display()),
        ] {
            SqliteStore::at(path).refuse_network_fs().unwrap();
        }
    }
}
