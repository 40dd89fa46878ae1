//! The generator's side of the registry contract, driven through an in-memory pool
//! registry (a test double for the *contract*, not for ZooKeeper or MySQL, whose own
//! tests run against the real servers): a lost lease stops issuing at once and the
//! heartbeat takes a new id; a failed renew stops issuing at the last persisted bound
//! unless the id survives outages and the cache file holds the bound; a registry down
//! at start-up falls back to the cache file only for ids that survive outages.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leafid::runtime::BoxFuture;
use leafid::snowflake::registry::{IssueLimit, Lease, WorkerCache, WorkerRegistry};
use leafid::{Error, ManualClock, SnowflakeGenerator};

const T: i64 = 1_700_000_000_000;

#[derive(Debug, Default)]
struct PoolState {
    free: BTreeSet<u32>,
    floors: std::collections::HashMap<u32, i64>,
    limit: Option<Arc<IssueLimit>>,
    held: Option<u32>,
    fail_acquire: bool,
    fail_renew: bool,
    renewals: Vec<(u32, i64)>,
}

#[derive(Debug)]
struct Pool {
    survives: bool,
    state: Mutex<PoolState>,
}

impl Pool {
    fn new(size: u32, survives: bool) -> Arc<Pool> {
        Arc::new(Pool {
            survives,
            state: Mutex::new(PoolState {
                free: (0..size).collect(),
                ..Default::default()
            }),
        })
    }

    /// The lease is gone (as when a ZooKeeper session expires): signal it through the
    /// limit and let someone else have the id.
    fn lose(&self) {
        let mut st = self.state.lock().unwrap();
        st.limit.as_ref().unwrap().set(i64::MIN);
        st.held = None; // not returned to `free`: another process took it
    }

    fn set(&self, f: impl FnOnce(&mut PoolState)) {
        f(&mut self.state.lock().unwrap())
    }
}

