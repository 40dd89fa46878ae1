//! [`Loader`]: what a tag's buffer and its refills need from the generator they belong
//! to — the options, the store (reopened with fresh connections in a forked child), the
//! high-water marks — and the one call back up, "this process is a forked child".
//!
//! Separate from the generator so that the tag layer (`tag_buffer.rs` and its children)
//! sits below it: the generator holds its tags' buffers and calls into them, and a
//! buffer reaches the generator only through [`FollowsFork`], a trait defined here, never
//! by name. A refill task holds the `Loader`, not the generator.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::high_water::HighWater;
use super::refill_error::copy_error;
use super::store::SegmentStore;
use super::SegmentOptions;
use crate::error::{Error, Result};
use crate::runtime;

/// A refill that has not finished after this long is abandoned and reported as a
/// failure, so the "loading" flag cannot stay set forever (a statement stuck on a lock,
/// a dead connection). Longer than any store's own timeouts (SQLite waits up to 10 s for
/// a busy file and retries for 10 s more). Short in unit tests.
#[cfg(not(test))]
pub(super) const REFILL_TIMEOUT: Duration = Duration::from_secs(30);
#[cfg(test)]
pub(super) const REFILL_TIMEOUT: Duration = Duration::from_millis(200);

/// The generator above a [`Loader`], as the tag layer sees it: something to tell when
/// a tag's slow path finds itself in a forked child, so that the generator's own
/// background work (the refresh task) follows the fork too.
pub(super) trait FollowsFork: Send + Sync + Debug {
    /// Restarts the generator's background work in this forked child (once per fork).
    fn follow_fork(self: Arc<Self>);
}

/// The options, store and marks of one generator, shared by its tags' buffers and
/// refill tasks.
#[derive(Debug)]
pub(super) struct Loader {
    pub(super) opts: SegmentOptions,
    store: Mutex<StoreSlot>,
    /// Each tag's high-water mark, kept through refresh, drop and re-create of the tag:
    /// the one guard every segment passes (see `high_water.rs`).
    pub(super) high_water: HighWater,
    /// The generator this loader belongs to (weak: the generator owns the loader).
    generator: Weak<dyn FollowsFork>,
}

/// The store, and the fork epoch it was opened under.
#[derive(Debug)]
struct StoreSlot {
    epoch: u64,
    store: Arc<dyn SegmentStore>,
    /// In a forked child whose store cannot follow the fork (`memory:`): why, returned
    /// by every later use instead of the parent's store.
    refused: Option<Error>,
}

impl Loader {
    /// A loader for `store`, opened under fork epoch `epoch`, belonging to `generator`.
    pub(super) fn new(
        opts: SegmentOptions,
        store: Arc<dyn SegmentStore>,
        epoch: u64,
        generator: Weak<dyn FollowsFork>,
    ) -> Loader {
        let fold = store.folds_tag_case();
        Loader {
            opts,
            store: Mutex::new(StoreSlot {
                epoch,
                store,
                refused: None,
            }),
            high_water: HighWater::new(fold),
            generator,
        }
    }

    /// The store, reopened with fresh connections in a forked child. A store that
    /// cannot follow a fork (`memory:`) makes every use in the child fail with the
    /// reason: the parent's copy must never hand out ranges in two processes.
    pub(super) fn store(&self) -> Result<Arc<dyn SegmentStore>> {
        let mut guard = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = runtime::fork_epoch();
        if guard.epoch != epoch {
            match guard.store.reopen() {
                Ok(fresh) => {
                    // Leaked, never dropped: the parent's sockets are registered with the
                    // parent's epoll instance, which the child shares; dropping them here
                    // would deregister them from it and stall the parent's pool.
                    std::mem::forget(std::mem::replace(&mut guard.store, fresh));
                    guard.refused = None;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the segment store cannot be used in this forked child");
                    guard.refused = Some(e);
                }
            }
            guard.epoch = epoch;
        }
        match &guard.refused {
            Some(e) => Err(copy_error(e)),
            None => Ok(guard.store.clone()),
        }
    }

    /// The store's lock, for the generator's fork guard (a fork while another thread
    /// holds it would leave it locked in the child).
    pub(super) fn hold_store(&self) -> Box<dyn runtime::Guard + '_> {
        Box::new(self.store.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Tells the generator that this process is a forked child (see [`FollowsFork`]).
    pub(super) fn follow_fork(&self) {
        if let Some(generator) = self.generator.upgrade() {
            generator.follow_fork();
        }
    }
}
