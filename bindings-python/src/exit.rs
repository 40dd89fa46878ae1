//! Whether this process's interpreter is exiting, and the work that must finish before it
//! does: from `_shutdown_logging` (an `atexit` hook) on, no core thread may take the GIL,
//! because taking it while the interpreter finalizes aborts the process.
//!
//! Apart from both of its users, below them: the log forwarder (`logging.rs`) sets the
//! flag and waits for the async results in flight, and the async glue (`aio.rs`) counts
//! those results and checks the flag; neither reaches into the other.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Set by `_shutdown_logging` (an `atexit` hook): from then on nothing is forwarded,
/// because taking the GIL while the interpreter finalizes aborts the process.
pub static SHUTDOWN: AtomicBool = AtomicBool::new(false);

/// Settles in flight: `_shutdown_logging` (atexit) waits for them before the
/// interpreter finalizes. A thread still waiting for the GIL when finalization starts
/// is ended from inside Python and the process aborts (seen: SIGABRT at `sys.exit`
/// with async calls completing on other threads).
pub static SETTLING: AtomicUsize = AtomicUsize::new(0);

/// Whether the interpreter is exiting (`_shutdown_logging` ran): from then on no core
/// thread may take the GIL.
pub fn exiting() -> bool {
    SHUTDOWN.load(Ordering::SeqCst)
}
