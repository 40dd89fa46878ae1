//! The chunked form's thread-local side: each thread keeps, per tag, a run of ids it
//! reserved from the tag's shared cursor with one atomic add, and hands them out with
//! plain arithmetic. Threads then meet on the shared cursor once per chunk instead of
//! once per id, so issuing scales with threads (see `docs/segment.md`, "Order").
//!
//! A chunk belongs to a *key*, not to a buffer's address: every tag buffer holds a key
//! drawn from one process-wide counter, and draws a new one at each segment switch, when
//! it is closed and when a forked child forgets the parent's segments
//! (`TagBuffer::renew_chunks`). A chunk whose
//! key is no longer its buffer's is never used again, so
//! - a forked child never issues from the chunk its forking thread inherited (the
//!   parent keeps issuing it): at most that chunk is lost, a gap, never a reuse;
//! - a closed tag stops issuing from chunks too;
//! - a buffer freed and another allocated at its address cannot match.
//!
//! A chunk is also given up, on the thread's next call, once the tag's shared cursor has
//! moved more than `n` × T ids past the chunk's next id (`n` the configured chunk size, T
//! the threads that took a chunk of the tag in its current segment, counted when the
//! chunk was taken, see [`count_thread`]). An id from a chunk then trails every id taken
//! before the call began by less than `n` × T, however long the thread was idle; the
//! check is one relaxed load of the cursor per id ([`Ring::word`]). Threads issuing at
//! similar rates use their chunks up before that; a thread that pauses loses the rest
//! of its chunk (fewer than its size, once per chunk), a gap, and its next chunk is
//! half the size, so a thread that keeps pausing soon loses little.
//!
//! Storage: a small direct-mapped table per thread ([`SLOTS`] entries, indexed by the key),
//! const-initialised and without a destructor, so a take is a TLS access, a relaxed
//! load of the cursor, three compares and a store: no lock, no allocation, no syscall. A thread that exits loses
//! what is left of its chunks (a gap). Two tags one thread uses whose keys fall on one
//! entry evict each other; an evicted chunk's rest is lost, and the chunk size starts
//! again at 1 and doubles per refill up to the configured size, so a thread that keeps
//! evicting loses little and pays one atomic add per id, as the ordered form does.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::buffer::{Ring, MAX_SEGMENT_LEN};

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

/// One thread's chunk of one tag: ids `next..end` are this thread's alone. A cell per
/// field, so that a take reads the four it checks and writes only `next`.
struct Chunk {
    key: Cell<u64>,
    next: Cell<i64>,
    end: Cell<i64>,
    /// The last cursor word at which id 0 of the chunk's segment could still be handed
    /// out (wrapping): id `i` may be while the cursor is at most `until_of_0 + i`, its
    /// own word plus the chunk's lead (module docs).
    until_of_0: Cell<u64>,
    /// The size of the last chunk reserved for this key (doubles up to the maximum).
    size: Cell<u64>,
    /// The chunk was given up with ids left (`next` then equals `end`, so none of them
    /// is ever issued): the next chunk is half the size instead of double.
    given_up: Cell<bool>,
}

impl Chunk {
    /// An entry holding no chunk (key 0 is never handed out). A function, not a
    /// `const` item: each call makes new cells.
    const fn empty() -> Chunk {
        Chunk {
            key: Cell::new(0),
            next: Cell::new(0),
            end: Cell::new(0),
            until_of_0: Cell::new(0),
            size: Cell::new(0),
            given_up: Cell::new(false),
        }
    }

    /// `next` when it may still be handed out: the chunk is this key's, has ids left,
    /// and `ring`'s cursor is at most its lead past it (the order bound, module docs).
    /// A chunk past its lead is given up for good: the slow path may pull an overshot
    /// cursor back to the segment's end, under the lead again, and the ids given up
    /// must stay skipped (below ids the thread took from the cursor meanwhile).
    #[inline(always)]
    fn usable(&self, key: u64, ring: &Ring) -> Option<i64> {
        let next = self.next.get();
        if self.key.get() != key || next >= self.end.get() {
            return None;
        }
        if ring.word() > self.until_of_0.get().wrapping_add(next as u64) {
            self.give_up();
            return None;
        }
        Some(next)
    }

