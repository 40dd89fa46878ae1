//! Model checks of the ring under loom: every interleaving (up to the preemption bound)
//! of takers, the switch to the next generation, publishing into a slot a stale taker
//! may still read, clamping, and the chunked form's check of how far the cursor moved.
//! Run with `RUSTFLAGS="--cfg leafid_loom" CARGO_TARGET_DIR=target/loom cargo test -p leafid --release --lib loom`.

use super::*;
use loom::sync::Arc;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn ids(takes: &[Option<Taken>]) -> Vec<i64> {
    takes.iter().flatten().map(|t| t.first).collect()
}

fn assert_unique(all: &mut Vec<i64>) {
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "an id was issued twice");
}

/// The fork-epoch handshake of `TagBuffer`: the child's first thread forgets the
/// parent's segment and publishes the new epoch; another thread that sees the new
/// epoch must not take from the parent's segment. (Loom runs each thread's
/// operations in program order and an RMW reads the newest value, so it cannot
/// show the Relaxed failure, where the taker's fetch_add is ordered before the
/// switch; this checks the handshake as written.)
#[test]
fn loom_a_thread_that_sees_the_child_epoch_never_takes_from_the_parents_segment() {
    model(|| {
        let ring = Arc::new(Ring::new());
        // The segment inherited from the parent, which keeps issuing it.
        ring.publish(1, 10, 5, u64::MAX, 5);
        ring.point_at(1);
        let epoch = Arc::new(AtomicU64::new(0));
        let other = {
            let (ring, epoch) = (ring.clone(), epoch.clone());
            thread::spawn(move || {
                if epoch.load(EPOCH_OBSERVE) == 1 {
                    ring.take_one()
                } else {
                    None
                }
            })
        };
        // `forget_parent`: forget, move to a generation with no slot, publish.
        ring.forget();
        ring.point_at(3);
        epoch.store(1, EPOCH_PUBLISH);
        let taken = other.join().unwrap();
        assert!(taken.is_none(), "took {taken:?} from the parent's segment");
    });
}

/// An all-or-nothing batch (`take_exact`, for a batch taken at call time) races a
/// single taker over the last ids of a segment while the taker switches to the
/// next: the batch is whole or nothing, inside one segment, and shares no id.
#[test]
fn loom_an_exact_batch_is_whole_or_nothing() {
    model(|| {
        let ring = Arc::new(Ring::new());
        ring.publish(1, 10, 3, u64::MAX, 3);
        ring.point_at(1);
        ring.publish(2, 20, 3, u64::MAX, 3);
        let batch = {
            let ring = ring.clone();
            thread::spawn(move || ring.take_exact(2))
        };
        let mut mine = vec![];
        for _ in 0..2 {
            match ring.take_one() {
                Some(t) => mine.push(Some(t)),
                None => {
                    ring.point_at(2);
                    ring.clamp();
                }
            }
        }
        let batch = batch.join().unwrap();
        let mut all = ids(&mine);
        if let Some(t) = batch {
            assert_eq!(t.count, 2, "a partial batch: {t:?}");
            let seg = if t.first < 20 { 10..13 } else { 20..23 };
            assert!(
                seg.contains(&t.first) && seg.contains(&(t.first + 1)),
                "{t:?}"
            );
            all.extend([t.first, t.first + 1]);
        }
        assert_unique(&mut all);
    });
}

/// Two takers race over the end of a segment while a third switches to the next
/// one, as the slow path does (only once the current segment is spent).
#[test]
fn loom_takers_and_a_switch_never_share_an_id() {
    model(|| {
        let ring = Arc::new(Ring::new());
        ring.publish(1, 10, 2, u64::MAX, 2);
        ring.point_at(1);
        ring.publish(2, 20, 2, u64::MAX, 2);
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || vec![ring.take_one(), ring.take_one()])
            })
            .collect();
        // The switcher: the slow path's "spent → point at the next generation".
        let mut mine = vec![];
        loop {
            match ring.take_many(1) {
                Some(t) => mine.push(Some(t)),
                None => {
                    ring.point_at(2);
                    ring.clamp();
                    break;
                }
            }
        }
        let mut all = ids(&mine);
        for t in takers {
            all.extend(ids(&t.join().unwrap()));
        }
        for id in &all {
            assert!((10..12).contains(id) || (20..22).contains(id), "id {id}");
        }
        assert_unique(&mut all);
        let (gen, off) = ring.position();
        assert_eq!(gen, 2);
        assert!(
            off <= 2 + 2,
            "offset {off} overshot by more than the takers"
        );
    });
}

