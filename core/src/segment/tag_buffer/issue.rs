//! The calls that issue ids from one tag, as the generator and its handles make them:
//! one id, a run, a batch all-or-nothing, each also async. The common case is the hot
//! path (a fork check and an atomic add on the ring, or in the chunked form the
//! thread's own chunk; no lock); everything else goes to `slow_path.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::TagBuffer;
use crate::error::{counted, Mode, Result};
use crate::segment::buffer::Taken;
use crate::segment::loader::Loader;
use crate::segment::thread_chunk;

impl TagBuffer {
    /// The next id; waits up to `wait_timeout` when none is at hand.
    #[inline(always)]
    pub(in crate::segment) fn next_id(self: &Arc<Self>, loader: &Arc<Loader>) -> Result<i64> {
        match self.try_next_id(loader) {
            Some(id) => Ok(id),
            // Errors are counted here, off the path that took an id.
            None => counted(
                self.slow(loader, 1, loader.opts.wait_timeout)
                    .map(|t| t.first),
                Mode::Segment,
            ),
        }
    }

    /// The hot path: the next id if one is at hand, `None` for the slow path.
    #[inline(always)]
    pub(in crate::segment) fn try_next_id(self: &Arc<Self>, loader: &Arc<Loader>) -> Option<i64> {
        if !self.fresh() {
            return None;
        }
        if self.chunk != 0 {
            return self.try_next_id_chunked(loader);
        }
        let t = self.ring.take_one()?;
        if t.wants_preload {
            self.maybe_preload(loader);
        }
        Some(t.first)
    }

    /// The chunked form's hot path (`thread_chunk.rs`): the next id of this thread's
    /// chunk, or a new chunk from the current segment with one atomic add (also when
    /// the cursor moved too far past the old one: the order bound). `None` once the
    /// segment is spent: the slow path then takes a single id (and switches), and the
    /// next call starts a chunk from the new segment. Call after `fresh`.
    #[inline(always)]
    fn try_next_id_chunked(self: &Arc<Self>, loader: &Arc<Loader>) -> Option<i64> {
        // Relaxed: after `fresh`'s Acquire, which orders it after the key a forked
        // child's `forget_parent` stored.
        let key = self.chunk_key.load(Ordering::Relaxed);
        match thread_chunk::take(key, &self.ring) {
            Some(id) => Some(id),
            None => self.new_chunk(loader),
        }
    }

    /// Reserves this thread's next chunk and returns its first id (`None`: the
    /// segment is spent). The chunk is kept under the buffer's key now, which may be
    /// newer than the one the failed take used.
    #[inline(never)]
    fn new_chunk(self: &Arc<Self>, loader: &Arc<Loader>) -> Option<i64> {
        // Acquire: pairs with the Release store in `renew_chunks`, so the count below
        // lands in this key's set, after the switch cleared it (never in the set of the
        // segment before, read with that segment's count).
        let key = self.chunk_key.load(Ordering::Acquire);
        // Counted before the take, never after: the preload below may wait for the
        // lock while the segment switches, and a thread counted then would add itself
        // to the new segment's threads though it took no chunk there (each chunk's
        // lead there one chunk too long). A switch between the count and the take
        // leaves this chunk under an old key: never used past its first id, which
        // comes from the cursor now and trails nothing.
        let threads = thread_chunk::count_thread(&self.chunk_threads);
        let size = thread_chunk::next_size(key, self.chunk);
        let (t, at) = self.ring.take_chunk(size)?;
        if t.wants_preload {
            self.maybe_preload(loader);
        }
        let lead = thread_chunk::lead(self.chunk, threads);
        // Cannot overflow: the chunk lies inside a segment.
        thread_chunk::keep(
            key,
            t.first + 1,
            t.first + t.count as i64,
            at + 1,
            size,
            lead,
        );
        Some(t.first)
    }

