//! [`TagHandle`]: a generator's calls for one tag, without the tag lookup per call.
//! Thin: each call is its tag buffer's (`tag_buffer/issue.rs`), with errors counted
//! for metrics and the async calls run on the core's runtime.

use std::sync::Arc;
use std::time::Duration;

use super::inner::{Inner, SEGMENT};
use crate::error::{counted, Result};
use crate::runtime;
use crate::segment::refill_error::settled_now;
use crate::segment::tag_buffer::TagBuffer;

/// The fast way to issue ids for one tag: no lookup of the tag per call.
#[derive(Clone, Debug)]
pub struct TagHandle {
    pub(super) buf: Arc<TagBuffer>,
    pub(super) inner: Arc<Inner>,
}

impl TagHandle {
    /// The tag this handle issues for.
    pub fn tag(&self) -> &str {
        &self.buf.tag
    }

    /// The next id: an atomic add on the current segment in the common case. When no
    /// id is at hand it waits up to the generator's `wait_timeout` for a refill.
    #[inline]
    pub fn next_id(&self) -> Result<i64> {
        self.buf.next_id(&self.inner.loader)
    }

    /// The next id if it can be had without waiting (the common case), `None` when the
    /// slow path is needed (segment spent, first load, fork, close). Bindings call this
    /// while holding their interpreter lock and fall back to [`next_id`](Self::next_id)
    /// after releasing it.
    #[inline]
    pub fn try_next_id(&self) -> Option<i64> {
        self.buf.try_next_id(&self.inner.loader)
    }

    /// The id [`next_id_async`](Self::next_id_async) would take at call time, when the
    /// core has it without waiting (a switch to the loaded next segment included, which
    /// [`try_next_id`](Self::try_next_id) leaves to the slow path); `None`, with nothing
    /// taken, when the call would wait or fail: the async call then waits or says what
    /// is wrong. Never waits on I/O (it may briefly take the tag's lock). For bindings that hand back an
    /// already-completed awaitable when the id is at hand.
    #[inline]
    pub fn next_id_at_hand(&self) -> Option<i64> {
        // Quiet: an error here is not the caller's outcome (the async call counts it).
        self.buf.next_id_now_quiet(&self.inner.loader).ok()
    }

    /// `n` ids if the current segment holds them all (the batch
    /// [`next_ids_async`](Self::next_ids_async) takes at call time), `None` otherwise
    /// (`n` refused included: the async call then says what is wrong). Never waits on
    /// I/O (it may briefly take the tag's lock), takes nothing when `None`. For bindings, as
    /// [`next_id_at_hand`](Self::next_id_at_hand).
    pub fn next_ids_at_hand(&self, n: usize) -> Option<Vec<i64>> {
        let n = crate::limits::batch(n as u64).ok()?;
        self.buf.batch_at_hand(&self.inner.loader, n)
    }

    /// `n` ids, ascending within each segment; waits as [`next_id`](Self::next_id) does.
    pub fn next_ids(&self, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; crate::limits::batch(n as u64)?];
        self.fill(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids, reserving whole runs at a time.
    pub fn fill(&self, out: &mut [i64]) -> Result<()> {
        let filled = self
            .buf
            .fill(&self.inner.loader, out, self.inner.loader.opts.wait_timeout);
        counted(filled, SEGMENT)
    }

    /// The next id without ever waiting: when none is at hand (segment spent and the
    /// next not loaded, first load pending, store down) it fails at once with
    /// [`Error::SegmentsExhausted`](crate::Error::SegmentsExhausted) (or the refill's permanent error) and a refill runs
    /// in the background. No I/O and no wait on the caller's thread, on any path. For
    /// callers that must never block (Node's synchronous calls).
    #[inline]
    pub fn next_id_now(&self) -> Result<i64> {
        self.buf.next_id_now(&self.inner.loader)
    }

    /// `n` ids without ever waiting (see [`next_id_now`](Self::next_id_now)).
    pub fn next_ids_now(&self, n: usize) -> Result<Vec<i64>> {
        let mut out = vec![0; crate::limits::batch(n as u64)?];
        self.fill_now(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with ids without ever waiting (see [`next_id_now`](Self::next_id_now)).
    pub fn fill_now(&self, out: &mut [i64]) -> Result<()> {
        counted(
            self.buf.fill(&self.inner.loader, out, Duration::ZERO),
            SEGMENT,
        )
    }

    /// The next id, waiting up to the generator's `wait_timeout` for a refill without
    /// blocking any thread: the wait is a notification on the core's runtime, so
    /// thousands of callers waiting out an outage cost no threads, and any executor (a
    /// binding's event loop included) can await it. Same errors as
    /// [`next_id`](Self::next_id).
    pub fn next_id_async(&self) -> impl std::future::Future<Output = Result<i64>> + Send + 'static {
        // As `SegmentGenerator::next_id_async`: take at call time when it can.
        let now = settled_now(self.buf.next_id_now_quiet(&self.inner.loader));
        let (buf, inner) = (self.buf.clone(), self.inner.clone());
        async move {
            let id = match now {
                Some(now) => now,
                None => {
                    runtime::run(async move { buf.next_id_async(inner.loader.clone()).await }).await
                }
            };
            counted(id, SEGMENT)
        }
    }

    /// `n` ids, waiting as [`next_id_async`](Self::next_id_async) does.
    pub fn next_ids_async(
        &self,
        n: usize,
    ) -> impl std::future::Future<Output = Result<Vec<i64>>> + Send + 'static {
        // As `SegmentGenerator::next_ids_async`: at call time when all are at hand.
        let (buf, inner) = (self.buf.clone(), self.inner.clone());
        let at_hand =
            crate::limits::batch(n as u64).map(|n| (n, buf.batch_at_hand(&inner.loader, n)));
        async move {
            let (n, at_hand) = at_hand?;
            if let Some(ids) = at_hand {
                return Ok(ids);
            }
            let filled = runtime::run(async move { buf.fill_async(inner.loader.clone(), n).await });
            counted(filled.await, SEGMENT)
        }
    }
}
