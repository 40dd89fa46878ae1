//! The hot path allocates nothing: a counting allocator watches one thread while it
//! takes a million ids by handle and by tag name (preloads included, which run on the
//! background runtime, not on the caller's thread).

use crate::counting_alloc;

use counting_alloc::allocations_during;

#[test]
fn next_id_allocates_nothing_in_the_common_case() {
    // The counter works: one Vec is one allocation.
    assert_eq!(
        allocations_during(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8)))),
        1
    );
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = leafid::SegmentGenerator::connect_blocking(&url, Default::default()).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 10_000_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    h.next_id().unwrap(); // first load: the slow path, allowed to allocate
    let mut buf = [0i64; 64];
    let n = allocations_during(|| {
        for _ in 0..1_000_000 {
            std::hint::black_box(h.next_id().unwrap());
            std::hint::black_box(gen.next_id("t").unwrap());
        }
        for _ in 0..1000 {
            h.fill(&mut buf).unwrap();
        }
    });
    // The 10% preload is spawned once from this thread; that spawn is the only
    // allocation the caller's thread may make.
    assert!(n <= 2, "{n} allocations on the hot path");
}

/// The chunked form's hot path allocates nothing either: the thread's chunks live in a
/// const-initialised thread-local table, and new chunks come from the ring.
#[test]
fn the_chunked_hot_path_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let opts = leafid::SegmentOptions::default().thread_chunk(256);
    let gen = leafid::SegmentGenerator::connect_blocking(&url, opts).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 10_000_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    h.next_id().unwrap(); // first load: the slow path, allowed to allocate
    let mut buf = [0i64; 64];
    let n = allocations_during(|| {
        for _ in 0..1_000_000 {
            std::hint::black_box(h.next_id().unwrap());
            std::hint::black_box(gen.next_id("t").unwrap());
            std::hint::black_box(h.try_next_id());
        }
        for _ in 0..1000 {
            h.fill(&mut buf).unwrap();
        }
    });
    // As above: the 10% preload's spawn is the only allocation allowed.
    assert!(n <= 2, "{n} allocations on the hot path");
}
