//! `fixed` — a worker id given in configuration.
//!
//! Nothing coordinates the id: the operator promises no other process uses it. The
//! time floor comes from the local cache file alone, which the generator reads for
//! every registry, so a restart with the clock set back is still refused.
//!
//! The URL grammar, `fixed:7` (or `fixed://7`), is here too (`parse_url`): it is one
//! number.

use std::sync::Arc;

use super::config::grammar::bad;
use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// The worker id of a `fixed:` URL; `rest` is what follows `fixed:`, `url` the whole URL
/// (for messages).
pub(super) fn parse_url(url: &str, rest: &str) -> Result<u32> {
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    rest.parse().map_err(|_| {
        bad(
            url,
            format!("worker id {rest:?} is not a non-negative integer"),
        )
    })
}

/// A registry that always hands out the same configured worker id.
#[derive(Debug, Clone)]
pub struct FixedRegistry {
    worker_id: u32,
}

impl FixedRegistry {
    /// A registry for `worker_id` (checked against the layout at `acquire`).
    pub fn new(worker_id: u32) -> FixedRegistry {
        FixedRegistry { worker_id }
    }
}

impl WorkerRegistry for FixedRegistry {
    fn clock_is_local(&self) -> bool {
        // Ids that led the clock would be issued again by a holder that finds no record
        // of them (a bound file or cache file deleted after a clean exit).
        true
    }

    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        let id = self.worker_id;
        Box::pin(async move {
            if id > max_worker_id {
                return Err(Error::WorkerIdOutOfRange {
                    worker_id: id as i64,
                    max: max_worker_id,
                });
            }
            Ok(Lease {
                worker_id: id,
                // No shared record: the cache file supplies the floor.
                floor_ms: i64::MIN,
                // No shared record and no clock: the id is the user's promise.
                floor_recorded: false,
                location: format!("fixed:{id}"),
            })
        })
    }

    fn renew<'a>(&'a self, _lease: &'a Lease, _bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn survives_outage(&self) -> bool {
        true
    }

    fn identity_is_configured(&self) -> bool {
        true
    }

    fn host_identity(&self) -> Option<String> {
        Some(format!("fixed/{}", self.worker_id))
    }

    fn cache_is_only_record(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("fixed-{}", self.worker_id)
    }
}