    /// [`next_id`](Self::next_id) that never waits: the slow path with no time to wait.
    #[inline(always)]
    pub(in crate::segment) fn next_id_now(self: &Arc<Self>, loader: &Arc<Loader>) -> Result<i64> {
        match self.try_next_id(loader) {
            Some(id) => Ok(id),
            None => counted(
                self.slow(loader, 1, Duration::ZERO).map(|t| t.first),
                Mode::Segment,
            ),
        }
    }

    /// [`next_id_now`](Self::next_id_now) without counting its error: the async calls'
    /// first attempt, whose error is not final (they count what they return).
    #[inline(always)]
    pub(in crate::segment) fn next_id_now_quiet(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
    ) -> Result<i64> {
        match self.try_next_id(loader) {
            Some(id) => Ok(id),
            None => self.slow(loader, 1, Duration::ZERO).map(|t| t.first),
        }
    }

    /// Fills `out`, reserving whole runs at a time; waits up to `wait` for refills. In
    /// the chunked form the calling thread's chunk goes first, so the batch comes after
    /// the thread's earlier ids and before its later ones.
    pub(in crate::segment) fn fill(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        out: &mut [i64],
        wait: Duration,
    ) -> Result<()> {
        let mut done = 0;
        if self.chunk != 0 && self.fresh() {
            // Relaxed: as in `try_next_id_chunked`.
            let key = self.chunk_key.load(Ordering::Relaxed);
            if let Some((first, count)) = thread_chunk::take_run(key, &self.ring, out.len() as u64)
            {
                let run = Taken {
                    first,
                    count,
                    wants_preload: false,
                };
                done += write_run(out, run);
            }
        }
        while done < out.len() {
            let want = (out.len() - done) as u64;
            let taken = match self.take_fast(loader, want) {
                Some(t) => t,
                None => self.slow(loader, want, wait)?,
            };
            done += write_run(&mut out[done..], taken);
        }
        Ok(())
    }

    /// `n` ids when the current segment holds them all, without the slow path and
    /// without waiting; `None` (nothing taken) otherwise, so a batch is never split
    /// around ids others take before it completes.
    pub(in crate::segment) fn batch_at_hand(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        n: usize,
    ) -> Option<Vec<i64>> {
        if !self.fresh() {
            return None;
        }
        // No ids asked: nothing to take from the thread's chunk, and nothing to give up.
        if self.chunk != 0 && n > 0 {
            // Runs on the calling thread, whose batch must come after its earlier ids
            // and before its later ones (docs/segment.md, "Order"): from its chunk when
            // the chunk holds them all; else the chunk is given up (a gap), so its later
            // ids come from a new chunk above whatever this batch takes, here or on the
            // runtime from the shared cursor. (A chunk the cursor moved too far past is
            // refused here as by a single take.)
            // Relaxed: as in `try_next_id_chunked`.
            let key = self.chunk_key.load(Ordering::Relaxed);
            if let Some(first) = thread_chunk::take_exact_run(key, &self.ring, n as u64) {
                let mut out = vec![0; n];
                write_run(
                    &mut out,
                    Taken {
                        first,
                        count: n as u64,
                        wants_preload: false,
                    },
                );
                return Some(out);
            }
            thread_chunk::give_up(key);
        }
        self.batch_from_cursor(loader, n)
    }

    /// `n` ids from the shared cursor when the current segment holds them all, never
    /// from a thread's chunk, so each is above every id issued or reserved in a chunk
    /// before the call; `None` (nothing taken) otherwise.
    pub(in crate::segment) fn batch_from_cursor(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        n: usize,
    ) -> Option<Vec<i64>> {
        // `fresh` first: its Acquire must come before the take it guards.
        if !self.fresh() {
            return None;
        }
        let taken = self.ring.take_exact(n as u64)?;
        if taken.wants_preload {
            self.maybe_preload(loader);
        }
        let mut out = vec![0; n];
        write_run(&mut out, taken);
        Some(out)
    }

