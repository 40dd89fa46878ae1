//! Keeps `fork()` out of SQLite: statements hold a pass, and the fork waits until none
//! is held.
//!
//! SQLite keeps process-global state (its mutexes, the table of open files and their
//! POSIX locks), and sqlx runs each connection on a thread of its own. A `fork()` while
//! such a thread is inside SQLite would copy a mutex locked by a thread the child does
//! not have, and the child's first statement would wait forever. So every statement
//! runs inside a [`Pass`], and a `pthread_atfork` handler waits, before the fork, until
//! no statement is running (new ones wait meanwhile). Apart from
//! [`sqlite`](super::sqlite) because this is process-wide state (statics and fork
//! handlers), while that file is one database's connection.

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
pub(crate) struct Pass(());

impl Drop for Pass {
    fn drop(&mut self) {
        // SeqCst: see `enter`.
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits (asynchronously) while a fork is being prepared, then counts a statement in.
pub(crate) async fn enter() -> Result<Pass> {
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
pub(crate) fn check_child() -> Result<()> {
    // Relaxed: written by the child's only thread in `after_fork_in_child`.
    if UNCLEAN.load(Ordering::Relaxed) {
        return Err(Error::InvalidConfig(format!(
            "this process was forked while a SQLite statement of its parent ran for more than {FORK_WAIT:?}; SQLite cannot be used in it safely. Fork before using leafid, or open the generator after the fork"
        )));
    }
    Ok(())
}

pub(crate) fn install() {
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
