//! The worker registries' integration tests, one test binary with a module per
//! registry (`local:`, `mysql://`, `zookeeper://`, `zookeeper-recycle://`), each
//! against the real services (`LEAFID_MYSQL_URL`, `LEAFID_ZK`: `source .services/env`)
//! and beside the foreign writers it must live with (Java Leaf, the NotFound9 fork).
//! One binary instead of one per file, because each test binary links the whole core
//! (CI's link time).
//!
//! Not here: the guarantees every registry shares (`tests/snowflake/`), the registry
//! adversary matrix (`tests/adversary/`, its own CI stage), ZooKeeper stopped mid-run
//! (`tests/outage/`).
//!
//! Tests that start child processes re-run this binary on an `#[ignore]`d entry point,
//! named with its module path ([`support::self_exec`]).
//!
//! Run one registry: `cargo test -p leafid --test registry zookeeper_recycle::`.

/// Shared test support (`tests/support/`), the parts this binary uses.
#[path = "../support"]
mod support {
    pub mod delay_proxy;
    pub mod faketime;
    pub mod fork_mysql;
    pub mod fork_recycle;
    pub mod ipv6;
    pub mod java_leaf;
    pub mod own_database;
    pub mod own_zookeeper;
    pub mod self_exec;
}

/// `local:`: worker ids held through file locks by the processes of one host.
mod local {
    /// Distinct ids for live processes, a SIGKILLed holder's id free at once, fork.
    mod processes;

    /// A directory reached by two paths (a swapped symlink, a bind mount).
    mod aliases;

    /// Identities that mean one thing: relative paths, emptied directories, long paths.
    mod identity;
}

/// `mysql://`: the Leaf fork's `leaf_workerid_alloc` table on the real MariaDB.
mod mysql {
    /// One id per ip:port, floors, no wrap, fencing and the lease table's migration.
    mod ids_and_fencing;

    /// Beside the fork's Java server on one row.
    mod beside_fork;
}

/// `zookeeper://`: Leaf's forever mode on the real ZooKeeper.
mod zookeeper {
    /// Java Leaf's nodes respected, leafid's byte-compatible, the clock check, the range.
    mod forever;

    /// Beside a Java Leaf server on the same identity or tree.
    mod beside_java_leaf;

    /// Both ZooKeeper layouts: outages ridden through, first ids at once, a restart
    /// after SIGKILL (issue 30).
    mod availability;
}

/// `zookeeper-recycle://`: a pool of leased worker ids on the real ZooKeeper.
mod zookeeper_recycle {
    /// Freed ids come back with their floor; a lost session cuts the issue limit.
    mod pool;

    /// Live holders (threads, SIGKILLed processes, saturated) never share an id.
    mod holders;

    /// Leases and floors read ZooKeeper's clock; credentials guard the floors.
    mod clock_and_credentials;

    /// What these modules share.
    mod harness;

    /// Beside the fork's `zk_recycle` servers on the same tree.
    mod beside_fork;

    /// Records deleted or rewritten by an operator under a live holder.
    mod operator_edits;
}

/// `statefulset:`: a StatefulSet pod's ordinal, its host claim and its floor file.
mod statefulset;

/// `mysql://…?pool=` and `postgres://…?pool=`: worker-id pools leased on the database.
mod database_pool;

/// `postgres://…?port=`: the identity lease on PostgreSQL.
mod postgres_identity;

/// A reviewer's proofs: records wiped or restored under a cut-off holder.
mod fencing_review;

/// Reviewer rev1: floor records lost while two hosts' clocks differ within the skew limit.
mod review_rev1;

/// Reviewer rev2: leases with no trusted record that reached the generator with a floor
/// (a MySQL identity restored from a dump, a statefulset bound file restored from a
/// snapshot); both reissued ids until `Lease::floor_recorded`.
mod review_rev2;

/// Issue 28: every database registry under a user with the DML grants alone, and the
/// PostgreSQL ones at REPEATABLE READ and SERIALIZABLE.
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod least_privilege;

/// Issue 30: a restart while the registry is down, from the cache file.
#[cfg(any(feature = "zookeeper", feature = "mysql"))]
mod restart_in_outage;

/// Issue 28: ZooKeeper connect strings with IPv6 literal hosts (`[::1]`).
#[cfg(feature = "zookeeper")]
mod ipv6_hosts;
