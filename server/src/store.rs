//! The segment store's connection for `leafid serve`: made at start, or, when the
//! database cannot be reached then, retried in the background while the server already
//! answers.
//!
//! Java Leaf does not listen at all until MySQL answers (its connection pool retries
//! inside the segment service's constructor; recorded in ../shared/leaf-http-recorded).
//! leafid listens at once so an orchestrator that starts the database and the id server
//! together gets a server that says why it is not ready: Leaf's -1 ("not initialised",
//! which is what it is) for segment ids meanwhile, and a 503 `/health`. A configuration the
//! store refuses (a wrong password, an unknown database, no `leaf_alloc` table) is not
//! retried: it ends the start with the store's message.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leafid::{Error, SegmentGenerator, SegmentOptions};

/// The first retry's delay; doubled after each failure up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
/// The longest wait between two attempts: a store that comes back is used within it.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Segment mode's generator, filled once the store has answered.
#[derive(Clone, Debug, Default)]
pub struct SegmentSlot {
    generator: Arc<OnceLock<SegmentGenerator>>,
    /// Why the generator is not there yet (the latest connect error), for `/health`.
    waiting_on: Arc<Mutex<Option<String>>>,
}

impl SegmentSlot {
    /// The generator, once connected.
    pub fn get(&self) -> Option<&SegmentGenerator> {
        self.generator.get()
    }

    /// The latest connect error while not connected; `None` once connected.
    pub fn waiting_on(&self) -> Option<String> {
        if self.get().is_some() {
            return None;
        }
        self.waiting_on
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A slot holding `gen` already (tests that build the router in-process).
    #[cfg(test)]
    pub fn connected(gen: SegmentGenerator) -> Self {
        let slot = SegmentSlot::default();
        let _ = slot.generator.set(gen);
        slot
    }

    fn fail(&self, e: &Error) {
        // The cause alone: the library's hint ("ids already buffered keep flowing") is
        // not true of a server that never connected.
        let why = match e {
            Error::StoreUnavailable { cause, .. } => format!("store unavailable: {cause}"),
            other => crate::admin::advice(other),
        };
        *self.waiting_on.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
}

/// Connects to the store at `url`. Returns at once with a filled slot, or, when the
/// store is unavailable (down, refusing, silent), with an empty slot and a task that
/// keeps trying until it connects; any other error is returned.
/// Every attempt uses `options` (with `create_table`, `leaf_alloc` is created when
/// missing, `serve --create-table`).
pub async fn connect(
    url: &str,
    options: SegmentOptions,
) -> Result<(SegmentSlot, Option<tokio::task::JoinHandle<()>>), Error> {
    let slot = SegmentSlot::default();
    match SegmentGenerator::connect(url, options.clone()).await {
        Ok(gen) => {
            let _ = slot.generator.set(gen);
            Ok((slot, None))
        }
        Err(e @ Error::StoreUnavailable { .. }) => {
            tracing::warn!(
                store = %leafid::redact::url(url),
                error = %e,
                "segment store unavailable at start: answering Leaf's -1 and retrying"
            );
            slot.fail(&e);
            let task = tokio::spawn(retry(url.to_string(), options, slot.clone()));
            Ok((slot, Some(task)))
        }
        Err(e) => Err(e),
    }
}

async fn retry(url: String, options: SegmentOptions, slot: SegmentSlot) {
    let mut delay = FIRST_RETRY_DELAY;
    loop {
        tokio::time::sleep(delay).await;
        match SegmentGenerator::connect(&url, options.clone()).await {
            Ok(gen) => {
                let _ = slot.generator.set(gen);
                tracing::info!(store = %leafid::redact::url(&url), "segment store connected");
                return;
            }
            Err(e) => {
                // A store that comes back misconfigured (say its table dropped) is
                // logged at each attempt; the operator's fix is picked up without a restart.
                tracing::warn!(store = %leafid::redact::url(&url), error = %crate::admin::advice(&e), "segment store still unavailable");
                slot.fail(&e);
            }
        }
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}