/// A taker keeps failing on a spent segment while the next one is published and
/// switched to, and the slot of the spent one is rewritten with a third: it never
/// moves the cursor by more than its own one overshoot, and never takes an id from
/// a half-written slot or one that the switcher also takes.
#[test]
fn loom_a_failing_taker_across_a_switch_and_a_publish() {
    model(|| {
        let ring = Arc::new(Ring::new());
        ring.publish(1, 10, 1, u64::MAX, 1);
        ring.point_at(1);
        assert_eq!(ring.take_one().map(|t| t.first), Some(10));
        let poller = {
            let ring = ring.clone();
            thread::spawn(move || (0..3).map(|_| ring.take_one()).collect::<Vec<_>>())
        };
        // The refill and the slow path: publish 2, switch, spend it, publish 3 into
        // the slot generation 1 used, switch again.
        ring.publish(2, 20, 1, u64::MAX, 1);
        ring.point_at(2);
        let mut mine = vec![ring.take_one()];
        ring.clamp();
        ring.publish(3, 30, 1, u64::MAX, 1);
        ring.point_at(3);
        mine.push(ring.take_one());
        let mut all = ids(&mine);
        all.extend(ids(&poller.join().unwrap()));
        for id in &all {
            assert!(
                [20, 30].contains(id),
                "id {id} from a spent or torn segment"
            );
        }
        assert_unique(&mut all);
        let (gen, off) = ring.position();
        assert_eq!(gen, 3);
        assert!(off <= 1 + 1, "offset {off}");
    });
}

/// A batch take (CAS) and single takes share a segment without overlap, and a
/// clamp racing with them never undoes a take.
#[test]
fn loom_batch_single_and_clamp_never_overlap() {
    model(|| {
        let ring = Arc::new(Ring::new());
        ring.publish(1, 0, 3, u64::MAX, 3);
        ring.point_at(1);
        let single = {
            let ring = ring.clone();
            thread::spawn(move || vec![ring.take_one(), ring.take_one()])
        };
        let clamp = {
            let ring = ring.clone();
            thread::spawn(move || ring.clamp())
        };
        let batch = ring.take_many(2);
        let mut all: Vec<i64> = batch
            .map(|t| (t.first..t.first + t.count as i64).collect())
            .unwrap_or_default();
        all.extend(ids(&single.join().unwrap()));
        clamp.join().unwrap();
        for id in &all {
            assert!((0..3).contains(id), "id {id}");
        }
        assert_unique(&mut all);
    });
}

/// The chunked form's hand-out (`thread_chunk.rs`): a thread reserving a chunk races
/// another that reserves chunks up to the segment's end and switches to the next
/// segment, as the slow path does. Every chunk lies inside one segment, and no id is
/// in two chunks.
#[test]
fn loom_a_chunk_taken_across_a_segment_switch_shares_no_id() {
    model(|| {
        let ring = Arc::new(Ring::new());
        ring.publish(1, 10, 4, u64::MAX, 4);
        ring.point_at(1);
        ring.publish(2, 20, 4, u64::MAX, 4);
        let taker = {
            let ring = ring.clone();
            thread::spawn(move || ring.take_chunk(3).map(|(t, _)| t))
        };
        let mut chunks = vec![];
        loop {
            match ring.take_chunk(2) {
                Some((t, _)) => chunks.push(t),
                None => {
                    ring.point_at(2);
                    ring.clamp();
                    chunks.extend(ring.take_chunk(2).map(|(t, _)| t));
                    break;
                }
            }
        }
        chunks.extend(taker.join().unwrap());
        let mut all = vec![];
        for t in &chunks {
            let last = t.first + t.count as i64 - 1;
            let seg = if t.first < 20 { 10..14 } else { 20..24 };
            assert!(
                seg.contains(&t.first) && seg.contains(&last),
                "chunk {t:?} crosses a segment's end"
            );
            all.extend(t.first..=last);
        }
        assert_unique(&mut all);
    });
}

