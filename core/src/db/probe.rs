//! One direct connection attempt that says why a pool could not connect.
//!
//! A sqlx pool retries a refused connection until its acquire timeout and then reports
//! only "pool timed out", losing why. One attempt of our own, bounded by
//! [`DIAGNOSE_TIMEOUT`], recovers the reason: refused, silent, or a login the server
//! turned down. Apart from [`diagnosis`](super::diagnosis) because a registry uses the
//! probe alone, after its own pool timed out, while a store runs it early through the
//! shared verdict.

use std::time::Duration;

use sqlx::{ConnectOptions, Connection};

/// How long the one direct connection attempt that explains a pool time-out may take.
pub(crate) const DIAGNOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What one direct connection attempt says about a server the pool could not reach.
pub(crate) enum Probe {
    /// The server answers now: the pool was busy, or the server just came back. Holds
    /// where ("MySQL at host:port").
    Answers(String),
    /// The attempt failed, with the driver's reason (refused, access denied, …).
    Failed(sqlx::Error),
    /// No answer within [`DIAGNOSE_TIMEOUT`]; holds where.
    Silent(String),
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Answers(at) => write!(
                f,
                "no free connection to {at} in time (all pooled connections busy, \
                 or the server was just unreachable)"
            ),
            Probe::Failed(e) => write!(f, "{e}"),
            Probe::Silent(at) => write!(
                f,
                "cannot connect to {at}: no answer within {DIAGNOSE_TIMEOUT:?} \
                 (host down, or a firewall dropping packets?)"
            ),
        }
    }
}

impl Probe {
    /// The cause of a pool time-out this probe explains, when the probe itself did not
    /// fail with a driver error: the pool's `PoolTimedOut`, kind `TimedOut` (the
    /// server was silent, or every connection stayed busy).
    pub(crate) fn timed_out_cause() -> crate::error::Cause {
        crate::error::Cause::new(crate::error::CauseKind::TimedOut, sqlx::Error::PoolTimedOut)
    }
}

/// One direct connection attempt to the server `options` name, bounded by
/// [`DIAGNOSE_TIMEOUT`]; `at` names it in the probe's text ("MySQL at host:port").
pub(crate) async fn probe<O>(options: &O, at: String) -> Probe
where
    O: ConnectOptions,
    O::Connection: Sized,
{
    match tokio::time::timeout(DIAGNOSE_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            drop(conn.close().await);
            Probe::Answers(at)
        }
        Ok(Err(e)) => Probe::Failed(e),
        Err(_) => Probe::Silent(at),
    }
}

/// Whether a direct attempt's failure is the server refusing (nothing listens, the
/// login or the database refused), which no retry within a caller's wait can change.
pub(crate) fn is_refusal(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        sqlx::Error::Database(_) => true,
        _ => false,
    }
}
