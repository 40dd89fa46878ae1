//! `fixed` — a worker id given in configuration.
//!
//! Nothing coordinates the id: the operator promises no other process uses it. The
//! time floor comes from the local cache file alone, which the generator reads for
//! every registry, so a restart with the clock set back is still refused.

use std::sync::Arc;

use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

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
