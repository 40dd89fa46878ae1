//! The hot path allocates nothing: a counting allocator watches one thread while it
//! takes a million ids by handle and by tag name (preloads included, which run on the
//! background runtime, not on the caller's thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCHED.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwards the caller's contract to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    WATCHED.with(|w| w.set(true));
    f();
    WATCHED.with(|w| w.set(false));
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

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
