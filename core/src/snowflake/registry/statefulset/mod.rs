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
//!   [`fence::lost`], and issuing stops.
//! - **Check and write are one step across pods.** The check and the write run under an
//!   exclusive `flock` on `worker-<n>.lock` beside the bound file ([`HostLock`]), so a
//!   renew stalled between them (a hung NFS or CephFS volume) cannot have another pod's
//!   check pass meanwhile and then land over that pod's write: whichever renew comes
//!   second sees the first one's write and stops. The lock is waited for at most
//!   [`LOCK_WAIT`]; a renew that cannot get it fails with `WorkerIdInUse` naming the
//!   holder, and raises no limit. The lock, check, write and check run on tokio's
//!   blocking pool, never on the runtime's threads, so a hung volume holds one blocking
//!   thread while the generator's limit on a registry call ends the renew for its caller
//!   (a renew that finishes later raises nothing). The kernel frees the lock when its
//!   holder dies; a child forked during a renew closes its copy of the lock's descriptor
//!   in the fork handler ([`HostLock::close_in_children`]), so it cannot hold the lock
//!   for a parent killed mid-renew. The holder checks after its write that the lock file
//!   is still the one it locked (deleted or replaced under it, another pod may have
//!   locked a new one: [`fence::lost`]).
//! - **A slow renew is a lost lease.** The lock keeps pods apart only while the
//!   filesystem keeps a hung client's lock; an NFS server or a CephFS MDS drops it after
//!   a lease or session timeout, and the hung pod's write may land over another pod's
//!   with its lock check still passing. So a renew that took longer than [`SLOW_RENEW`]
//!   from taking the lock to the end of its write is [`fence::lost`], and the next
//!   acquire's floor covers, by this node's clock, the limit another pod may have taken
//!   meanwhile: its last renew came before this write landed (after that, its check
//!   fails), so its limit is at most that renew plus the lookahead, which this pod's
//!   stalled bound moved on by the renew's length reaches. (That pod's clock may be
//!   ahead of this node's by the allowed skew; its ids reach that high only if it also
//!   fails to renew for a whole lookahead, since its next renew sees this write and
//!   stops it.) On NFS, Linux turns `flock` into a
//!   lock the server holds (NLM for v3, a v4 lock), seen by every client; a mount with
//!   `nolock` or `local_lock=flock|all` keeps locks on one node, and the lock then
//!   serializes only the pods of that node (`docs/kubernetes.md`).
//!
//! The configuration is in `config.rs`, its URL grammar in `url.rs`, the host-name rule
//! in `ordinal.rs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cache::{CacheEntry, WorkerCache};
use super::host_lock::{Attempt, HostLock};
use super::{fence, system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

mod config;
mod ordinal;
pub(crate) mod url;

pub use self::config::StatefulsetConfig;
pub use self::ordinal::ordinal;

/// How long a renew waits for another pod's hold on `worker-<n>.lock`. A write takes
/// milliseconds; a hold this long is a pod of this ordinal whose volume hangs, and
/// waiting longer would only delay this pod's next renew.
pub const LOCK_WAIT: Duration = Duration::from_secs(1);

/// How often a renew tries the lock again while another pod holds it.
const LOCK_RETRY: Duration = Duration::from_millis(10);

/// A renew that took longer than this from taking the lock to the end of its write
/// (on `CLOCK_BOOTTIME`, which counts a suspended VM's time) is a lost lease, not a
/// success. A server drops a silent client's lock only after it has been silent for a
/// whole lease: NFSv4's lease is 90 s by default and Linux's nfsd accepts no less than
/// 10 s; NLM (NFSv3) drops locks only after a server reboot, whose grace period is the
/// lease again; CephFS's MDS evicts a client after its session timeout (60 s by
/// default). A renew that kept the lock for less than half the shortest of those can
/// have lost it to no one; one slower may have landed its write over another pod's.
/// A healthy write takes milliseconds; the stalls tests inject are 4 s at most.
pub const SLOW_RENEW: Duration = Duration::from_secs(5);

/// The StatefulSet registry: the worker id is the pod's ordinal plus the offset.
/// Building it checks the host name; `acquire` checks the id against the layout before
/// any I/O.
#[derive(Debug)]
pub struct StatefulsetRegistry {
    config: StatefulsetConfig,
    /// Ordinal plus offset, possibly outside the layout (refused at `acquire`).
    worker_id: i64,
    /// The bound this holder last read from or wrote to its bound file: `Some(None)`
    /// when the file was missing at `acquire`, `None` when no lease is held. Shared
    /// with the renew running on a blocking thread.
    last: Arc<Mutex<Option<Option<CacheEntry>>>>,
    /// The lowest floor the next acquire may take, by this node's clock: above the
    /// limit another pod may hold after a renew slower than [`SLOW_RENEW`].
    cover: Arc<Mutex<i64>>,
    /// A renew is running on a blocking thread (perhaps long after its caller gave up).
    busy: Arc<AtomicBool>,
    /// This node's clock at the last acquire or renew, for the generator's floor and its
    /// clock check.
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
            last: Arc::new(Mutex::new(None)),
            cover: Arc::new(Mutex::new(i64::MIN)),
            busy: Arc::new(AtomicBool::new(false)),
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

    fn lock_file(dir: &Path, id: u32) -> PathBuf {
        dir.join(format!("worker-{id}.lock"))
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
        let floor = floor.max(*self.cover.lock().unwrap_or_else(|p| p.into_inner()));
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

    /// The node's clock now: the reading the generator floors on at every acquire, and
    /// checks its clock against at every renew.
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
    /// this holder last read or wrote (fence rules 1 and 2), both under the lock. The
    /// file I/O runs on tokio's blocking pool: a hung volume holds that thread, never
    /// the runtime's, so the generator's limit on a registry call ends the wait. A renew
    /// that finishes after its caller stopped waiting raises no limit (only the caller
    /// does that, with its answer), and one slower than [`SLOW_RENEW`] ends the lease.
    async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let Some(dir) = &self.config.floor_dir else {
            return Ok(());
        };
        // One renew at a time: on a volume that hangs even the lock file's open, every
        // heartbeat would otherwise leave one more blocking thread behind.
        // Acquire/Release: the flag is cleared after the previous renew's last write.
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(Error::registry(format!(
                "the previous renew of {} is still waiting on the volume",
                Self::bound_file(dir, lease.worker_id).path().display()
            )));
        }
        let renew = Renew {
            dir: dir.clone(),
            id: lease.worker_id,
            ordinal: self.worker_id - self.config.offset,
            bound_ms,
            called: boottime(),
            last: self.last.clone(),
            cover: self.cover.clone(),
            busy: self.busy.clone(),
        };
        tokio::task::spawn_blocking(move || renew.run())
            .await
            .map_err(Error::registry)?
    }
}

