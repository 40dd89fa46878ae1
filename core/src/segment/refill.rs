//! Loading a tag's next segment from the store (a background task), and the errors a
//! failed load leaves for callers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer::{NEXT_LOADING, NEXT_NONE, NEXT_READY};
use super::generator::Inner;
use super::step::next_step;
use super::store::Allocation;
use super::tag_buffer::{TagBuffer, REFILL_TIMEOUT};
use crate::error::{Error, Result};

/// Clears the "loading" flag if a refill task is dropped before it finished (its
/// runtime shut down, the task cancelled), so the tag does not wait on it forever.
struct LoadingFlag<'a> {
    buf: &'a TagBuffer,
    done: bool,
}

impl Drop for LoadingFlag<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Under the lock, as every wake (see `TagBuffer::wait_for`); never held here:
            // the refill holds it only after setting `done`.
            let st = self.buf.lock();
            // AcqRel: as the flag's other updates; fails harmlessly if it moved on.
            let _ = self.buf.ring.next.compare_exchange(
                NEXT_LOADING,
                NEXT_NONE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            self.buf.wake(&st);
        }
    }
}

/// Loads the generation after the current one into its slot (runs on the runtime).
pub(super) async fn refill(inner: Arc<Inner>, buf: Arc<TagBuffer>) {
    let mut flag = LoadingFlag {
        buf: &buf,
        done: false,
    };
    let now = inner.opts.clock.now_millis();
    let request = {
        let st = buf.lock();
        if !st.initialized || st.update_ts == 0 {
            // Leaf's first two loads use the table's step.
            None
        } else {
            let lasted = Duration::from_millis(now.saturating_sub(st.update_ts).max(0) as u64);
            Some(next_step(st.step, st.min_step, lasted, inner.opts.max_step))
        }
    };
    let started = Instant::now();
    let result = match inner.store() {
        Ok(store) => {
            match tokio::time::timeout(REFILL_TIMEOUT, store.allocate(&buf.tag, request)).await {
                Ok(result) => result.and_then(|a| check_allocation(&buf.tag, a, request)),
                Err(_) => Err(Error::store(format!(
                    "refill of tag {:?} did not finish within {REFILL_TIMEOUT:?}; abandoned",
                    buf.tag
                ))),
            }
        }
        Err(e) => Err(e),
    };
    let elapsed = started.elapsed();
    let mut st = buf.lock();
    flag.done = true;
    if st.closed {
        return;
    }
    // A `js_safe` tag never hands out 2^53 or above: the segment is cut at the limit,
    // and one that starts there is refused for good. Before it, the one guard every
    // segment passes: never below one this generator loaded for the tag (`high_water.rs`).
    let result = result.and_then(|(alloc, step)| {
        let start = alloc.max_id - step;
        // Checked first, as before the marks: a lowered row is that, not a js_safe end.
        // (A segment refused below raises the mark anyway: the store handed those ids
        // out and will not again, so a higher mark refuses nothing it should accept.)
        inner.high_water.admit(&buf.tag, start, alloc.max_id, step)?;
        if inner.opts.js_safe && start >= super::JS_SAFE_LIMIT {
            return Err(Error::InvalidConfig(format!(
                "tag {:?} reached 2^53 ({}), the largest id a JavaScript number holds exactly, and this \
                 generator is js_safe; move the tag's ids to strings or turn js_safe off",
                buf.tag,
                super::JS_SAFE_LIMIT
            )));
        }
        Ok((alloc, step))
    });
    match result {
        Ok((alloc, step)) => {
            if st.initialized {
                st.update_ts = now;
            }
            st.initialized = true;
            st.step = step;
            st.min_step = alloc.step;
            let mut len = step as u64;
            if inner.opts.js_safe {
                // Checked above: the segment starts below the limit.
                len = len.min((super::JS_SAFE_LIMIT - (alloc.max_id - step)) as u64);
            }
            // Leaf preloads once more than 10% of a segment is used.
            let preload_at = if inner.opts.double_buffer {
                len / 10
            } else {
                u64::MAX
            };
            // Cannot underflow: `check_allocation` proved `max_id - step` fits.
            buf.ring
                .publish(st.gen + 1, alloc.max_id - step, len, preload_at, step);
            // Release: after the publish, so a switch sees the new slot.
            buf.ring.next.store(NEXT_READY, Ordering::Release);
            st.refills += 1;
            st.last_refill = Some(elapsed);
            st.refill_latency.observe(elapsed);
            st.last_error = None;
            st.backoff_ms = 0;
            buf.retry_at.store(0, Ordering::Relaxed);
            tracing::debug!(tag = %buf.tag, max_id = alloc.max_id, step, ?elapsed, "segment loaded");
            buf.wake(&st);
        }
        Err(e) => buf.failed(&inner, &mut st, e),
    }
}

/// Refuses an allocation no segment can be made of (whatever store returned it):
/// `Ok((allocation, step of the new segment))`.
fn check_allocation(
    tag: &str,
    alloc: Allocation,
    request: Option<i64>,
) -> Result<(Allocation, i64)> {
    let step = request.unwrap_or(alloc.step);
    let bad = |reason: String| Error::Malformed {
        what: "leaf_alloc row",
        path: format!("biz_tag {tag:?}"),
        reason,
    };
    if alloc.step <= 0 || step <= 0 {
        return Err(bad(format!(
            "step is {}; a segment needs a step of at least 1",
            alloc.step.min(step)
        )));
    }
    if alloc.max_id.checked_sub(step).is_none() {
        return Err(bad(format!(
            "max_id {} minus step {step} is below the smallest id",
            alloc.max_id
        )));
    }
    Ok((alloc, step))
}

/// A fresh copy of a stored refill error for one more caller: configuration and data
/// errors stay what they are (permanent), only transient ones say "unavailable".
pub(super) fn replay(e: Option<&Error>, tag: &str) -> Error {
    match e {
        Some(Error::TagNotFound { .. }) => Error::TagNotFound { tag: tag.into() },
        Some(e) => copy_error(e),
        None => Error::store(format!("refill of tag {tag:?} failed")),
    }
}

/// `Error` is not `Clone` (it may hold an `io::Error`); this copies what the slow path
/// keeps, and keeps each variant's kind and source (see `Error::copy`).
pub(crate) fn copy_error(e: &Error) -> Error {
    e.copy()
}

/// The cause a `SegmentsExhausted` reports: the last refill error (text and source);
/// with none yet and a refill still `loading` after the caller's `waited`, "the store
/// has not answered within …" (kind `TimedOut`), so an outage shows as one even when
/// the caller's wait ends before the first attempt does; "none" when nothing runs.
pub(super) fn exhausted_cause(
    last: Option<&Error>,
    loading: bool,
    waited: Duration,
) -> (String, Option<crate::error::Cause>) {
    match last {
        Some(e) => (e.to_string(), e.cause().cloned()),
        None if loading && !waited.is_zero() => {
            let text = format!("none yet: the store has not answered within {waited:?}");
            let cause = crate::error::Cause::timed_out(text.clone());
            (text, Some(cause))
        }
        None => ("none".to_string(), None),
    }
}
