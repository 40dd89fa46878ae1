//! Closing a snowflake generator, bounded: issuing stops at once, the final write and
//! release run on the core's runtime, and the caller waits for them at most a deadline
//! (or, when dropping, not at all).
//!
//! Letting go before the registry answered is safe. Every id ever issued has a timestamp
//! at or below the issue limit, and the limit is raised only after a bound at least that
//! high was persisted where it counts (the registry, or the cache file for registries
//! whose id survives an outage; see `persist_locked`). So the last persisted bound
//! already covers every id, and the final write of the exact last timestamp only lowers
//! it, to give the id back sooner. Skipped or lost, the next holder's floor is the older,
//! higher bound: it may wait longer for the id, never reissue one. A release that never
//! completes leaves the lease to expire on the registry's side (a ZooKeeper session's
//! timeout, the database lease's term after its last renew).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::super::layout::decode;
use super::super::registry::{identity_lock, system_now_ms, CacheEntry, Handover};
use super::state::{bounded, Core, Session};
use crate::runtime;

/// Host identities whose generator was closed (or dropped) in this process while its
/// release still runs, with the signal of its end. A new generator for one of them
/// waits for that release ([`wait_for_release`]) rather than failing with
/// `WorkerIdInUse` because a drop no longer waits.
///
/// Each entry carries the fork epoch it was made under: in a forked child the parent's
/// releases run in the parent, never here, so the child neither waits on them nor
/// touches their channels (whose locks a fork may have copied held); it drops them
/// unread.
type Releasing = Vec<(String, u64, tokio::sync::watch::Receiver<bool>)>;

/// The list, held across every fork() (registered as a fork lock) so that a child
/// never inherits it locked by a thread it does not have.
struct ReleasingList(std::sync::Mutex<Releasing>);

impl runtime::ForkLock for ReleasingList {
    fn hold_for_fork(&self) -> Box<dyn runtime::Guard + '_> {
        Box::new(self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

static RELEASING: std::sync::LazyLock<Arc<ReleasingList>> = std::sync::LazyLock::new(|| {
    let list = Arc::new(ReleasingList(std::sync::Mutex::new(Vec::new())));
    let weak: std::sync::Weak<dyn runtime::ForkLock> =
        Arc::downgrade(&(list.clone() as Arc<dyn runtime::ForkLock>));
    // Rank 9: a leaf, taken last (nothing else is locked while it is held).
    runtime::register_fork_lock(9, weak);
    list
});

/// The list, with the entries of other processes (before a fork) forgotten unread and
/// finished releases dropped.
fn releasing() -> std::sync::MutexGuard<'static, Releasing> {
    let mut all = RELEASING.0.lock().unwrap_or_else(|p| p.into_inner());
    let epoch = runtime::fork_epoch();
    if all.iter().any(|(_, e, _)| *e != epoch) {
        for entry in std::mem::take(&mut *all) {
            if entry.1 == epoch {
                all.push(entry);
            } else {
                std::mem::forget(entry);
            }
        }
    }
    all.retain(|(_, _, done)| !*done.borrow());
    all
}

/// Waits (at most `limit`) for the releases of `identity` started by closes in this
/// process. Runs on the runtime, in a constructor.
pub(super) async fn wait_for_release(identity: &str, limit: Duration) {
    let pending: Vec<_> = {
        releasing()
            .iter()
            .filter(|(id, _, _)| id == identity)
            .map(|(_, _, done)| done.clone())
            .collect()
    };
    for mut done in pending {
        let _ = tokio::time::timeout(limit, done.wait_for(|d| *d)).await;
    }
}

impl Core {
    /// Stops issuing and starts the final write and release in the background (the
    /// first call only; later ones do nothing). Never waits: safe in `Drop`, on any
    /// thread, with the registry unreachable.
    pub(super) fn begin_close(self: &Arc<Self>) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // A lease lost (its record used by another writer) hands nothing over.
        let lost = self.limit.get() == i64::MIN;
        self.limit.set(i64::MIN);
        // Swapping in the closed marker makes every swap prepared before it fail, so the
        // word read here is the last id anyone will ever issue from this generator.
        let last = self.state.close();
        // The last millisecond's ids, before its word is gone.
        self.rolled_over(last, super::super::word::CLOSED_STATE);
        let Some(session) = self.session() else {
            self.released.send_replace(true);
            return;
        };
        if runtime::fork_epoch() != self.epoch.load(Ordering::Acquire) {
            // A forked child closing its parent's generator: the lease is the parent's.
            if let Some(local) = &session.local {
                local.forget_inherited();
            }
            std::mem::forget(session);
            self.released.send_replace(true);
            return;
        }
        session.stop.notify_one();
        if let Some(lock) = &session.identity_lock {
            releasing().push((
                lock.identity().to_string(),
                runtime::fork_epoch(),
                self.released.subscribe(),
            ));
        }
        let last_ms = decode(last as i64, &self.layout).timestamp_ms;
        if session.registry.shared_with_foreign_servers() {
            // `close` waits until the clock passes it (`lead_left`).
            self.last_issued_ms.store(last_ms, Ordering::Relaxed);
        }
        let core = self.clone();
        runtime::spawn(async move {
            release(&session, last_ms, lost).await;
            core.released.send_replace(true);
        });
    }

