//! The local worker cache file: the worker id and the last persisted time bound, one
//! small JSON file per registry identity.
//!
//! It lets a restart while the registry is down keep its worker id (for registries
//! whose ids survive an outage), and it raises the start-up floor when the registry's
//! copy of the bound is older than the local one. Writes go to a temporary file that
//! is renamed over the old one (then the directory is synced), so a crash leaves either
//! the old or the new content.
//!
//! The cache directory is private: created 0700, and refused when another user owns it
//! or others may write to it (a file planted there could lower a floor). Files are
//! created without following symlinks. Files untouched for [`PRUNE_AFTER`] are pruned:
//! their bounds are that far in the past, so they no longer protect anything.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the cache file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The worker id last held under this registry identity.
    pub worker_id: u32,
    /// The highest timestamp (ms since the Unix epoch) that worker may have issued.
    pub bound_ms: i64,
    /// Set by a close that could not reach the registry (`generator/close.rs`); `None`
    /// otherwise, and every other write clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<Handover>,
}

/// The bound a close out of touch with the registry left there for the next process of
/// its identity on this host (`generator/close.rs`, `generator/session.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    /// The bound the registry holds for this worker id, confirmed by it and left there
    /// (the close skipped its final write, which would have lowered it to the entry's
    /// `bound_ms`). Any other holder of the id starts above it, so the next process may
    /// issue between `bound_ms` and it while the registry is still down.
    pub bound_ms: i64,
    /// The identity lock's domain the close ran in ([`super::identity_lock::domain`]):
    /// only a process under the same lock (this boot, this network namespace) takes it.
    pub domain: u64,
}

/// Cache files (and their locks) untouched this long are pruned.
pub const PRUNE_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);

/// One cache file.
#[derive(Debug, Clone)]
pub struct WorkerCache {
    path: PathBuf,
    /// Whether the directory must be private (the cache directory; not `local`'s
    /// shared lock directory).
    private: bool,
}

