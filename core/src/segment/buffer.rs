//! The lock-free double buffer of one tag: the hot path.
//!
//! A tag owns two segment slots. One 64-bit `cursor` names the current segment's
//! generation (high bits) and the offset of the next id within it (low
//! [`OFFSET_BITS`] bits), so taking an id is a load and a `fetch_add`. A slot is published
//! like a seqlock: its generation is set to `EMPTY` while it is rewritten and to the new
//! generation after, and a reader checks the generation before and after reading the
//! range. A reader that raced with a rewrite sees a mismatch and retries: at worst an id
//! is skipped, never handed out twice. A generation is published once and never
//! rewritten with other contents, so a consistent read of generation `g` stays true
//! for `g` forever. Switching to the next generation happens only in the slow path,
//! under the tag's mutex, and only when the current segment is spent.
//!
//! Offsets can never carry into the generation. A single take first looks at the
//! cursor and adds only when it saw room in a published segment; a spent, empty or
//! closed segment is refused without touching the cursor, however often it is polled.
//! After an add that lands past the end (`off >= len`), the same thread's later loads
//! see that offset or a later generation (coherence of one atomic), so each thread
//! overshoots a generation at most once: the offset stays below `len + threads` (`len +
//! threads × MAX_THREAD_CHUNK` with the chunked form's [`Ring::take_chunk`]), far from
//! `2^OFFSET_BITS` (segments hold at most [`MAX_SEGMENT_LEN`] = half of it). Batches
//! use a CAS and never overshoot.
//!
//! Model-checked with loom (the `loom_*` tests in `buffer/loom_tests.rs`):
//! `RUSTFLAGS="--cfg leafid_loom" CARGO_TARGET_DIR=target/loom cargo test -p leafid --release --lib loom`

use super::atomics::{fence, AtomicI64, AtomicU64, AtomicU8, Ordering};

/// Bits of the cursor that hold the offset within the current segment. Tests use a
/// narrow field, so that a carry into the generation takes thousands of takes instead
/// of billions.
#[cfg(not(test))]
pub const OFFSET_BITS: u32 = 32;
#[cfg(test)]
pub const OFFSET_BITS: u32 = 16;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// The largest segment a slot holds (half the offset field, so overshooting takes
/// have room); a larger step leaves the rest of its range unused.
pub const MAX_SEGMENT_LEN: u64 = 1 << (OFFSET_BITS - 1);
/// A slot generation meaning "being written / holds nothing".
const EMPTY: u64 = u64::MAX;
/// A generation no slot ever holds: the cursor of a closed tag.
pub const CLOSED_GEN: u64 = u64::MAX >> OFFSET_BITS;
/// The last generation a segment may be published under; past it the tag must be
/// reloaded by a new generator. 2^32 refills in production: with the dynamic step
/// (segments of about 15 minutes) that is never reached, and even a refill every
/// millisecond would take 50 days.
pub const LAST_GEN: u64 = CLOSED_GEN - 2;

#[inline(always)]
fn split(w: u64) -> (u64, u64) {
    (w >> OFFSET_BITS, w & OFFSET_MASK)
}

/// How a forked child's first thread publishes a tag's new fork epoch, after it
/// forgot the parent's segments and moved the cursor past them (`TagBuffer::forget_parent`).
/// Release, so that everything before it is visible to a thread that sees the epoch.
pub const EPOCH_PUBLISH: Ordering = Ordering::Release;
/// How takers read a tag's fork epoch before taking (`TagBuffer::fresh`). Acquire,
/// pairing with [`EPOCH_PUBLISH`]: a second thread of a forked child that sees the new
/// epoch also sees the parent's segments forgotten. With Relaxed, a weakly ordered CPU
/// (ARM) may show it the new epoch with the old cursor, and it would take from a
/// segment the parent keeps issuing.
pub const EPOCH_OBSERVE: Ordering = Ordering::Acquire;

/// No next segment loaded and none loading.
pub const NEXT_NONE: u8 = 0;
/// A background load of the next segment is running.
pub const NEXT_LOADING: u8 = 1;
/// The next segment is loaded and waits in the other slot.
pub const NEXT_READY: u8 = 2;

