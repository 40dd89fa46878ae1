//! The local worker cache file: the worker id and the last persisted time bound, one
//! small JSON file per registry identity.
//!
//! It lets a restart while the registry is down keep its worker id (for registries
//! whose ids survive an outage), and it raises the start-up floor when the registry's
//! copy of the bound is older than the local one. Writes go to a temporary file that
//! is renamed over the old one, so a crash leaves either the old or the new content.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the cache file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The worker id last held under this registry identity.
    pub worker_id: u32,
    /// The highest timestamp (ms since the Unix epoch) that worker may have issued.
    pub bound_ms: i64,
}

/// One cache file.
#[derive(Debug, Clone)]
pub struct WorkerCache {
    path: PathBuf,
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
    // FNV-1a: stable across Rust versions and processes, unlike std's SipHash keys.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let short: String = safe.chars().take(80).collect();
    format!("{short}-{h:016x}.json")
}

impl WorkerCache {
    /// The cache file for registry `identity` (see `WorkerRegistry::describe`) in `dir`.
    /// Touches nothing on disk.
    pub fn new(dir: &Path, identity: &str) -> WorkerCache {
        WorkerCache {
            path: dir.join(file_name(identity)),
        }
    }

    /// A cache at an exact path (the `local` registry keeps its bounds this way).
    pub fn at(path: PathBuf) -> WorkerCache {
        WorkerCache { path }
    }

    /// Where the file lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file: `Ok(None)` when it does not exist, [`Error::Malformed`] (with the
    /// path) when it cannot be parsed.
    pub fn read(&self) -> Result<Option<CacheEntry>> {
        let text = match std::fs::read_to_string(&self.path) {
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
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tmp = self.path.with_extension(format!(
            "tmp-{}-{}",
            std::process::id(),
            // Distinct per thread, so two generators of one process never share it.
            thread_tag()
        ));
        let body = serde_json::to_vec(&entry).expect("a cache entry always serializes");
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&body)?;
            // Flushed before the rename, so a power cut never leaves an empty file
            // under the final name.
            f.sync_data()?;
            std::fs::rename(&tmp, &self.path)
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
        };
        c.write(e).unwrap();
        assert_eq!(c.read().unwrap(), Some(e));
        let text = std::fs::read_to_string(c.path()).unwrap();
        assert_eq!(text, r#"{"worker_id":17,"bound_ms":1700000000123}"#);
        // Nothing but the file itself is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
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
