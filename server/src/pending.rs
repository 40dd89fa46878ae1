//! A generator `leafid serve` makes at start, or, when what it stands on (the segment
//! store, the snowflake registry) cannot serve it then, keeps trying to make in the
//! background while the server already answers. One policy for both modes: which
//! errors are retried, and how often.
//!
//! Java Leaf does not listen at all until MySQL answers, and it exits when ZooKeeper is
//! down and it has no `workerID.properties` (leaf-spec §2.5). leafid listens at once so
//! an orchestrator that starts the database, ZooKeeper and the id server together gets
//! a server that says why it is not ready: Leaf's error for that mode's ids meanwhile,
//! at once, and a 503 `/health` naming the cause.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leafid::{Error, ErrorKind};
use tokio::task::JoinHandle;

/// The first retry's delay; doubled after each failure up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
/// The longest wait between two attempts: a store or registry that comes back is used
/// within it.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Whether an error at start is retried in the background rather than ending the
/// start: the core's `Unavailable` group, the failures that end without the operator
/// (a store or registry down, refusing, silent; a worker id held by another holder, as
/// a predecessor killed a moment ago whose session or lease has not expired yet; a
/// pool full; a worker's floor ahead of the clock by no more than any holder's reach).
/// Anything else (a bad URL or option, access denied, a missing table, a clock out of
/// step with the registry, a malformed record) needs the operator: start ends with its
/// message. So does a local file that cannot be read or written (`Io`,
/// which the core counts as unavailable): a path or its permissions are the operator's
/// to fix.
pub fn retried(e: &Error) -> bool {
    match e {
        // A floor ahead of the clock within the longest reach any holder may leave (a
        // predecessor with a longer lookahead, or crashed): the clock passes it, so the
        // server waits in the background (its segment API up) instead of exiting. Further
        // ahead, the clock was set back: the operator's to fix.
        Error::ClockBehindRegistry { behind_ms, .. } => *behind_ms <= LONGEST_REACH_MS,
        _ => e.kind() == ErrorKind::Unavailable && !matches!(e, Error::Io { .. }),
    }
}

/// The furthest ahead of the clock a bound of any holder may be: the longest lookahead,
/// the default skew allowance, and 1 s (fence rule 5's reach).
const LONGEST_REACH_MS: i64 = (leafid::snowflake::MAX_LOOKAHEAD.as_millis()
    + leafid::snowflake::DEFAULT_MAX_SKEW.as_millis()
    + 1_000) as i64;

/// A mode's generator, filled once made.
#[derive(Debug)]
pub struct Pending<G> {
    generator: Arc<OnceLock<G>>,
    /// Why the generator is not there yet (the latest attempt's error), for `/health`.
    waiting_on: Arc<Mutex<Option<String>>>,
}

// By hand: derived, they would ask `G: Clone` / `G: Default`.
impl<G> Clone for Pending<G> {
    fn clone(&self) -> Self {
        Pending {
            generator: self.generator.clone(),
            waiting_on: self.waiting_on.clone(),
        }
    }
}

impl<G> Default for Pending<G> {
    fn default() -> Self {
        Pending {
            generator: Arc::new(OnceLock::new()),
            waiting_on: Arc::new(Mutex::new(None)),
        }
    }
}

impl<G> Pending<G> {
    /// The generator, once made.
    pub fn get(&self) -> Option<&G> {
        self.generator.get()
    }

    /// The latest attempt's error while not made; `None` once made.
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
    pub fn ready(gen: G) -> Self {
        let slot = Pending::default();
        let _ = slot.generator.set(gen);
        slot
    }

