//! `local` — worker ids held by file locks in one directory on one host.
//!
//! Worker id `n` belongs to whoever holds an exclusive `flock` on `<dir>/worker-<n>.lock`.
//! The kernel drops the lock when the holder's last descriptor closes, so a process
//! that dies (even by SIGKILL) frees its id at once, and a live one can never lose it.
//! The last bound of id `n` is kept beside the lock in `<dir>/worker-<n>.json` and is
//! the next holder's floor.
//!
//! `flock` (not `fcntl`) on purpose: its locks belong to the open file, so two
//! generators in one process get distinct ids, and closing an unrelated descriptor
//! of the same file does not drop the lock.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::cache::{CacheEntry, WorkerCache};
use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// A registry of file locks in a directory.
#[derive(Debug)]
pub struct LocalRegistry {
    dir: PathBuf,
    /// Lock files held by this process, by worker id.
    held: Mutex<HashMap<u32, File>>,
}

impl LocalRegistry {
    /// A registry in `dir` (created at `acquire` when missing).
    pub fn new(dir: impl Into<PathBuf>) -> LocalRegistry {
        LocalRegistry {
            dir: dir.into(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock_path(&self, id: u32) -> PathBuf {
        self.dir.join(format!("worker-{id}.lock"))
    }

    fn bound_file(&self, id: u32) -> WorkerCache {
        WorkerCache::at(self.dir.join(format!("worker-{id}.json")))
    }

    /// Closes this process's copies of the lock files without unlocking them. For a
    /// child after `fork()`: the locks are shared with the parent, which still owns
    /// them; keeping the copies open would hold the parent's ids after it exits.
    pub(crate) fn forget_inherited(&self) {
        // try_lock: a parent thread may have held the mutex at the fork; then the
        // copies stay open until this process exits, which is safe, only less prompt.
        if let Ok(mut held) = self.held.try_lock() {
            held.clear();
        }
    }

    fn try_take(&self, max_worker_id: u32) -> Result<Lease> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for id in 0..=max_worker_id {
            let path = self.lock_path(id);
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?;
            // SAFETY: a valid descriptor we own; LOCK_NB makes the call return at once.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    continue; // held by a live process (or another generator here)
                }
                return Err(Error::io(&path, err));
            }
            // Held: read the previous holder's bound. A malformed file is an error,
            // not a floor of zero, because guessing low could reissue ids.
            let floor = match self.bound_file(id).read() {
                Ok(entry) => entry.map(|e| e.bound_ms).unwrap_or(i64::MIN),
                Err(e) => return Err(e), // dropping `file` unlocks
            };
            self.held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, file);
            tracing::debug!(worker_id = id, dir = %self.dir.display(), floor, "local worker id taken");
            return Ok(Lease {
                worker_id: id,
                floor_ms: floor,
                location: path.display().to_string(),
            });
        }
        Err(Error::WorkerIdExhausted {
            pool: self.dir.display().to_string(),
            size: max_worker_id + 1,
        })
    }
}

impl WorkerRegistry for LocalRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // A held flock cannot be lost while the process lives, so the limit is never lowered.
        Box::pin(async move { self.try_take(max_worker_id) })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let held = self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&lease.worker_id);
            if !held {
                return Err(Error::LeaseLost {
                    worker_id: lease.worker_id,
                    cause: format!("{} is not locked by this registry", lease.location),
                });
            }
            self.bound_file(lease.worker_id).write(CacheEntry {
                worker_id: lease.worker_id,
                bound_ms,
            })
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let file = self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&lease.worker_id);
            if let Some(file) = file {
                // Explicit unlock before close: makes the id free even if a forked
                // child still holds a copy of the descriptor.
                // SAFETY: a valid descriptor we own.
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
            }
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("local-{}", self.dir.display())
    }
}
