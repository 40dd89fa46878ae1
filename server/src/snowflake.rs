//! The snowflake generator of `leafid serve`: built at start, or, when its worker-id
//! registry cannot give it a worker id then (ZooKeeper or the database down, refusing,
//! silent; the identity still held, as by a predecessor killed a moment ago whose
//! session or lease has not expired yet) or not within `pending::FIRST_ATTEMPT_WAIT`,
//! built in the background while the server already answers Leaf's -4 for snowflake
//! ids at once (the policy: `pending.rs`). A configuration no retry can fix (a bad URL,
//! access denied, a clock out of step with the registry) ends the start with its
//! message when the first attempt finds it in time.

use std::time::Duration;

use leafid::{Error, SnowflakeGenerator};
use tokio::task::JoinHandle;

use crate::pending::{self, Maker, Pending};

/// Snowflake mode's generator, filled once it holds a worker id.
pub type SnowflakeSlot = Pending<SnowflakeGenerator>;

/// Builds the generator on the registry at `url` (with `lookahead`, or the core's
/// default): a filled slot, or an empty one and the task that keeps trying; an error
/// retrying cannot fix is returned.
pub async fn build(
    url: &str,
    lookahead: Option<Duration>,
) -> Result<(SnowflakeSlot, Option<JoinHandle<()>>), Error> {
    // Parsed once, before any I/O: a bad URL ends the start.
    let mut builder = SnowflakeGenerator::builder().registry_url(url)?;
    if let Some(ahead) = lookahead {
        builder = builder.lookahead(ahead);
    }
    pending::start(Maker {
        what: format!("snowflake registry {}", leafid::redact::url(url)),
        make: move || {
            let builder = builder.clone();
            async move { builder.build().await }
        },
        why,
    })
    .await
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
