//! `local` — worker ids held by file locks in one directory on one host.
//!
//! The directory must be absolute: a relative one would be resolved against each
//! process's working directory, and one configuration started from two directories
//! would hold two locks on one worker id (`absolute_dir` refuses it when the URL is
//! parsed, before any I/O). At every acquire the directory is created and canonicalised
//! (symlinks, `.` and `//` resolved), so the same directory spelled two ways is one.
//!
//! Worker id `n` of directory `D` (canonical) belongs to whoever holds both
//! - [`IdentityLock`]s named `local:<name>#n` for every name of the directory: as
//!   configured, canonical, and its device and inode (abstract Unix sockets: no file to
//!   delete, shared by every user of the host's network namespace; several names so that
//!   a symlink swapped under a live holder or a bind mount cannot give one id two
//!   holders), and
//! - an exclusive lock on `D/worker-<n>.lock` ([`HostLock`]: `flock`, tied to the file's
//!   path), which also excludes processes of other network namespaces sharing `D`.
//!
//! The kernel drops both when the holder's last descriptor closes, so a process that
//! dies (even by SIGKILL) frees its id at once. The identity claim is what survives the
//! directory being emptied under a live holder (`rm -rf`, a deploy that recreates it, a
//! remount): a newcomer then finds a new, unlocked file, but the id's identity is still
//! held, so it takes another id. Every renew checks that the lock file is still the one
//! locked; a file unlinked or replaced under its holder is [`fence::lost`] (rule 2): the
//! holder stops issuing, and its re-acquire releases the identity first. The directory
//! must be on a local filesystem: network filesystems are refused.
//!
//! What this cannot cover, because nothing on a filesystem survives its deletion and
//! abstract sockets do not cross network namespaces: containers with network stacks of
//! their own sharing one lock directory are excluded by the lock files alone, so
//! emptying that directory while they run lets a newcomer take a live holder's id until
//! the holder's next renew (its heartbeat). Give such containers a registry that spans
//! hosts (`zookeeper-recycle://`), or never empty a shared lock directory under them.
//!
//! The last bound of id `n` is kept beside the lock in `D/worker-<n>.json` and is the
//! next holder's floor. An id with no bound file (never used, or its file deleted with
//! the directory: fence rule 3, a record with no floor) gets the floor *now*: a live
//! holder of it would still hold its identity claim (so the id is not free), and a
//! holder that died issued only at timestamps up to its clock when it died, which is
//! behind the clock now. Its bound ahead of the clock would matter only if the clock
//! then stepped back (a wipe and a backward step together): the generator refuses a
//! clock behind its own cache file, but that file is per user, so a newcomer of another
//! user is not covered. A new directory therefore costs no wait. Acquire
//! prefers a free id whose floor is already past, so a crashed holder's bound ahead of
//! the clock never makes a newcomer wait while another id is free.
//!
//! The URL grammar, `local:///dir`, is here too (`parse_url`): it is the directory,
//! checked by `absolute_dir`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::cache::{CacheEntry, WorkerCache};
use super::config::grammar::bad;
use super::fence;
use super::host_lock::{refuse_network_fs, Attempt, HostLock};
use super::identity_lock::IdentityLock;
use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// The lock directory of a `local:` URL; `rest` is what follows `local:`, `url` the
/// whole URL (for messages).
pub(super) fn parse_url(url: &str, rest: &str) -> Result<PathBuf> {
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() {
        return Err(bad(url, "missing lock directory"));
    }
    absolute_dir(Path::new(path)).map_err(|reason| bad(url, reason))
}

/// The directory of a `local:` URL or config: refused when relative (it would be
/// resolved against each process's working directory), else normalised lexically
/// (`/a/./b`, `/a//b/` are `/a/b`; symlinks are resolved at acquire). No I/O.
pub(crate) fn absolute_dir(dir: &Path) -> std::result::Result<PathBuf, String> {
    if !dir.is_absolute() {
        let shown = dir.to_string_lossy();
        let rel = shown.trim_start_matches("./");
        return Err(format!(
            "lock directory {shown:?} is relative: every process would resolve it against its \
             own working directory, so one configuration started from two directories would \
             lock two different files and issue ids as the same worker; write an absolute \
             directory, with three slashes: local:///{rel} (for example \
             local:///var/lib/leafid/workers)"
        ));
    }
    Ok(dir.components().collect())
}

/// What this registry holds for one worker id.
#[derive(Debug)]
struct Held {
    lock: HostLock,
    /// Held as long as the lock; released with it: one claim per name of the
    /// directory ([`dir_names`]).
    identities: Vec<IdentityLock>,
    /// The canonical directory the id was taken in (its bound file lives there).
    dir: PathBuf,
}

