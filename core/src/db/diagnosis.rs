//! A pool acquire whose failure says why: the probe run early, its verdict shared.
//!
//! The pool alone retries a refused connection until its acquire timeout and then says
//! only "timed out". So when an acquire takes longer than [`EARLY_PROBE_AFTER`], one
//! direct attempt ([`probe`]) runs beside it, and a refusal it meets (connection
//! refused, access denied, unknown database) is returned at once, within a caller's
//! wait, instead of after the pool's timeout. Silent or answering: the pool's outcome
//! stands. One probe at a time, its verdict kept for [`DIAGNOSE_TIMEOUT`], so a burst of
//! failing callers opens one extra connection to the server, not one each.
//!
//! Separate from [`probe`](super::probe): this is the policy (when to probe, how long a
//! verdict holds, which failures end a wait), that is the attempt itself.

use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Database, Pool};

use super::probe::{is_refusal, probe, Probe, DIAGNOSE_TIMEOUT};
use crate::error::{Error, Result};

/// How long a pool acquire may take before a direct attempt runs beside it to learn
/// why. Well under a caller's default wait (1 s): a refused connection or login is
/// known in a few ms, and the pool alone would retry a refusal until its acquire
/// timeout and then say only "timed out". A healthy pool answers far sooner; a busy
/// one makes at most one extra attempt per [`DIAGNOSE_TIMEOUT`] (shared verdict).
pub(crate) const EARLY_PROBE_AFTER: Duration = Duration::from_millis(100);

/// A shared probe's verdict, kept for [`DIAGNOSE_TIMEOUT`].
enum Verdict {
    /// The server refused (connection, login, database): the error to report.
    Refused(Error),
    /// The server answers, or is silent: the pool's own outcome decides; this is the
    /// error to give if the pool then times out.
    Undecided(Error),
}

/// The last diagnosis of a pool time-out and when it was made (see the module docs).
pub(crate) struct Diagnosis {
    last: tokio::sync::Mutex<Option<(Instant, Verdict)>>,
}

/// How a diagnosis reaches the server and words its errors: the options a direct
/// attempt uses, where they point ("MySQL at host:port"), and the store's own mapping
/// of a failed connection attempt to what the user sees.
pub(crate) struct Target<'a, O, F> {
    /// The options the pool connects with.
    pub options: &'a O,
    /// The server as a message names it ("MySQL at host:port").
    pub at: &'a str,
    /// A failed connection attempt as the user sees it.
    pub connect_error: F,
}

impl Diagnosis {
    /// No diagnosis yet.
    pub(crate) fn new() -> Diagnosis {
        Diagnosis {
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// A connection from `pool`, a refusal reported within [`EARLY_PROBE_AFTER`] plus
    /// one probe (see the module docs). Errors the probe words itself (silent, busy)
    /// are store errors: the stores are this policy's users.
    pub(crate) async fn acquire<DB, O, F>(
        &self,
        pool: &Pool<DB>,
        target: Target<'_, O, F>,
    ) -> Result<PoolConnection<DB>>
    where
        DB: Database,
        O: ConnectOptions,
        O::Connection: Sized,
        F: Fn(sqlx::Error) -> Error,
    {
        let acquire = pool.acquire();
        tokio::pin!(acquire);
        tokio::select! {
            r = &mut acquire => return self.acquired(r, &target).await,
            _ = tokio::time::sleep(EARLY_PROBE_AFTER) => {}
        }
        tokio::select! {
            r = &mut acquire => self.acquired(r, &target).await,
            verdict = self.diagnose(&target) => match verdict {
                Verdict::Refused(e) => Err(e),
                Verdict::Undecided(_) => self.acquired(acquire.await, &target).await,
            },
        }
    }

    /// The pool's answer as the user sees it (a time-out explained by a probe).
    async fn acquired<DB, O, F>(
        &self,
        r: std::result::Result<PoolConnection<DB>, sqlx::Error>,
        target: &Target<'_, O, F>,
    ) -> Result<PoolConnection<DB>>
    where
        DB: Database,
        O: ConnectOptions,
        O::Connection: Sized,
        F: Fn(sqlx::Error) -> Error,
    {
        match r {
            Ok(conn) => Ok(conn),
            Err(sqlx::Error::PoolTimedOut) => Err(match self.diagnose(target).await {
                Verdict::Refused(e) | Verdict::Undecided(e) => e,
            }),
            Err(e) => Err((target.connect_error)(e)),
        }
    }

    /// Why no connection could be had, from one direct connection attempt; one at a
    /// time, its verdict shared for [`DIAGNOSE_TIMEOUT`].
    async fn diagnose<O, F>(&self, target: &Target<'_, O, F>) -> Verdict
    where
        O: ConnectOptions,
        O::Connection: Sized,
        F: Fn(sqlx::Error) -> Error,
    {
        let mut last = self.last.lock().await;
        if let Some((at, verdict)) = &*last {
            if at.elapsed() < DIAGNOSE_TIMEOUT {
                return match verdict {
                    Verdict::Refused(e) => Verdict::Refused(e.copy()),
                    Verdict::Undecided(e) => Verdict::Undecided(e.copy()),
                };
            }
        }
        let (verdict, kept) = match probe(target.options, target.at.to_string()).await {
            Probe::Failed(e) if is_refusal(&e) => {
                let e = (target.connect_error)(e);
                (Verdict::Refused(e.copy()), Verdict::Refused(e))
            }
            // A connection cut or reset (a proxy or failover switching over): not a
            // refusal; the pool, still trying, may connect now. Its outcome stands.
            Probe::Failed(e) => {
                let e = (target.connect_error)(e);
                (Verdict::Undecided(e.copy()), Verdict::Undecided(e))
            }
            other => {
                let e = Error::store_with(other.to_string(), Probe::timed_out_cause());
                (Verdict::Undecided(e.copy()), Verdict::Undecided(e))
            }
        };
        *last = Some((Instant::now(), kept));
        verdict
    }
}
