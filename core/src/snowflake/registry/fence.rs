//! The fencing rule every registry follows, written once.
//!
//! A registry's records are touched by more than cooperating leafid processes: Java Leaf
//! (`zookeeper` forever nodes), the NotFound9 fork's servers (its `mysql` and `zk_recycle`
//! modes), operators (`zkCli`, `mysql`, `rm -rf`), backups restored over live rows, and
//! configuration typos. Every registry therefore holds to these five rules; each
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
//! 5. **Every bound within reach of the registry's clock; a newcomer with no record
//!    starts beyond it.** Rules 1 to 3 rest on records an operator may wipe
//!    (`deleteall /snowflake/{name}`, a database restored from an older dump), and a
//!    holder cut off from its registry cannot see the wipe. So the generator never
//!    persists a bound beyond the registry's clock (its last reading, carried forward by
//!    the monotonic clock, which never runs ahead of the registry's own) plus the
//!    **reach**: its lookahead + its `max_skew` + 1 s (`Core::capped`). A holder in step
//!    with the registry never meets that cap: its clock is within the skew, checked
//!    before every write. Where the clock and that carried-forward reading differ by
//!    more (a clock stepped, or a paused VM whose pause the monotonic clock missed),
//!    the holder renews the bound it already persisted, raising nothing, and goes on
//!    only if the registry's clock read with it agrees (`confirm_clock`; not on layouts a
//!    Java Leaf or fork server shares, where that renew would rewrite their stamp from
//!    the suspect clock: there the holder stops until the clock agrees again). A newcomer whose floor is not recorded (see [`floor_recorded`])
//!    floors the lease at the registry's clock, read after it found the record missing,
//!    plus the reach (`generator/session.rs`). Every bound written before that reading is
//!    below the floor, and every write after it fails by rule 1 (the record the holder
//!    last wrote is gone or is the newcomer's), so every id the newcomer issues is above
//!    every id an earlier holder issued or may still issue up to its persisted bound.
//!    Hence **a holder out of touch keeps issuing** up to the bound its registry holds
//!    (the lookahead: 65 s by default, less one heartbeat) and stops there, and **no
//!    newcomer waits**: neither for cut-off holders to stop nor for the clock to pass
//!    its floor. The generator's clock starts at the floor and runs at half speed until
//!    the real clock catches up (`generator/lead.rs`); the ids' time part leads the wall
//!    clock by at most the reach, for at most twice that. Holders of one identity must
//!    share `lookahead` and `max_skew` (they share a configuration), and the argument
//!    takes the registry's clock as one clock that does not step back: ZooKeeper's
//!    servers and a database's primary and replicas under NTP. A wipe while a holder
//!    that leads is cut off, followed by a failover to a server whose clock is behind
//!    by more than the time since that holder's last write plus half its age, is not
//!    covered. A registry without a clock (`local`, `fixed`) caps bounds at this host's
//!    clock plus the reach: its records are this host's files, which no other host
//!    takes over. `statefulset` reads each node's own clock, so no cap holds across
//!    nodes: there a floor with no record is the node's clock plus `max_skew` plus 1 s.
//!    On these three the start waits for a floor ahead of the clock instead of leading
//!    (`WorkerRegistry::clock_is_local`): their records are files an operator empties
//!    with a directory (a `local:` lock directory recreated by a deploy), and an id of
//!    theirs with no record floors at the clock, so ids that led it would be issued
//!    again (303 479 of 305 408 in the review's run). The wait is at most their
//!    lookahead (twice the heartbeat), and `local` takes a free id whose floor has passed
//!    first.
//!
//!    This replaces an earlier rule 5 (a holder out of touch for 2/5 of its session
//!    stopped, and a newcomer without a record watched 3.5 s, then waited out the
//!    skew): that made every registry outage past 2 s an id outage and cost every new
//!    id 9.6 s. It also closes what that rule admitted: a holder frozen (SIGSTOP, a
//!    paused VM) across a wipe of every record of its bound wakes up able to issue only
//!    up to that bound, which lies below any floor a newcomer that found nothing
//!    started from.
//!
//! The handover: rule 1 lets a holder issue under a bound the registry holds, whoever
//! wrote it. A close out of touch with the registry, on an identity one process of a
//! host holds at a time (`WorkerRegistry::identity_is_configured`) on a layout no
//! foreign server shares (a Java Leaf or fork server started during the outage would
//! be seen only by rule 3's watch, through the registry), skips the final
//! write that would lower the bound to its last id, and names the bound the registry
//! confirmed in the cache file, with the identity lock's domain. The next process of the
//! identity in that domain (this boot and network namespace, holding the lock), once
//! the last id is behind the clock, issues from the clock up to that bound while the
//! registry is down, each bound in the cache file first (which clears the handover, so
//! its own crash leaves none, and an older copy restored later starts at a later clock
//! than what was issued from it), and takes the identity in the registry once it
//! answers. A lease lost before the close hands nothing over.
//! Every other holder of the id starts above the bound the registry holds (rules 1 and
//! 5), which is at least the confirmed one (`generator/close.rs`, `generator/session.rs`).
//!
//! A newcomer watches a record before its first id only where a foreign server (Java
//! Leaf, the fork) can be live on the identity and still unseen (rule 3): never on
//! leafid's own layouts (`zookeeper-recycle`, the pools, `postgres://?port=`), and at
//! most [`TAKEOVER_WATCH_AFTER_RELEASE`] where it can have started since the last write.
//! A newcomer on a host-bound identity (`zookeeper://`, `?port=`) that holds the host's
//! identity lock knows the identity's previous leafid holder on this host is gone, and
//! takes its lease at once instead of waiting for its session or lease to expire.
//!
//! What no rule closes: a record the registry trusts (a ZooKeeper node, a lease row with
//! a leafid bound) restored from a backup taken while its holder ran, holding an older
//! bound than that holder went on to write. A newcomer floors at the older bound; the
//! holder, if it still runs (or is cut off, up to its persisted bound), issues above it.
//! Nothing in a restored record tells it from a current one; `docs/registries.md`
//! ("A missing record and clocks apart") says what to do: stop the fleet of that name
//! first, or restore without the registry's records (then rule 5 holds).
//!
//! Where a foreign writer cannot be detected at all, the registry refuses the
//! configuration and says why instead of hoping.
//!
//! The handover to a foreign server: Java Leaf and the fork start from their own clock
//! and the stamp leafid wrote (never ahead of the clock, rule 4), so ids that lead the
//! clock would be issued again by a server started on the identity next. `close` on
//! those layouts waits until the clock passes the last id
//! ([`WorkerRegistry::shared_with_foreign_servers`](super::WorkerRegistry::shared_with_foreign_servers));
//! after a crash while leading, the docs tell operators to wait as long.
//!
//! The residual window: a Java Leaf or fork server issues from its start, but writes
//! its record only [`FOREIGN_FIRST_UPLOAD`] later. A leafid holder that is already live
//! when such a server starts on its identity sees the server's first write (a ZooKeeper
//! watch, or the next conditional write) and stops; until then both issue. No protocol on
//! leafid's side can close that window, because the Java server reads and issues without
//! writing; `docs` state it in milliseconds as measured. While leafid's ids lead the
//! clock (the first minutes after a start above a floor) the window also covers every
//! id leafid issued ahead of the foreign server's clock.

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

