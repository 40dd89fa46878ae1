//! Snowflake generator behaviour under a manual clock: sequence overflow, clock steps,
//! overflow of the timestamp range, layouts, start-up floors, the cache file, the
//! issue limit and close.

use std::sync::Arc;
use std::time::Duration;

use leafid::snowflake::registry::{CacheEntry, WorkerCache};
use leafid::{Error, Layout, ManualClock, RegistryConfig, SnowflakeGenerator};

const T: i64 = 1_700_000_000_000;

fn fixed(id: u32, clock: &Arc<ManualClock>, cache: &std::path::Path) -> SnowflakeGenerator {
    SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(id))
        .clock(clock.clone())
        .cache_dir(cache)
        .build_blocking()
        .expect("build")
}

#[test]
fn ids_carry_worker_and_clock_and_decode_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(7, &clock, dir.path());
    assert_eq!(gen.worker_id(), 7);
    let id = gen.next_id().unwrap();
    let d = gen.decode(id);
    assert_eq!(d.timestamp_ms, T);
    assert_eq!(d.worker_id, 7);
    assert!(
        d.sequence < 100,
        "first sequence of a ms starts in [0, 100): {}",
        d.sequence
    );
    assert_eq!(leafid::decode(id, &Layout::default()), d);
    let next = gen.decode(gen.next_id().unwrap());
    assert_eq!(next.sequence, d.sequence + 1);
}

#[test]
fn sequence_overflow_waits_for_the_next_millisecond() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(1, &clock, dir.path());
    let first = gen.next_id().unwrap();
    let start = gen.decode(first).sequence;
    let mut ids = vec![first];
    // The manual clock stands still, so this ms holds exactly 4096 - start ids.
    for _ in 0..(4096 - start) {
        ids.push(gen.next_id().unwrap());
    }
    let in_first_ms = ids
        .iter()
        .filter(|&&id| gen.decode(id).timestamp_ms == T)
        .count();
    assert_eq!(in_first_ms as u32, 4096 - start);
    let last = *ids.last().unwrap();
    assert_eq!(
        gen.decode(last).timestamp_ms,
        T + 1,
        "the overflow waited for the next ms"
    );
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn batch_fill_spans_milliseconds_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(2, &clock, dir.path());
    let ids = gen.next_ids(20_000).unwrap();
    assert_eq!(ids.len(), 20_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
    let last = gen.decode(*ids.last().unwrap());
    assert!(
        last.timestamp_ms >= T + 4,
        "20 000 ids need at least 5 ms: {last:?}"
    );
    assert!(ids.iter().all(|&id| gen.decode(id).worker_id == 2));
    let mut buf = [0i64; 3];
    gen.fill(&mut buf).unwrap();
    assert!(buf[0] > *ids.last().unwrap() && buf[0] < buf[1] && buf[1] < buf[2]);
}

#[test]
fn small_backward_step_is_waited_out() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(3, &clock, dir.path());
    let before = gen.next_id().unwrap();
    clock.set(T - 3);
    // Waits 2 × 3 ms (the manual clock advances while "sleeping"), then issues.
    let after = gen.next_id().unwrap();
    assert!(after > before);
    assert_eq!(gen.decode(after).timestamp_ms, T + 3);
}

#[test]
fn small_backward_step_that_does_not_recover_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::frozen(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(6))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    gen.next_id().unwrap();
    clock.set(T - 4);
    match gen.next_id() {
        Err(Error::ClockMovedBackwards { offset_ms }) => assert_eq!(offset_ms, 4),
        other => panic!("expected ClockMovedBackwards, got {other:?}"),
    }
}

#[test]
fn large_backward_step_fails_then_recovers_without_reissuing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(4, &clock, dir.path());
    let before = gen.next_id().unwrap();
    clock.set(T - 100);
    match gen.next_id() {
        Err(e @ Error::ClockMovedBackwards { .. }) => {
            assert!(matches!(e, Error::ClockMovedBackwards { offset_ms: 100 }));
            assert_eq!(e.code(), "LEAF_CLOCK_MOVED_BACKWARDS");
        }
        other => panic!("expected ClockMovedBackwards, got {other:?}"),
    }
    assert!(gen.next_ids(5).is_err(), "batches refuse too");
    clock.set(T);
    let again = gen.next_id().unwrap();
    assert!(
        again > before,
        "same ms continues the sequence, never repeats"
    );
}

