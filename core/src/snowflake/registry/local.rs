//! `local` — worker ids held by file locks in one directory on one host.
//!
//! Worker id `n` belongs to whoever holds an exclusive lock on `<dir>/worker-<n>.lock`
//! ([`HostLock`]: `flock`, tied to the file's path). The kernel drops the lock when the
//! holder's last descriptor closes, so a process that dies (even by SIGKILL) frees its id
//! at once. Every renew checks that the lock file is still the one locked; a file
//! unlinked or replaced under its holder (a tmp cleaner) stops the holder's issuing,
//! because another process may since have locked a new file at that path. The directory
//! must be on a local filesystem: network filesystems are refused.
//!
//! The last bound of id `n` is kept beside the lock in `<dir>/worker-<n>.json` and is the
//! next holder's floor. Acquire prefers a free id whose floor is already past, so a
//! crashed holder's bound ahead of the clock never makes a newcomer wait while another
//! id is free.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::cache::{CacheEntry, WorkerCache};
use super::host_lock::{refuse_network_fs, Attempt, HostLock};
use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// A registry of file locks in a directory.
#[derive(Debug)]
pub struct LocalRegistry {
    dir: PathBuf,
    /// Lock files held by this registry, by worker id.
    held: Mutex<HashMap<u32, HostLock>>,
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
        if let Ok(held) = self.held.try_lock() {
            for lock in held.values() {
                lock.forget_inherited();
            }
        }
    }

    fn try_take(&self, max_worker_id: u32) -> Result<Lease> {
        std::fs::create_dir_all(&self.dir).map_err(|e| not_creatable(&self.dir, e))?;
        refuse_network_fs(&self.dir)?;
        let now = super::system_now_ms();
        // The free id with the lowest floor, in case every free id's floor is ahead.
        let mut earliest: Option<(u32, i64)> = None;
        for id in 0..=max_worker_id {
            let Some((lock, floor)) = self.lock_id(id)? else {
                continue; // held by a live process (or another generator here)
            };
            if floor < now {
                return Ok(self.keep(id, lock, floor));
            }
            // A bound ahead of the clock (a crashed holder's look-ahead): taking this id
            // would mean waiting; look for a free id that needs no wait first.
            if earliest.is_none_or(|(_, f)| floor < f) {
                earliest = Some((id, floor));
            }
            lock.unlock();
        }
        if let Some((id, _)) = earliest {
            if let Some((lock, floor)) = self.lock_id(id)? {
                return Ok(self.keep(id, lock, floor));
            }
        }
        Err(Error::WorkerIdExhausted {
            pool: self.dir.display().to_string(),
            size: max_worker_id + 1,
        })
    }

    /// Locks worker id `id` and reads its floor; `None` when another holder has it.
    fn lock_id(&self, id: u32) -> Result<Option<(HostLock, i64)>> {
        let lock = match HostLock::try_lock(&self.lock_path(id))? {
            Attempt::Locked(lock) => lock,
            Attempt::Held(_) => return Ok(None),
        };
        // The previous holder's bound. A malformed file is an error, not a floor of
        // zero, because guessing low could reissue ids.
        match self.bound_file(id).read() {
            Ok(entry) => Ok(Some((lock, entry.map(|e| e.bound_ms).unwrap_or(i64::MIN)))),
            Err(e) => {
                lock.unlock();
                Err(e)
            }
        }
    }

    fn keep(&self, id: u32, lock: HostLock, floor: i64) -> Lease {
        let location = lock.path().display().to_string();
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, lock);
        tracing::debug!(worker_id = id, dir = %self.dir.display(), floor, "local worker id taken");
        Lease {
            worker_id: id,
            floor_ms: floor,
            location,
        }
    }
}

impl WorkerRegistry for LocalRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // A held flock cannot be lost while the process lives, so the limit is never lowered.
        Box::pin(async move { self.try_take(max_worker_id) })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            {
                let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                let Some(lock) = held.get(&lease.worker_id) else {
                    return Err(Error::LeaseLost {
                        worker_id: lease.worker_id,
                        cause: format!("{} is not locked by this registry", lease.location),
                    });
                };
                lock.touch();
                // A lock file unlinked or replaced: another process may hold this id now.
                lock.check().map_err(|e| match e {
                    Error::LeaseLost { cause, .. } => Error::LeaseLost {
                        worker_id: lease.worker_id,
                        cause,
                    },
                    other => other,
                })?;
            }
            self.bound_file(lease.worker_id).write(CacheEntry {
                worker_id: lease.worker_id,
                bound_ms,
            })
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let lock = self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&lease.worker_id);
            if let Some(lock) = lock {
                // Explicit unlock: frees the id even if a forked child still holds a
                // copy of the descriptor.
                lock.unlock();
            }
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        // No: the bound file beside the lock is this registry's record; the cache file
        // is shared by the pool (one name per directory) and cannot stand in for it.
        false
    }

    fn describe(&self) -> String {
        format!("local-{}", self.dir.display())
    }
}

/// The error for a lock directory this process may not create: the README's
/// `/var/lib/leafid/workers` is a root path, so a plain user meets this first and
/// needs to be told which directory to pass instead.
fn not_creatable(dir: &std::path::Path, e: std::io::Error) -> Error {
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return Error::io(dir, e);
    }
    let mine = super::default_cache_dir().join("workers");
    Error::InvalidConfig(format!(
        "cannot create the worker-id lock directory {} ({e}); pass one this user may write, \
         the same for every process of the host that shares worker ids, e.g. local://{}, \
         or create it for this user: sudo install -d -o \"$(id -un)\" {}",
        dir.display(),
        mine.display(),
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_the_user_may_not_create_names_one_to_pass() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = not_creatable(std::path::Path::new("/var/lib/leafid/workers"), denied);
        let Error::InvalidConfig(msg) = e else {
            panic!("{e:?}")
        };
        let mine = super::super::default_cache_dir().join("workers");
        assert!(
            msg.contains(&format!("local://{}", mine.display())),
            "{msg}"
        );
        let other = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(matches!(
            not_creatable(std::path::Path::new("/x"), other),
            Error::Io { .. }
        ));
    }
}