/// A registry of file locks in a directory.
#[derive(Debug)]
pub struct LocalRegistry {
    dir: PathBuf,
    /// Locks held by this registry, by worker id.
    held: Mutex<HashMap<u32, Held>>,
}

impl LocalRegistry {
    /// A registry in `dir` (created at `acquire` when missing; must be absolute).
    pub fn new(dir: impl Into<PathBuf>) -> LocalRegistry {
        LocalRegistry {
            dir: dir.into(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The directory, as configured.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes this process's copies of the lock files without unlocking them. For a
    /// child after `fork()`: the locks are shared with the parent, which still owns
    /// them; keeping the copies open would hold the parent's ids after it exits. (The
    /// identity claims are closed in the child by [`IdentityLock`]'s fork handler.)
    pub(crate) fn forget_inherited(&self) {
        // try_lock: a parent thread may have held the mutex at the fork; then the
        // copies stay open until this process exits, which is safe, only less prompt.
        if let Ok(held) = self.held.try_lock() {
            for h in held.values() {
                h.lock.forget_inherited();
            }
        }
    }

    fn try_take(&self, max_worker_id: u32) -> Result<Lease> {
        // Also for a registry built with LocalRegistry::new, which skips the parser.
        let configured = absolute_dir(&self.dir).map_err(Error::InvalidConfig)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| not_creatable(&self.dir, e))?;
        // Once per acquire, after creating it: the identity names and the files of
        // this lease use the one spelling every process resolves the same.
        let dir = std::fs::canonicalize(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        refuse_network_fs(&dir)?;
        let names = dir_names(&configured, &dir)?;
        let now = super::system_now_ms();
        // The free id with the lowest floor, in case every free id's floor is ahead,
        // kept locked while the scan goes on: let go and locked again at the end, it
        // could be taken meanwhile by a process starting at the same time.
        let mut best: Option<(u32, Held, i64)> = None;
        // An id with no bound file gets the floor `now` (module docs).
        let fresh_floor = now;
        for id in 0..=max_worker_id {
            // An id with no bound file gets `fresh_floor`, no better than the candidate
            // in hand: skipped without creating its lock file (a scan would otherwise
            // leave one per id of the space in the directory).
            if best.as_ref().is_some_and(|(_, _, f)| *f <= fresh_floor)
                && !bound_file_path(&dir, id).exists()
            {
                continue;
            }
            let Some((held, floor)) = lock_id(&dir, &names, id, now)? else {
                continue; // held by a live process (or another generator here)
            };
            if floor < now {
                if let Some((_, other, _)) = best {
                    other.release();
                }
                return Ok(self.keep(id, held, floor));
            }
            // A bound ahead of the clock (a crashed holder's look-ahead, or no bound):
            // taking this id would mean waiting; look for a free id that needs no wait.
            match &best {
                Some((_, _, f)) if *f <= floor => held.release(),
                _ => {
                    if let Some((_, other, _)) = best.replace((id, held, floor)) {
                        other.release();
                    }
                }
            }
        }
        if let Some((id, held, floor)) = best {
            return Ok(self.keep(id, held, floor));
        }
        Err(Error::WorkerIdExhausted {
            pool: dir.display().to_string(),
            size: max_worker_id + 1,
        })
    }

    fn keep(&self, id: u32, held: Held, floor: i64) -> Lease {
        let location = held.lock.path().display().to_string();
        tracing::debug!(worker_id = id, dir = %held.dir.display(), floor, "local worker id taken");
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, held);
        Lease {
            worker_id: id,
            floor_ms: floor,
            // The lock file's bound, written by this host's clock.
            floor_recorded: true,
            location,
        }
    }
}

impl Held {
    fn release(&self) {
        // Explicit unlock: frees the id even if a forked child still holds a copy of
        // the descriptor. The identity last, so no newcomer finds it free while the
        // lock file is still ours.
        self.lock.unlock();
        for identity in &self.identities {
            identity.release();
        }
    }
}

/// The names under which the worker ids of a directory are claimed, all of them held
/// at once: the directory as configured (lexically normalised), its canonical path, and
/// its device and inode. One name alone is not enough: a symlink swapped under a live
/// holder (a deploy's `current -> release2`) gives the configured spelling a new
/// canonical path, and a bind mount gives one directory two canonical paths but one
/// inode; a newcomer is excluded when any of its names is held.
fn dir_names(configured: &Path, canonical: &Path) -> Result<Vec<String>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(canonical).map_err(|e| Error::io(canonical, e))?;
    let mut names = vec![
        configured.to_string_lossy().into_owned(),
        canonical.to_string_lossy().into_owned(),
        format!("dev {} inode {}", meta.dev(), meta.ino()),
    ];
    names.dedup();
    Ok(names)
}

/// The identity claimed for worker id `id` of the directory known by `name`.
fn identity(name: &str, id: u32) -> String {
    format!("local:{name}#{id}")
}

fn bound_file_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("worker-{id}.json"))
}

