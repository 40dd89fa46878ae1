//! The segment store's connection for `leafid serve`: made at start, or, when the
//! database cannot be reached then (or not within `pending::FIRST_ATTEMPT_WAIT`),
//! retried in the background while the server already
//! answers Leaf's -1 ("not initialised", which is what it is) for segment ids (the
//! policy: `pending.rs`). A configuration the store refuses (a wrong password, an
//! unknown database, no `leaf_alloc` table) is not retried: it ends the start with the
//! store's message.

use leafid::{Error, SegmentGenerator, SegmentOptions};
use tokio::task::JoinHandle;

use crate::pending::{self, Maker, Pending};

/// Segment mode's generator, filled once the store has answered.
pub type SegmentSlot = Pending<SegmentGenerator>;

/// Connects to the store at `url`: a filled slot, or an empty one and the task that
/// keeps trying while the store is unavailable (down, refusing, silent); any other
/// error is returned. Every attempt uses `options` (with `create_table`, `leaf_alloc`
/// is created when missing, `serve --create-table`).
pub async fn connect(
    url: &str,
    options: SegmentOptions,
) -> Result<(SegmentSlot, Option<JoinHandle<()>>), Error> {
    let owned = url.to_string();
    pending::start(Maker {
        what: format!("segment store {}", leafid::redact::url(url)),
        make: move || {
            let (url, options) = (owned.clone(), options.clone());
            async move { SegmentGenerator::connect(&url, options).await }
        },
        why,
    })
    .await
}

/// Why the store is not connected, for `/health` and the log.
fn why(e: &Error) -> String {
    // The cause alone: the library's hint ("ids already buffered keep flowing") is not
    // true of a server that never connected.
    match e {
        Error::StoreUnavailable { cause, .. } => format!("store unavailable: {cause}"),
        other => crate::admin::advice(other),
    }
}
