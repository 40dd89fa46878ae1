//! Segment mode on the in-memory store with a manual clock: the double buffer, the
//! dynamic step, outages and the tag list, without a database.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::segment::store::memory::MemoryStore;
use leafid::segment::SegmentStore;
use leafid::{Error, ManualClock, SegmentGenerator, SegmentOptions, TagStats};

const MINUTE: i64 = 60_000;

fn options(clock: Arc<ManualClock>) -> SegmentOptions {
    SegmentOptions {
        clock,
        wait_timeout: Duration::from_secs(5),
        ..SegmentOptions::default()
    }
}

fn setup(step: i64) -> (Arc<MemoryStore>, Arc<ManualClock>, SegmentGenerator) {
    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    leafid::runtime::block_on(async move { s.create_tag("order", 1, step, "").await }).unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let dynstore: Arc<dyn SegmentStore> = store.clone();
    let opts = options(clock.clone());
    let gen = leafid::runtime::block_on(SegmentGenerator::with_store(dynstore, opts)).unwrap();
    (store, clock, gen)
}

/// Waits (bounded) until the background load of the next segment has landed.
fn wait_for(gen: &SegmentGenerator, what: impl Fn(&TagStats) -> bool) -> TagStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = gen.stats().into_iter().find(|s| s.tag == "order").unwrap();
        if what(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "condition not reached: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn first_ids_start_at_the_tags_start_and_run_across_segments() {
    let (_, _, gen) = setup(10);
    let h = gen.tag("order").unwrap();
    let ids: Vec<i64> = (0..35).map(|_| h.next_id().unwrap()).collect();
    assert_eq!(ids, (1..36).collect::<Vec<_>>());
}

#[test]
fn preloads_next_segment_after_ten_percent() {
    let (store, _, gen) = setup(100);
    let h = gen.tag("order").unwrap();
    for _ in 0..10 {
        h.next_id().unwrap();
    }
    // 10 of 100 used: Leaf loads once *more* than 10% is gone.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(store.allocations(), 1, "no preload at exactly 10%");
    assert!(!gen.stats()[0].next_ready);
    h.next_id().unwrap();
    let stats = wait_for(&gen, |s| s.next_ready);
    assert_eq!(store.allocations(), 2);
    assert_eq!(stats.segments[1 - stats.current].max, 201);
}

#[test]
fn single_buffer_loads_only_when_spent() {
    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    leafid::runtime::block_on(async move { s.create_tag("order", 1, 100, "").await }).unwrap();
    let opts = SegmentOptions {
        double_buffer: false,
        ..options(ManualClock::new(0))
    };
    let dynstore: Arc<dyn SegmentStore> = store.clone();
    let gen = leafid::runtime::block_on(SegmentGenerator::with_store(dynstore, opts)).unwrap();
    let h = gen.tag("order").unwrap();
    for _ in 0..100 {
        h.next_id().unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(store.allocations(), 1);
    assert_eq!(h.next_id().unwrap(), 101);
    assert_eq!(store.allocations(), 2);
}

/// Issues ids until one more segment has been loaded; returns that load's step.
fn spend_until_next_load(gen: &SegmentGenerator) -> i64 {
    let before = gen.stats()[0].refills;
    let h = gen.tag("order").unwrap();
    loop {
        h.next_id().unwrap();
        let stats = gen.stats().remove(0);
        if stats.refills > before {
            return stats.step;
        }
    }
}

#[test]
fn step_doubles_when_segments_go_fast_and_halves_when_slow() {
    let (_, clock, gen) = setup(100);
    let mut steps = vec![];
    for _ in 0..5 {
        steps.push(spend_until_next_load(&gen));
        clock.advance(MINUTE);
    }
    // Leaf: the first two loads use the table's step, then it doubles per fast segment.
    assert_eq!(steps, vec![100, 100, 200, 400, 800]);
    clock.advance(20 * MINUTE);
    assert_eq!(
        spend_until_next_load(&gen),
        800,
        "kept between 15 and 30 minutes"
    );
    clock.advance(31 * MINUTE);
    assert_eq!(spend_until_next_load(&gen), 400, "halved after 30 minutes");
}

#[test]
fn outage_serves_from_buffer_then_errors_then_resumes_without_duplicates() {
    let (store, clock, gen) = setup(100);
    let h = gen.tag("order").unwrap();
    let mut seen = HashSet::new();
    assert!(seen.insert(h.next_id().unwrap()));
    for _ in 0..20 {
        assert!(seen.insert(h.next_id().unwrap()));
    }
    wait_for(&gen, |s| s.next_ready);
    store.set_available(false);
    // Both buffered segments still flow.
    let mut issued = 21;
    let err = loop {
        match h.next_id() {
            Ok(id) => {
                assert!(seen.insert(id), "duplicate {id}");
                issued += 1;
            }
            Err(e) => break e,
        }
    };
    assert_eq!(issued, 200, "every id of both segments was issued");
    assert!(
        matches!(err, Error::StoreUnavailable { .. }),
        "unexpected {err:?}"
    );
    assert!(
        err.to_string().contains("switched off"),
        "cause kept: {err}"
    );
    store.set_available(true);
    clock.advance(10_000);
    let next = h.next_id().unwrap();
    assert!(seen.insert(next));
    assert!(next > 200, "no id below what was issued: {next}");
}

#[test]
fn slow_refill_gives_segments_exhausted_after_the_timeout() {
    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    leafid::runtime::block_on(async move { s.create_tag("order", 1, 5, "").await }).unwrap();
    let opts = SegmentOptions {
        wait_timeout: Duration::from_millis(50),
        double_buffer: false,
        ..options(ManualClock::new(0))
    };
    let dynstore: Arc<dyn SegmentStore> = store.clone();
    let gen = leafid::runtime::block_on(SegmentGenerator::with_store(dynstore, opts)).unwrap();
    for _ in 0..5 {
        gen.next_id("order").unwrap();
    }
    store.set_delay(Duration::from_millis(500));
    let err = gen.next_id("order").unwrap_err();
    assert!(matches!(err, Error::SegmentsExhausted { .. }), "{err:?}");
    assert_eq!(err.code(), "LEAF_SEGMENTS_EXHAUSTED");
}

#[test]
fn refresh_adds_and_removes_tags() {
    let (store, _, gen) = setup(10);
    let s = store.clone();
    leafid::runtime::block_on(async move { s.create_tag("pay", 500, 10, "").await }).unwrap();
    assert!(matches!(gen.next_id("pay"), Err(Error::TagNotFound { .. })));
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.refresh().await }).unwrap();
    assert_eq!(gen.tags(), vec!["order", "pay"]);
    assert_eq!(gen.next_id("pay").unwrap(), 500);
    store.remove_tag("pay");
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.refresh().await }).unwrap();
    assert_eq!(gen.tags(), vec!["order"]);
    let err = gen.next_id("pay").unwrap_err();
    assert!(matches!(err, Error::TagNotFound { .. }));
    assert_eq!(err.code(), "LEAF_TAG_NOT_FOUND");
}

