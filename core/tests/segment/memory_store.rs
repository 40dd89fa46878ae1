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
    SegmentOptions::default()
        .clock(clock)
        .wait_timeout(Duration::from_secs(5))
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
    let opts = options(ManualClock::new(0)).double_buffer(false);
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
    let opts = options(ManualClock::new(0))
        .wait_timeout(Duration::from_millis(50))
        .double_buffer(false);
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

/// A tag made in the store behind the generator's back is found by the lookup on its
/// first use (issue 12); one the store dropped leaves the cache at the next refresh.
#[test]
fn a_tag_made_in_the_store_is_found_on_first_use_and_refresh_removes_a_dropped_one() {
    let (store, _, gen) = setup(10);
    let s = store.clone();
    leafid::runtime::block_on(async move { s.create_tag("pay", 500, 10, "").await }).unwrap();
    assert_eq!(gen.next_id("pay").unwrap(), 500);
    assert_eq!(gen.tags(), vec!["order", "pay"]);
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.refresh().await }).unwrap();
    assert_eq!(gen.tags(), vec!["order", "pay"]);
    assert_eq!(gen.next_id("pay").unwrap(), 501);
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
        leafid::segment::store::open("oracle://x"),
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
fn ensure_tag_creates_once_then_accepts_the_existing_tag() {
    let (_, _, gen) = setup(10);
    let g = gen.clone();
    let (first, again) = leafid::runtime::block_on(async move {
        (
            g.ensure_tag("invoice", 1, 10, "").await.unwrap(),
            g.ensure_tag("invoice", 500, 10, "").await.unwrap(),
        )
    });
    assert!(first && !again);
    // The second call left the tag as it was: ids still start at 1.
    assert_eq!(gen.next_id("invoice").unwrap(), 1);
    let g = gen.clone();
    let bad = leafid::runtime::block_on(async move { g.ensure_tag("bad", 1, 0, "").await });
    assert!(matches!(bad, Err(Error::InvalidConfig(_))));
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

fn refresh(gen: &SegmentGenerator) {
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.refresh().await }).unwrap();
}

/// Issue 11: `close()` closed only the tags in the map; a handle on a tag a refresh
/// had dropped went on issuing (and refilling) after close.
#[test]
fn close_ends_buffers_dropped_from_the_map_that_handles_hold() {
    let (store, _, gen) = setup(10);
    let h = gen.tag("order").unwrap();
    h.next_id().unwrap();
    store.remove_tag("order");
    refresh(&gen);
    assert!(gen.tags().is_empty());
    assert_eq!(
        h.next_id().unwrap(),
        2,
        "a handle keeps its buffer, as in Leaf"
    );
    gen.close();
    assert!(
        matches!(h.next_id(), Err(Error::Closed)),
        "{:?}",
        h.next_id()
    );
    assert_eq!(h.try_next_id(), None);
    assert!(matches!(h.next_ids(3), Err(Error::Closed)));
}

/// Issue 11: a tag dropped by a refresh and added back got a second buffer while a
/// handle still held the first, so the process issued lower ids after higher ones.
#[test]
fn a_tag_that_comes_back_keeps_its_buffer_so_ids_never_go_backwards() {
    let (store, _, gen) = setup(10);
    let h = gen.tag("order").unwrap();
    let mut last = h.next_id().unwrap();
    store.remove_tag("order");
    refresh(&gen);
    // The row comes back far ahead (re-created by hand, or by another tool).
    store.put_row("order", 1000, 10);
    refresh(&gen);
    for k in 0..40 {
        let id = if k % 2 == 0 {
            gen.next_id("order").unwrap()
        } else {
            h.next_id().unwrap()
        };
        assert!(id > last, "id {id} after {last}");
        last = id;
    }
}

/// Issue 11: `create_tag(start=2**63-6, step=10)` was accepted, and on `memory:` ids
/// wrapped to negative.
#[test]
fn create_tag_refuses_a_start_whose_first_segment_passes_i64_max() {
    let (store, _, gen) = setup(10);
    for (start, step) in [(i64::MAX - 5, 10), (i64::MAX, 1), (i64::MAX - 9, 10)] {
        let g = gen.clone();
        let err = leafid::runtime::block_on(async move {
            g.create_tag("near-the-top", start, step, "").await
        })
        .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
        assert!(err.to_string().contains("near-the-top"), "{err}");
        // The store refuses on its own too (a caller may use it directly).
        let s = store.clone();
        let err = leafid::runtime::block_on(async move {
            s.create_tag("near-the-top", start, step, "").await
        })
        .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    }
    // The last start that fits is accepted and issues up to i64::MAX - 1.
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("top", i64::MAX - 10, 10, "").await })
        .unwrap();
    let ids = gen.next_ids("top", 10).unwrap();
    assert_eq!(ids, ((i64::MAX - 10)..i64::MAX).collect::<Vec<_>>());
}

/// Issue 11: a row near i64::MAX (written by hand or by other tooling) wrapped ids to
/// negative on `memory:`; it must be a permanent error naming the tag instead.
#[test]
fn a_row_near_i64_max_is_a_permanent_error_naming_the_tag() {
    let (store, _, gen) = setup(10);
    store.put_row("full", i64::MAX - 5, 10);
    refresh(&gen);
    for _ in 0..2 {
        let err = gen.next_id("full").unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("\"full\"") && text.contains("max_id"),
            "{text}"
        );
        assert!(!text.contains("retry once it is back"), "{text}");
    }
    let row = leafid::runtime::block_on({
        let s = store.clone();
        async move { s.rows().await }
    })
    .unwrap()
    .into_iter()
    .find(|r| r.tag == "full")
    .unwrap();
    assert_eq!(row.max_id, i64::MAX - 5, "the row is left as it was");
}

/// Issue 11: a step of 0 or below in the table was never validated: refills lowered
/// max_id and handed out ranges already issued.
#[test]
fn a_row_with_a_step_below_one_is_a_permanent_error_and_max_id_stays() {
    let (store, _, gen) = setup(10);
    for (tag, step) in [("zero", 0), ("negative", -5)] {
        store.put_row(tag, 100, step);
        refresh(&gen);
        let err = gen.next_id(tag).unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{tag}: {err:?}");
        assert!(err.to_string().contains(tag), "{err}");
        let s = store.clone();
        let rows = leafid::runtime::block_on(async move { s.rows().await }).unwrap();
        assert_eq!(rows.iter().find(|r| r.tag == tag).unwrap().max_id, 100);
    }
}

/// Issue 15: a `js_safe` generator never issues 2^53 or above; the segment that crosses
/// it is cut short and the next call names the tag.
#[test]
fn js_safe_tags_stop_below_two_to_the_53() {
    let limit = leafid::segment::JS_SAFE_LIMIT;
    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    // The first segment is [limit - 5, limit + 95): only 5 of its ids are safe.
    leafid::runtime::block_on(async move { s.create_tag("order", limit - 5, 100, "").await })
        .unwrap();
    let opts = options(ManualClock::new(1_700_000_000_000)).js_safe(true);
    let dynstore: Arc<dyn SegmentStore> = store.clone();
    let gen = leafid::runtime::block_on(SegmentGenerator::with_store(dynstore, opts)).unwrap();
    let h = gen.tag("order").unwrap();
    let ids: Vec<i64> = (0..5).map(|_| h.next_id().unwrap()).collect();
    assert_eq!(ids, (limit - 5..limit).collect::<Vec<_>>());
    let err = h.next_id().unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(
        err.to_string().contains("\"order\"") && err.to_string().contains("2^53"),
        "{err}"
    );
    assert!(gen.next_ids("order", 3).is_err());
}