#[test]
fn configurable_backward_wait() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(14))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .max_backward(Duration::from_millis(50))
        .build_blocking()
        .unwrap();
    let before = gen.next_id().unwrap();
    clock.set(T - 40);
    let after = gen.next_id().unwrap();
    assert!(after > before);
}

#[test]
fn stalled_clock_at_sequence_overflow_gives_up_instead_of_spinning_forever() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::frozen(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(5))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    let mut n = 0;
    let err = loop {
        match gen.next_id() {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(n <= 4096 && n > 3996, "{n}");
    assert!(matches!(err, Error::ClockMovedBackwards { .. }), "{err}");
}

#[test]
fn clock_stepping_back_during_overflow_wait_is_noticed() {
    // Leaf PR #153: the wait for the next ms must see a backward step. A frozen clock
    // set back from another thread while the generator waits.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::frozen(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(15))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    let d0 = gen.decode(gen.next_id().unwrap());
    for _ in 0..(4095 - d0.sequence) {
        gen.next_id().unwrap();
    }
    let c = clock.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        c.set(T - 1_000);
    });
    let err = gen.next_id().unwrap_err();
    setter.join().unwrap();
    assert!(
        matches!(err, Error::ClockMovedBackwards { offset_ms: 1_000 }),
        "{err}"
    );
}

#[test]
fn timestamp_past_the_range_is_an_error_never_a_negative_id() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::default();
    let clock = ManualClock::new(layout.max_timestamp_ms() - 1);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(1023))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    let id = gen.next_id().unwrap();
    assert!(id > 0);
    clock.advance(1);
    let id = gen.next_id().unwrap();
    assert!(id > 0);
    assert_eq!(gen.decode(id).timestamp_ms, layout.max_timestamp_ms());
    clock.advance(1);
    match gen.next_id() {
        Err(Error::TimestampOverflow { max_ms }) => assert_eq!(max_ms, 3_487_858_230_208),
        other => panic!("expected TimestampOverflow, got {other:?}"),
    }
    assert!(gen.next_ids(10).is_err());
    // A builder whose clock is already past the range is refused up front.
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(16))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap_err();
    assert!(matches!(e, Error::TimestampOverflow { .. }), "{e}");
}

#[test]
fn custom_layout_issues_and_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = 1_600_000_000_000;
    let layout = Layout::new(39, 16, 8, epoch).unwrap();
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(65_000))
        .layout(layout)
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    let ids = gen.next_ids(1_000).unwrap();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    for &id in &ids {
        let d = gen.decode(id);
        assert_eq!(d.worker_id, 65_000);
        assert!(d.sequence <= 255);
        assert!(d.timestamp_ms >= T);
        assert_eq!(id >> 24, d.timestamp_ms - epoch);
    }
    // 256 ids per ms at most: 1000 ids span at least 4 ms.
    assert!(gen.decode(ids[999]).timestamp_ms >= T + 3);
}

#[test]
fn bad_configuration_is_refused_before_any_io() {
    // The cache dir below cannot exist; errors must come before anything touches it.
    let nowhere = std::path::PathBuf::from("/proc/self/no-such-dir/leafid");
    assert!(Layout::new(41, 10, 13, 0).is_err());
    assert!(Layout::new(41, 11, 12, i64::MAX / 4).is_err());
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(1024))
        .cache_dir(&nowhere)
        .build_blocking()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::WorkerIdOutOfRange {
                worker_id: 1024,
                max: 1023
            }
        ),
        "{e}"
    );
    let e = SnowflakeGenerator::builder()
        .cache_dir(&nowhere)
        .build_blocking()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(1))
        .heartbeat(Duration::from_secs(3))
        .lookahead(Duration::from_secs(1))
        .cache_dir(&nowhere)
        .build_blocking()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(1))
        .clock(ManualClock::new(1_000))
        .cache_dir(&nowhere)
        .build_blocking()
        .unwrap_err();
    assert!(e.to_string().contains("epoch"), "{e}");
    assert!(SnowflakeGenerator::builder()
        .registry_url("fixed:x")
        .is_err());
}

