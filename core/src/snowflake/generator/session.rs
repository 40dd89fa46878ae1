//! Holding a worker id: acquiring it (or the cached one through an outage), waiting for
//! the clock to pass its floor, installing it into the state word, persisting a time
//! bound ahead of the clock every heartbeat, and re-acquiring one after a lost lease.
//!
//! This is the generator's I/O with its registry and cache file; the issuing path never
//! calls it directly, only through the slow path (`slow.rs`) when the gate is shut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::super::registry::identity_lock::{self, IdentityLock};
use super::super::registry::{
    system_now_ms, CacheEntry, ClockReading, Lease, LocalRegistry, RegistryConfig, WorkerCache,
    WorkerRegistry, IN_USE_ADVICE,
};
use super::super::word::OPENING_LIMIT;
use super::close;
use super::settings::{Source, MAX_LOOKAHEAD};
use super::state::{
    bounded, skew_of, Core, LeaseState, Session, REGISTRY_CALL_LIMIT, SKEW_SLACK_MS,
};
use crate::error::{Error, Result};
use crate::runtime;

/// The room (ms of the generator's clock) a new lease's first bound leaves above its
/// floor at the least: a floor at the cap waits this long for the registry's clock.
const FIRST_ROOM_MS: i64 = 40;

/// The first wait before retrying a failed re-acquire; doubles up to the last one.
const REACQUIRE_FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between re-acquire attempts (or the heartbeat, when shorter), so a
/// worker is back within about a second of its registry.
const REACQUIRE_LAST_RETRY: Duration = Duration::from_secs(1);

/// `ClockSkew` for a reading whose skew exceeds `max_skew_ms`, else `None`.
fn skew_error(reading: &ClockReading, max_skew_ms: i64) -> Option<Error> {
    let skew = reading.skew_ms();
    (skew.abs() > max_skew_ms).then(|| skew_of(skew, max_skew_ms, reading.source.clone()))
}

/// Fence rule 5: the floor of a lease that has no trusted record of its last holder
/// ([`Lease::floor_recorded`] false: a new record, or one deleted, wiped or restored
/// without it), from the registry's clock `reading`: that clock plus the reach
/// ([`Core::reach_ms`]). Every bound any holder of the identity wrote before this reading
/// is at most the registry's clock at its write plus the reach (`Core::capped`), and
/// every write after it fails (rule 1), so the first id here is above every id an
/// earlier holder issued or may still issue, cut off or not; nothing waits for the
/// clock to get there (`lead.rs`). `None` for a recorded floor or a registry without a
/// clock.
fn unrecorded_floor(
    core: &Core,
    lease: &Lease,
    reading: Option<&ClockReading>,
    clock_is_local: bool,
) -> Option<i64> {
    if lease.floor_recorded {
        return None;
    }
    let r = reading?;
    // The reading may be older than now (taken before the registry's watch).
    let age = system_now_ms()
        .saturating_sub(r.local_after_ms)
        .clamp(0, 3_600_000);
    Some(
        r.registry_ms
            .saturating_add(age)
            .saturating_add(if clock_is_local {
                // Readings of hosts' own clocks: no cap holds across hosts, so nothing
                // leads (see `hold`); an earlier holder issued by its clock, at most the
                // skew (plus the reading's slack) ahead of this one.
                core.settings.max_skew_ms + SKEW_SLACK_MS
            } else {
                core.reach_ms()
            }),
    )
}

/// Takes the registry's clock reading after an acquire: `ClockSkew` when the local
/// clock is too far off (the lease is given back), else the floor [`unrecorded_floor`]
/// asks for.
async fn check_clock(
    core: &Core,
    registry: &Arc<dyn WorkerRegistry>,
    lease: &Lease,
) -> Result<Option<i64>> {
    let Some(reading) = registry.take_clock_reading() else {
        return Ok(None);
    };
    if let Some(e) = skew_error(&reading, core.settings.max_skew_ms) {
        core.note_skew(reading.skew_ms());
        let _ = registry.release(lease).await;
        return Err(e);
    }
    core.keep_clock_ref(&reading);
    Ok(unrecorded_floor(
        core,
        lease,
        Some(&reading),
        registry.clock_is_local(),
    ))
}

