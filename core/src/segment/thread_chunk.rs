//! The chunked form's thread-local side: each thread keeps, per tag, a run of ids it
//! reserved from the tag's shared cursor with one atomic add, and hands them out with
//! plain arithmetic. Threads then meet on the shared cursor once per chunk instead of
//! once per id, so issuing scales with threads (see `docs/segment.md`, "Order").
//!
//! A chunk belongs to a *key*, not to a buffer's address: every tag buffer holds a key
//! drawn from one process-wide counter, and draws a new one when it is closed and when a
//! forked child forgets the parent's segments (`TagBuffer::forget_parent`). A chunk whose
//! key is no longer its buffer's is never used again, so
//! - a forked child never issues from the chunk its forking thread inherited (the
//!   parent keeps issuing it): at most that chunk is lost, a gap, never a reuse;
//! - a closed tag stops issuing from chunks too;
//! - a buffer freed and another allocated at its address cannot match.
//!
//! Storage: a small direct-mapped table per thread ([`SLOTS`] entries, indexed by the key),
//! const-initialised and without a destructor, so a take is a TLS access, two
//! compares and a store: no lock, no allocation, no syscall. A thread that exits loses
//! what is left of its chunks (a gap). Two tags one thread uses whose keys fall on one
//! entry evict each other; an evicted chunk's rest is lost, and the chunk size starts
//! again at 1 and doubles per refill up to the configured size, so a thread that keeps
//! evicting loses little and pays one atomic add per id, as the ordered form does.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest chunk a thread reserves at once
/// ([`SegmentOptions::thread_chunk`](super::SegmentOptions::thread_chunk)). The tag's
/// cursor may overshoot a segment's end by a chunk per thread (see `buffer.rs`), which
/// must stay far below the offset field's spare half: 2^31 ids in production, room for
/// half a million threads racing over one segment's end.
pub const MAX_THREAD_CHUNK: u64 = 4096;

/// Entries in each thread's table (a power of two).
const SLOTS: usize = 16;

/// Keys handed to tag buffers; 0 is never handed out (it marks an empty entry).
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// A key no buffer held before: for a new buffer, and for one whose chunks must all
/// be dropped (close, a forked child).
pub(super) fn new_key() -> u64 {
    // Relaxed: only uniqueness matters, which one RMW counter gives.
    NEXT_KEY.fetch_add(1, Ordering::Relaxed)
}

/// One thread's chunk of one tag: ids `next..end` are this thread's alone.
#[derive(Clone, Copy)]
struct Chunk {
    key: u64,
    next: i64,
    end: i64,
    /// The size of the last chunk reserved for this key (doubles up to the maximum).
    size: u64,
}

impl Chunk {
    const EMPTY: Chunk = Chunk {
        key: 0,
        next: 0,
        end: 0,
        size: 0,
    };
}

thread_local! {
    // `const` and `Copy` contents: no lazy initialisation, no destructor to register,
    // so an access is a plain TLS offset.
    static CHUNKS: [Cell<Chunk>; SLOTS] = const { [const { Cell::new(Chunk::EMPTY) }; SLOTS] };
}

#[inline(always)]
fn slot(key: u64) -> usize {
    (key as usize) & (SLOTS - 1)
}

/// The next id of this thread's chunk for `key`, if it has one with ids left.
#[inline(always)]
pub(super) fn take(key: u64) -> Option<i64> {
    CHUNKS.with(|chunks| {
        let cell = &chunks[slot(key)];
        let mut c = cell.get();
        if c.key != key || c.next >= c.end {
            return None;
        }
        let id = c.next;
        c.next += 1;
        cell.set(c);
        Some(id)
    })
}

/// Up to `max` ids from this thread's chunk for `key` as `(first, count)`, for a batch
/// that must come after the thread's earlier single ids; `None` when it has none.
#[inline]
pub(super) fn take_run(key: u64, max: u64) -> Option<(i64, u64)> {
    CHUNKS.with(|chunks| {
        let cell = &chunks[slot(key)];
        let mut c = cell.get();
        if c.key != key || c.next >= c.end || max == 0 {
            return None;
        }
        // Both bounded by MAX_THREAD_CHUNK: no overflow.
        let count = ((c.end - c.next) as u64).min(max);
        let first = c.next;
        c.next += count as i64;
        cell.set(c);
        Some((first, count))
    })
}

/// Exactly `n` ids from this thread's chunk for `key` when it holds that many (the
/// first is returned), else nothing is taken.
#[inline]
pub(super) fn take_exact_run(key: u64, n: u64) -> Option<i64> {
    CHUNKS.with(|chunks| {
        let cell = &chunks[slot(key)];
        let mut c = cell.get();
        // Both bounded by MAX_THREAD_CHUNK: no overflow.
        if c.key != key || n == 0 || ((c.end - c.next) as u64) < n {
            return None;
        }
        let first = c.next;
        c.next += n as i64;
        cell.set(c);
        Some(first)
    })
}

/// Gives up what is left of this thread's chunk for `key` (a gap), keeping its size:
/// the thread's next id then comes from a new chunk, above anything taken meanwhile.
#[inline]
pub(super) fn give_up(key: u64) {
    CHUNKS.with(|chunks| {
        let cell = &chunks[slot(key)];
        let mut c = cell.get();
        if c.key == key {
            c.next = c.end;
            cell.set(c);
        }
    })
}

/// How many ids this thread should reserve next for `key`: double the last chunk, up to
/// `max`; 1 for a key its table does not hold (first use, or evicted).
#[inline]
pub(super) fn next_size(key: u64, max: u64) -> u64 {
    CHUNKS.with(|chunks| {
        let c = chunks[slot(key)].get();
        if c.key == key {
            c.size.saturating_mul(2).clamp(1, max)
        } else {
            1
        }
    })
}

/// Keeps ids `next..end` (reserved as a chunk of `size`) as this thread's for `key`,
/// replacing whatever the entry held.
#[inline]
pub(super) fn keep(key: u64, next: i64, end: i64, size: u64) {
    CHUNKS.with(|chunks| {
        chunks[slot(key)].set(Chunk {
            key,
            next,
            end,
            size,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_serves_its_key_only_and_the_size_doubles_to_the_cap() {
        let (a, b) = (new_key(), new_key());
        assert_eq!(take(a), None);
        assert_eq!(next_size(a, 8), 1);
        keep(a, 10, 12, 1);
        assert_eq!(take(b), None, "another key's chunk");
        assert_eq!(take(a), Some(10));
        assert_eq!(take_run(a, 5), Some((11, 1)), "what is left, no more");
        assert_eq!((take(a), take_run(a, 5)), (None, None));
        assert_eq!(next_size(a, 8), 2);
        keep(a, 20, 30, 8);
        assert_eq!(next_size(a, 8), 8, "capped");
        // A key that falls on the same entry evicts the chunk and starts again at 1.
        let c = (0..)
            .map(|_| new_key())
            .find(|k| slot(*k) == slot(a))
            .unwrap();
        keep(c, 40, 41, 1);
        assert_eq!(take(a), None);
        assert_eq!(next_size(a, 8), 1);
    }

    #[test]
    fn each_thread_has_its_own_chunks() {
        let key = new_key();
        keep(key, 1, 100, 99);
        let other = std::thread::spawn(move || take(key)).join().unwrap();
        assert_eq!(other, None);
        assert_eq!(take(key), Some(1));
    }
}
