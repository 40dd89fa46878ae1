//! The fencing rule every registry follows, written once.
//!
//! A registry's records are touched by more than cooperating leafid processes: Java Leaf
//! (`zookeeper` forever nodes), the NotFound9 fork's servers (its `mysql` and `zk_recycle`
//! modes), operators (`zkCli`, `mysql`, `rm -rf`), backups restored over live rows, and
//! configuration typos. Every registry therefore holds to these four rules; each
//! registry's module doc says how it meets them.
//!
//! 1. **Issue only under a bound the registry holds.** A holder issues at timestamps up to
//!    a bound that its registry has persisted for it, and every write of that bound is
//!    conditional on what this holder last wrote (a ZooKeeper version, the row's last
//!    value, a lease token). A conditional write that fails means another writer used the
//!    record: the lease is over.
//! 2. **A record of its own missing or changed under it is [`Error::LeaseLost`] at once**
//!    (see [`lost`]), never "registry unavailable": a deleted node, row, lock file or
//!    directory means another process may take the identity now, with no floor.
//! 3. **A newcomer that takes over an identity another writer may still be using watches
//!    it first.** When the record was last written by something that is not a leafid
//!    holder which let go (a foreign format, or a record with no floor), the newcomer
//!    watches it for [`TAKEOVER_WATCH`] (one full upload cycle of Java Leaf and the fork,
//!    plus a margin) before its first id, and refuses with `WorkerIdInUse` when it changes.
//!    When the last writer was a leafid that released it, only a foreign server started
//!    since can be there, and it uploads [`FOREIGN_FIRST_UPLOAD`] after its start:
//!    [`TAKEOVER_WATCH_AFTER_RELEASE`].
//! 4. **Foreign fields hold only what their owner would write.** leafid's look-ahead bound
//!    (the clock plus a few seconds) lives in leafid's own nodes and rows. In Leaf's
//!    `timestamp` and the fork's `max_timestamp` leafid writes [`foreign_timestamp`]: never
//!    ahead of the clock. A Java server reading a future value there does not stop; it
//!    falls back to its local `workerID.properties` and never writes again, which would
//!    make it invisible.
//!
//! Where a foreign writer cannot be detected at all, the registry refuses the
//! configuration and says why instead of hoping.
//!
//! The residual window: a Java Leaf or fork server issues from its start, but writes
//! its record only [`FOREIGN_FIRST_UPLOAD`] later. A leafid holder that is already live
//! when such a server starts on its identity sees the server's first write (a ZooKeeper
//! watch, or the next conditional write) and stops; until then both issue. No protocol on
//! leafid's side can close that window, because the Java server reads and issues without
//! writing; `docs` state it in milliseconds as measured.

use std::time::Duration;

use crate::error::Error;

/// Java Leaf and the fork upload their record this long after a server starts issuing.
pub const FOREIGN_FIRST_UPLOAD: Duration = Duration::from_millis(1000);

/// ... and every this long afterwards.
pub const FOREIGN_UPLOAD_INTERVAL: Duration = Duration::from_millis(3000);

/// Slack on top of a foreign writer's cycle: a JVM's scheduler, a GC pause, the round
/// trips of the write and of our read.
pub const TAKEOVER_MARGIN: Duration = Duration::from_millis(500);

/// How long a newcomer watches a record another writer may still be using before its
/// first id: one full upload cycle of Java Leaf and the fork, plus [`TAKEOVER_MARGIN`].
pub const TAKEOVER_WATCH: Duration = Duration::from_millis(
    FOREIGN_UPLOAD_INTERVAL.as_millis() as u64 + TAKEOVER_MARGIN.as_millis() as u64,
);

/// How long a newcomer watches a record a leafid holder released: a foreign server can
/// only have started since, and its first upload comes [`FOREIGN_FIRST_UPLOAD`] after.
pub const TAKEOVER_WATCH_AFTER_RELEASE: Duration = Duration::from_millis(
    FOREIGN_FIRST_UPLOAD.as_millis() as u64 + TAKEOVER_MARGIN.as_millis() as u64,
);

/// What leafid writes into a field a foreign server reads as "the last time I issued"
/// (Leaf's forever-node `timestamp`, the fork's `max_timestamp`): the bound, but never
/// ahead of the local clock (rule 4).
pub fn foreign_timestamp(bound_ms: i64) -> i64 {
    bound_ms.min(super::system_now_ms())
}

/// Rule 2: a record of this holder's own that is missing or was changed by another writer.
pub fn lost(worker_id: u32, cause: impl Into<String>) -> Error {
    Error::LeaseLost {
        worker_id,
        cause: cause.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_field_never_gets_a_future_time() {
        let now = super::super::system_now_ms();
        assert!(foreign_timestamp(now + 5_000) <= super::super::system_now_ms());
        assert_eq!(foreign_timestamp(now - 10), now - 10);
    }

    #[test]
    fn the_takeover_watch_covers_a_full_foreign_cycle() {
        assert!(TAKEOVER_WATCH > FOREIGN_UPLOAD_INTERVAL);
        assert!(TAKEOVER_WATCH_AFTER_RELEASE > FOREIGN_FIRST_UPLOAD);
    }
}