    /// Gives up the ids left (a gap, never issued), so that the next chunk is halved.
    #[cold]
    fn give_up(&self) {
        if self.next.get() < self.end.get() {
            self.next.set(self.end.get());
            self.given_up.set(true);
        }
    }
}

/// Threads get bits 0 to 63 of a tag's thread set in turn ([`count_thread`]).
static NEXT_THREAD_BIT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // `const` contents without a destructor: no lazy initialisation, no destructor to
    // register, so an access is a plain TLS offset.
    static CHUNKS: [Chunk; SLOTS] = const { [const { Chunk::empty() }; SLOTS] };
    /// This thread's bit in tags' thread sets; 0 until its first chunk.
    static THREAD_BIT: Cell<u64> = const { Cell::new(0) };
}

/// Adds this thread to `set` (a tag's threads that took a chunk in its current
/// segment, one bit each) and returns how many the set holds, itself included. Threads
/// get bits in turn, so past 64 threads several share one: the count is then lower than
/// the threads, which only makes chunks' leads shorter (the order bound tighter). Once
/// per chunk, not per id; an RMW only on the thread's first chunk of the segment.
#[inline]
pub(super) fn count_thread(set: &AtomicU64) -> u64 {
    let bit = THREAD_BIT.with(|b| {
        if b.get() == 0 {
            // Relaxed: only spreading threads over the bits matters.
            b.set(1 << (NEXT_THREAD_BIT.fetch_add(1, Ordering::Relaxed) % 64));
        }
        b.get()
    });
    // Relaxed: a count to size a lead, read by no one for anything else; a set that
    // misses a thread racing with it only shortens the lead.
    let mut seen = set.load(Ordering::Relaxed);
    if seen & bit == 0 {
        seen = set.fetch_or(bit, Ordering::Relaxed) | bit;
    }
    u64::from(seen.count_ones())
}

/// How far the cursor may move past a chunk's next id before the chunk is given up:
/// `chunk` × `threads` (the order bound of `docs/segment.md`), at most a segment.
#[inline]
pub(super) fn lead(chunk: u64, threads: u64) -> u64 {
    // At most MAX_THREAD_CHUNK × 64 = 2^18 in production; the cap matters only for the
    // unit tests' narrow segments, where another generation must read as past the lead.
    (chunk * threads).min(MAX_SEGMENT_LEN)
}

#[inline(always)]
fn slot(key: u64) -> usize {
    (key as usize) & (SLOTS - 1)
}

/// The next id of this thread's chunk for `key`, if it has one with ids left and
/// `ring`'s cursor has not moved too far past it.
#[inline(always)]
pub(super) fn take(key: u64, ring: &Ring) -> Option<i64> {
    CHUNKS.with(|chunks| {
        let c = &chunks[slot(key)];
        let id = c.usable(key, ring)?;
        c.next.set(id + 1);
        Some(id)
    })
}

/// Up to `max` ids from this thread's chunk for `key` as `(first, count)`, for a batch
/// that must come after the thread's earlier single ids; `None` when it has none.
#[inline]
pub(super) fn take_run(key: u64, ring: &Ring, max: u64) -> Option<(i64, u64)> {
    CHUNKS.with(|chunks| {
        let c = &chunks[slot(key)];
        let first = c.usable(key, ring).filter(|_| max > 0)?;
        // Both bounded by MAX_THREAD_CHUNK: no overflow.
        let count = ((c.end.get() - first) as u64).min(max);
        c.next.set(first + count as i64);
        Some((first, count))
    })
}

/// Exactly `n` ids from this thread's chunk for `key` when it holds that many (the
/// first is returned), else nothing is taken.
#[inline]
pub(super) fn take_exact_run(key: u64, ring: &Ring, n: u64) -> Option<i64> {
    CHUNKS.with(|chunks| {
        let c = &chunks[slot(key)];
        let first = c.usable(key, ring)?;
        // Both bounded by MAX_THREAD_CHUNK: no overflow.
        if n == 0 || ((c.end.get() - first) as u64) < n {
            return None;
        }
        c.next.set(first + n as i64);
        Some(first)
    })
}

