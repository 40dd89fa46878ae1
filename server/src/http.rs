//! Leaf's HTTP API on axum: the same paths, status codes and bodies as Java Leaf's
//! `LeafController` and `LeafMonitorController` (leaf-spec §5), plus a batch form,
//! `/health` and `/metrics`.
//!
//! Segment handlers await the core's `_async` calls, which take the ids at call time
//! when they are at hand and otherwise wait (a tag's first use, both segments spent)
//! without holding a thread. Snowflake handlers take ids with the never-waiting call,
//! as Java Leaf does: a generator that cannot issue (its registry out of reach past its
//! bound, a lease being re-acquired) answers Leaf's -4 at once while the core works in
//! the background. No runtime worker ever blocks on the database or ZooKeeper.
//!
//! The parts: `http/routes.rs` maps the paths; `http/ids.rs` answers the id requests,
//! `http/monitor.rs` Leaf's monitor pages (`/cache`, `/db`, `/decodeSnowflakeId`) and
//! `http/ops.rs` `/health` and `/metrics`; `http/request.rs` reads what a request asks
//! for (content negotiation, a browser) and `http/response.rs` writes Spring's answers
//! and Leaf's failures.

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::snowflake::SnowflakeSlot;
use crate::store::SegmentSlot;

mod ids;
mod monitor;
mod ops;
mod request;
mod response;
mod routes;

pub use routes::router;

/// What the handlers share: the generators of the enabled modes and the metrics.
#[derive(Clone)]
pub struct AppState {
    /// The segment generator, when segment mode is on (off: ids are `0`, as Leaf's
    /// ZeroIDGen); empty until the store has answered.
    pub segment: Option<SegmentSlot>,
    /// The snowflake generator, when snowflake mode is on; empty until it holds a
    /// worker id.
    pub snowflake: Option<SnowflakeSlot>,
    /// The metrics `/metrics` serves.
    pub metrics: Arc<Metrics>,
}