#[test]
fn startup_waits_for_a_clock_slightly_behind_the_cached_bound() {
    let dir = tempfile::tempdir().unwrap();
    let cache = WorkerCache::new(dir.path(), "fixed-17");
    cache
        .write(CacheEntry {
            worker_id: 17,
            bound_ms: T + 3_000,
            handover: None,
        })
        .unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(17, &clock, dir.path());
    let id = gen.next_id().unwrap();
    assert!(gen.decode(id).timestamp_ms > T + 3_000);
}

/// `fixed:`'s records, kept by a registry that does not keep them by this host's clock
/// (`clock_is_local` left false, as for a custom or networked registry): its floors
/// lead the clock instead of being waited for.
#[derive(Debug)]
struct Leading(leafid::snowflake::registry::FixedRegistry);

impl leafid::snowflake::registry::WorkerRegistry for Leading {
    fn acquire(
        &self,
        max_worker_id: u32,
        limit: Arc<leafid::snowflake::registry::IssueLimit>,
    ) -> leafid::runtime::BoxFuture<'_, leafid::Result<leafid::snowflake::registry::Lease>> {
        self.0.acquire(max_worker_id, limit)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a leafid::snowflake::registry::Lease,
        bound_ms: i64,
    ) -> leafid::runtime::BoxFuture<'a, leafid::Result<()>> {
        self.0.renew(lease, bound_ms)
    }
    fn release<'a>(
        &'a self,
        lease: &'a leafid::snowflake::registry::Lease,
    ) -> leafid::runtime::BoxFuture<'a, leafid::Result<()>> {
        self.0.release(lease)
    }
    fn survives_outage(&self) -> bool {
        self.0.survives_outage()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn host_identity(&self) -> Option<String> {
        self.0.host_identity()
    }
    fn cache_is_only_record(&self) -> bool {
        self.0.cache_is_only_record()
    }
}

#[test]
fn a_floor_ahead_of_the_clock_gives_the_first_id_at_once_and_the_ids_catch_up_at_half_speed() {
    let dir = tempfile::tempdir().unwrap();
    WorkerCache::new(dir.path(), "fixed-19")
        .write(CacheEntry {
            worker_id: 19,
            bound_ms: T + 4_000,
            handover: None,
        })
        .unwrap();
    // A manual clock moves only when told or when the generator sleeps on it: start-up
    // used to sleep it past the floor (4 s); now nothing sleeps.
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .custom_registry(Arc::new(Leading(
            leafid::snowflake::registry::FixedRegistry::new(19),
        )))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .expect("build");
    let first = gen.next_id().unwrap();
    assert_eq!(
        leafid::Clock::now_millis(&*clock),
        T,
        "start-up waited for the clock"
    );
    assert_eq!(gen.decode(first).timestamp_ms, T + 4_001);
    clock.advance(2_000);
    let later = gen.next_id().unwrap();
    assert!(later > first);
    assert_eq!(gen.decode(later).timestamp_ms, T + 4_001 + 1_000);
    // Caught up after twice the lead: the real clock again.
    clock.advance(7_000);
    let caught = gen.next_id().unwrap();
    assert_eq!(gen.decode(caught).timestamp_ms, T + 9_000);
    gen.close();
}

/// Review of issue 30: `fixed:` (and `local:`, `statefulset:`) never lead the clock.
/// Their records are this host's files; one deleted after a clean exit (a `local:`
/// directory emptied by a deploy) leaves the id floored at the clock, and ids that had
/// led it were issued again. A floor ahead of the clock is waited for instead.
#[test]
fn fixed_waits_for_a_floor_ahead_of_the_clock_and_never_leads_it() {
    let dir = tempfile::tempdir().unwrap();
    WorkerCache::new(dir.path(), "fixed-16")
        .write(CacheEntry {
            worker_id: 16,
            bound_ms: T + 4_000,
            handover: None,
        })
        .unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(16, &clock, dir.path());
    let first = gen.next_id().unwrap();
    let now = leafid::Clock::now_millis(&*clock);
    assert!(
        now > T + 4_000,
        "start-up did not wait for the floor: clock at {now}"
    );
    assert!(
        gen.decode(first).timestamp_ms <= now,
        "the first id leads the clock"
    );
    gen.close();
}