#[derive(Debug)]
struct Slot {
    gen: AtomicU64,
    base: AtomicI64,
    len: AtomicU64,
    preload_at: AtomicU64,
    step: AtomicI64,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            gen: AtomicU64::new(EMPTY),
            base: AtomicI64::new(0),
            len: AtomicU64::new(0),
            preload_at: AtomicU64::new(u64::MAX),
            step: AtomicI64::new(0),
        }
    }
}

/// What a take returned: ids `first..first + count`, and whether the current segment
/// passed its preload point.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    /// The first id.
    pub first: i64,
    /// How many consecutive ids (at least 1).
    pub count: u64,
    /// The caller should make sure the next segment is loading.
    pub wants_preload: bool,
}

/// The two slots and the cursor of one tag.
#[derive(Debug)]
pub struct Ring {
    cursor: AtomicU64,
    slots: [Slot; 2],
    /// `NEXT_NONE`, `NEXT_LOADING` or `NEXT_READY`.
    pub next: AtomicU8,
}

/// A segment's contents as seen by stats.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotView {
    /// Generation held, `None` when empty.
    pub gen: Option<u64>,
    /// First id.
    pub base: i64,
    /// Ids in it.
    pub len: u64,
    /// The step it was loaded with.
    pub step: i64,
}

impl Ring {
    /// A ring at generation 0 with no segment loaded.
    pub fn new() -> Ring {
        Ring {
            cursor: AtomicU64::new(0),
            slots: [Slot::new(), Slot::new()],
            next: AtomicU8::new(NEXT_NONE),
        }
    }

    /// Reads the slot holding `gen` consistently: `(base, len, preload_at)`.
    #[inline(always)]
    fn read(&self, gen: u64) -> Option<(i64, u64, u64)> {
        let slot = &self.slots[(gen & 1) as usize];
        // Acquire pairs with the Release store of the generation in `publish`.
        if slot.gen.load(Ordering::Acquire) != gen {
            return None;
        }
        let base = slot.base.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        let preload_at = slot.preload_at.load(Ordering::Relaxed);
        // Seqlock read side: the fence orders the field loads before the re-check, so
        // fields from a rewrite in progress are caught by a changed generation.
        fence(Ordering::Acquire);
        if slot.gen.load(Ordering::Relaxed) != gen {
            return None;
        }
        Some((base, len, preload_at))
    }

    /// Takes one id: the hot path. `None` means "go to the slow path"; a `None` never
    /// moves the cursor unless another thread's take raced it past the end (see the
    /// module docs for the bound).
    #[inline(always)]
    pub fn take_one(&self) -> Option<Taken> {
        // Acquire pairs with the Release in `point_at`: the slot of the generation we
        // see was published before the cursor was pointed at it.
        let (gen, off) = split(self.cursor.load(Ordering::Acquire));
        let (base, len, preload_at) = self.read(gen)?;
        if off >= len {
            // Spent: refuse without adding, so polling can never carry the offset.
            return None;
        }
        // Acquire for the same reason as the load above, in case a switch happened in
        // between and we land in a newer generation.
        let (gen2, off) = split(self.cursor.fetch_add(1, Ordering::Acquire));
        let (base, len, preload_at) = if gen2 == gen {
            (base, len, preload_at)
        } else {
            self.read(gen2)?
        };
        if off >= len {
            return None;
        }
        Some(Taken {
            first: base + off as i64,
            count: 1,
            wants_preload: off >= preload_at,
        })
    }

