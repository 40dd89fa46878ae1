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
use crate::segment::lookup::{answered, Answer, Ask, LookupState, Outcome};
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
    /// wait is `StoreUnavailable` (the store is silent or slow), never "no such tag",
    /// which a caller may take for final. A caller that does not wait (`next_id_now`, a
    /// zero `wait_timeout`) gets `TagNotFound` at once while the lookup runs, as documented.
    fn found(
        &self,
        tag: &str,
        answer: &Answer,
        waited: Option<Duration>,
    ) -> Result<Arc<TagBuffer>> {
        self.check_open()?;
        match self.tags.load().get(tag) {
            Some(buf) => Ok(buf.clone()),
            // The store could not say: its error, not a "no such tag" a caller may take
            // for final.
            None => match &*answer.borrow() {
                // The store's own error (an outage, a refused login, …), source kept.
                Some(Err(e)) => Err(e.copy()),
                None => match waited {
                    Some(w) => Err(Error::store(format!(
                        "the store has not answered within {w:?} whether tag {tag:?} exists (it is \
                         silent or slow; the lookup goes on in the background); retry later"
                    ))),
                    None => Err(Error::TagNotFound { tag: tag.into() }),
                },
                Some(Ok(_)) => Err(Error::TagNotFound { tag: tag.into() }),
            },
        }
    }

    /// The shared lookup of `tag` in the store, started (in the background) unless one
    /// ran within the rate-limit window.
    fn lookup(self: &Arc<Self>, tag: &str) -> Answer {
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
            Ask::Join(answer) => answer,
            Ask::Start(reply, answer) => {
                let (inner, tag) = (self.clone(), tag.to_string());
                // On the runtime, not in the caller's future: a caller that stops
                // waiting does not cancel the lookup others share.
                drop(runtime::spawn(async move {
                    let found = inner.look_up(tag, slots).await;
                    let _ = reply.send(Some(found));
                }));
                answer
            }
        }
    }

    /// Asks the store whether `tag` exists; if it does, adds it to the cache and starts
    /// loading its first segment. A failed lookup gives the store's cause.
    async fn look_up(self: Arc<Self>, tag: String, slots: Arc<tokio::sync::Semaphore>) -> Outcome {
        let asked = match self.loader.store() {
            Ok(store) => tokio::time::timeout(REFILL_TIMEOUT, async {
                // A flood of unknown names must not take the store's connections from
                // refills (nor open connections of its own): a few lookups at a time,
                // the rest queue (each name at most once per second, see `lookup.rs`).
                let _permit = slots.acquire().await;
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
        let answer = self.lookup(tag);
        let wait = self.loader.opts.wait_timeout;
        // On one of the runtime's own threads, waiting would starve the lookup (and the
        // timer that ends the wait): answer as a zero wait does.
        if answer.borrow().is_some() || wait.is_zero() || runtime::on_runtime_thread() {
            return self.found(tag, &answer, None);
        }
        runtime::block_on(answered(answer.clone(), wait));
        self.found(tag, &answer, Some(wait))
    }

    /// The buffer of a tag missing from the cache without waiting: a lookup starts in
    /// the background and this fails with `TagNotFound` unless an earlier one found it.
    #[cold]
    pub(super) fn find_now(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        self.may_look_up(tag)?;
        let answer = self.lookup(tag);
        self.found(tag, &answer, None)
    }

    /// [`find`](Self::find) for async callers (on the core's runtime).
    pub(super) async fn find_async(self: &Arc<Self>, tag: &str) -> Result<Arc<TagBuffer>> {
        if let Some(buf) = self.tags.load().get(tag) {
            return Ok(buf.clone());
        }
        self.may_look_up(tag)?;
        let answer = self.lookup(tag);
        let wait = self.loader.opts.wait_timeout;
        answered(answer.clone(), wait).await;
        // A zero wait is the never-waiting contract: `TagNotFound` while the lookup runs.
        self.found(tag, &answer, (!wait.is_zero()).then_some(wait))
    }
}
