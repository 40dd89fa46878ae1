//! A SQLite database file and the one connection this process keeps to it.
//!
//! Statements of one process are serialised by SQLite's write lock anyway, so one
//! connection is enough; it is opened on first use, in WAL mode with a busy timeout so
//! that several processes on one host sharing the file queue instead of failing. Every
//! statement runs inside a fork pass ([`sqlite_fork`](super::sqlite_fork)), and counts
//! as finished only once its connection's thread answered a ping, that is, went back
//! to waiting for commands, with the statement reset. The connection is never closed
//! in the background, so no SQLite call happens outside a pass. A forked child opens
//! its own connection and never touches the parent's.
//!
//! What the file holds (`leaf_alloc`) and its statements belong to the segment store;
//! this file is how any statement reaches the database.

use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};
use sqlx::{ConnectOptions, Connection};

use super::sqlite_fork as quiet;
use crate::error::{Error, Result};
use crate::runtime::{self, BoxFuture};

/// How long SQLite waits for another process's write lock, and how long `SQLITE_BUSY`
/// answers that the busy timeout does not cover are retried.
pub(crate) const BUSY_WAIT: Duration = Duration::from_secs(10);

/// A SQLite database file and this process's one connection to it.
#[derive(Debug)]
pub(crate) struct SqliteFile {
    path: String,
    /// The fork epoch this file was opened under.
    epoch: u64,
    /// The one connection, opened on first use. Statements of one process are
    /// serialised by SQLite's write lock anyway.
    conn: tokio::sync::Mutex<Option<SqliteConnection>>,
}

impl SqliteFile {
    /// The database at `path`, created on first use. No I/O.
    pub(crate) fn new(path: String) -> SqliteFile {
        // Before any statement: a fork racing with the first one is covered too.
        quiet::install();
        SqliteFile {
            path,
            epoch: runtime::fork_epoch(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The file's path as given.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    fn options(&self) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // Other processes hold the write lock only for one statement; wait for it.
            .busy_timeout(BUSY_WAIT)
    }

    /// Refuses a database on a network filesystem: SQLite's own locking is unreliable
    /// over NFS and its kin (SQLite's documentation says so), and two processes could
    /// then receive overlapping segments. The directory is checked (the file may not
    /// exist yet).
    pub(crate) fn refuse_network_fs(&self) -> Result<()> {
        // The file itself when it exists, resolved: a symlink to a file on NFS would
        // pass a check of the link's own directory.
        let resolved = std::fs::canonicalize(&self.path).ok();
        if let Some(real) = &resolved {
            if let Ok(Some(kind)) = super::network_fs::network_fs(real) {
                return Err(network_fs_refusal(&self.path, kind));
            }
        }
        let file = std::path::Path::new(&self.path);
        let dir = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        match super::network_fs::network_fs(dir) {
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
    ///
    /// The outer error is leafid's own (a forked child, a network filesystem, a file
    /// that cannot be opened); the inner one the statement's, for the caller to map to
    /// what its table means.
    pub(crate) async fn run<T, F>(&self, op: F) -> Result<std::result::Result<T, sqlx::Error>>
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
                other => return Ok(other),
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

impl Drop for SqliteFile {
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
            SqliteFile::new(path).refuse_network_fs().unwrap();
        }
    }
}