    /// Takes a chunk of up to `n` consecutive ids for one thread (the chunked form,
    /// `thread_chunk.rs`): [`take_one`](Self::take_one) with an add of `n`, so threads
    /// meet on the cursor once per chunk. The chunk stops at the segment's end (never
    /// crosses it: the rest of the add is an overshoot, refused to everyone, see the
    /// module docs); a spent segment is refused without adding, as in `take_one`.
    /// Also returns the cursor word the chunk starts at (see [`word`](Self::word)).
    #[inline]
    pub fn take_chunk(&self, n: u64) -> Option<(Taken, u64)> {
        // Acquire: as in `take_one`.
        let (gen, off) = split(self.cursor.load(Ordering::Acquire));
        let (base, len, preload_at) = self.read(gen)?;
        if off >= len {
            return None;
        }
        // Acquire: as in `take_one`.
        let at = self.cursor.fetch_add(n, Ordering::Acquire);
        let (gen2, off) = split(at);
        let (base, len, preload_at) = if gen2 == gen {
            (base, len, preload_at)
        } else {
            self.read(gen2)?
        };
        if off >= len {
            return None;
        }
        let count = n.min(len - off);
        let taken = Taken {
            first: base + off as i64,
            count,
            wants_preload: off + count > preload_at,
        };
        Some((taken, at))
    }

    /// The cursor word now, for the chunked form's hot path (`thread_chunk.rs`), which
    /// asks before each id of a chunk how far the cursor has moved past it (from the
    /// word [`take_chunk`](Self::take_chunk) returned), to give the chunk up once
    /// others have moved far past it. The cursor of another generation is at least
    /// [`MAX_SEGMENT_LEN`] past any word of the one before (offsets stay below twice
    /// that, see the module docs).
    #[inline(always)]
    pub fn word(&self) -> u64 {
        // Relaxed: only this one atomic is read, and coherence alone gives what the
        // caller needs: a take that happened before this load (e.g. another thread's,
        // whose call returned before this thread's call began) is seen by it, or a
        // later value. Nothing else is read through it. A plain load, no RMW: the line
        // is shared, not taken from the threads that add to it.
        self.cursor.load(Ordering::Relaxed)
    }

