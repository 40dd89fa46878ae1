//! The lock-free double buffer of one tag: the hot path.
//!
//! A tag owns two segment slots. One 64-bit `cursor` names the current segment's
//! generation (high 32 bits) and the offset of the next id within it (low 32 bits), so
//! taking an id is a single `fetch_add`. A slot is published like a seqlock: its
//! generation is set to `EMPTY` while it is rewritten and to the new generation after,
//! and a reader checks the generation before and after reading the range. A reader that
//! raced with a rewrite sees a mismatch and retries: at worst an id is skipped, never
//! handed out twice. Switching to the next generation happens only in the slow path,
//! under the tag's mutex, and only when the current segment is spent.
//!
//! Offsets: segments hold at most 2^31 ids, so a single-id `fetch_add` may overshoot a
//! spent segment by 2^31 before it could carry into the generation; every overshooting
//! caller goes through the slow path, which clamps the offset back. Batches use a CAS
//! and never overshoot.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, AtomicU8, Ordering};

/// The largest segment a slot holds; a larger step leaves the rest of its range unused.
pub const MAX_SEGMENT_LEN: u64 = 1 << 31;
const OFFSET_BITS: u32 = 32;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// A slot generation meaning "being written / holds nothing".
const EMPTY: u64 = u64::MAX;
/// A generation no slot ever holds: the cursor of a closed tag.
pub const CLOSED_GEN: u64 = OFFSET_MASK;

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
    const fn new() -> Slot {
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
    pub const fn new() -> Ring {
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

    /// Takes one id: the hot path. `None` means "go to the slow path".
    #[inline(always)]
    pub fn take_one(&self) -> Option<Taken> {
        // Acquire: the generation we land in was published (Release) before the switch.
        let w = self.cursor.fetch_add(1, Ordering::Acquire);
        let (gen, off) = (w >> OFFSET_BITS, w & OFFSET_MASK);
        let (base, len, preload_at) = self.read(gen)?;
        if off >= len {
            return None;
        }
        Some(Taken {
            first: base + off as i64,
            count: 1,
            wants_preload: off >= preload_at,
        })
    }

    /// Takes up to `n` consecutive ids from the current segment without overshooting.
    pub fn take_many(&self, n: u64) -> Option<Taken> {
        let mut w = self.cursor.load(Ordering::Acquire);
        loop {
            let (gen, off) = (w >> OFFSET_BITS, w & OFFSET_MASK);
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
        // Release: a taker that lands in `gen` also sees the slot published before.
        self.cursor.store(gen << OFFSET_BITS, Ordering::Release);
    }

    /// Pulls a spent cursor's offset back to the segment's end, so single-id takes that
    /// overshot can never carry into the generation bits.
    pub fn clamp(&self) {
        let w = self.cursor.load(Ordering::Acquire);
        let gen = w >> OFFSET_BITS;
        let len = self.read(gen).map(|(_, len, _)| len).unwrap_or(0);
        if w & OFFSET_MASK > len {
            // A failed CAS means another taker moved on; the next slow call clamps again.
            let _ = self.cursor.compare_exchange(
                w,
                (gen << OFFSET_BITS) | len,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Forgets both segments (after a fork: they belong to the parent).
    pub fn forget(&self) {
        for slot in &self.slots {
            slot.gen.store(EMPTY, Ordering::Release);
        }
        self.next.store(NEXT_NONE, Ordering::Release);
    }

    /// Both slots as `(view, next offset)` for stats, current first.
    pub fn views(&self) -> ([SlotView; 2], u64, u64) {
        let w = self.cursor.load(Ordering::Acquire);
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
        ([view(0), view(1)], w >> OFFSET_BITS, w & OFFSET_MASK)
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
    fn stale_generation_is_refused() {
        let ring = Ring::new();
        ring.publish(1, 0, 10, u64::MAX, 10);
        ring.point_at(1);
        // Generation 3 replaces 1 in the same slot while the cursor still says 1.
        ring.publish(3, 1000, 10, u64::MAX, 10);
        assert!(ring.take_one().is_none());
    }

    #[test]
    fn clamp_pulls_an_overshot_offset_back() {
        let ring = Ring::new();
        ring.publish(1, 0, 2, u64::MAX, 2);
        ring.point_at(1);
        for _ in 0..10 {
            ring.take_one();
        }
        ring.clamp();
        let (_, gen, off) = ring.views();
        assert_eq!((gen, off), (1, 2));
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
