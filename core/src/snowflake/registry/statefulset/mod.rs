//! `statefulset` — the worker id of a Kubernetes StatefulSet pod: its ordinal, from its
//! host name (`orders-3` -> 3), plus an optional offset.
//!
//! Nothing is coordinated over the network: Kubernetes promises at most one pod per
//! ordinal while pods are deleted gracefully (`docs/kubernetes.md` says when that holds
//! and when it does not, a force-deleted pod), and leafid adds what it can check from
//! inside the pod:
//! - **One holder per pod.** The generator claims the host identity
//!   `statefulset/<worker id>` ([`WorkerRegistry::host_identity`], an abstract Unix socket
//!   in the pod's network namespace, which every container of the pod shares), so a
//!   second generator or process of the pod with the same worker id is refused with
//!   `WorkerIdInUse`. Pods do not share a network namespace: two pods with one ordinal
//!   are not excluded by it.
//! - **Refused before any I/O**: a host name that is not a StatefulSet pod's (or not a
//!   pod of `?name=`) when the URL is parsed or the registry built, and an id outside the
//!   layout's worker ids at `acquire`, before any file is touched.
//! - **The floor across restarts, as `local:` keeps it.** With a floor directory
//!   (`statefulset:///var/lib/leafid?…`, on the pod's PersistentVolume so that it follows
//!   the ordinal to whatever node the pod is scheduled on), the bound of worker id `n` is
//!   kept in `worker-<n>.json` there, written every heartbeat and at close, and is the
//!   next holder's floor. Without one, the floor is the generator's own cache file, as for
//!   `fixed:` (it survives a restart only where the cache directory does).
//! - **No file trusted alone, no trust in the clock (fence rule 5).** The bound file may
//!   be missing (a pod's first start, a file deleted, no floor directory) or older than
//!   the pod's last ids (a volume restored from a snapshot taken while it ran), and the
//!   pod's previous incarnation may have run on a node whose clock was ahead.
//!   Kubernetes stopped it before this pod started, so the generator starts above both
//!   the file's bound and this node's clock at start-up plus the allowed skew
//!   (`max_skew`, 5 s by default, plus 1 s): the registry reports the node's own clock
//!   as its reading, the only clock a pod has, and marks the floor unrecorded. It
//!   assumes the cluster's nodes keep their clocks within that skew of each other (NTP).
//! - **A second writer is a lost lease (fence rules 1 and 2).** Every renew first checks
//!   that the bound file still holds what this holder last wrote: a file written by
//!   another process (a second pod with this ordinal sharing the volume) or deleted is
//!   [`fence::lost`], and issuing stops. That detects two holders within a heartbeat; it
//!   cannot keep them from issuing meanwhile.
//!
//! The configuration is in `config.rs`, its URL grammar in `url.rs`, the host-name rule
//! in `ordinal.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::cache::{CacheEntry, WorkerCache};
use super::{fence, system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

mod config;
mod ordinal;
pub(crate) mod url;

pub use self::config::StatefulsetConfig;
pub use self::ordinal::ordinal;

/// The StatefulSet registry: the worker id is the pod's ordinal plus the offset.
/// Building it checks the host name; `acquire` checks the id against the layout before
/// any I/O.
#[derive(Debug)]
pub struct StatefulsetRegistry {
    config: StatefulsetConfig,
    /// Ordinal plus offset, possibly outside the layout (refused at `acquire`).
    worker_id: i64,
    /// The bound this holder last read from or wrote to its bound file: `Some(None)`
    /// when the file was missing at `acquire`, `None` when no lease is held.
    last: Mutex<Option<Option<CacheEntry>>>,
    /// This node's clock at an acquire that found no bound, for the generator's floor.
    reading: Mutex<Option<ClockReading>>,
}

impl StatefulsetRegistry {
    /// A registry for `config`: [`Error::InvalidConfig`] when the host name is not a
    /// StatefulSet pod's (or not one of `config.statefulset`'s), or the floor directory
    /// is relative.
    pub fn new(config: StatefulsetConfig) -> Result<StatefulsetRegistry> {
        let worker_id = config.worker_id().map_err(Error::InvalidConfig)?;
        if let Some(dir) = &config.floor_dir {
            super::local::absolute_dir(dir).map_err(Error::InvalidConfig)?;
        }
        Ok(StatefulsetRegistry {
            config,
            worker_id,
            last: Mutex::new(None),
            reading: Mutex::new(None),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StatefulsetConfig {
        &self.config
    }

    /// The worker id (ordinal plus offset), before the layout check.
    pub fn worker_id(&self) -> i64 {
        self.worker_id
    }

    /// The id as a layout with largest worker id `max` allows it, or a message naming
    /// the pod, its ordinal and the offset.
    fn fitting(&self, max: u32) -> Result<u32> {
        u32::try_from(self.worker_id)
            .ok()
            .filter(|id| *id <= max)
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "pod {:?} (ordinal {}) + offset {} is worker id {}, outside the layout's worker \
                     ids 0..={max}: lower the offset, keep the StatefulSet's replicas within the \
                     layout, or give the layout more worker bits",
                    self.config.hostname,
                    self.worker_id - self.config.offset,
                    self.config.offset,
                    self.worker_id
                ))
            })
    }

    fn bound_file(dir: &Path, id: u32) -> WorkerCache {
        WorkerCache::at(dir.join(format!("worker-{id}.json")))
    }

    /// Takes the id: checks the layout, then reads the floor from the bound file.
    fn take(&self, max_worker_id: u32) -> Result<Lease> {
        let id = self.fitting(max_worker_id)?;
        let location = format!(
            "statefulset pod {} (ordinal {}, offset {})",
            self.config.hostname,
            self.worker_id - self.config.offset,
            self.config.offset
        );
        let Some(dir) = &self.config.floor_dir else {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(None);
            self.read_clock();
            // No record of its own: the generator's cache file supplies the floor.
            return Ok(Lease {
                worker_id: id,
                floor_ms: i64::MIN,
                floor_recorded: false,
                location,
            });
        };
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let file = Self::bound_file(dir, id);
        // A malformed file is an error, not a floor of zero: guessing low could reissue.
        let found = file.read()?;
        let floor = match &found {
            Some(entry) if entry.worker_id == id => entry.bound_ms,
            Some(entry) => {
                return Err(Error::Malformed {
                    what: "statefulset bound file",
                    path: file.path().display().to_string(),
                    reason: format!("it holds worker id {}, not {id}", entry.worker_id),
                })
            }
            None => i64::MIN,
        };
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(found);
        self.read_clock();
        Ok(Lease {
            worker_id: id,
            floor_ms: floor,
            // A file a volume snapshot can bring back with an older bound is never a
            // record to trust alone (review 2).
            floor_recorded: false,
            location: format!("{location}, bound file {}", file.path().display()),
        })
    }

    /// The node's clock now, the reading the generator floors on at every acquire.
    fn read_clock(&self) {
        let now = system_now_ms();
        *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(ClockReading {
            registry_ms: now,
            local_before_ms: now,
            local_after_ms: now,
            source: format!(
                "this node's clock (statefulset pod {}: no shared clock)",
                self.config.hostname
            ),
        });
    }

    /// Writes `bound_ms` to the bound file, after checking that it still holds what
    /// this holder last read or wrote (fence rules 1 and 2).
    fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let Some(dir) = &self.config.floor_dir else {
            return Ok(());
        };
        let id = lease.worker_id;
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let Some(expected) = last.as_ref() else {
            return Err(fence::lost(id, "this registry holds no lease"));
        };
        let file = Self::bound_file(dir, id);
        let shown = file.path().display();
        let found = file.read()?;
        if found.as_ref() != expected.as_ref() {
            let what = match (&found, expected) {
                (None, _) => format!("{shown} was deleted"),
                (Some(f), Some(e)) => format!(
                    "{shown} was written by another process (bound {} ms, worker id {}, where this \
                     pod last wrote {} ms)",
                    f.bound_ms, f.worker_id, e.bound_ms
                ),
                (Some(f), None) => format!(
                    "{shown} was created by another process (bound {} ms) since this pod started",
                    f.bound_ms
                ),
            };
            *last = None;
            return Err(fence::lost(
                id,
                format!(
                    "{what}: a second pod with ordinal {} may be issuing (a force-deleted pod still \
                     running?)",
                    self.worker_id - self.config.offset
                ),
            ));
        }
        let entry = CacheEntry {
            worker_id: id,
            bound_ms,
        };
        file.write(entry)?;
        *last = Some(Some(entry));
        Ok(())
    }
}

impl WorkerRegistry for StatefulsetRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // Files only, no network: a lost lease is found by `renew`.
        Box::pin(async move { self.take(max_worker_id) })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.write(lease, bound_ms) })
    }

    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        // With a bound file, it is this registry's record (a renew that cannot check and
        // write it must not count on the cache file, as for `local:`); without one the
        // cache file is the record, as for `fixed:`.
        self.config.floor_dir.is_none()
    }

    fn describe(&self) -> String {
        format!("statefulset-{}", self.worker_id)
    }

    fn host_identity(&self) -> Option<String> {
        Some(format!("statefulset/{}", self.worker_id))
    }

    fn cache_is_only_record(&self) -> bool {
        self.config.floor_dir.is_none()
    }

    fn take_clock_reading(&self) -> Option<ClockReading> {
        self.reading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}
