//! The background runtime and fork handling.
//!
//! All database and ZooKeeper I/O runs on one tokio runtime per process, started on
//! first use and owned by the core, so ids keep flowing whatever runtime (or none) the
//! caller uses. A fork leaves the child with a copy of the runtime's memory but none of
//! its threads; [`fork_epoch`] changes in the child, which makes every generator drop
//! what it inherited and makes [`handle`] start a fresh runtime.

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError, Weak};

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
    FORK_EPOCH.fetch_add(1, Ordering::SeqCst);
    release_fork_locks();
    // Locks other threads held for a moment (a statefulset renew): the child must not
    // keep them if the parent dies holding them.
    crate::snowflake::registry::host_lock::close_inherited_in_flight();
}

/// A lock that a fork() must not copy while another thread holds it: the child has
/// none of the parent's other threads, so it would stay locked in the child forever.
/// Registered locks are taken by the forking thread just before fork() and released
/// just after, in the parent and in the child alike. (std's futex locks, not
/// parking_lot's: those keep waiter queues in process memory, where a child would find
/// its parent's threads waiting forever.)
pub(crate) trait ForkLock: Send + Sync {
    /// Locks; dropping the returned guard unlocks.
    fn hold_for_fork(&self) -> Box<dyn Guard + '_>;
}

/// Anything held until dropped (a lock guard).
pub(crate) trait Guard {}
impl<T> Guard for T {}

/// Registered fork locks, with their rank: lower ranks are taken first, matching the
/// order in which the code nests them.
type Registered = Vec<(u8, Weak<dyn ForkLock>)>;
static FORK_LOCKS: Mutex<Registered> = Mutex::new(Vec::new());

/// What the forking thread holds across the fork. Fields drop in order: the guards
/// before the locks they borrow from, the registry last.
struct HeldAcrossFork {
    guards: Vec<Box<dyn Guard>>,
    _locks: Vec<Arc<dyn ForkLock>>,
    _registry: MutexGuard<'static, Registered>,
}

thread_local! {
    // The prepare and after-fork handlers run on the forking thread, in both processes.
    static HELD: RefCell<Option<HeldAcrossFork>> = const { RefCell::new(None) };
}

/// Registers `lock` to be held across every fork() while it lives.
pub(crate) fn register_fork_lock(rank: u8, lock: Weak<dyn ForkLock>) {
    watch_forks();
    let mut all = FORK_LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|(_, l)| l.strong_count() > 0);
    all.push((rank, lock));
}

extern "C" fn before_fork() {
    // The registry stays locked across the fork, so nobody registers meanwhile.
    let registry = FORK_LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut live: Vec<(u8, Arc<dyn ForkLock>)> = registry
        .iter()
        .filter_map(|(rank, l)| l.upgrade().map(|l| (*rank, l)))
        .collect();
    live.sort_by_key(|(rank, _)| *rank);
    let locks: Vec<Arc<dyn ForkLock>> = live.into_iter().map(|(_, l)| l).collect();
    let guards = locks
        .iter()
        .map(|l| {
            let guard = l.hold_for_fork();
            // SAFETY: the guard borrows from an Arc kept alive in `_locks`, which drops
            // after `guards` (field order).
            unsafe { std::mem::transmute::<Box<dyn Guard + '_>, Box<dyn Guard>>(guard) }
        })
        .collect();
    HELD.with(|h| {
        *h.borrow_mut() = Some(HeldAcrossFork {
            guards,
            _locks: locks,
            _registry: registry,
        })
    });
}

extern "C" fn after_fork_in_parent() {
    release_fork_locks();
}

fn release_fork_locks() {
    HELD.with(|h| {
        if let Some(mut held) = h.borrow_mut().take() {
            // Unlock in the reverse order of locking.
            while held.guards.pop().is_some() {}
        }
    });
}

/// Installs the fork hook. Called by every generator constructor, so any generator
/// that exists before a fork is covered.
pub fn watch_forks() {
    AT_FORK.call_once(|| {
        // SAFETY: plain extern "C" fns; they take only the registered locks.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            );
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
            .thread_name(THREAD_NAME)
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

/// True on one of the background runtime's own threads, where blocking on the runtime
/// could starve the very task waited for.
pub fn on_runtime_thread() -> bool {
    std::thread::current().name() == Some(THREAD_NAME)
}

/// The name of the background runtime's threads.
const THREAD_NAME: &str = "leafid-bg";

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

/// How often [`block_on_checked`] stops waiting to run its check.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// [`block_on`] that runs `check` every [`CHECK_EVERY`] while it waits and gives up
/// with `check`'s error when it fails (the future is then cancelled). For bindings
/// whose users must be able to interrupt any wait (Python's Ctrl-C).
pub fn block_on_checked<F, E>(
    fut: F,
    mut check: impl FnMut() -> std::result::Result<(), E>,
) -> std::result::Result<F::Output, E>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = handle();
    // Polled once here first, inside the runtime's context (its timers and spawns work):
    // a future that is ready at once (ids at hand, taken at call time) then costs no
    // trip through the runtime. Otherwise the same future moves to the runtime, whose
    // next poll registers a real waker.
    let mut fut = Box::pin(fut);
    {
        let _context = rt.enter();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(v);
        }
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = rt.spawn(fut);
    let abort = task.abort_handle();
    rt.spawn(async move {
        let _ = tx.send(task.await);
    });
    loop {
        match rx.recv_timeout(CHECK_EVERY) {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Ok(Err(e)) => panic!("leafid: a background task was cancelled: {e}"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = check() {
                    abort.abort();
                    return Err(e);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("leafid: the background runtime dropped a task")
            }
        }
    }
}

/// Runs `fut` on the background runtime and awaits it from the caller's runtime, so
/// connections always live on the runtime that outlives the call. A caller that stops
/// awaiting does not stop `fut`: it runs to its end, for work that must not stop at an
/// arbitrary await (acquiring a worker id; a segment wait, which lets go of its
/// notification under the tag's lock so that a fork never copies that lock held).
/// Snowflake issuing, which may stop anywhere, uses [`run_cancellable`].
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

/// [`run`] for work that is safe to stop at any await point: dropping the returned
/// future (a cancelled `await`, a timeout, Python's `Task.cancel`) aborts `fut` on the
/// runtime too, so a batch nobody waits for stops reserving ids.
pub async fn run_cancellable<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// Aborts the task when dropped before it finished (a no-op once it finished).
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = handle().spawn(fut);
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // `_abort` aborts it only once nobody awaits this; else as `block_on`.
        Err(e) => panic!("leafid: a background task was cancelled: {e}"),
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