/// Review of this session: a `fixed:` restart after a crash with a lookahead over 10 s
/// (the bound it left is up to that far ahead) was refused with `ClockBehindRegistry`
/// once `fixed:` stopped leading; it waits for the bound instead.
#[test]
fn fixed_restart_waits_for_a_crash_bound_as_far_ahead_as_its_lookahead() {
    let dir = tempfile::tempdir().unwrap();
    WorkerCache::new(dir.path(), "fixed-15")
        .write(CacheEntry {
            worker_id: 15,
            bound_ms: T + 28_000,
            handover: None,
        })
        .unwrap();
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(15))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .lookahead(Duration::from_secs(30))
        .build_blocking()
        .expect("a restart within the lookahead's reach waits, never refused");
    let first = gen.decode(gen.next_id().unwrap()).timestamp_ms;
    assert!(first > T + 28_000, "an id at {first}, below the bound");
    assert!(
        first <= leafid::Clock::now_millis(&*clock),
        "the id leads the clock"
    );
    gen.close();
}

#[test]
fn startup_refuses_a_clock_far_behind_the_cached_bound() {
    let dir = tempfile::tempdir().unwrap();
    WorkerCache::new(dir.path(), "fixed-18")
        .write(CacheEntry {
            worker_id: 18,
            bound_ms: T + 90_000,
            handover: None,
        })
        .unwrap();
    let clock = ManualClock::new(T);
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(18))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap_err();
    // A bound that far ahead may also have been written by a run with a longer
    // lookahead (or heartbeat) than this one: the message says both (the review of
    // issue 30 found it blamed the clock alone).
    let text = e.to_string();
    assert!(
        text.contains("set back") && text.contains("longer lookahead"),
        "{text}"
    );
    match e {
        Error::ClockBehindRegistry {
            worker_id,
            last_ms,
            behind_ms,
        } => {
            assert_eq!((worker_id, last_ms, behind_ms), (18, T + 90_000, 90_000));
        }
        other => panic!("expected ClockBehindRegistry, got {other:?}"),
    }
    // `fixed:` never leads the clock, so its bound is at most its reach (the lookahead,
    // 6 s here, plus the skew, 5 s, and 1 s) ahead of it, and a start waits for it at
    // most that plus `startup_wait` (10 s); 90 s is a clock set back. A longer start-up allowance lets it through: it waits for the clock
    // (a manual one here), and the first id is above the bound.
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(18))
        .clock(clock.clone())
        .cache_dir(dir.path())
        .startup_wait(Duration::from_secs(100))
        .build_blocking()
        .unwrap();
    assert!(gen.decode(gen.next_id().unwrap()).timestamp_ms > T + 90_000);
}

#[test]
fn malformed_cache_file_fails_start_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let cache = WorkerCache::new(dir.path(), "fixed-8");
    std::fs::write(cache.path(), "workerID=8\n").unwrap();
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(8))
        .clock(ManualClock::new(T))
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap_err();
    match e {
        Error::Malformed { path, .. } => assert_eq!(path, cache.path().display().to_string()),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn never_issues_past_an_unpersisted_bound() {
    let root = tempfile::tempdir().unwrap();
    let cache_dir = root.path().join("cache");
    let clock = ManualClock::new(T);
    let gen = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(9))
        .clock(clock.clone())
        .cache_dir(&cache_dir)
        .heartbeat(Duration::from_secs(60)) // the test drives persistence itself
        .lookahead(Duration::from_secs(120))
        .build_blocking()
        .unwrap();
    let bound = WorkerCache::new(&cache_dir, "fixed-9")
        .read()
        .unwrap()
        .unwrap()
        .bound_ms;
    assert_eq!(bound, T + 120_000);
    // Within the bound: fine. Make the cache unwritable (the only record of a fixed id).
    clock.set(bound);
    gen.next_id().unwrap();
    std::fs::remove_dir_all(&cache_dir).unwrap();
    std::fs::write(&cache_dir, b"not a directory").unwrap();
    clock.set(bound + 1);
    let e = gen.next_id().unwrap_err();
    assert!(matches!(e, Error::RegistryUnavailable { .. }), "{e}");
    assert!(gen.fill(&mut [0; 4]).is_err());
    // Writable again: the slow path persists a new bound and issuing resumes.
    std::fs::remove_file(&cache_dir).unwrap();
    clock.advance(1_000);
    let id = gen.next_id().unwrap();
    assert_eq!(gen.decode(id).timestamp_ms, bound + 1_001);
    let persisted = WorkerCache::new(&cache_dir, "fixed-9")
        .read()
        .unwrap()
        .unwrap();
    assert!(persisted.bound_ms >= bound + 1_001);
}

