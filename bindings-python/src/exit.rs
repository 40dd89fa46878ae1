//! Whether this process's interpreter is exiting, and how a thread of ours behaves once it
//! is. From `_at_exit` (an `atexit` hook) on, CPython (3.11, 3.12) ends any thread
//! other than the finalizing one that takes the GIL with `pthread_exit`. That unwinds the
//! thread's stack, and Rust frames cannot be unwound that way: the process aborts
//! (SIGABRT). So after the hook:
//! - work that runs Python code from a Rust frame ([`enter`]: a log record forwarded,
//!   an async call making its future, a result handed to its loop) is counted, and the
//!   hook waits for it, so no daemon thread is inside such a frame when finalization
//!   ends it; after the hook, such work does not start;
//! - a thread that waited without the GIL never takes it back ([`detach`]): it sleeps
//!   until the process ends, as CPython 3.14 does with its own threads. So an `atexit`
//!   hook that runs after leafid's (registered before `import leafid`) and waits for a
//!   daemon thread inside a leafid call waits forever: stop such threads before exit.
//!
//! The flag is never cleared: a harness that runs the `atexit` hooks without exiting
//! (`atexit._run_exitfuncs()`) leaves leafid refusing async calls and parking threads.
//!
//! Apart from its users, below them: the log forwarder (`logging.rs`), the async glue
//! (`aio.rs`) and the classes count and check.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use pyo3::prelude::*;

/// Set by `_at_exit` (an `atexit` hook): from then on nothing enters Python from a Rust
/// frame, because taking the GIL while the interpreter finalizes aborts the process.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);

/// The thread (its [`this_thread`] number) that last ran `_at_exit`: the one
/// finalizing the interpreter, the only one that may still take the GIL (later `atexit`
/// hooks run on it). Last, not first: a harness may run the hooks on another thread
/// before the real exit.
static FINALIZER: AtomicU64 = AtomicU64::new(0);

/// A number for the calling thread, never 0 (no lock: taken at fork time too).
fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static THIS: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    THIS.with(|n| *n)
}

/// Rust frames running Python code right now (see [`enter`]); `_at_exit` waits
/// for them before the interpreter finalizes.
static IN_PYTHON_CODE: AtomicUsize = AtomicUsize::new(0);

/// Whether the interpreter is exiting (`_at_exit` ran): from then on no core
/// thread may take the GIL.
pub fn exiting() -> bool {
    SHUTDOWN.load(Ordering::SeqCst)
}

/// Counts the caller as a Rust frame running Python code until the guard drops; `None`
/// once the interpreter is exiting (the caller must not start).
pub fn enter() -> Option<InPythonCode> {
    // SeqCst, with the flag and the count in `_at_exit`: either it sees this
    // frame counted and waits for it, or this sees the flag and does not start.
    IN_PYTHON_CODE.fetch_add(1, Ordering::SeqCst);
    let guard = InPythonCode {
        epoch: leafid::runtime::fork_epoch(),
    };
    (!exiting()).then_some(guard)
}

/// See [`enter`]. Remembers the fork epoch it was counted in: a child forked meanwhile
/// (a signal handler may fork) has reset the count, and must not take this one off.
pub struct InPythonCode {
    epoch: u64,
}

impl Drop for InPythonCode {
    fn drop(&mut self) {
        if leafid::runtime::fork_epoch() == self.epoch {
            IN_PYTHON_CODE.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// `py.detach(f)` that never takes the GIL back once the interpreter is exiting, on any
/// thread but the finalizing one: such a thread (a daemon thread, every non-daemon one
/// was joined before `atexit`) would be ended by `pthread_exit` through Rust frames.
/// The way back is counted ([`enter`]), so `_at_exit` waits for a thread that
/// decided to come back just before it set the flag.
pub fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    // `Send`, which is what pyo3's `Ungil` means on stable Rust.
    F: Send + FnOnce() -> T,
    T: Send,
{
    let (out, coming_back) = py.detach(|| {
        // A panic comes back the same way, counted, before it goes on unwinding.
        let out = std::panic::catch_unwind(AssertUnwindSafe(f));
        (out, enter_or_park())
    });
    drop(coming_back); // attached again
    out.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// [`enter`], or, once the interpreter is exiting, sleep until the process ends (on any
/// thread but the finalizing one, which may still take the GIL). Call it, detached,
/// before taking the GIL, and drop the guard once attached.
pub fn enter_or_park() -> Option<InPythonCode> {
    match enter() {
        Some(guard) => Some(guard),
        None if FINALIZER.load(Ordering::SeqCst) == this_thread() => None,
        None => loop {
            std::thread::park(); // may wake spuriously: sleep again
        },
    }
}

/// The exit hook, registered with `atexit` by `leafid/__init__.py`: sets the flag, then
/// waits (without the GIL, which they need) for the Rust frames running Python code on
/// other threads (a log record being forwarded, an async call making its future, a
/// result handed to its loop, a thread coming back from a wait). Bounded, in case one
/// of them is stuck in Python code.
#[pyfunction]
pub fn _at_exit(py: Python<'_>) {
    FINALIZER.store(this_thread(), Ordering::SeqCst);
    SHUTDOWN.store(true, Ordering::SeqCst);
    py.detach(|| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while IN_PYTHON_CODE.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}

/// Makes a forked child forget its parent's count: the threads it counted are not in
/// the child, and its `atexit` hook would wait for them. Registered with
/// `os.register_at_fork` by `leafid/__init__.py`.
#[pyfunction]
pub fn _after_fork_in_child() {
    IN_PYTHON_CODE.store(0, Ordering::SeqCst);
}