/// Gives up what is left of this thread's chunk for `key` (a gap; the next chunk is
/// then halved, as for a chunk given up for its lead): the thread's next id comes from
/// a new chunk, above anything taken meanwhile.
#[inline]
pub(super) fn give_up(key: u64) {
    CHUNKS.with(|chunks| {
        let c = &chunks[slot(key)];
        if c.key.get() == key {
            c.give_up();
        }
    })
}

/// How many ids this thread should reserve next for `key`: double the last chunk, up to
/// `max`; half of it when the last one was given up with ids left (for its lead: the
/// thread issues slower than the others; or for a batch it could not hold: a smaller
/// chunk loses less next time); 1 for a key its table does not hold (first use, or
/// evicted).
#[inline]
pub(super) fn next_size(key: u64, max: u64) -> u64 {
    CHUNKS.with(|chunks| {
        let c = &chunks[slot(key)];
        if c.key.get() != key {
            1
        } else if c.given_up.get() {
            (c.size.get() / 2).clamp(1, max)
        } else {
            c.size.get().saturating_mul(2).clamp(1, max)
        }
    })
}

/// Keeps ids `next..end` (reserved as a chunk of `size` whose id `next` the cursor
/// stood at as word `at`) as this thread's for `key`, to be given up once the cursor
/// is more than `lead` past its next id; replaces whatever the entry held.
#[inline]
pub(super) fn keep(key: u64, next: i64, end: i64, at: u64, size: u64, lead: u64) {
    CHUNKS.with(|chunks| {
        let c = &chunks[slot(key)];
        c.key.set(key);
        c.next.set(next);
        c.end.set(end);
        // Id `next`'s last word is `at + lead`: no overflow in it (words stay far below
        // 2^64, leads at most 2^18); the wrapping is only in the offset by `next`.
        c.until_of_0.set((at + lead).wrapping_sub(next as u64));
        c.size.set(size);
        c.given_up.set(false);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring whose one segment holds ids 1000.. (1000 of them), cursor at its start.
    fn ring() -> Ring {
        let ring = Ring::new();
        ring.publish(1, 1000, 1000, u64::MAX, 1000);
        ring.point_at(1);
        ring
    }

    /// Reserves a chunk of `size` from `ring` and keeps it all for `key` (the first id
    /// included) with the lead `lead`.
    fn reserve(ring: &Ring, key: u64, size: u64, lead: u64) {
        let (t, at) = ring.take_chunk(size).unwrap();
        keep(key, t.first, t.first + t.count as i64, at, size, lead);
    }

    #[test]
    fn a_chunk_serves_its_key_only_and_the_size_doubles_to_the_cap() {
        let r = ring();
        let (a, b) = (new_key(), new_key());
        assert_eq!(take(a, &r), None);
        assert_eq!(next_size(a, 8), 1);
        reserve(&r, a, 2, 64);
        assert_eq!(take(b, &r), None, "another key's chunk");
        assert_eq!(take(a, &r), Some(1000));
        assert_eq!(take_run(a, &r, 5), Some((1001, 1)), "what is left, no more");
        assert_eq!((take(a, &r), take_run(a, &r, 5)), (None, None));
        assert_eq!(next_size(a, 8), 4);
        reserve(&r, a, 8, 64);
        assert_eq!(take_run(a, &r, 8), Some((1002, 8)));
        assert_eq!(next_size(a, 8), 8, "capped");
        // A key that falls on the same entry evicts the chunk and starts again at 1.
        let c = (0..)
            .map(|_| new_key())
            .find(|k| slot(*k) == slot(a))
            .unwrap();
        reserve(&r, c, 1, 64);
        assert_eq!(take(a, &r), None);
        assert_eq!(next_size(a, 8), 1);
    }

    #[test]
    fn a_chunk_is_given_up_once_the_cursor_leads_its_next_id_by_more_than_its_lead() {
        let r = ring();
        let key = new_key();
        reserve(&r, key, 8, 10);
        assert_eq!(take(key, &r), Some(1000));
        // The cursor is at 1008: 7 past the next id, 1001. Others reserve 3 more: 10.
        r.take_chunk(3).unwrap();
        assert_eq!(take(key, &r), Some(1001), "10 past 1001: kept");
        assert_eq!(take(key, &r), Some(1002), "9 past 1002: kept");
        r.take_chunk(3).unwrap();
        assert_eq!(take(key, &r), None, "11 past 1003: given up");
        assert_eq!(take_run(key, &r, 4), None);
        assert_eq!(take_exact_run(key, &r, 1), None);
        assert_eq!(
            next_size(key, 64),
            4,
            "half the chunk given up with ids left"
        );
        // Batches are held to the lead too; a fresh chunk starts at the cursor.
        let key = new_key();
        reserve(&r, key, 8, 10);
        assert_eq!(take_exact_run(key, &r, 3), Some(1014));
        assert_eq!(take_run(key, &r, 9), Some((1017, 5)));
        // Another generation is always past the lead.
        let key = new_key();
        reserve(&r, key, 4, MAX_SEGMENT_LEN);
        r.publish(2, 5000, 1000, u64::MAX, 1000);
        r.point_at(2);
        assert_eq!(take(key, &r), None);
    }

    #[test]
    fn a_chunk_given_up_for_its_lead_stays_given_up_when_the_cursor_is_clamped_back() {
        let r = ring();
        r.take_chunk(990).unwrap();
        let key = new_key();
        // Ids 1990..1998, each usable while the cursor is at most 10 past it.
        reserve(&r, key, 8, 10);
        assert_eq!(take(key, &r), Some(1990));
        // A take racing over the segment's end moves the cursor to 1008 (8 past the
        // end, 17 past 1991) though only 2 ids were left.
        let (t, _) = r.take_chunk(10).unwrap();
        assert_eq!((t.first, t.count), (1998, 2));
        assert_eq!(take(key, &r), None, "given up for its lead");
        // The slow path pulls the cursor back to the end: 9 past 1991.
        r.clamp();
        assert_eq!(r.position().1, 1000);
        assert_eq!(take(key, &r), None, "given up ids are never issued");
        assert_eq!(take_run(key, &r, 4), None);
        assert_eq!(next_size(key, 64), 4, "and the next chunk is still halved");
    }

    #[test]
    fn a_chunk_given_up_with_ids_left_halves_the_next_and_a_spent_one_doubles_it() {
        let r = ring();
        let key = new_key();
        reserve(&r, key, 8, 1000);
        assert_eq!(take(key, &r), Some(1000));
        // An async batch that does not fit in the chunk gives up its 7 ids left.
        give_up(key);
        assert_eq!(take(key, &r), None);
        assert_eq!(next_size(key, 64), 4);
        // Given up once used up: nothing was lost, so the next doubles.
        reserve(&r, key, 2, 1000);
        assert_eq!(take_run(key, &r, 5), Some((1008, 2)));
        give_up(key);
        assert_eq!(next_size(key, 64), 4);
    }

    #[test]
    fn a_threads_count_is_its_own_bit_once_and_the_lead_is_capped() {
        let set = AtomicU64::new(0);
        assert_eq!(count_thread(&set), 1);
        assert_eq!(count_thread(&set), 1, "counted once");
        let s = &set;
        std::thread::scope(|scope| {
            assert_eq!(scope.spawn(|| count_thread(s)).join().unwrap(), 2);
        });
        assert_eq!(lead(64, 2), 128);
        assert_eq!(lead(4096, 64), (4096 * 64).min(MAX_SEGMENT_LEN));
    }

    #[test]
    fn each_thread_has_its_own_chunks() {
        let r = ring();
        let key = new_key();
        reserve(&r, key, 99, 1000);
        let other = std::thread::scope(|s| s.spawn(|| take(key, &r)).join().unwrap());
        assert_eq!(other, None);
        assert_eq!(take(key, &r), Some(1000));
    }
}