/// Creates `dir` (0700) when missing and refuses it when it is not private: owned by
/// another user, or writable by group or others.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(dir, e))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| Error::io(dir, e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let refuse = |why: String| {
        Err(Error::InvalidConfig(format!(
            "cache directory {}: {why}; another user could plant a cache file there that lowers \
             a worker's time floor. Use a private directory (cache_dir=…) or fix it with \
             chown $(id -u) {} && chmod 700 {}",
            dir.display(),
            dir.display(),
            dir.display()
        )))
    };
    if !meta.is_dir() {
        return refuse("is not a directory (a symlink?)".into());
    }
    if meta.uid() != me {
        return refuse(format!(
            "is owned by uid {}, not by this process's uid {me}",
            meta.uid()
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return refuse(format!(
            "is writable by group or others (mode {:o})",
            meta.permissions().mode() & 0o777
        ));
    }
    Ok(())
}

/// Deletes cache files, locks and stale temporary files in `dir` untouched for
/// [`PRUNE_AFTER`] (one day for temporary files). A lock still held is kept.
pub fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let limit = if name.contains(".tmp-") {
            Duration::from_secs(24 * 3600)
        } else if name.ends_with(".json") || name.ends_with(".json.lock") {
            PRUNE_AFTER
        } else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        let age = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .unwrap_or_default();
        if age < limit || !meta.is_file() {
            continue;
        }
        if name.ends_with(".lock") {
            // Only a lock nobody holds; `HostLock::check` makes a holder of an unlinked
            // lock stop, so never delete one in use.
            match super::host_lock::HostLock::try_lock(&path) {
                Ok(super::host_lock::Attempt::Locked(lock)) => {
                    let _ = std::fs::remove_file(&path);
                    lock.unlock();
                }
                _ => continue,
            }
        } else {
            let _ = std::fs::remove_file(&path);
        }
        tracing::debug!(path = %path.display(), "pruned an old worker cache file");
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/leafid`, else `~/.cache/leafid`, else
/// `/tmp/leafid-<uid>`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("leafid");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".cache").join("leafid");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("leafid-{uid}"))
}

/// FNV-1a: stable across Rust versions and processes, unlike std's SipHash keys. Hand
/// written: eight lines, where a crate would add a dependency for them.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Turns a registry identity into a file name: safe characters kept, anything else
/// replaced, plus a hash of the original when something was replaced so two
/// identities never share a file.
fn file_name(identity: &str) -> String {
    let safe: String = identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = safe.trim_start_matches('.').to_string();
    if safe == identity && !safe.is_empty() && safe.len() <= 100 {
        return format!("{safe}.json");
    }
    let h = fnv1a(identity.as_bytes());
    let short: String = safe.chars().take(80).collect();
    format!("{short}-{h:016x}.json")
}

impl WorkerCache {
    /// The cache file for registry `identity` (see `WorkerRegistry::describe`) in `dir`.
    /// Touches nothing on disk.
    pub fn new(dir: &Path, identity: &str) -> WorkerCache {
        WorkerCache {
            path: dir.join(file_name(identity)),
            private: true,
        }
    }

    /// A cache at an exact path (the `local` registry keeps its bounds this way).
    pub fn at(path: PathBuf) -> WorkerCache {
        WorkerCache {
            path,
            private: false,
        }
    }

    /// Where the file lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file: `Ok(None)` when it does not exist, [`Error::Malformed`] (with the
    /// path) when it cannot be parsed.
    pub fn read(&self) -> Result<Option<CacheEntry>> {
        let text = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .and_then(std::io::read_to_string)
        {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        serde_json::from_str::<CacheEntry>(&text)
            .map(Some)
            .map_err(|e| Error::Malformed {
                what: "worker cache file",
                path: self.path.display().to_string(),
                reason: format!("{e} (expected {{\"worker_id\":N,\"bound_ms\":T}})"),
            })
    }

    /// Replaces the file's content atomically (temporary file, flush to disk, rename),
    /// creating the directory when missing.
    pub fn write(&self, entry: CacheEntry) -> Result<()> {
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        if self.private {
            ensure_private_dir(dir)?;
        } else {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let tmp = self.path.with_extension(format!(
            "tmp-{}-{}",
            std::process::id(),
            // Distinct per thread, so two generators of one process never share it.
            thread_tag()
        ));
        let body = serde_json::to_vec(&entry).expect("a cache entry always serializes");
        let result = (|| {
            // A leftover of a crashed writer with this name is ours to replace.
            let _ = std::fs::remove_file(&tmp);
            // create_new + O_NOFOLLOW: never write through a planted symlink.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&body)?;
            // Flushed before the rename, so a power cut never leaves an empty file
            // under the final name.
            f.sync_data()?;
            std::fs::rename(&tmp, &self.path)?;
            // The rename itself is durable only once the directory is synced.
            std::fs::File::open(dir)?.sync_all()
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(&self.path, e));
        }
        Ok(())
    }
}

fn thread_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local!(static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TAG.with(|t| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let c = WorkerCache::new(dir.path(), "zookeeper-127.0.0.1:2181-order");
        assert_eq!(c.read().unwrap(), None);
        let e = CacheEntry {
            worker_id: 17,
            bound_ms: 1_700_000_000_123,
            handover: None,
        };
        c.write(e).unwrap();
        assert_eq!(c.read().unwrap(), Some(e));
        let text = std::fs::read_to_string(c.path()).unwrap();
        assert_eq!(text, r#"{"worker_id":17,"bound_ms":1700000000123}"#);
        // Nothing but the file itself is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn cache_directory_is_private_and_a_shared_one_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache");
        let c = WorkerCache::new(&dir, "fixed-1");
        c.write(CacheEntry {
            worker_id: 1,
            bound_ms: 5,
            handover: None,
        })
        .unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = c
            .write(CacheEntry {
                worker_id: 1,
                bound_ms: 6,
                handover: None,
            })
            .unwrap_err();
        assert!(
            err.to_string().contains("writable by group or others"),
            "{err}"
        );
    }

    #[test]
    fn cache_files_are_never_written_or_read_through_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let c = WorkerCache::new(root.path(), "fixed-2");
        let target = root.path().join("elsewhere");
        std::fs::write(&target, r#"{"worker_id":2,"bound_ms":1}"#).unwrap();
        std::os::unix::fs::symlink(&target, c.path()).unwrap();
        assert!(matches!(c.read(), Err(Error::Io { .. })));
    }

    #[test]
    fn old_cache_files_are_pruned_and_fresh_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let old = WorkerCache::new(root.path(), "fixed-3");
        let fresh = WorkerCache::new(root.path(), "fixed-4");
        let e = CacheEntry {
            worker_id: 3,
            bound_ms: 1,
            handover: None,
        };
        old.write(e).unwrap();
        fresh.write(e).unwrap();
        let long_ago = std::time::SystemTime::now() - PRUNE_AFTER - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(old.path())
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        prune(root.path());
        assert!(!old.path().exists());
        assert!(fresh.path().exists());
    }

    #[test]
    fn malformed_cache_file_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let c = WorkerCache::new(dir.path(), "fixed-3");
        std::fs::write(c.path(), "workerID=3").unwrap();
        match c.read() {
            Err(Error::Malformed { path, .. }) => assert_eq!(path, c.path().display().to_string()),
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn distinct_identities_get_distinct_files() {
        let a = file_name("local-/a/b");
        let b = file_name("local-/a_b");
        assert_ne!(a, b);
        assert_eq!(file_name("fixed-7"), "fixed-7.json");
        assert!(!file_name("../../etc/passwd").contains('/'));
    }
}
