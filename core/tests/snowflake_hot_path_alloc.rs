//! Snowflake's hot path allocates nothing: a counting allocator watches one thread
//! while it takes a million ids one by one and in batches through `fill` (heartbeats
//! run on the background runtime, not on the caller's thread).

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
fn snowflake_next_id_and_fill_allocate_nothing() {
    // The counter works: one Vec is one allocation.
    assert_eq!(
        allocations_during(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8)))),
        1
    );
    let dir = tempfile::tempdir().unwrap();
    let gen = leafid::SnowflakeGenerator::builder()
        .registry(leafid::RegistryConfig::Fixed(3))
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    gen.next_id().unwrap();
    let mut buf = [0i64; 64];
    let n = allocations_during(|| {
        for _ in 0..1_000_000 {
            std::hint::black_box(gen.next_id().unwrap());
        }
        for _ in 0..1_000 {
            gen.fill(&mut buf).unwrap();
        }
    });
    assert_eq!(n, 0, "{n} allocations on the hot path");
}
