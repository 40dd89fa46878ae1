//! Issue 12, segment mode: the never-waiting calls (`next_id_now`, a zero
//! `wait_timeout`) and the async ones (`next_id_async`, `next_ids_async`), with eager
//! first segments. Real MariaDB and SQLite; a loopback proxy plays the outage. Tags
//! usable at once (`create_tag`, `TagExists`, a store lookup on a cache miss) are in
//! `tag_lookup.rs`.

use std::collections::HashSet;
use std::time::Duration;

use crate::harness::{eventually, proxy, try_create, via_proxy};
use crate::support::mysql::{self, create, fresh_tag};

use leafid::runtime::{block_on, BoxFuture};
use leafid::{Error, SegmentGenerator, SegmentOptions};

/// This process's thread count (Linux).
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

/// While the database is blackholed, `next_id_now` answers at once (no waiting out
/// the generator's long timeout) and thousands of `next_id_async` waiters cost no
/// threads; once it is back, every waiter resolves, with distinct ids.
#[test]
fn next_id_now_fails_at_once_while_the_store_is_blackholed_and_next_id_async_resolves_after_it_is_back(
) {
    let tag = fresh_tag("nowait");
    create(&mysql::connect(SegmentOptions::default()), &tag, 1, 10);
    let proxy = proxy();
    let wait = Duration::from_secs(60);
    let gen = via_proxy(
        &proxy,
        SegmentOptions::default()
            .wait_timeout(wait)
            .double_buffer(false)
            .tags(vec![tag.clone()]),
    );
    let h = gen.tag(&tag).unwrap();
    let mut seen: HashSet<i64> = (0..10).map(|_| h.next_id_now().unwrap()).collect();
    assert_eq!(seen.len(), 10);
    proxy.set_blackhole(true);
    // The segment is spent and the refill is stuck in the blackhole: no wait at all.
    for _ in 0..100 {
        match h.next_id_now() {
            Err(e @ Error::SegmentsExhausted { waited, .. }) => {
                assert!(waited < wait);
                // It names the calls that wait (issue 31), never the one that threw.
                let message = e.to_string();
                assert!(message.contains("(next_id, or next_id_async)"), "{message}");
                assert!(message.contains("next_ids_async"), "{message}");
            }
            Err(Error::StoreUnavailable { .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(gen.next_id_now(&tag).is_err());
    }
    let before = threads();
    let waiters: Vec<_> = (0..2000)
        .map(|k| {
            let (h, gen, tag) = (h.clone(), gen.clone(), tag.clone());
            leafid::runtime::spawn(async move {
                if k % 2 == 0 {
                    h.next_id_async().await
                } else {
                    gen.next_id_async(&tag).await
                }
            })
        })
        .collect();
    // Let every waiter reach its wait (well within the pool's 1.5 s acquire timeout,
    // after which the stuck refill would fail and end the waits with its error).
    std::thread::sleep(Duration::from_millis(100));
    let during = threads();
    assert!(
        during < before + 50,
        "{before} threads before, {during} with 2000 waiters"
    );
    proxy.set_blackhole(false);
    let ids = block_on(async move {
        let mut ids = vec![];
        for w in waiters {
            ids.push(w.await.unwrap());
        }
        ids
    });
    for id in ids {
        let id = id.unwrap();
        assert!(seen.insert(id), "id {id} issued twice");
    }
    assert_eq!(seen.len(), 2010);
}

/// A `wait_timeout` of zero means "never wait", and serves a tag once its segment is
/// there: after `connect(tags=…)`, after `create_tag`, and after a handle's eager load.
#[test]
fn zero_wait_works_after_tag_handle_create_tag_and_connect_tags() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let admin = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap();
    for (tag, start) in [("listed", 100), ("handled", 200)] {
        try_create(&admin, tag, start, 10).unwrap();
    }
    let gen = SegmentGenerator::connect_blocking(
        &url,
        SegmentOptions::default()
            .wait_timeout(Duration::ZERO)
            .tags(["listed"]),
    )
    .unwrap();
    // `admin` holds the first segments (create_tag loads them): 100..110, 200..210.
    assert_eq!(gen.next_id("listed").unwrap(), 110);
    assert_eq!(gen.next_id_now("listed").unwrap(), 111);

    try_create(&gen, "created", 300, 10).unwrap();
    assert_eq!(gen.next_id("created").unwrap(), 300);

    let h = gen.tag("handled").unwrap();
    eventually(10, || {
        let stats = gen.stats();
        stats
            .iter()
            .any(|s| s.tag == "handled" && s.next_ready)
            .then_some(())
    });
    assert_eq!(h.next_id().unwrap(), 210);
    assert_eq!(h.next_id_now().unwrap(), 211);
}

/// `next_ids_async` takes a batch the current segment holds when it is called, not
/// when it is first polled: asked for before a single id, it holds lower ids. A batch
/// the segment cannot hold is taken whole when polled, never split around other ids
/// (review: `[8, 9, 10, 12..18]` around a single 11).
#[test]
fn next_ids_async_takes_at_call_time_and_completes_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap();
    try_create(&gen, "t", 1, 10).unwrap();
    let h = gen.tag("t").unwrap();
    assert_eq!(h.next_id().unwrap(), 1, "the first segment is loaded");
    for (batch, n) in [
        (Box::pin(gen.next_ids_async("t", 4)) as BoxFuture<_>, 4),
        (Box::pin(h.next_ids_async(3)), 3),
    ] {
        let single = gen.next_id("t").unwrap();
        let ids = block_on(batch).unwrap();
        assert_eq!(ids.len(), n);
        assert!(ids.iter().all(|&id| id < single), "{ids:?} after {single}");
    }
    // 1..=10 all taken: a batch of 25 spans three segments, ascending, no gap.
    let ids = block_on(gen.next_ids_async("t", 25)).unwrap();
    assert_eq!(ids, (11..36).collect::<Vec<i64>>());
    // 36..=40 left in the segment: a batch of 10 cannot be had now, so nothing is
    // taken at call time and the batch comes whole, above the single id taken after.
    let batch = gen.next_ids_async("t", 10);
    let single = gen.next_id("t").unwrap();
    let ids = block_on(batch).unwrap();
    assert!(
        ids.iter().all(|&id| id > single),
        "{ids:?} split around {single}"
    );
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    // Two such batches awaited in reverse order: each is a run of its own.
    let (a, b) = (gen.next_ids_async("t", 10), gen.next_ids_async("t", 5));
    let (b, a) = (block_on(b).unwrap(), block_on(a).unwrap());
    assert!(a.windows(2).all(|w| w[1] == w[0] + 1), "{a:?}");
    assert!(b.windows(2).all(|w| w[1] == w[0] + 1), "{b:?}");
    assert!(a.iter().all(|x| !b.contains(x)));
}