    fn fail(&self, why: String) {
        *self.waiting_on.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
}

/// What a mode's start needs: what to call it in the log, how to make its generator,
/// and how to say why it is not made yet.
pub struct Maker<F> {
    /// "segment store mysql://…" or "snowflake registry zookeeper://…" (redacted).
    pub what: String,
    /// One attempt at the generator.
    pub make: F,
    /// The `/health` text of an attempt's error.
    pub why: fn(&Error) -> String,
}

/// How long the start waits for a mode's first attempt before it listens without the
/// generator: longer than a usual start (round trips and at most the 1.5 s watch of
/// Leaf's layouts), shorter than what may hang a first attempt (a registry or store
/// that accepts connections and never answers, until its connect timeout; a `fixed:`,
/// `local:` or `statefulset:` restart after a crash, which waits up to its lookahead
/// for its floor). Meanwhile the mode answers Leaf's error at once, as for an outage.
pub const FIRST_ATTEMPT_WAIT: Duration = Duration::from_secs(3);

/// Makes the generator. Returns with a filled slot when the first attempt succeeds
/// within [`FIRST_ATTEMPT_WAIT`]; with an empty slot and the task that goes on when
/// that attempt fails with an error [`retried`] or is still running then (the task
/// finishes it, then tries again every 0.5 to 5 s, with jitter, until it succeeds);
/// with the error when the first attempt ends in time with any other. Attempts that
/// end after the start has gone on retry every error: a store or registry that comes
/// back misconfigured is logged at each one, and the operator's fix is picked up
/// without a restart.
pub async fn start<G, F, Fut>(
    maker: Maker<F>,
) -> Result<(Pending<G>, Option<JoinHandle<()>>), Error>
where
    G: Send + Sync + 'static,
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<G, Error>> + Send + 'static,
{
    let slot = Pending::default();
    slot.fail(format!(
        "{}: the first attempt has not answered yet",
        maker.what
    ));
    // One task makes every attempt, the first included, so aborting it at shutdown
    // stops them all. An attempt in flight is not cancelled: the core builds on its own
    // runtime, so a generator it makes after the abort holds its worker id until the
    // process exits, right after (its lease then ends as after a crash).
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let what = maker.what.clone();
    let task = tokio::spawn(attempts(maker, slot.clone(), first_tx));
    match tokio::time::timeout(FIRST_ATTEMPT_WAIT, first_rx).await {
        Ok(Ok(Ok(()))) => {
            let _ = task.await;
            Ok((slot, None))
        }
        Ok(Ok(Err(e))) if retried(&e) => {
            tracing::warn!(
                "{what} at start: {}; retrying in the background (0.5 to 5 s apart); \
                 meanwhile its id requests get Leaf's error at once and /health is 503",
                slot.waiting_on().unwrap_or_default()
            );
            Ok((slot, Some(task)))
        }
        Ok(Ok(Err(e))) => {
            let _ = task.await;
            Err(e)
        }
        // The task dropped its sender without sending: it panicked.
        Ok(Err(_)) => match task.await {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => unreachable!("the attempts task ends only after reporting the first"),
        },
        Err(_) => {
            tracing::warn!(
                "{what}: no answer to the first attempt within {} s; listening without it, \
                 its id requests get Leaf's error at once and /health is 503 until it is made",
                FIRST_ATTEMPT_WAIT.as_secs()
            );
            Ok((slot, Some(task)))
        }
    }
}

/// Makes the first attempt and reports it to the start (or, once the start has gone
/// on, logs it); then, unless it succeeded or the start ends on its error, retries.
async fn attempts<G, F, Fut>(
    maker: Maker<F>,
    slot: Pending<G>,
    first: tokio::sync::oneshot::Sender<Result<(), Error>>,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<G, Error>>,
{
    let outcome = match (maker.make)().await {
        Ok(gen) => {
            let _ = slot.generator.set(gen);
            Ok(())
        }
        Err(e) => {
            slot.fail((maker.why)(&e));
            Err(e)
        }
    };
    let ends_the_start = matches!(&outcome, Err(e) if !retried(e));
    match first.send(outcome) {
        Ok(()) if ends_the_start => return,
        Ok(()) => {}
        // The start went on without waiting for this answer.
        Err(Ok(())) => {
            tracing::info!("{} ready: its mode issues ids", maker.what);
            return;
        }
        Err(Err(e)) => tracing::warn!(
            "{} at start: {}; retrying in the background (0.5 to 5 s apart)",
            maker.what,
            (maker.why)(&e)
        ),
    }
    if slot.get().is_none() {
        retry(maker, slot).await;
    }
}

async fn retry<G, F, Fut>(maker: Maker<F>, slot: Pending<G>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<G, Error>>,
{
    let mut delay = FIRST_RETRY_DELAY;
    loop {
        // The jitter spreads a fleet started together, so a store or registry coming
        // back is not met by every server in the same instant.
        tokio::time::sleep(delay.mul_f64(0.8 + 0.4 * fastrand::f64())).await;
        match (maker.make)().await {
            Ok(gen) => {
                let _ = slot.generator.set(gen);
                tracing::info!("{} ready: its mode issues ids", maker.what);
                return;
            }
            Err(e) => {
                let why = (maker.why)(&e);
                tracing::warn!("{} still not ready: {why}; retrying", maker.what);
                slot.fail(why);
            }
        }
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outages_and_held_worker_ids_are_retried_configuration_is_not() {
        let down = Error::RegistryUnavailable {
            cause: "no server reachable".into(),
            source: None,
        };
        let held = Error::WorkerIdInUse {
            identity: "zookeeper/…/10.0.0.1:8080".into(),
            worker_id: Some(3),
            holder: "pid 1".into(),
            advice: "stop it".into(),
        };
        assert!(retried(&down) && retried(&held));
        assert!(!retried(&Error::InvalidConfig("lookahead".into())));
        let skew = Error::ClockSkew {
            skew_ms: 9000,
            direction: "ahead of",
            max_skew_ms: 5000,
            source_desc: "ZooKeeper".into(),
        };
        assert!(!retried(&skew), "fixing NTP is the operator's part");
        // Review of this session: a floor a predecessor with a longer lookahead left
        // ahead of the clock passes in time; `leafid serve` exited on it (its segment API
        // too) and a service manager restarted it until it did.
        let behind = |behind_ms| Error::ClockBehindRegistry {
            worker_id: 7,
            last_ms: 0,
            behind_ms,
        };
        assert!(retried(&behind(240_000)), "a longer lookahead's floor");
        assert!(!retried(&behind(3_600_000)), "a clock set back an hour");
    }
}
