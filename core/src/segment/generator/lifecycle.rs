//! A generator's life after connect: the refresh task (started at connect, started
//! again in a forked child, where the parent's did not come along), the locks a fork
//! must not copy held, and close (explicit, or when the last clone and handle go).
//!
//! The tag layer below reaches this only through [`FollowsFork`], which `Inner`
//! implements here.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use super::inner::Inner;
use crate::runtime;
use crate::segment::loader::FollowsFork;

impl Inner {
    pub(super) fn start_refresher(self: &Arc<Self>) {
        let weak: Weak<Inner> = Arc::downgrade(self);
        let every = self.loader.opts.refresh_interval;
        let task = runtime::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.closed.load(Ordering::Acquire) {
                    return;
                }
                if let Err(e) = inner.refresh().await {
                    tracing::warn!(error = %e, "tag list refresh failed; keeping the cached list");
                }
            }
        });
        *self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
    }

    /// In a forked child the refresh task did not come along; start it again.
    pub(super) fn restart_after_fork(self: &Arc<Self>) {
        let epoch = runtime::fork_epoch();
        if self.epoch.swap(epoch, Ordering::AcqRel) != epoch {
            // The parent's JoinHandle refers to a runtime that is gone here; forget it.
            std::mem::forget(
                self.refresher
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
            if !self.closed.load(Ordering::Acquire) {
                self.start_refresher();
            }
        }
    }

    pub(super) fn close(&self) {
        // SeqCst: see `close_if_closed`.
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let task = self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            if self.epoch.load(Ordering::Acquire) == runtime::fork_epoch() {
                task.abort();
            } else {
                std::mem::forget(task);
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        // Live tags and dropped ones that handles still hold.
        for buf in self.tags.load().all() {
            buf.close();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl runtime::ForkLock for Inner {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        let store = self.loader.hold_store();
        let refresher = self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let lookups = self.lookups.lock().unwrap_or_else(PoisonError::into_inner);
        // Taken by refills under a tag's lock (rank 0), never with the three above.
        let marks = self.loader.high_water.lock();
        Box::new((store, refresher, lookups, marks))
    }
}

impl FollowsFork for Inner {
    fn follow_fork(self: Arc<Self>) {
        self.restart_after_fork();
    }
}
