//! The background runtime and fork handling.
//!
//! All database and ZooKeeper I/O runs on one tokio runtime per process, started on
//! first use and owned by the core, so ids keep flowing whatever runtime (or none) the
//! caller uses. A fork leaves the child with a copy of the runtime's memory but none of
//! its threads; [`fork_epoch`] changes in the child, which makes every generator drop
//! what it inherited and makes [`handle`] start a fresh runtime.

use std::future::Future;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

use crate::error::{Error, Result};

/// Bumped in the child after every `fork()`.
static FORK_EPOCH: AtomicU64 = AtomicU64::new(0);
static AT_FORK: Once = Once::new();

struct Slot {
    epoch: u64,
    runtime: tokio::runtime::Runtime,
}

static RUNTIME: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn after_fork_in_child() {
    // Only an atomic add: the child of a multi-threaded process may run nothing that
    // takes a lock here.
    FORK_EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Installs the fork hook. Called by every generator constructor, so any generator
/// that exists before a fork is covered.
pub fn watch_forks() {
    AT_FORK.call_once(|| {
        // SAFETY: registers a plain extern "C" fn that only touches an atomic.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
}

/// A number that changes in a child process after `fork()`. Generators remember the
/// value they were built under and treat a change as "everything inherited is the
/// parent's".
#[inline]
pub fn fork_epoch() -> u64 {
    // Relaxed: the value is only compared; the child's single thread wrote it.
    FORK_EPOCH.load(Ordering::Relaxed)
}

/// The handle of this process's background runtime, started on first use and again
/// in a child after a fork.
pub fn handle() -> tokio::runtime::Handle {
    watch_forks();
    loop {
        let epoch = fork_epoch();
        let current = RUNTIME.load(Ordering::Acquire);
        // SAFETY: a published Slot is never freed (see below), so the pointer stays valid.
        if let Some(slot) = unsafe { current.as_ref() } {
            if slot.epoch == epoch {
                return slot.runtime.handle().clone();
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("leafid-bg")
            .enable_all()
            .build()
            .expect("leafid: cannot start the background tokio runtime");
        let fresh = Box::into_raw(Box::new(Slot { epoch, runtime }));
        match RUNTIME.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // The replaced Slot (if any) belongs to the parent: its threads do not exist
            // in this process, so dropping it would wait for them forever. It is leaked
            // on purpose, once per fork.
            Ok(_) => {}
            Err(_) => {
                // Another thread won; discard ours without waiting on its threads.
                // SAFETY: `fresh` was never published.
                let lost = unsafe { Box::from_raw(fresh) };
                lost.runtime.shutdown_background();
            }
        }
    }
}

/// Runs `fut` on the background runtime and waits for it from any thread (a plain
/// thread, a Python thread without the GIL, a libuv worker). Used by blocking
/// constructors and by the rare slow path of `next_id`.
pub fn block_on<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let rt = handle();
    let task = rt.spawn(fut);
    rt.spawn(async move {
        let _ = tx.send(task.await);
    });
    match rx
        .recv()
        .expect("leafid: the background runtime dropped a task")
    {
        Ok(v) => v,
        // A panic in the task resumes in the caller, with its own message.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("leafid: a background task was cancelled: {e}"),
    }
}

/// Runs `fut` on the background runtime and awaits it from the caller's runtime, so
/// connections always live on the runtime that outlives the call.
pub async fn run<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match handle().spawn(fut).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Spawns a background task on the runtime.
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(fut)
}

/// Boxed future used by the object-safe store and registry traits.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Fails with a clear error when called in a forked child for a resource that cannot
/// follow it.
pub(crate) fn refuse_after_fork(built_under: u64, what: &str) -> Result<()> {
    if built_under == fork_epoch() {
        Ok(())
    } else {
        Err(Error::InvalidConfig(format!(
            "{what} was created before fork() and cannot be used in the child; create it after the fork"
        )))
    }
}