/// One renew's lock, check, write and check, on a blocking thread.
struct Renew {
    dir: PathBuf,
    id: u32,
    ordinal: i64,
    bound_ms: i64,
    /// When the renew was asked for, on [`boottime`].
    called: Duration,
    last: Arc<Mutex<Option<Option<CacheEntry>>>>,
    cover: Arc<Mutex<i64>>,
    busy: Arc<AtomicBool>,
}

impl Drop for Renew {
    fn drop(&mut self) {
        // Release: pairs with the next renew's swap.
        self.busy.store(false, Ordering::Release);
    }
}

impl Renew {
    fn run(self) -> Result<()> {
        let path = StatefulsetRegistry::lock_file(&self.dir, self.id);
        let lock = self.lock(&path)?;
        lock.close_in_children();
        let locked = boottime();
        let expected = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        let written = self.check_and_write(expected);
        let took = boottime().saturating_sub(locked);
        let kept = lock.check();
        // Explicit: a child forked meanwhile shares the descriptor, and must not keep the
        // lock held after this renew.
        lock.unlock();
        if took > SLOW_RENEW {
            // The server may have dropped this pod's lock meanwhile, and another pod may
            // have locked, checked, written and issued before this write landed over its
            // own. Its limit is at most its last renew (before this write landed) plus the
            // lookahead: this pod's bound moved on by the time this renew took.
            let since_called = boottime().saturating_sub(self.called);
            let cover = self
                .bound_ms
                .saturating_add(since_called.as_millis() as i64);
            let mut c = self.cover.lock().unwrap_or_else(|p| p.into_inner());
            *c = (*c).max(cover);
            drop(c);
            self.end(&expected);
            let outcome = match &written {
                Ok(_) => "its write landed".to_string(),
                Err(e) => format!("its write may have landed ({e})"),
            };
            return Err(fence::lost(
                self.id,
                format!(
                    "a renew of {} took {took:?} from taking {} to the end of its write, longer                      than {SLOW_RENEW:?} ({outcome}): a network filesystem may have dropped this                      pod's lock meanwhile and let another pod with ordinal {} write and issue;                      the next worker id starts above the bound such a pod may hold",
                    StatefulsetRegistry::bound_file(&self.dir, self.id)
                        .path()
                        .display(),
                    path.display(),
                    self.ordinal
                ),
            ));
        }
        let entry = written?;
        if kept.is_err() {
            self.end(&expected);
            return Err(fence::lost(
                self.id,
                format!(
                    "{} was deleted or replaced while this pod held it: another pod with ordinal                      {} may have locked a new one and written its bound meanwhile",
                    path.display(),
                    self.ordinal
                ),
            ));
        }
        self.update(&expected, Some(Some(entry)));
        Ok(())
    }

