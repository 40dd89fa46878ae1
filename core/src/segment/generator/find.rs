//! Finding a tag missing from a generator's cache: a store lookup ("does this tag
//! exist?"), shared by every caller asking about the same name and rate-limited per
//! name (`lookup.rs`), waited on up to `wait_timeout` by the blocking calls, not at all
//! by the never-waiting ones, and on a notification by the async ones. A tag found is
//! added to the map and its first segment starts loading.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::inner::Inner;
use crate::error::{Error, Result};
use crate::runtime;
use crate::segment::loader::REFILL_TIMEOUT;
use crate::segment::lookup::{answered, Ask, LookupState, Outcome, Progress, Reply, Shared};
use crate::segment::store::validate_tag;
use crate::segment::tag_buffer::TagBuffer;

impl Inner {
    /// Why a tag missing from the cache cannot be looked up: bad input first, then
    /// closed. `Ok` when a lookup may run.
    fn may_look_up(self: &Arc<Self>, tag: &str) -> Result<()> {
        validate_tag(tag)?;
        self.check_open()?;
        self.restart_after_fork();
        Ok(())
    }

    /// The buffer of `tag` once a lookup answered, or `TagNotFound`. `waited`: how long
    /// the caller waited for the answer, if it did; a lookup still unanswered after a
    /// wait is `StoreUnavailable` (the store is silent or slow, or the lookup is queued
    /// behind others), never "no such tag", which a caller may take for final, unless
    /// the name's previous lookup said "no" recently (`lookup.rs`). A caller that does
    /// not wait (`next_id_now`, a zero `wait_timeout`) gets `TagNotFound` at once while
    /// the lookup runs, as documented.
    fn found(
        &self,
        tag: &str,
        shared: &Shared,
        waited: Option<Duration>,
    ) -> Result<Arc<TagBuffer>> {
        self.check_open()?;
        if let Some(buf) = self.tags.load().get(tag) {
            return Ok(buf.clone());
        }
        let not_found = || Err(Error::TagNotFound { tag: tag.into() });
        let queued = match &*shared.answer.borrow() {
            // The store's own error (an outage, a refused login, …), source kept: not
            // a "no such tag" a caller may take for final.
            Progress::Done {
                outcome: Err(e), ..
            } => return Err(e.copy()),
            Progress::Done { outcome: Ok(_), .. } => return not_found(),
            Progress::Queued => true,
            Progress::Asking => false,
        };
        let Some(w) = waited else {
            return not_found();
        };
        if shared.previously_absent(self.loader.opts.clock.now_millis()) {
            return not_found();
        }
        Err(Error::store(if queued {
            format!(
                "the lookup of tag {tag:?} was still queued behind other lookups of tags \
                 missing from the cache after {w:?} (a few query the store at once; many \
                 unknown names were asked for); retry later"
            )
        } else {
            format!(
                "the store has not answered within {w:?} whether tag {tag:?} exists (it is \
                 silent or slow; the lookup goes on in the background); retry later"
            )
        }))
    }

    /// The shared lookup of `tag` in the store, started (in the background) unless one
    /// is running or answered within the rate-limit window.
    fn lookup(self: &Arc<Self>, tag: &str) -> Shared {
        let now = self.loader.opts.clock.now_millis();
        let (ask, slots) = {
            let mut state = self.lookups.lock().unwrap_or_else(PoisonError::into_inner);
            // In a forked child, the parent's lookups are answered (and its slots held)
            // by tasks that do not exist here: start afresh rather than wait on them.
            let epoch = runtime::fork_epoch();
            if state.epoch != epoch {
                *state = LookupState::new(epoch);
            }
            (state.lookups.ask(tag, now), state.slots.clone())
        };
        match ask {
            Ask::Join(shared) => shared,
            Ask::Start(reply, shared) => {
                let (inner, tag) = (self.clone(), tag.to_string());
                // On the runtime, not in the caller's future: a caller that stops
                // waiting does not cancel the lookup others share.
                drop(runtime::spawn(async move {
                    let clock = inner.loader.opts.clock.clone();
                    let found = inner.look_up(tag, slots, &reply).await;
                    let at_ms = clock.now_millis();
                    reply.send_replace(Progress::Done {
                        outcome: found,
                        at_ms,
                    });
                }));
                shared
            }
        }
    }

    /// Asks the store whether `tag` exists; if it does, adds it to the cache and starts
    /// loading its first segment. A failed lookup gives the store's cause.
    async fn look_up(
        self: Arc<Self>,
        tag: String,
        slots: Arc<tokio::sync::Semaphore>,
        progress: &Reply,
    ) -> Outcome {
        let asked = match self.loader.store() {
            Ok(store) => tokio::time::timeout(REFILL_TIMEOUT, async {
                // A flood of unknown names must not take the store's connections from
                // refills (nor open connections of its own): a few lookups at a time,
                // the rest queue (each name at most once per second, see `lookup.rs`).
                let _permit = slots.acquire().await;
                progress.send_replace(Progress::Asking);
                store.has_tag(&tag).await
            })
            .await
            .unwrap_or_else(|_| {
                Err(Error::store(format!(
                    "lookup did not finish within {REFILL_TIMEOUT:?}"
                )))
            }),
            Err(e) => Err(e),
        };
        match asked {
            Ok(true) => {
                self.add_tag(tag).load_first(&self.loader);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                tracing::warn!(tag = %tag, error = %e, "looking up a tag missing from the cache failed");
                // A missing tag is `Ok(false)`; any error here is the store's, and a
                // caller must not take it for a final "no such tag".
                Err(match e {
                    e @ (Error::StoreUnavailable { .. } | Error::AccessDenied { .. }) => e,
                    other => Error::StoreUnavailable {
                        cause: other.to_string(),
                        source: other.cause().cloned(),
                    },
                })
            }
        }
    }

    /// The buffer of a tag missing from the cache, after a store lookup that waits up
    /// to `wait_timeout` (the blocking calls). A zero timeout never waits.
    #[cold]
    pub(super) fn find(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        self.may_look_up(tag)?;
        let shared = self.lookup(tag);
        let wait = self.loader.opts.wait_timeout;
        let done = matches!(&*shared.answer.borrow(), Progress::Done { .. });
        // On one of the runtime's own threads, waiting would starve the lookup (and the
        // timer that ends the wait): answer as a zero wait does.
        if done || wait.is_zero() || runtime::on_runtime_thread() {
            return self.found(tag, &shared, None);
        }
        runtime::block_on(answered(shared.answer.clone(), wait));
        self.found(tag, &shared, Some(wait))
    }

    /// The buffer of a tag missing from the cache without waiting: a lookup starts in
    /// the background and this fails with `TagNotFound` unless an earlier one found it.
    #[cold]
    pub(super) fn find_now(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        self.may_look_up(tag)?;
        let shared = self.lookup(tag);
        self.found(tag, &shared, None)
    }

    /// [`find`](Self::find) for async callers (on the core's runtime).
    pub(super) async fn find_async(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        if let Some(buf) = self.tags.load().get(tag) {
            return Ok(buf.clone());
        }
        self.may_look_up(tag)?;
        let shared = self.lookup(tag);
        let wait = self.loader.opts.wait_timeout;
        answered(shared.answer.clone(), wait).await;
        // A zero wait is the never-waiting contract: `TagNotFound` while the lookup runs.
        self.found(tag, &shared, (!wait.is_zero()).then_some(wait))
    }
}