/// Whether a lease's floor is a record of where its last holder stopped
/// ([`Lease::floor_recorded`](super::Lease::floor_recorded)), decided here for every
/// registry. `own_bound` is the bound a leafid holder persisted in leafid's own record
/// (`ids/{id}`, the lease row, `last/{id}`, the pool row; `None` when there is no such
/// record or it holds none). `foreign_stamp` is the field a foreign server writes beside
/// it (Java Leaf's forever-node `timestamp`, the fork's `max_timestamp`; `None` where the
/// layout has none, or where leafid wrote it itself just now).
///
/// A foreign field is never a recorded floor: its writer uploads it every 3 s and issues
/// past it in between, by its own host's clock. leafid's own bound is one only when it is
/// at least the foreign stamp: leafid writes [`foreign_timestamp`] of its bound there,
/// never more, so a larger stamp means a foreign server used the identity after that
/// bound was written (a rollback, a reused pod IP), and the floor is the foreign stamp,
/// which trails what that server issued. A floor that is not recorded makes the
/// generator also wait out the allowed skew from the registry's clock (rule 5).
pub fn floor_recorded(own_bound: Option<i64>, foreign_stamp: Option<i64>) -> bool {
    match (own_bound, foreign_stamp) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(own), Some(stamp)) => own >= stamp,
    }
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
    fn a_foreign_stamp_is_never_a_recorded_floor_and_an_older_own_bound_under_it_neither() {
        assert!(!floor_recorded(None, None));
        assert!(!floor_recorded(None, Some(1_000)));
        assert!(floor_recorded(Some(1_000), None));
        // leafid was the last writer: the stamp is foreign_timestamp(bound) <= bound.
        assert!(floor_recorded(Some(1_000), Some(1_000)));
        assert!(floor_recorded(Some(1_000), Some(900)));
        // A foreign server wrote after leafid's bound.
        assert!(!floor_recorded(Some(1_000), Some(1_001)));
    }

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