    /// Takes the lock that makes the check and the write one step across pods, waiting
    /// at most [`LOCK_WAIT`].
    fn lock(&self, path: &Path) -> Result<HostLock> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let holder = match HostLock::try_lock(path)? {
                Attempt::Locked(lock) => return Ok(lock),
                Attempt::Held(holder) => holder,
            };
            if Instant::now() >= deadline {
                let mine = holder.as_ref().is_some_and(|h| {
                    h.pid == std::process::id() && h.host == super::host_lock::host_name()
                });
                let who = holder.map_or_else(|| "another process".to_string(), |h| h.to_string());
                let holder = if mine {
                    format!(
                        "{who} (this pod: its previous renew, still waiting on the volume for more                          than {LOCK_WAIT:?})"
                    )
                } else {
                    format!(
                        "{who}, which has held it for more than {LOCK_WAIT:?}: another pod with                          ordinal {} writing this worker id's bound, its volume hung",
                        self.ordinal
                    )
                };
                return Err(Error::WorkerIdInUse {
                    identity: format!("statefulset bound file lock {}", path.display()),
                    worker_id: Some(self.id),
                    holder,
                    advice: "this pod raises no issue limit until it gets the lock; if that pod \
                             was force-deleted and still runs, stop it (two pods of one ordinal \
                             must not run at once)"
                        .into(),
                });
            }
            std::thread::sleep(LOCK_RETRY);
        }
    }

    /// The check and the write, run under the lock: the entry written.
    fn check_and_write(&self, expected: Option<Option<CacheEntry>>) -> Result<CacheEntry> {
        let id = self.id;
        let Some(expected) = expected else {
            return Err(fence::lost(id, "this registry holds no lease"));
        };
        let file = StatefulsetRegistry::bound_file(&self.dir, id);
        let shown = file.path().display();
        let found = file.read()?;
        if found != expected {
            let what = match (&found, &expected) {
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
            self.update(&Some(expected), None);
            return Err(fence::lost(
                id,
                format!(
                    "{what}: a second pod with ordinal {} may be issuing (a force-deleted pod still \
                     running?)",
                    self.ordinal
                ),
            ));
        }
        let entry = CacheEntry {
            worker_id: id,
            bound_ms: self.bound_ms,
            handover: None,
        };
        fault::between_check_and_write(&self.dir);
        file.write(entry)?;
        Ok(entry)
    }

    /// Ends the lease this renew was made under.
    fn end(&self, expected: &Option<Option<CacheEntry>>) {
        self.update(expected, None);
    }

    /// Sets what this holder last wrote to `to`, unless the lease changed since the
    /// renew read it (released, or acquired again while this renew was late): that
    /// lease's own check then compares the file with what it read.
    fn update(&self, expected: &Option<Option<CacheEntry>>, to: Option<Option<CacheEntry>>) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if *last == *expected {
            *last = to;
        }
    }
}

/// The time since boot, counting time suspended (`CLOCK_BOOTTIME`): a renew's length
/// must include a suspended VM's or a frozen container's pause, which is exactly when
/// a server drops a client's lock.
fn boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_BOOTTIME exists on every Linux since 2.6.39.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl WorkerRegistry for StatefulsetRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // Files only, no network: a lost lease is found by `renew`.
        Box::pin(async move { self.take(max_worker_id) })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.write(lease, bound_ms).await?;
            // A reading with every renew, as with every other clock: the generator checks
            // its clock against the last one, so a step of this node's clock (NTP after a
            // paused VM) is measured against the node's clock now, not at the acquire.
            self.read_clock();
            Ok(())
        })
    }

    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
            Ok(())
        })
    }

    fn clock_is_local(&self) -> bool {
        true
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

/// A stall between a renew's check of the bound file and its write, as a hung volume
/// makes it: for tests that prove the check and the write are one step across pods.
/// Nothing arms it outside tests; disarmed, it costs a renew one uncontended lock.
#[doc(hidden)]
pub mod fault {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::time::Duration;

    /// A floor directory whose renews stall.
    struct Armed {
        dir: PathBuf,
        stall: Duration,
        left: u64,
        begun: u64,
    }

    static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

    /// Makes the next `times` renews into floor directory `dir` (in this process) stall
    /// for `stall` between their check and their write.
    pub fn stall_writes(dir: &Path, stall: Duration, times: u64) {
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        armed.retain(|a| a.dir != dir);
        armed.push(Armed {
            dir: dir.to_path_buf(),
            stall,
            left: times,
            begun: 0,
        });
    }

    /// How many renews into `dir` have begun a stall since it was armed.
    pub fn stalls_begun(dir: &Path) -> u64 {
        let armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        armed.iter().find(|a| a.dir == dir).map_or(0, |a| a.begun)
    }

    pub(super) fn between_check_and_write(dir: &Path) {
        let stall = {
            let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
            match armed.iter_mut().find(|a| a.dir == dir && a.left > 0) {
                Some(a) => {
                    a.left -= 1;
                    a.begun += 1;
                    a.stall
                }
                None => return,
            }
        };
        // Blocks this thread, as a write to a hung volume does.
        std::thread::sleep(stall);
    }
}