fn bound_file(dir: &Path, id: u32) -> WorkerCache {
    WorkerCache::at(bound_file_path(dir, id))
}

/// Claims worker id `id` of `dir` (its identities under every name, then the lock
/// file) and reads its floor; `None` when another holder has any of them.
fn lock_id(dir: &Path, names: &[String], id: u32, now: i64) -> Result<Option<(Held, i64)>> {
    // The identities first: they survive the directory being emptied under its holder,
    // where a new lock file would be free. Those claimed are released (dropped) when a
    // later one is held.
    let mut identities = Vec::with_capacity(names.len());
    for name in names {
        match IdentityLock::try_claim(&identity(name, id))? {
            Some(claim) => identities.push(claim),
            None => return Ok(None),
        }
    }
    let lock = match HostLock::try_lock(&dir.join(format!("worker-{id}.lock")))? {
        Attempt::Locked(lock) => lock,
        Attempt::Held(_) => return Ok(None), // the claim is dropped (released) here
    };
    let held = Held {
        lock,
        identities,
        dir: dir.to_path_buf(),
    };
    // The previous holder's bound. A malformed file is an error, not a floor of zero,
    // because guessing low could reissue ids. No file: fence rule 3, a record with no
    // floor; a dead holder may have issued up to its lost bound (module docs).
    match bound_file(dir, id).read() {
        Ok(Some(entry)) => Ok(Some((held, entry.bound_ms))),
        Ok(None) => Ok(Some((held, now))),
        Err(e) => {
            held.release();
            Err(e)
        }
    }
}

impl WorkerRegistry for LocalRegistry {
    fn clock_is_local(&self) -> bool {
        // Ids that led the clock would be issued again by a holder that finds no record
        // of them (a bound file or cache file deleted after a clean exit).
        true
    }

    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // The locks cannot be taken from a live process; a lock file deleted under it is
        // found by `renew`, whose LeaseLost makes the generator lower the limit.
        Box::pin(async move { self.try_take(max_worker_id) })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let dir = {
                let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                let Some(h) = held.get(&lease.worker_id) else {
                    return Err(fence::lost(
                        lease.worker_id,
                        format!("{} is not locked by this registry", lease.location),
                    ));
                };
                h.lock.touch();
                // A lock file (or its directory) unlinked or replaced: another process
                // may lock a new file there now (fence rule 2).
                h.lock.check().map_err(|e| match e {
                    Error::LeaseLost { cause, .. } => fence::lost(lease.worker_id, cause),
                    other => other,
                })?;
                h.dir.clone()
            };
            bound_file(&dir, lease.worker_id).write(CacheEntry {
                worker_id: lease.worker_id,
                bound_ms,
                handover: None,
            })
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let held = self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&lease.worker_id);
            if let Some(held) = held {
                held.release();
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

    /// Issue 20 row 1: a relative `local:` directory was resolved against each process's
    /// working directory, so one config started from two directories held two locks.
    #[test]
    fn relative_local_directories_are_refused_with_the_absolute_form() {
        for (url, suggested) in [
            ("local:workers", "local:///workers"),
            ("local://workers", "local:///workers"),
            (
                "local://var/lib/leafid/workers",
                "local:///var/lib/leafid/workers",
            ),
            ("local://./w", "local:///w"),
            ("local://~/w", "local:///~/w"),
        ] {
            let e = crate::snowflake::registry::RegistryConfig::parse(url).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(suggested), "{url}: {msg}");
            assert!(msg.contains("working directory"), "{url}: {msg}");
        }
        // A hand-built config skips the parser; building refuses it the same way.
        let hand = crate::snowflake::registry::RegistryConfig::Local {
            dir: "workers".into(),
        };
        assert!(matches!(hand.build(1023), Err(Error::InvalidConfig(_))));
        // The same directory spelled two ways is one (the symlinks at acquire).
        for url in [
            "local:/var/lib/leafid/workers",
            "local:///var/lib/leafid/workers/",
            "local:///var/lib/./leafid//workers",
            "local:////var/lib/leafid/workers",
        ] {
            assert_eq!(
                crate::snowflake::registry::RegistryConfig::parse(url).unwrap(),
                crate::snowflake::registry::RegistryConfig::Local {
                    dir: "/var/lib/leafid/workers".into()
                },
                "{url}"
            );
        }
    }
}