#[test]
fn close_persists_the_last_timestamp_and_refuses_later_calls() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(11, &clock, dir.path());
    let clone = gen.clone();
    clock.advance(5);
    let last = gen.next_id().unwrap();
    gen.close();
    gen.close(); // idempotent
    assert!(matches!(clone.next_id(), Err(Error::Closed)));
    assert!(matches!(clone.next_ids(2), Err(Error::Closed)));
    let entry = WorkerCache::new(dir.path(), "fixed-11")
        .read()
        .unwrap()
        .unwrap();
    assert_eq!(
        entry,
        CacheEntry {
            worker_id: 11,
            bound_ms: T + 5,
            handover: None
        }
    );
    // A restart in the same ms continues above the last id, without waiting long.
    let again = fixed(11, &clock, dir.path());
    let next = again.next_id().unwrap();
    assert!(next > last);
    assert_eq!(again.decode(next).timestamp_ms, T + 6);
}

#[test]
fn dropping_the_last_clone_closes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let gen = fixed(12, &clock, dir.path());
    gen.next_id().unwrap();
    drop(gen.clone());
    let entry = WorkerCache::new(dir.path(), "fixed-12")
        .read()
        .unwrap()
        .unwrap();
    assert!(
        entry.bound_ms > T + 1_000,
        "still open: bound is the lookahead"
    );
    // The drop returns at once; the final write follows on the core's runtime.
    drop(gen);
    let started = std::time::Instant::now();
    loop {
        let entry = WorkerCache::new(dir.path(), "fixed-12")
            .read()
            .unwrap()
            .unwrap();
        if entry.bound_ms == T {
            break; // closed: the bound is the last issued ms
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the close started by the drop never wrote the last issued ms"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn restart_after_a_crash_with_the_clock_set_back_never_reissues() {
    // Leaf issue #216: the clock goes back by less than the upload interval across a
    // crash. The persisted bound (ahead of every issued id) makes the restart wait.
    // The crash is a real one: a forked child issues and _exits without closing (the
    // worker identity is this host's, so it is freed only when its holder dies).
    let dir = tempfile::tempdir().unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: a plain pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fork in a test; the child runs leafid code and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let clock = ManualClock::new(T);
        let gen = fixed(13, &clock, dir.path());
        clock.advance(2_000);
        let last = *gen.next_ids(1_000).unwrap().last().unwrap();
        let bytes = last.to_le_bytes();
        // SAFETY: writing 8 bytes we own to our pipe, then leaving without any cleanup.
        unsafe {
            libc::write(fds[1], bytes.as_ptr() as *const _, 8);
            libc::_exit(0);
        }
    }
    let mut buf = [0u8; 8];
    // SAFETY: reading 8 bytes into our buffer, then reaping the child.
    unsafe {
        assert_eq!(libc::read(fds[0], buf.as_mut_ptr() as *mut _, 8), 8);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    let last_issued = i64::from_le_bytes(buf);
    let clock = ManualClock::new(T + 500);
    let again = fixed(13, &clock, dir.path());
    let next = again.next_id().unwrap();
    assert!(next > last_issued);
    assert!(again.decode(next).timestamp_ms > T + 2_000);
}
