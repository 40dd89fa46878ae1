//! A global allocator that counts the allocations of watched threads: test support for
//! the "the hot path allocates nothing" tests (`tests/hot_path_alloc/`). The count is
//! the watched thread's own, so tests watching threads at once do not add to each other.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
    // Const-initialised, so counting allocates nothing itself.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCHED.with(|w| w.get()) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
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

/// How many allocations this thread made while running `f`.
pub fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(|n| n.get());
    WATCHED.with(|w| w.set(true));
    f();
    WATCHED.with(|w| w.set(false));
    ALLOCATIONS.with(|n| n.get()) - before
}
