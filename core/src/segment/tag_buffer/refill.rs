//! Loading a tag's next segment from the store: the background task that asks the
//! store for a range, checks it (a sane step, the high-water mark, `js_safe`), and
//! publishes it into the ring's free slot, or records the failure for callers.
//!
//! Spawned only by `loading.rs`; what a failure reads like to callers is in
//! `refill_error.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::TagBuffer;
use crate::error::{Error, Result};
use crate::segment::buffer::{NEXT_LOADING, NEXT_NONE, NEXT_READY};
use crate::segment::loader::{Loader, REFILL_TIMEOUT};
use crate::segment::options::JS_SAFE_LIMIT;
use crate::segment::step::next_step;
use crate::segment::store::Allocation;

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
pub(super) async fn refill(loader: Arc<Loader>, buf: Arc<TagBuffer>) {
    let mut flag = LoadingFlag {
        buf: &buf,
        done: false,
    };
    let now = loader.opts.clock.now_millis();
    let request = {
        let st = buf.lock();
        if !st.initialized || st.update_ts == 0 {
            // Leaf's first two loads use the table's step.
            None
        } else {
            let lasted = Duration::from_millis(now.saturating_sub(st.update_ts).max(0) as u64);
            Some(next_step(
                st.step,
                st.min_step,
                lasted,
                loader.opts.max_step,
            ))
        }
    };
    let started = Instant::now();
    let result = match loader.store() {
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
        loader.high_water.admit(&buf.tag, start, alloc.max_id, step)?;
        if loader.opts.js_safe && start >= JS_SAFE_LIMIT {
            return Err(Error::InvalidConfig(format!(
                "tag {:?} reached 2^53 ({}), the largest id a JavaScript number holds exactly, and this \
                 generator is js_safe; move the tag's ids to strings or turn js_safe off",
                buf.tag,
                JS_SAFE_LIMIT
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
            if loader.opts.js_safe {
                // Checked above: the segment starts below the limit.
                len = len.min((JS_SAFE_LIMIT - (alloc.max_id - step)) as u64);
            }
            // Leaf preloads once more than 10% of a segment is used.
            let preload_at = if loader.opts.double_buffer {
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
        Err(e) => buf.failed(&loader, &mut st, e),
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