#[test]
fn bad_tags_fail_before_any_io() {
    let (store, _, gen) = setup(10);
    store.set_available(false);
    let long = "x".repeat(129);
    for bad in ["", long.as_str()] {
        let err = gen.next_id(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidTag { .. }), "{bad:?}: {err:?}");
        assert!(matches!(gen.tag(bad), Err(Error::InvalidTag { .. })));
    }
    let g = gen.clone();
    let err = leafid::runtime::block_on(async move { g.create_tag("", 1, 10, "").await });
    assert!(matches!(err, Err(Error::InvalidTag { .. })));
    let g = gen.clone();
    let err = leafid::runtime::block_on(async move { g.create_tag("ok", 1, 0, "").await });
    assert!(matches!(err, Err(Error::InvalidConfig(_))));
    let g = gen.clone();
    let err = leafid::runtime::block_on(async move { g.create_tag("ok", 1, -5, "").await });
    assert!(matches!(err, Err(Error::InvalidConfig(_))));
    assert!(matches!(
        leafid::segment::store::open("postgres://x"),
        Err(Error::InvalidUrl { .. })
    ));
}

#[test]
fn creating_an_existing_tag_is_a_clear_error() {
    let (_, _, gen) = setup(10);
    let g = gen.clone();
    let err = leafid::runtime::block_on(async move { g.create_tag("order", 1, 10, "").await });
    assert!(matches!(err, Err(Error::TagExists { .. })));
}

#[test]
fn closed_generator_refuses_calls() {
    let (_, _, gen) = setup(10);
    let h = gen.tag("order").unwrap();
    h.next_id().unwrap();
    gen.close();
    gen.close();
    assert!(matches!(h.next_id(), Err(Error::Closed)));
    assert!(matches!(gen.next_id("order"), Err(Error::Closed)));
}

#[test]
fn batches_are_contiguous_within_segments_and_unique() {
    let (_, _, gen) = setup(7);
    let ids = gen.next_ids("order", 100).unwrap();
    assert_eq!(ids, (1..101).collect::<Vec<_>>());
    let mut buf = [0i64; 3];
    gen.tag("order").unwrap().fill(&mut buf).unwrap();
    assert_eq!(buf, [101, 102, 103]);
}

#[test]
fn many_threads_never_share_an_id() {
    let (_, _, gen) = setup(1000);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let h = gen.tag("order").unwrap();
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(200_000);
                for i in 0..200_000 {
                    if (i + t) % 1000 == 0 {
                        ids.extend(h.next_ids(17).unwrap());
                    } else {
                        ids.push(h.next_id().unwrap());
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        let ids = t.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing per thread");
        for id in ids {
            assert!(all.insert(id), "duplicate {id}");
        }
    }
    assert!(all.len() >= 800_000);
}
