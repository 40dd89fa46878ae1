//! The snowflake generator of `leafid serve`: built at start, or, when its worker-id
//! registry cannot give it a worker id then (ZooKeeper or the database down, refusing,
//! silent; the identity still held, as by a predecessor killed a moment ago whose
//! session or lease has not expired yet), built in the background while the server
//! already answers Leaf's -4 for snowflake ids at once (the policy: `pending.rs`). A
//! configuration no retry can fix (a bad URL, access denied, a clock out of step with
//! the registry) ends the start with its message.

use std::time::Duration;

use leafid::{Error, LeaseStatus, SnowflakeGenerator};
use tokio::task::JoinHandle;

use crate::pending::{self, Maker, Pending};

/// Snowflake mode's generator, filled once it holds a worker id.
pub type SnowflakeSlot = Pending<SnowflakeGenerator>;

/// Builds the generator on the registry at `url`: a filled slot, or an empty one and
/// the task that keeps trying; an error retrying cannot fix is returned.
pub async fn build(url: &str) -> Result<(SnowflakeSlot, Option<JoinHandle<()>>), Error> {
    // Parsed once, before any I/O: a bad URL ends the start.
    let builder = SnowflakeGenerator::builder().registry_url(url)?;
    pending::start(Maker {
        what: format!("snowflake registry {}", leafid::redact::url(url)),
        make: move || {
            let builder = builder.clone();
            async move {
                let gen = builder.build().await?;
                until_issuing(&gen).await;
                Ok(gen)
            }
        },
        why,
    })
    .await
}

/// How long a generator just built may take to open its gate before it is served anyway
/// (its requests then get Leaf's -4 until it does, and `/health` says why).
const OPENING_WAIT: Duration = Duration::from_secs(1);

/// How far the bound must lead the clock for a generator to count as open: many
/// heartbeat round trips on a loopback or LAN registry.
const OPENING_ROOM_MS: i64 = 20;

/// Waits until `gen` issues with some room: a generator whose floor leads the clock (a
/// fresh or unrecorded id on the ZooKeeper and database layouts, at 79adb00) comes out
/// of `build` with its bound capped at the floor, and its heartbeat raises the bound a
/// little at a time while the registry's clock gains on it; a request in the first
/// milliseconds found the gate shut (measured: one -4 answer, ids 10 to 20 ms after the
/// start). Requests never wait on the registry (`http/ids.rs`), so the server waits
/// here, once, until the bound leads by [`OPENING_ROOM_MS`].
pub(crate) async fn until_issuing(gen: &SnowflakeGenerator) {
    let start = tokio::time::Instant::now();
    let open = |s: leafid::SnowflakeStats| {
        s.lease == LeaseStatus::Held && s.bound_lead_ms.unwrap_or(0) >= OPENING_ROOM_MS
    };
    while !open(gen.stats()) && start.elapsed() < OPENING_WAIT {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Why there is no generator yet, for `/health` and the log.
fn why(e: &Error) -> String {
    match e {
        // The core's "retry once it is back" is this server's own work now.
        Error::RegistryUnavailable { cause, .. } => {
            format!("worker registry unavailable: {cause}")
        }
        Error::WorkerIdInUse { .. } => format!(
            "{e} (retried: a holder that stopped frees it when its session or lease expires)"
        ),
        other => other.to_string(),
    }
}