/// How many times start-up acquires a worker id when the lease is lost before the first
/// id (a ZooKeeper session expired, or the record taken, while it waited for its floor):
/// that lease issued nothing, so taking another is always safe.
const START_ATTEMPTS: u32 = 3;

/// Acquires a worker id, checks the clock against its floor, installs the state and
/// starts the heartbeat; acquires again when the lease is lost before the first id.
/// Runs on the background runtime.
pub(super) async fn start_session(core: &Arc<Core>) -> Result<()> {
    let mut attempt = 1;
    loop {
        match start_session_once(core).await {
            Err(e @ Error::LeaseLost { .. })
                if attempt < START_ATTEMPTS && !core.closed.load(Ordering::Acquire) =>
            {
                tracing::warn!(error = %e, attempt, "worker-id lease lost before the first id; acquiring again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn start_session_once(core: &Arc<Core>) -> Result<()> {
    let settings = &core.settings;
    let (registry, local): (Arc<dyn WorkerRegistry>, Option<Arc<LocalRegistry>>) =
        match &settings.registry {
            Source::Config(RegistryConfig::Local { dir }) => {
                let l = Arc::new(LocalRegistry::new(dir.clone()));
                (l.clone(), Some(l))
            }
            Source::Config(other) => (other.build(core.layout.max_worker_id())?, None),
            Source::Custom(r) => (r.clone(), None),
        };
    let cache = WorkerCache::new(&settings.cache_dir, &registry.describe());
    // Old cache files of identities long gone; best effort, off the runtime's workers.
    let cache_dir = settings.cache_dir.clone();
    let _ =
        tokio::task::spawn_blocking(move || super::super::registry::cache::prune(&cache_dir)).await;
    let identity_lock = match registry.host_identity() {
        Some(identity) => {
            // A generator of this identity dropped or closed just before: its release
            // runs in the background, bounded by the registry calls' limit.
            close::wait_for_release(&identity, REGISTRY_CALL_LIMIT * 2).await;
            Some(claim_identity(&identity)?)
        }
        None => None,
    };
    core.limit.set(OPENING_LIMIT);
    let max = core.layout.max_worker_id();
    let (lease, skew_floor, handover) = match registry.acquire(max, core.limit.clone()).await {
        Ok(lease) => {
            let skew_floor = check_clock(core, &registry, &lease).await?;
            (lease, skew_floor, None)
        }
        Err(e @ (Error::RegistryUnavailable { .. } | Error::StoreUnavailable { .. })) => {
            let cached = tokio::task::spawn_blocking({
                let cache = cache.clone();
                move || cache.read()
            })
            .await
            .map_err(Error::registry)??;
            let Some((lease, handover)) = from_cache(core, &*registry, &cache, cached) else {
                return Err(e);
            };
            tracing::warn!(error = %e, worker_id = lease.worker_id, cache = %cache.path().display(),
                handover_bound = handover,
                "worker registry unreachable at start-up; using the cached worker id");
            (lease, None, handover)
        }
        Err(e) => return Err(e),
    };
    match hold(core, &registry, &cache, &lease, skew_floor).await {
        Ok(floor) => {
            let session = Arc::new(Session {
                registry,
                local,
                cache,
                identity_lock,
                lease: tokio::sync::Mutex::new(match handover {
                    Some(confirmed) => LeaseState {
                        confirmed,
                        out_of_touch: true,
                        adopting: true,
                        ..LeaseState::acquired(lease.clone())
                    },
                    None => LeaseState::acquired(lease.clone()),
                }),
                stop: tokio::sync::Notify::new(),
                attempts: std::sync::atomic::AtomicU64::new(0),
                catching_up: AtomicBool::new(false),
            });
            install(core, lease.worker_id, floor)?;
            if let Err(e) = persist(
                core,
                &session,
                core.clock.now_millis() + settings.lookahead_ms,
            )
            .await
            {
                let _ = session.registry.release(&lease).await;
                return Err(e);
            }
            // The previous session (a forked parent's) is leaked: see `Core::session`.
            core.session.store(
                Arc::into_raw(session.clone()) as *mut Session,
                Ordering::Release,
            );
            core.epoch.store(runtime::fork_epoch(), Ordering::Release);
            runtime::spawn(heartbeat(core.clone(), session));
            // No floor (a fresh id) is i64::MIN; `leafid serve` prints it as "none".
            tracing::info!(worker_id = lease.worker_id, location = %lease.location, floor, "snowflake worker id held");
            Ok(())
        }
        Err(e) => {
            let _ = registry.release(&lease).await;
            Err(e)
        }
    }
}

/// Whether a close out of touch with `registry` hands its bound over through the cache
/// file, and a start while the registry is down takes it: identities one process of a
/// host holds at a time, whose id does not survive an outage on the cache alone, on
/// layouts no foreign server shares (`postgres://?port=`). On `zookeeper://` and
/// `mysql://?port=` a Java Leaf or fork server may have started on the identity since
/// the close, issuing by its own clock; only the registry shows it (fence rule 3's
/// watch), and a start from the cache file cannot (review: 303 530 ids issued by both a
/// Java Leaf server and a restart from a handover, 313 266 beside the fork).
pub(super) fn hands_over(registry: &dyn WorkerRegistry) -> bool {
    registry.identity_is_configured()
        && !registry.survives_outage()
        && !registry.shared_with_foreign_servers()
}

/// The lease a start may take from the cache file while its registry is down, and the
/// handover bound it issues up to (`None`: no limit but the usual ones), or `None`
/// when it may not start:
/// - registries whose id stays this process's own through an outage
///   ([`WorkerRegistry::survives_outage`]: `fixed`, `statefulset` without a floor
///   directory) start from the cached bound, as a restart of Java Leaf does from its
///   `workerID.properties`;
/// - identities held one process of this host at a time (`zookeeper://`, `?port=`)
///   start only from a handover: a predecessor that closed while the registry was down
///   left the bound the registry holds for the id in place, and named it in the cache
///   file (`close.rs`). Any other holder of the id starts above that bound (fence rules
///   1 and 5), the predecessor issued up to the cached bound, and this host's identity
///   lock, claimed before, keeps every other process of this host out; so ids between
///   the two are this process's alone. A predecessor that crashed left no handover: its
///   ids may reach the registry's bound.
fn from_cache(
    core: &Core,
    registry: &dyn WorkerRegistry,
    cache: &WorkerCache,
    cached: Option<CacheEntry>,
) -> Option<(Lease, Option<i64>)> {
    let entry = cached?;
    core.layout.check_worker_id(entry.worker_id as i64).ok()?;
    let handover = if registry.survives_outage() {
        None
    } else {
        let handover = entry.handover?;
        let now = core.clock.real_millis();
        // Under the same identity lock only: a copy of the file on another host or in
        // another container is not the predecessor's (review: both issued 2 974 189
        // ids alike from one handover copied to a host with the same ip:port).
        let same_lock = Some(handover.domain) == identity_lock::domain();
        // Only once the predecessor's ids no longer lead the clock: ids start at the
        // clock, so a start from an older copy of the file (a backup restored) issues
        // above what every run since issued by the same clock (review: 2 251 772 ids
        // again from a restored handover whose floor led the clock).
        let behind_clock = entry.bound_ms < now;
        // Room for more than a moment's ids.
        let room = handover.bound_ms > now.saturating_add(FIRST_ROOM_MS);
        if !(hands_over(registry) && same_lock && behind_clock && room) {
            return None;
        }
        Some(handover.bound_ms)
    };
    let lease = Lease {
        worker_id: entry.worker_id,
        floor_ms: entry.bound_ms,
        // This host's own bound, by this host's clock.
        floor_recorded: true,
        location: format!("cache file {}", cache.path().display()),
    };
    Some((lease, handover))
}

/// Claims `identity` on this host, or fails with `WorkerIdInUse`.
fn claim_identity(identity: &str) -> Result<IdentityLock> {
    IdentityLock::try_claim(identity)?.ok_or_else(|| {
        let who = match super::super::registry::identity_lock::holder_pid(identity) {
            Some(pid) if pid == std::process::id() => {
                format!("another generator of this process (pid {pid})")
            }
            Some(pid) => format!("pid {pid} on this host"),
            None => "another process of this host".to_string(),
        };
        Error::WorkerIdInUse {
            identity: format!("identity {identity} on this host"),
            worker_id: None,
            holder: format!("{who} (`ss -xap | grep @leafid/{identity}` shows it)"),
            advice: IN_USE_ADVICE.into(),
        }
    })
}

/// Works out the floor for `lease` (its own, the cache file's, and `skew_floor` from
/// [`unrecorded_floor`]) and moves the generator's clock to it: the first id comes at
/// once, above the floor, and the ids' time part leads the wall clock until it catches
/// up (`lead.rs`). A recorded floor ahead of the clock by more than the reach plus the
/// start-up allowance is a clock set back, `ClockBehindRegistry`. Returns the floor.
async fn hold(
    core: &Arc<Core>,
    registry: &Arc<dyn WorkerRegistry>,
    cache: &WorkerCache,
    lease: &Lease,
    skew_floor: Option<i64>,
) -> Result<i64> {
    core.layout.check_worker_id(lease.worker_id as i64)?;
    let cached = tokio::task::spawn_blocking({
        let cache = cache.clone();
        move || cache.read()
    })
    .await
    .map_err(Error::registry)??;
    let mut recorded = lease.floor_ms;
    if let Some(entry) = cached.filter(|e| e.worker_id == lease.worker_id) {
        recorded = recorded.max(entry.bound_ms);
    }
    let behind_by = |floor: i64| Error::ClockBehindRegistry {
        worker_id: lease.worker_id,
        last_ms: floor,
        behind_ms: floor.saturating_sub(core.clock.real_millis()),
    };
    // A recorded floor leads this host's clock by at most the reach of its writer, which
    // may have had the longest lookahead where the registry's clock caps it (a lookahead
    // lowered since must not refuse the restart); further ahead, this clock was set back.
    // Registries that never lead (`clock_is_local`) or have no clock leave a bound up to
    // their reach ahead at a crash: a restart waits for it (below), never refused.
    let usual = if registry.clock_is_local() || core.registry_now_ms().is_none() {
        core.reach_ms()
    } else {
        MAX_LOOKAHEAD.as_millis() as i64 + core.settings.max_skew_ms + SKEW_SLACK_MS
    };
    if recorded.saturating_sub(core.clock.real_millis()) > usual + core.settings.startup_wait_ms {
        return Err(behind_by(recorded));
    }
    let floor = recorded.max(skew_floor.unwrap_or(i64::MIN));
    if registry.clock_is_local() {
        // Records by this host's own clock (`WorkerRegistry::clock_is_local`): the ids
        // never lead the clock; wait for it (at most the skew plus 1 s past a floor with
        // no record, at most `startup_wait` past a recorded one).
        while core.clock.real_millis() <= floor {
            sleep_on_clock(core, (floor - core.clock.real_millis() + 1).max(1) as u64).await?;
        }
        return Ok(floor);
    }
    // `install` marks the floor's millisecond spent: the next id is from the one after,
    // and a bound must reach past it, within the cap (`Core::capped`). A floor with no
    // record is the cap itself, which moves with the registry's clock: wait until it
    // leaves the first ids some room, so a generator returned by `build` issues at once
    // and goes on until its first heartbeat. A floor further beyond the cap (this host's
    // clock set back, or a lookahead lowered since the floor was written) waits for the
    // clock at most `startup_wait`.
    let wait = core.until_cap_reaches(floor.saturating_add(1 + FIRST_ROOM_MS));
    if wait.as_millis() as i64 > core.settings.startup_wait_ms.max(FIRST_ROOM_MS * 2) {
        return Err(behind_by(floor));
    }
    let now = core.clock.real_millis();
    if floor >= now {
        tracing::info!(
            worker_id = lease.worker_id,
            lead_ms = floor - now + 1,
            recorded = skew_floor.is_none(),
            "the worker id's floor is ahead of the clock: ids start above it at once and \
             their time part leads the clock until it catches up (at half speed)"
        );
    }
    if !wait.is_zero() {
        sleep_on_clock(core, wait.as_millis() as u64).await?;
    }
    core.clock.raise_to(floor.saturating_add(1));
    Ok(floor)
}

/// Sleeps `ms` on the generator's real clock, off the runtime's threads (a test's manual
/// clock advances instead of sleeping).
async fn sleep_on_clock(core: &Core, ms: u64) -> Result<()> {
    let clock = core.clock.real_handle();
    tokio::task::spawn_blocking(move || clock.sleep_millis(ms))
        .await
        .map_err(Error::registry)
}

/// Puts the worker id and its floor into the state word: the floor's millisecond with
/// a full sequence, so the next id comes from a later millisecond. Never moves the
/// word's timestamp back.
fn install(core: &Core, worker_id: u32, floor: i64) -> Result<()> {
    let floor_rel = floor
        .saturating_sub(core.shape.epoch_ms)
        .clamp(0, core.shape.max_rel);
    let before = core.state.load();
    if !core.state.install(&core.shape, worker_id, floor_rel) {
        return Err(Error::Closed);
    }
    // Counts the millisecond in progress (the gate is shut: nothing is issued during an
    // install) and moves the count's first id past the marker, which is no id.
    // Wrapping: a close racing the install leaves CLOSED_STATE (u64::MAX) in the word,
    // and the count of a closed generator no longer matters.
    core.rolled_over(before, core.state.load().wrapping_add(1));
    core.worker.store(worker_id, Ordering::Relaxed);
    Ok(())
}

/// Persists `bound` (cache file and registry) and raises the limit to it when it is
/// persisted somewhere that counts.
async fn persist(core: &Arc<Core>, session: &Session, bound: i64) -> Result<()> {
    let mut st = session.lease.lock().await;
    persist_locked(core, session, &mut st, bound).await
}

pub(super) async fn persist_locked(
    core: &Arc<Core>,
    session: &Session,
    st: &mut LeaseState,
    bound: i64,
) -> Result<()> {
    if core.closed.load(Ordering::Acquire) {
        return Err(Error::Closed);
    }
    // Before the cap, which reads the same reference.
    confirm_clock(core, session, st).await?;
    let bound = core.capped(bound);
    if st.adopting {
        return persist_handover(core, session, st, bound).await;
    }
    if bound <= st.persisted {
        return Ok(());
    }
    let worker_id = st.lease.worker_id;
    let cache = session.cache.clone();
    let cache_res = tokio::task::spawn_blocking(move || {
        cache.write(CacheEntry {
            worker_id,
            bound_ms: bound,
            handover: None,
        })
    })
    .await
    .map_err(Error::registry)
    .and_then(|r| r);
    let mut reg_res = bounded("renew", session.registry.renew(&st.lease, bound)).await;
    if let Err(Error::LeaseLost { .. }) = reg_res {
        // Found by the renew itself (the lease node gone or re-taken): stop, re-acquire.
        core.limit.lose();
    }
    st.out_of_touch = reg_res.as_ref().is_err_and(is_outage);
    let renewed = reg_res.is_ok();
    let skewed = reg_res.is_ok()
        && match session.registry.take_clock_reading() {
            Some(r) => match skew_error(&r, core.settings.max_skew_ms) {
                Some(e) => {
                    core.note_skew(r.skew_ms());
                    tracing::warn!(error = %e, "clock skew against the registry; issuing stops at the last bound");
                    reg_res = Err(e);
                    true
                }
                None => {
                    core.keep_clock_ref(&r);
                    false
                }
            },
            None => false,
        };
    let counted = match (&reg_res, &cache_res) {
        (Ok(()), Ok(())) => true,
        (Ok(()), Err(ce)) => {
            tracing::warn!(error = %ce, "cannot write the worker cache file");
            !session.registry.cache_is_only_record()
        }
        (Err(re), Ok(())) => {
            tracing::warn!(error = %re, "worker registry renew failed");
            // A skewed clock is not an outage: the bound must not rise on the cache alone.
            session.registry.survives_outage() && !skewed
        }
        (Err(re), Err(ce)) => {
            tracing::warn!(registry = %re, cache = %ce, "time bound persisted nowhere");
            false
        }
    };
    if !counted {
        return Err(match (reg_res, cache_res) {
            (Err(e), _) | (_, Err(e)) => e,
            _ => unreachable!("counted is false only when something failed"),
        });
    }
    st.persisted = bound;
    if renewed && !skewed {
        // Only a counted bound: `confirm_clock` renews `persisted` again, and the
        // registry must never hold less than this (`close.rs` hands it over).
        st.confirmed = bound;
    }
    if !core.limit.raise(bound) {
        return Err(Error::LeaseLost {
            worker_id,
            cause: "the registry reported the lease lost".into(),
        });
    }
    Ok(())
}

/// Whether a registry call failed as an outage (down, refusing, silent), not an answer.
fn is_outage(e: &Error) -> bool {
    matches!(
        e,
        Error::RegistryUnavailable { .. } | Error::StoreUnavailable { .. }
    )
}

/// [`persist_locked`] for a lease taken from a handover (`LeaseState::adopting`): the
/// bound goes to the cache file alone, never past the one the registry holds for the
/// id (`LeaseState::confirmed`), and the write clears the handover before any id above
/// the predecessor's is issued, so a restart after this process crashes never issues
/// them again (it finds no handover and waits for the registry).
async fn persist_handover(
    core: &Core,
    session: &Session,
    st: &mut LeaseState,
    bound: i64,
) -> Result<()> {
    if st.confirmed == i64::MIN {
        return Err(Error::LeaseLost {
            worker_id: st.lease.worker_id,
            cause: "the registry answered without giving back the worker id handed over; \
                    asking it again"
                .into(),
        });
    }
    let bound = bound.min(st.confirmed);
    if bound > st.persisted {
        let entry = CacheEntry {
            worker_id: st.lease.worker_id,
            bound_ms: bound,
            handover: None,
        };
        let cache = session.cache.clone();
        tokio::task::spawn_blocking(move || cache.write(entry))
            .await
            .map_err(Error::registry)??;
        st.persisted = bound;
    }
    if st.persisted <= core.clock.now_millis() {
        return Err(Error::registry(format!(
            "the worker registry is unreachable, and the bound it holds for worker id {} \
             (handed over by the process before this one) has passed; ids resume once it answers",
            st.lease.worker_id
        )));
    }
    // Also when nothing was written: a limit set back to `OPENING_LIMIT` (`adopt`) opens
    // again up to what the cache file holds.
    if !core.limit.raise(st.persisted) {
        return Err(Error::LeaseLost {
            worker_id: st.lease.worker_id,
            cause: "the limit was lowered while the bound was written".into(),
        });
    }
    Ok(())
}

/// Fence rule 5, before any bound is raised: the local clock against the registry's
/// clock of the last reading, carried forward by the monotonic clock
/// ([`Core::jumped_clock`]). Where they differ by more than the skew allows, no bound
/// from the local clock is written (a bound far ahead would strand the worker id that
/// long after a crash, and the cap would rest on the wrong clock) until a fresh reading
/// decides: the bound already persisted is renewed as it is, which raises nothing, and
/// the registry's clock read with it either agrees with the local clock within
/// `max_skew` (the reference moves to it and the caller goes on) or is the `ClockSkew`.
/// Without that reading a holder whose clock was stepped (NTP after a paused VM, whose
/// pause the monotonic clock does not count) would compare every later write with a
/// reference that never moves again, and stop for good.
async fn confirm_clock(core: &Core, session: &Session, st: &LeaseState) -> Result<()> {
    let Some(jumped) = core.jumped_clock() else {
        return Ok(());
    };
    // No bound of this lease persisted yet: the reading its acquire took is the fresh one.
    // On a layout a Java Leaf or fork server shares, a renew also rewrites the stamp that
    // server reads (`fence::foreign_timestamp`, from this suspect clock): a clock set back
    // would lower it below ids already issued, and such a server started next would
    // issue them again. There nothing is written until the clock agrees again.
    if st.persisted == i64::MIN || session.registry.shared_with_foreign_servers() {
        tracing::warn!(error = %jumped, "clock skew against the registry; no bound written");
        return Err(jumped);
    }
    match bounded("renew", session.registry.renew(&st.lease, st.persisted)).await {
        Ok(()) => {}
        Err(e @ Error::LeaseLost { .. }) => {
            core.limit.lose();
            return Err(e);
        }
        Err(e) => {
            // An outage: the clock stays unconfirmed, and so does any bound from it.
            tracing::warn!(error = %jumped, registry = %e,
                "clock skew against the registry's last reading, which cannot be read again now; no bound written");
            return Err(jumped);
        }
    }
    let Some(reading) = session.registry.take_clock_reading() else {
        return Err(jumped);
    };
    if let Some(e) = skew_error(&reading, core.settings.max_skew_ms) {
        core.note_skew(reading.skew_ms());
        tracing::warn!(error = %e, "clock skew against the registry; no bound written");
        return Err(e);
    }
    tracing::info!(
        skew_ms = reading.skew_ms(),
        "the local clock moved against the registry's last reading, and a fresh reading agrees: \
         issuing goes on by it"
    );
    core.keep_clock_ref(&reading);
    Ok(())
}

/// Persists a bound every heartbeat; re-acquires a worker id after a lost lease.
async fn heartbeat(core: Arc<Core>, session: Arc<Session>) {
    let mut wait = until_room_partly_used(&core);
    let mut retry = REACQUIRE_FIRST_RETRY;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = core.limit.lost() => {}
            _ = session.stop.notified() => return,
        }
        wait = core.settings.heartbeat;
        if core.closed.load(Ordering::Acquire)
            || runtime::fork_epoch() != core.epoch.load(Ordering::Acquire)
        {
            return;
        }
        if session.lease.lock().await.adopting {
            let result = adopt(&core, &session).await;
            if let Err(e) = &result {
                tracing::warn!(error = %e, "a worker id taken over from a handover: not the registry's yet");
            }
            core.note_persist(&result);
            continue;
        }
        if core.limit.get() == i64::MIN {
            match reacquire(&core, &session).await {
                Ok(()) => {
                    retry = REACQUIRE_FIRST_RETRY;
                    wait = until_room_partly_used(&core);
                }
                Err(e) => {
                    // Soon at first, then backing off; the jitter spreads a fleet's
                    // retries so a registry coming back is not hit all at once.
                    wait = retry.min(wait).mul_f64(0.8 + 0.4 * fastrand::f64());
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot re-acquire a worker id after a lost lease");
                    retry = (retry * 2).min(REACQUIRE_LAST_RETRY);
                }
            }
            continue;
        }
        let bound = core.clock.now_millis() + core.settings.lookahead_ms;
        let result = persist(&core, &session, bound).await;
        if let Err(e) = &result {
            tracing::warn!(error = %e, "heartbeat could not persist a time bound");
        }
        core.note_persist(&result);
        if result.is_ok() {
            wait = until_room_partly_used(&core);
        }
    }
}

/// When the next persist is due after a successful one: a heartbeat later, or sooner
/// while the clock leads (`lead.rs`) and the bound may reach only a little past it
/// (`Core::capped`): once a quarter of the room is used, so callers keep finding the
/// gate open even when this task runs late on a busy host. The clock leads at half
/// speed, so `room` clock ms last `2 × room` real ms.
fn until_room_partly_used(core: &Core) -> Duration {
    let room = core.limit.get().saturating_sub(core.clock.now_millis());
    let soon = Duration::from_millis((room / 2).clamp(2, i64::from(u32::MAX)) as u64);
    core.settings.heartbeat.min(soon)
}

/// For a lease taken from a handover while the registry was down: persists the next
/// bound (cache file only, up to the handed-over bound), then asks the registry for the
/// identity as any start does. Once it answers with a lease, the usual floor check
/// (the registry's bound and this process's cached one, so above every id issued here)
/// installs it and the session goes on as any other. An outage keeps the handover
/// going. Any other answer (the identity held by another process, a clock out of step)
/// stops issuing from the handover for good: the registry may have given the id to
/// someone else; this heartbeat goes on asking.
async fn adopt(core: &Arc<Core>, session: &Session) -> Result<()> {
    let persisted = {
        let mut st = session.lease.lock().await;
        if core.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if st.confirmed == i64::MIN {
            Ok(())
        } else {
            if core.limit.get() == i64::MIN {
                // A failed attempt's registry session gave up its limit; the handover
                // does not rest on that session.
                core.limit.set(OPENING_LIMIT);
            }
            let bound = core.clock.now_millis() + core.settings.lookahead_ms;
            persist_locked(core, session, &mut st, bound).await
        }
    };
    let max = core.layout.max_worker_id();
    let lease = match session.registry.acquire(max, core.limit.clone()).await {
        Ok(lease) => lease,
        // Still down: the handover goes on (its bound's error first, once it has passed).
        Err(e) if is_outage(&e) => return persisted.and(Err(e)),
        Err(e) => {
            stop_handover(core, session).await;
            return Err(e);
        }
    };
    let floor = match check_clock(core, &session.registry, &lease).await {
        Ok(skew_floor) => hold(core, &session.registry, &session.cache, &lease, skew_floor).await,
        Err(e) => Err(e),
    };
    let floor = match floor {
        Ok(floor) => floor,
        Err(e) => {
            let _ = bounded("release", session.registry.release(&lease)).await;
            stop_handover(core, session).await;
            return Err(e);
        }
    };
    let mut st = session.lease.lock().await;
    if core.closed.load(Ordering::Acquire) {
        let _ = bounded("release", session.registry.release(&lease)).await;
        return Err(Error::Closed);
    }
    // The gate shut for the install, as for any new lease.
    core.limit.set(OPENING_LIMIT);
    if let Err(e) = install(core, lease.worker_id, floor) {
        // Closed meanwhile: the close's release covers the handover, not this lease.
        let _ = bounded("release", session.registry.release(&lease)).await;
        return Err(e);
    }
    tracing::info!(worker_id = lease.worker_id, location = %lease.location, floor,
        "the registry is back: the worker id taken over from a handover is held there");
    *st = LeaseState::acquired(lease);
    let bound = core.clock.now_millis() + core.settings.lookahead_ms;
    persist_locked(core, session, &mut st, bound).await
}

/// The registry answered an adopting lease without giving the identity back: no more
/// ids from the handover, and none handed on at close.
async fn stop_handover(core: &Core, session: &Session) {
    let mut st = session.lease.lock().await;
    st.confirmed = i64::MIN;
    st.out_of_touch = false;
    core.limit.set(i64::MIN);
}

/// After a registry reported the lease lost: takes a (possibly different) worker id
/// from the same registry, with the usual floor check.
async fn reacquire(core: &Arc<Core>, session: &Session) -> Result<()> {
    let mut st = session.lease.lock().await;
    if core.closed.load(Ordering::Acquire) {
        return Err(Error::Closed);
    }
    // The lost lease hands nothing over (`close.rs`): another writer used its record.
    st.out_of_touch = false;
    st.confirmed = i64::MIN;
    let _ = bounded("release", session.registry.release(&st.lease)).await;
    core.limit.set(OPENING_LIMIT);
    let lease = match session
        .registry
        .acquire(core.layout.max_worker_id(), core.limit.clone())
        .await
    {
        Ok(lease) => lease,
        Err(e) => {
            // Back to "lease lost", so the next heartbeat tries again.
            core.limit.set(i64::MIN);
            return Err(e);
        }
    };
    let skew_floor = match check_clock(core, &session.registry, &lease).await {
        Ok(f) => f,
        Err(e) => {
            core.limit.set(i64::MIN);
            return Err(e);
        }
    };
    let floor = match hold(core, &session.registry, &session.cache, &lease, skew_floor).await {
        Ok(f) => f,
        Err(e) => {
            let _ = session.registry.release(&lease).await;
            core.limit.set(i64::MIN);
            return Err(e);
        }
    };
    install(core, lease.worker_id, floor)?;
    *st = LeaseState::acquired(lease);
    let bound = core.clock.now_millis() + core.settings.lookahead_ms;
    persist_locked(core, session, &mut st, bound).await
}
