//! [`StatefulsetConfig`]: what a `statefulset:` registry is built from (the pod's host
//! name, the StatefulSet's name, the offset, the floor directory) and the worker id it
//! maps to.
//!
//! Apart from the registry so that the URL grammar (`url.rs`) and the registry both
//! build on it without depending on each other.

use std::path::PathBuf;

use super::ordinal::ordinal;

/// A StatefulSet registry, as configured: the pod's host name and what to do with its
/// ordinal. Build one with [`StatefulsetConfig::new`] and the setters, or parse a
/// `statefulset:` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatefulsetConfig {
    /// The pod's host name, `<statefulset>-<ordinal>` (by default the system's).
    pub hostname: String,
    /// The StatefulSet's name, when given: the host name must be one of its pods'.
    pub statefulset: Option<String>,
    /// Added to the ordinal to make the worker id (default 0). Negative offsets map a
    /// StatefulSet whose ordinals start above 0 (`.spec.ordinals.start`) to low ids.
    pub offset: i64,
    /// Where the bound file lives (absolute); `None`: the generator's cache file alone.
    pub floor_dir: Option<PathBuf>,
}

impl StatefulsetConfig {
    /// A configuration for the pod named `hostname`: offset 0, any StatefulSet name, no
    /// floor directory.
    pub fn new(hostname: impl Into<String>) -> StatefulsetConfig {
        StatefulsetConfig {
            hostname: hostname.into(),
            statefulset: None,
            offset: 0,
            floor_dir: None,
        }
    }

    /// A configuration for this pod: the system's host name (`gethostname`).
    pub fn this_pod() -> StatefulsetConfig {
        StatefulsetConfig::new(crate::snowflake::registry::host_lock::host_name())
    }

    /// Requires the host name to be a pod of the StatefulSet `name`.
    pub fn statefulset(mut self, name: impl Into<String>) -> StatefulsetConfig {
        self.statefulset = Some(name.into());
        self
    }

    /// The offset added to the ordinal.
    pub fn offset(mut self, offset: i64) -> StatefulsetConfig {
        self.offset = offset;
        self
    }

    /// Keeps the bound in `dir/worker-<id>.json` (an absolute directory, best on the
    /// pod's PersistentVolume).
    pub fn floor_dir(mut self, dir: impl Into<PathBuf>) -> StatefulsetConfig {
        self.floor_dir = Some(dir.into());
        self
    }

    /// The worker id this configuration maps to (ordinal plus offset; not yet checked
    /// against a layout), or why the host name has none.
    pub fn worker_id(&self) -> std::result::Result<i64, String> {
        let n = ordinal(&self.hostname, self.statefulset.as_deref())?;
        i64::from(n)
            .checked_add(self.offset)
            .ok_or_else(|| format!("ordinal {n} + offset {} overflows", self.offset))
    }
}