    /// Takes up to `n` consecutive ids from the current segment without overshooting.
    pub fn take_many(&self, n: u64) -> Option<Taken> {
        // Acquire: as in `take_one`.
        let mut w = self.cursor.load(Ordering::Acquire);
        loop {
            let (gen, off) = split(w);
            let (base, len, preload_at) = self.read(gen)?;
            if off >= len {
                return None;
            }
            let count = n.min(len - off);
            // AcqRel: the reservation is a read-modify-write like the single take.
            match self.cursor.compare_exchange_weak(
                w,
                w + count,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Taken {
                        first: base + off as i64,
                        count,
                        wants_preload: off + count > preload_at,
                    })
                }
                Err(now) => w = now,
            }
        }
    }

    /// Takes exactly `n` consecutive ids from the current segment, or nothing when
    /// fewer are left in it (so a batch taken at call time is never split around ids
    /// taken by others meanwhile).
    pub fn take_exact(&self, n: u64) -> Option<Taken> {
        // Acquire: as in `take_one`.
        let mut w = self.cursor.load(Ordering::Acquire);
        loop {
            let (gen, off) = split(w);
            let (base, len, preload_at) = self.read(gen)?;
            if off >= len || len - off < n {
                return None;
            }
            // AcqRel: the reservation is a read-modify-write like the single take.
            match self
                .cursor
                .compare_exchange_weak(w, w + n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Some(Taken {
                        first: base + off as i64,
                        count: n,
                        wants_preload: off + n > preload_at,
                    })
                }
                Err(now) => w = now,
            }
        }
    }

    /// Writes segment `[base, base + len)` as generation `gen` into its slot. Only the
    /// slow path calls this, for the generation after the current one (whose slot holds
    /// a spent segment), so no live reader needs what is overwritten.
    pub fn publish(&self, gen: u64, base: i64, len: u64, preload_at: u64, step: i64) {
        let slot = &self.slots[(gen & 1) as usize];
        slot.gen.store(EMPTY, Ordering::Relaxed);
        // Seqlock write side: readers that see any new field also see EMPTY or `gen`.
        fence(Ordering::Release);
        slot.base.store(base, Ordering::Relaxed);
        slot.len.store(len.min(MAX_SEGMENT_LEN), Ordering::Relaxed);
        slot.preload_at.store(preload_at, Ordering::Relaxed);
        slot.step.store(step, Ordering::Relaxed);
        // Release: publishes the fields above together with the generation.
        slot.gen.store(gen, Ordering::Release);
    }

    /// Points the cursor at the start of generation `gen` (a switch, a reset or a close).
    pub fn point_at(&self, gen: u64) {
        debug_assert!(gen <= CLOSED_GEN);
        // A read-modify-write, not a plain store: it is ordered after every take that
        // came before it (C++ orders a plain store the same way, but loom models a
        // plain store racing with a take's fetch_add more loosely and would report a
        // switch undone by an earlier take). AcqRel: Release so a taker that lands in
        // `gen` also sees the slot published before; Acquire is not needed by the
        // callers, which hold the tag's lock, but costs nothing on a swap.
        self.cursor.swap(gen << OFFSET_BITS, Ordering::AcqRel);
    }

    /// Pulls an overshot offset back to the segment's end. Not needed for uniqueness
    /// (takes never carry, see the module docs); it keeps the cursor tidy for stats.
    pub fn clamp(&self) {
        // Acquire: as in `take_one`, so the slot read below is the current one's.
        let w = self.cursor.load(Ordering::Acquire);
        let (gen, off) = split(w);
        let len = self.read(gen).map(|(_, len, _)| len).unwrap_or(0);
        if off > len {
            // AcqRel like any take; a failed CAS means another thread moved the cursor
            // (a take or a switch), and a stale clamp must not undo that.
            let _ = self.cursor.compare_exchange(
                w,
                (gen << OFFSET_BITS) | len,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// How many ids the segment of generation `gen` holds; 0 when no slot holds it (no
    /// segment loaded yet, or forgotten after a fork). Slow path and stats only.
    pub fn len_of(&self, gen: u64) -> u64 {
        self.read(gen).map_or(0, |(_, len, _)| len)
    }

    /// The cursor as `(generation, offset)`.
    pub fn position(&self) -> (u64, u64) {
        // Acquire: callers compare it with slots they read next.
        split(self.cursor.load(Ordering::Acquire))
    }

    /// Forgets both segments (after a fork: they belong to the parent).
    pub fn forget(&self) {
        for slot in &self.slots {
            // Release: published with the fork epoch (see `TagBuffer::forget_parent`).
            slot.gen.store(EMPTY, Ordering::Release);
        }
        // Release: as above.
        self.next.store(NEXT_NONE, Ordering::Release);
    }

    /// Both slots as `(view, next offset)` for stats, current first.
    pub fn views(&self) -> ([SlotView; 2], u64, u64) {
        let (gen, off) = self.position();
        let view = |i: usize| {
            let s = &self.slots[i];
            let gen = s.gen.load(Ordering::Acquire);
            SlotView {
                gen: (gen != EMPTY).then_some(gen),
                base: s.base.load(Ordering::Relaxed),
                len: s.len.load(Ordering::Relaxed),
                step: s.step.load(Ordering::Relaxed),
            }
        };
        ([view(0), view(1)], gen, off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_from_published_segment_then_reports_spent() {
        let ring = Ring::new();
        assert!(ring.take_one().is_none(), "nothing published yet");
        ring.publish(1, 100, 3, 1, 3);
        ring.point_at(1);
        let ids: Vec<i64> = (0..3).map(|_| ring.take_one().unwrap().first).collect();
        assert_eq!(ids, vec![100, 101, 102]);
        assert!(ring.take_one().is_none());
    }

    #[test]
    fn take_many_never_crosses_the_segment_end() {
        let ring = Ring::new();
        ring.publish(1, 10, 5, u64::MAX, 5);
        ring.point_at(1);
        let t = ring.take_many(3).unwrap();
        assert_eq!((t.first, t.count), (10, 3));
        let t = ring.take_many(3).unwrap();
        assert_eq!((t.first, t.count), (13, 2));
        assert!(ring.take_many(1).is_none());
    }

    #[test]
    fn take_exact_takes_all_or_nothing() {
        let ring = Ring::new();
        ring.publish(1, 10, 5, u64::MAX, 5);
        ring.point_at(1);
        assert!(ring.take_exact(6).is_none(), "more than the segment holds");
        let t = ring.take_exact(3).unwrap();
        assert_eq!((t.first, t.count), (10, 3));
        assert!(ring.take_exact(3).is_none(), "two left: nothing taken");
        let t = ring.take_exact(2).unwrap();
        assert_eq!((t.first, t.count), (13, 2));
        assert!(ring.take_one().is_none());
    }

    #[test]
    fn take_chunk_stops_at_the_segment_end_and_then_refuses_without_adding() {
        let ring = Ring::new();
        ring.publish(1, 10, 5, 1, 5);
        ring.point_at(1);
        let (t, at) = ring.take_chunk(3).unwrap();
        assert_eq!(
            (t.first, t.count, t.wants_preload, at),
            (10, 3, true, 1 << OFFSET_BITS)
        );
        assert_eq!(ring.word() - at, 3, "its own add");
        let (t, _) = ring.take_chunk(3).unwrap();
        assert_eq!((t.first, t.count), (13, 2), "cut at the end");
        assert_eq!(ring.word() - at, 6);
        assert!(ring.take_chunk(3).is_none());
        assert_eq!(
            ring.position(),
            (1, 6),
            "the cut chunk overshot by one; no add after"
        );
        ring.publish(2, 20, 5, u64::MAX, 5);
        ring.point_at(2);
        assert_eq!(
            ring.take_chunk(2).map(|(t, _)| (t.first, t.count)),
            Some((20, 2))
        );
        assert!(ring.word() - at >= MAX_SEGMENT_LEN, "another generation");
    }

    #[test]
    fn stale_generation_is_refused() {
        let ring = Ring::new();
        ring.publish(1, 0, 10, u64::MAX, 10);
        ring.point_at(1);
        // Generation 3 replaces 1 in the same slot while the cursor still says 1.
        ring.publish(3, 1000, 10, u64::MAX, 10);
        assert!(ring.take_one().is_none());
    }

    #[test]
    fn clamp_leaves_a_spent_cursor_at_the_segment_end() {
        let ring = Ring::new();
        ring.publish(1, 0, 2, u64::MAX, 2);
        ring.point_at(1);
        for _ in 0..10 {
            ring.take_one();
        }
        ring.clamp();
        assert_eq!(ring.position(), (1, 2));
    }

    /// Issue 11: polling a spent segment (e.g. `try_next_id` during an outage) used to
    /// add 1 per call, and after 2^32 calls the offset carried into the generation.
    #[test]
    fn failing_takes_never_move_the_cursor() {
        let ring = Ring::new();
        let polls = 3 << OFFSET_BITS;
        // Nothing published yet.
        for _ in 0..polls {
            assert!(ring.take_one().is_none());
        }
        assert_eq!(ring.position(), (0, 0));
        // A spent segment.
        ring.publish(1, 100, 3, u64::MAX, 3);
        ring.point_at(1);
        for _ in 0..3 {
            ring.take_one().unwrap();
        }
        for _ in 0..polls {
            assert!(ring.take_one().is_none());
        }
        assert_eq!(ring.position(), (1, 3));
        // The next generation is loaded meanwhile: still no take from it before the
        // switch, and none of its ids are skipped or repeated after it.
        ring.publish(2, 200, 3, u64::MAX, 3);
        for _ in 0..polls {
            assert!(ring.take_one().is_none());
        }
        ring.point_at(2);
        let ids: Vec<i64> = (0..3).map(|_| ring.take_one().unwrap().first).collect();
        assert_eq!(ids, vec![200, 201, 202]);
        // Closed.
        ring.point_at(CLOSED_GEN);
        for _ in 0..polls {
            assert!(ring.take_one().is_none());
        }
        assert_eq!(ring.position(), (CLOSED_GEN, 0));
    }

    #[test]
    fn flags_preload_once_past_the_threshold() {
        let ring = Ring::new();
        ring.publish(1, 0, 10, 1, 10);
        ring.point_at(1);
        assert!(!ring.take_one().unwrap().wants_preload);
        assert!(ring.take_one().unwrap().wants_preload);
    }
}

/// Model checks of the ring under loom (in their own file: they are most of this
/// module's length and compile only under `--cfg leafid_loom`).
#[cfg(all(test, leafid_loom))]
mod loom_tests;