    /// Waits at most `wait` for the release [`begin_close`](Self::begin_close) started;
    /// true when it completed. Blocks the calling thread, except on the runtime's own
    /// threads, where waiting could starve the release: there it returns at once.
    pub(super) fn wait_released(&self, wait: Duration) -> bool {
        let mut done = self.released.subscribe();
        if *done.borrow() {
            return true;
        }
        if runtime::on_runtime_thread() {
            return false;
        }
        let finished = runtime::block_on(async move {
            matches!(
                tokio::time::timeout(wait, done.wait_for(|d| *d)).await,
                Ok(Ok(_))
            )
        });
        if !finished {
            self.gave_up(wait);
        }
        finished
    }

    /// [`wait_released`](Self::wait_released) without a thread.
    pub(super) async fn released_within(self: Arc<Self>, wait: Duration) -> bool {
        let mut done = self.released.subscribe();
        let finished = matches!(
            tokio::time::timeout(wait, done.wait_for(|d| *d)).await,
            Ok(Ok(_))
        );
        if !finished {
            self.gave_up(wait);
        }
        finished
    }

    /// How long until the clock passes the last id issued, on a layout a Java Leaf or
    /// fork server shares (zero elsewhere, and once it has): such a server taking the
    /// identity over next starts from its own clock and the stamp leafid wrote (never
    /// ahead of the clock, fence rule 4), so ids that lead the clock (the first minutes
    /// after a start above a floor, `lead.rs`) would be issued again. `close` waits
    /// this long after the release (a leafid successor needs no wait: it starts above
    /// the exact last timestamp the release wrote); `close_within` and `close_async`
    /// (the bindings' closes) do not.
    pub(super) fn lead_left(&self) -> Duration {
        // Relaxed: written by `begin_close` on this thread, before the caller asks.
        let last = self.last_issued_ms.load(Ordering::Relaxed);
        let left = last.saturating_add(1).saturating_sub(system_now_ms());
        Duration::from_millis(left.clamp(0, i64::MAX / 4) as u64)
    }

    fn gave_up(&self, wait: Duration) {
        tracing::warn!(
            worker_id = self.worker.load(Ordering::Relaxed),
            ?wait,
            "the worker registry did not confirm the release in time; it goes on in the background, \
             and if it never completes the lease expires on the registry's side"
        );
    }
}

/// Writes the exact last timestamp issued (cache file, then registry) and releases the
/// lease; each registry call bounded. Failures are logged: see the module docs for why
/// skipping any of it is safe.
///
/// A close out of touch with the registry (its last call failed as an outage) on an
/// identity one process of this host holds at a time (`zookeeper://`, `?port=`) skips
/// the final write instead: the registry keeps the bound it confirmed, above the last
/// id, and the cache file names it as a handover, so the next process of this identity
/// may issue between the two while the registry is still down (`session::from_cache`).
/// A lease taken from a handover and not yet the registry's has nothing there to write.
async fn release(session: &Session, last_ms: i64, lost: bool) {
    let st = session.lease.lock().await;
    let registry = &session.registry;
    let handover = match identity_lock::domain() {
        Some(domain)
            if st.out_of_touch
                && !lost
                && super::session::hands_over(&**registry)
                && st.confirmed > last_ms =>
        {
            Some(Handover {
                bound_ms: st.confirmed,
                domain,
            })
        }
        _ => None,
    };
    let entry = CacheEntry {
        worker_id: st.lease.worker_id,
        bound_ms: last_ms,
        handover,
    };
    let cache = session.cache.clone();
    match tokio::task::spawn_blocking(move || cache.write(entry)).await {
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the worker cache file at close"),
        Err(e) => tracing::warn!(error = %e, "cache write task failed at close"),
        Ok(Ok(())) => {}
    }
    if let Some(Handover {
        bound_ms: bound, ..
    }) = handover
    {
        tracing::info!(
            worker_id = st.lease.worker_id,
            bound,
            "the worker registry is unreachable at close: it keeps the bound it holds, \
             which the cache file hands over to the next process of this identity"
        );
    } else if st.adopting {
        // Nothing of this lease is in the registry yet.
    } else if let Err(e) = bounded("final renew", registry.renew(&st.lease, last_ms)).await {
        tracing::warn!(error = %e, "final renew failed; the registry keeps the last heartbeat's bound");
    }
    if let Err(e) = bounded("release", session.registry.release(&st.lease)).await {
        tracing::warn!(error = %e, "releasing the worker id failed; its lease expires on the registry's side");
    }
    if let Some(lock) = &session.identity_lock {
        lock.release();
    }
    tracing::info!(
        worker_id = st.lease.worker_id,
        last_ms,
        "snowflake generator closed"
    );
}