    /// Up to `want` ids from the current segment without the slow path.
    #[inline]
    pub(in crate::segment) fn take_fast(
        self: &Arc<Self>,
        loader: &Arc<Loader>,
        want: u64,
    ) -> Option<Taken> {
        // `fresh` first: its Acquire must come before the take it guards.
        if !self.fresh() {
            return None;
        }
        let t = self.ring.take_many(want)?;
        if t.wants_preload {
            self.maybe_preload(loader);
        }
        Some(t)
    }

    /// [`next_id`](Self::next_id) for async callers (runs on the core's runtime).
    pub(in crate::segment) async fn next_id_async(
        self: Arc<Self>,
        loader: Arc<Loader>,
    ) -> Result<i64> {
        // The shared cursor only, never a chunk of the runtime thread this runs on: an
        // id from the cursor now is above every chunk reserved before, so the calling
        // thread (whose own chunk was empty when it came here) sees its ids increase.
        match self.take_fast(&loader, 1) {
            Some(t) => Ok(t.first),
            None => self.slow_async(&loader, 1).await.map(|t| t.first),
        }
    }

    /// [`fill`](Self::fill) for async callers (runs on the core's runtime).
    pub(in crate::segment) async fn fill_async(
        self: Arc<Self>,
        loader: Arc<Loader>,
        n: usize,
    ) -> Result<Vec<i64>> {
        let mut out = vec![0; n];
        let mut done = 0;
        while done < n {
            let want = (n - done) as u64;
            let taken = match self.take_fast(&loader, want) {
                Some(t) => t,
                None => self.slow_async(&loader, want).await?,
            };
            done += write_run(&mut out[done..], taken);
        }
        Ok(out)
    }
}

/// Writes the run `taken` to the front of `out`; returns how many ids it wrote.
fn write_run(out: &mut [i64], taken: Taken) -> usize {
    let count = taken.count as usize;
    for (k, slot) in out[..count].iter_mut().enumerate() {
        *slot = taken.first + k as i64;
    }
    count
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Weak};

    use crate::segment::buffer::NEXT_LOADING;
    use crate::segment::loader::{FollowsFork, Loader};
    use crate::segment::store::memory::MemoryStore;
    use crate::segment::tag_buffer::TagBuffer;
    use crate::segment::SegmentOptions;

    #[derive(Debug)]
    struct NoGenerator;

    impl FollowsFork for NoGenerator {
        fn follow_fork(self: Arc<Self>) {}
    }

    /// A thread that took its chunk in a segment and was held up (here in the preload's
    /// wait for the tag's lock) while the segment switched must not count itself among
    /// the new segment's threads: it took no chunk there, and counting it would give
    /// every chunk of the new segment a lead one chunk longer than the documented bound.
    #[test]
    fn a_thread_held_up_across_a_switch_is_not_counted_in_the_new_segment() {
        let no_generator: Weak<dyn FollowsFork> = Weak::<NoGenerator>::new();
        let loader = Arc::new(Loader::new(
            SegmentOptions::default(),
            Arc::new(MemoryStore::new()),
            crate::runtime::fork_epoch(),
            no_generator,
        ));
        let buf = TagBuffer::shared("t".into(), crate::runtime::fork_epoch(), 64);
        // Every take asks for a preload, which waits for the lock held below.
        buf.ring.publish(1, 1000, 1000, 0, 1000);
        buf.ring.point_at(1);
        let st = buf.lock();
        let taken_at = buf.ring.word();
        let (b, l) = (buf.clone(), loader.clone());
        let thread = std::thread::spawn(move || b.try_next_id(&l));
        while buf.ring.word() == taken_at {
            std::thread::yield_now();
        }
        // The thread took its chunk; the segment switches under the lock meanwhile (as
        // the slow path does), and no refill is started when the thread gets the lock.
        buf.renew_chunks();
        buf.ring.publish(2, 5000, 1000, u64::MAX, 1000);
        buf.ring.point_at(2);
        buf.ring.next.store(NEXT_LOADING, Ordering::Release);
        drop(st);
        assert_eq!(thread.join().unwrap(), Some(1000));
        assert_eq!(
            buf.chunk_threads.load(Ordering::Relaxed),
            0,
            "no thread took a chunk in the new segment"
        );
    }
}
