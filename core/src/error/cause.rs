//! The underlying error an [`Error`](super::Error) keeps, and its classification.
//!
//! A driver error (sqlx, `std::io`, ZooKeeper) is classified once, where leafid turns it
//! into its own error: the [`CauseKind`] a caller branches on (refused, timed out, login
//! refused, not found) and the original error, kept as the leafid error's
//! [`source()`](std::error::Error::source) so a program can downcast it
//! (`e.source().and_then(|s| s.downcast_ref::<std::io::Error>())`).
//!
//! This module knows no backend: `std::io` and sqlx (drivers both modes share) are
//! classified here, and a backend of leafid's own (the ZooKeeper client) classifies its
//! errors itself into [`CauseKind`] and builds the [`Cause`] with [`Cause::new`].
//!
//! The text stays in the leafid error's own message as well (bindings and logs show
//! the message alone), so a reporter that prints the whole chain shows the cause twice.

use std::error::Error as StdError;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// What kind of failure lies under an error, as far as the driver said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CauseKind {
    /// The connection was refused: nothing listens at that address (server down or
    /// restarting, wrong port).
    Refused,
    /// No answer in time: a host down, a network or firewall dropping packets, a server
    /// too busy to answer.
    TimedOut,
    /// The server answered and refused the credentials or the user's grants (a wrong
    /// password, `Access denied`, ZooKeeper's auth failure).
    LoginRefused,
    /// Something named in the URL does not exist: an unknown database, a host name that
    /// does not resolve, a missing ZooKeeper chroot.
    NotFound,
    /// Anything else (connection reset, TLS, protocol, a failed statement, …).
    Other,
}

impl CauseKind {
    /// `"refused"`, `"timed_out"`, `"login_refused"`, `"not_found"` or `"other"`: the
    /// stable spelling bindings expose.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Refused => "refused",
            CauseKind::TimedOut => "timed_out",
            CauseKind::LoginRefused => "login_refused",
            CauseKind::NotFound => "not_found",
            CauseKind::Other => "other",
        }
    }
}

impl fmt::Display for CauseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The underlying error of a leafid error, with its [`CauseKind`].
///
/// Shared (`Arc`), so one failed refill can be reported to every caller that waited on
/// it, each with the same source. Dereferences to the error itself; the leafid error's
/// [`source()`](std::error::Error::source) is that error (not this wrapper), so
/// `downcast_ref::<sqlx::Error>()` / `::<std::io::Error>()` work on it.
#[derive(Clone)]
pub struct Cause {
    kind: CauseKind,
    error: Arc<dyn StdError + Send + Sync + 'static>,
}

impl Cause {
    /// A cause of the given kind (for errors leafid's users build themselves, e.g. a
    /// server reporting a store it could not reach).
    pub fn new(kind: CauseKind, error: impl Into<Box<dyn StdError + Send + Sync>>) -> Cause {
        Cause {
            kind,
            error: Arc::from(error.into()),
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> CauseKind {
        self.kind
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }

    /// An OS error, classified by its kind.
    pub(crate) fn io(e: std::io::Error) -> Cause {
        Cause::new(io_kind(&e), e)
    }

    /// "No answer within …" where the driver gave no error of its own (a timer of
    /// leafid's ran out): an `io::Error` of kind `TimedOut` with that text.
    pub(crate) fn timed_out(what: impl Into<String>) -> Cause {
        Cause::io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            what.into(),
        ))
    }

    /// A sqlx error (MySQL or SQLite), classified.
    #[cfg(any(feature = "mysql", feature = "sqlite"))]
    pub(crate) fn sqlx(e: sqlx::Error) -> Cause {
        Cause::new(sqlx_kind(&e), e)
    }
}

/// The error itself, so thiserror's `#[source]` (and any caller) reaches the driver's
/// error and not this wrapper.
impl Deref for Cause {
    type Target = dyn StdError + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.error
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cause")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.error, f)
    }
}

/// The kind of an OS error. A host name that does not resolve comes back from the
/// resolver as an uncategorized error whose text says so.
pub(crate) fn io_kind(e: &std::io::Error) -> CauseKind {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => CauseKind::Refused,
        K::TimedOut => CauseKind::TimedOut,
        K::NotFound => CauseKind::NotFound,
        _ if unresolved(&e.to_string()) => CauseKind::NotFound,
        _ => CauseKind::Other,
    }
}

/// Whether an error's text is a name resolution failure (glibc, musl, macOS wording).
/// For backends whose driver reports a failure as text only (the ZooKeeper client's
/// `NoHosts`), so they classify it as an OS error would be.
pub(crate) fn unresolved(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("failed to lookup address")
        || t.contains("name or service not known")
        || t.contains("nodename nor servname")
        || t.contains("no address associated")
        || t.contains("temporary failure in name resolution")
}

/// The kind of a sqlx error.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
pub(crate) fn sqlx_kind(e: &sqlx::Error) -> CauseKind {
    match e {
        sqlx::Error::Io(io) => io_kind(io),
        sqlx::Error::PoolTimedOut => CauseKind::TimedOut,
        // A refusal (login, grants, unknown database) as `db::refusal` decides it.
        #[cfg(feature = "mysql")]
        sqlx::Error::Database(_) => crate::db::refusal::refusal(e)
            .map(|r| r.kind())
            .unwrap_or(CauseKind::Other),
        _ => CauseKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leafid error's `source()` is the driver's error, not the `Cause` wrapper
    /// (thiserror reaches it through `Deref`).
    #[test]
    fn source_is_the_underlying_error() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = crate::Error::store_with("cannot connect", Cause::io(io));
        let src = StdError::source(&e).expect("a source");
        let io = src.downcast_ref::<std::io::Error>().expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(e.cause_kind(), Some(CauseKind::Refused));
        // Copies for other waiters keep both.
        let copy = e.copy();
        assert!(StdError::source(&copy)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some());
        assert_eq!(copy.cause_kind(), Some(CauseKind::Refused));
    }

    #[test]
    fn io_kinds() {
        use std::io::{Error, ErrorKind as K};
        assert_eq!(
            io_kind(&Error::from(K::ConnectionRefused)),
            CauseKind::Refused
        );
        assert_eq!(io_kind(&Error::from(K::TimedOut)), CauseKind::TimedOut);
        let dns = Error::other("failed to lookup address information: Name or service not known");
        assert_eq!(io_kind(&dns), CauseKind::NotFound);
        assert_eq!(io_kind(&Error::from(K::ConnectionReset)), CauseKind::Other);
    }
}
