//! Starting a tag's refill task: the 10% preload from the hot path, the load a slow
//! path needs, and the first load of a new handle or tag. A refill that cannot even be
//! spawned is recorded as a failed one.
//!
//! Separate from the refill itself (`refill.rs`, what the task does) and from the slow
//! path that waits for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::refill::refill;
use super::{SlowState, TagBuffer};
use crate::error::Error;
use crate::runtime;
use crate::segment::buffer::{NEXT_LOADING, NEXT_NONE};
use crate::segment::loader::Loader;

impl TagBuffer {
    /// Starts loading the next segment if nobody has (the 10% preload).
    #[cold]
    pub(in crate::segment) fn maybe_preload(self: &Arc<Self>, loader: &Arc<Loader>) {
        // Acquire: pairs with the Release stores of the flag (a cheap early exit only;
        // `start_load` checks again under the lock).
        if self.ring.next.load(Ordering::Acquire) != NEXT_NONE {
            return;
        }
        // Relaxed: a hint for back-off; the lock below orders what matters.
        let retry_at = self.retry_at.load(Ordering::Relaxed);
        if retry_at != 0 && loader.opts.clock.now_millis() < retry_at {
            return;
        }
        let mut st = self.lock();
        self.start_load(loader, &mut st);
    }

    /// Spawns a refill of the next generation unless one runs or is ready. Caller holds
    /// the state lock, so the generation cannot move under the load. A refill that
    /// cannot even be spawned clears the flag and is recorded as a failed refill.
    pub(in crate::segment) fn start_load(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        st: &mut SlowState,
    ) {
        // Acquire/Release on the flag: it is also read without the lock (preload hint).
        if st.closed || self.ring.next.load(Ordering::Acquire) != NEXT_NONE {
            return;
        }
        self.ring.next.store(NEXT_LOADING, Ordering::Release);
        let task = refill(loader.clone(), self.clone());
        // Spawning starts the runtime on first use, which can fail (no threads left).
        let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(runtime::spawn(task));
        }));
        if let Err(panic) = spawned {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            self.failed(
                loader,
                st,
                Error::store(format!(
                    "cannot start a refill of tag {:?}: {what}",
                    self.tag
                )),
            );
        }
    }

    /// Starts loading the first segment if none is loaded or loading (a new handle, a
    /// created or found tag). Never waits for the load.
    pub(in crate::segment) fn load_first(self: &Arc<Self>, loader: &Arc<Loader>) {
        let mut st = self.lock_fresh(loader);
        // Relaxed: a back-off hint, as in `maybe_preload`.
        let retry_at = self.retry_at.load(Ordering::Relaxed);
        let backing_off = retry_at != 0 && loader.opts.clock.now_millis() < retry_at;
        if !st.initialized && !backing_off {
            self.start_load(loader, &mut st);
        }
    }
}