impl WorkerRegistry for Pool {
    fn acquire(&self, max: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, leafid::Result<Lease>> {
        Box::pin(async move {
            let mut st = self.state.lock().unwrap();
            if st.fail_acquire {
                return Err(Error::RegistryUnavailable {
                    cause: "test pool is down".into(),
                    source: None,
                });
            }
            let id = *st
                .free
                .iter()
                .find(|&&i| i <= max)
                .ok_or(Error::WorkerIdExhausted {
                    pool: "test".into(),
                    size: max + 1,
                })?;
            st.free.remove(&id);
            st.held = Some(id);
            st.limit = Some(limit);
            Ok(Lease {
                worker_id: id,
                floor_ms: st.floors.get(&id).copied().unwrap_or(i64::MIN),
                floor_recorded: st.floors.contains_key(&id),
                location: format!("test-pool/{id}"),
            })
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, leafid::Result<()>> {
        Box::pin(async move {
            let mut st = self.state.lock().unwrap();
            if st.fail_renew {
                return Err(Error::RegistryUnavailable {
                    cause: "test pool is down".into(),
                    source: None,
                });
            }
            st.floors.insert(lease.worker_id, bound_ms);
            st.renewals.push((lease.worker_id, bound_ms));
            Ok(())
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, leafid::Result<()>> {
        Box::pin(async move {
            let mut st = self.state.lock().unwrap();
            if st.held == Some(lease.worker_id) {
                st.held = None;
                st.free.insert(lease.worker_id);
            }
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        self.survives
    }

    fn describe(&self) -> String {
        "test-pool".into()
    }
}

#[test]
fn lost_lease_stops_issuing_at_once_and_a_new_id_is_taken() {
    let cache = tempfile::tempdir().unwrap();
    let pool = Pool::new(4, false);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(pool.clone())
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(50))
        .build_blocking()
        .unwrap();
    assert_eq!(gen.worker_id(), 0);
    let before = gen.next_ids(100).unwrap();
    pool.lose();
    match gen.next_id() {
        Err(Error::LeaseLost { worker_id, .. }) => assert_eq!(worker_id, 0),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    // The heartbeat re-acquires; poll (generously) until issuing resumes.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        match gen.next_id() {
            Ok(id) => break id,
            Err(Error::LeaseLost { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("unexpected {e}"),
        }
    };
    assert_eq!(gen.worker_id(), 1, "the lost id went to someone else");
    assert_eq!(gen.decode(after).worker_id, 1);
    assert!(before.iter().all(|&id| id < after));
}

#[test]
fn failed_renew_stops_issuing_at_the_last_bound_when_the_id_dies_with_the_registry() {
    let cache = tempfile::tempdir().unwrap();
    let pool = Pool::new(2, false);
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(pool.clone())
        .clock(clock.clone())
        .cache_dir(cache.path())
        .heartbeat(Duration::from_secs(60))
        .lookahead(Duration::from_secs(120))
        .build_blocking()
        .unwrap();
    let bound = T + 120_000;
    assert_eq!(pool.state.lock().unwrap().renewals, vec![(0, bound)]);
    pool.set(|st| st.fail_renew = true);
    clock.set(bound);
    gen.next_id().unwrap(); // at the bound: still covered
    clock.set(bound + 1);
    let e = gen.next_id().unwrap_err();
    assert!(matches!(e, Error::RegistryUnavailable { .. }), "{e}");
    // The cache file was written, but it does not count for an id that dies with the
    // registry: another process may hold it now.
    pool.set(|st| st.fail_renew = false);
    clock.advance(1_000);
    let id = gen.next_id().unwrap();
    assert_eq!(gen.decode(id).timestamp_ms, bound + 1_001);
}

#[test]
fn failed_renew_continues_on_the_cache_file_when_the_id_survives_outages() {
    let cache = tempfile::tempdir().unwrap();
    let pool = Pool::new(2, true);
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(pool.clone())
        .clock(clock.clone())
        .cache_dir(cache.path())
        .heartbeat(Duration::from_secs(60))
        .lookahead(Duration::from_secs(120))
        .build_blocking()
        .unwrap();
    pool.set(|st| st.fail_renew = true);
    clock.set(T + 120_001);
    gen.next_id().unwrap();
    let entry = WorkerCache::new(cache.path(), "test-pool")
        .read()
        .unwrap()
        .unwrap();
    assert_eq!(entry.worker_id, 0);
    assert!(entry.bound_ms >= T + 120_001 + 120_000);
}

#[test]
fn registry_down_at_startup_uses_the_cached_id_above_its_bound() {
    let cache = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let first = Pool::new(4, true);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(first.clone())
        .clock(clock.clone())
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap();
    let _other = first.state.lock().unwrap().free.pop_first(); // id 1 taken elsewhere
    assert_eq!(gen.worker_id(), 0);
    let crash_bound = WorkerCache::new(cache.path(), "test-pool")
        .read()
        .unwrap()
        .unwrap()
        .bound_ms;
    let last = gen.next_id().unwrap();
    std::mem::forget(gen); // crash: the cache keeps the heartbeat's bound

    let down = Pool::new(4, true);
    down.set(|st| st.fail_acquire = true);
    let again = SnowflakeGenerator::builder()
        .custom_registry(down.clone())
        .clock(clock.clone())
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap();
    assert_eq!(again.worker_id(), 0, "the cached id");
    let next = again.next_id().unwrap();
    assert!(next > last);
    assert!(
        again.decode(next).timestamp_ms > crash_bound,
        "waited out the cached bound"
    );

    // Without a cache file the registry's error stands.
    let empty = tempfile::tempdir().unwrap();
    let e = SnowflakeGenerator::builder()
        .custom_registry(down)
        .clock(clock.clone())
        .cache_dir(empty.path())
        .build_blocking()
        .unwrap_err();
    assert!(matches!(e, Error::RegistryUnavailable { .. }), "{e}");
}

#[test]
fn registry_down_at_startup_is_an_error_when_ids_die_with_the_registry() {
    let cache = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let up = Pool::new(4, false);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(up)
        .clock(clock.clone())
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap();
    gen.next_id().unwrap();
    gen.close();
    let down = Pool::new(4, false);
    down.set(|st| st.fail_acquire = true);
    let e = SnowflakeGenerator::builder()
        .custom_registry(down)
        .clock(clock.clone())
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap_err();
    assert!(matches!(e, Error::RegistryUnavailable { .. }), "{e}");
}

#[test]
fn close_renews_with_the_exact_last_timestamp_then_releases() {
    let cache = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let pool = Pool::new(2, false);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(pool.clone())
        .clock(clock.clone())
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap();
    clock.advance(42);
    gen.next_id().unwrap();
    gen.close();
    let st = pool.state.lock().unwrap();
    assert_eq!(st.renewals.last(), Some(&(0, T + 42)));
    assert!(st.free.contains(&0) && st.held.is_none(), "released");
}