/// A fork between a chunk's take and its use: the forking thread's chunk is copied into
/// the child, where the first thread to notice the fork forgets the parent's segments,
/// draws a new chunk key and publishes the child's epoch (`TagBuffer::forget_parent`).
/// A child thread that sees the new epoch (`fresh`) must see the new key, so it never
/// issues from the inherited chunk; one that sees the old epoch goes to the slow path.
#[test]
fn loom_a_child_never_issues_from_a_chunk_taken_before_the_fork() {
    model(|| {
        let ring = Arc::new(Ring::new());
        ring.publish(1, 10, 8, u64::MAX, 8);
        ring.point_at(1);
        let (key, epoch) = (Arc::new(AtomicU64::new(1)), Arc::new(AtomicU64::new(0)));
        // Taken before the fork, under key 1; the parent keeps issuing it.
        let (chunk, _) = ring.take_chunk(4).unwrap();
        let forgetter = {
            let (ring, key, epoch) = (ring.clone(), key.clone(), epoch.clone());
            thread::spawn(move || {
                ring.forget();
                ring.point_at(3);
                key.store(2, Ordering::Relaxed);
                epoch.store(1, EPOCH_PUBLISH);
            })
        };
        // The inherited thread's next call: `fresh`, then the key, then its chunk.
        let issued = if epoch.load(EPOCH_OBSERVE) == 1 {
            (key.load(Ordering::Relaxed) == 1).then_some(chunk.first)
        } else {
            None // not fresh: the slow path, which forgets the parent's state first
        };
        forgetter.join().unwrap();
        assert_eq!(issued, None, "issued from the parent's chunk {chunk:?}");
    });
}

/// The chunked form's order bound (`thread_chunk.rs`): a thread holding a chunk makes
/// a call after another thread's takes (seen here through a flag, as a call that began
/// after another returned sees it). It hands out its chunk's next id only while the
/// cursor is at most a lead past it, read with a Relaxed load ([`Ring::word`]);
/// coherence makes that load see every take before the flag, so the id trails those
/// takes by less than the lead. A stale read would let it hand out 10 after 17.
#[test]
fn loom_an_id_from_a_chunk_trails_the_takes_before_its_call_by_less_than_the_lead() {
    model(|| {
        // Past the chunk's next id (10): its own 4, then one of the other's chunks.
        const LEAD: u64 = 6;
        let ring = Arc::new(Ring::new());
        ring.publish(1, 10, 16, u64::MAX, 16);
        ring.point_at(1);
        let (chunk, at) = ring.take_chunk(4).unwrap();
        // 1 + the other thread's last id, once it is done.
        let done = Arc::new(AtomicI64::new(0));
        let other = {
            let (ring, done) = (ring.clone(), done.clone());
            thread::spawn(move || {
                let mut ids = vec![];
                for _ in 0..2 {
                    let (t, _) = ring.take_chunk(2).unwrap();
                    ids.extend(t.first..t.first + t.count as i64);
                }
                // Release: the call "returns" after its takes.
                done.store(ids.last().unwrap() + 1, Ordering::Release);
                ids
            })
        };
        // Acquire: this call begins after the other's returned, when it sees the flag.
        let others_end = done.load(Ordering::Acquire);
        let mine = if ring.word() - at <= LEAD {
            chunk.first
        } else {
            ring.take_chunk(1).unwrap().0.first
        };
        let mut all = other.join().unwrap();
        if others_end != 0 {
            let trail = others_end - 1 - mine;
            assert!(
                trail < LEAD as i64,
                "{mine} came {trail} below {}",
                others_end - 1
            );
        }
        all.push(mine);
        assert_unique(&mut all);
    });
}
