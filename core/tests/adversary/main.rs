//! The registry adversary matrix (issue 20, "Proof"): one suite, parameterised by
//! registry, run against the real MariaDB and ZooKeeper (`LEAFID_MYSQL_URL`,
//! `LEAFID_ZK`: `source .services/env`).
//!
//! Every row starts real leafid processes (this test binary re-run as a worker, see
//! [`worker`]), lets them issue at a high rate for a few seconds, applies one adversary,
//! then asserts that no id was issued twice across everything issued (every process and
//! every foreign writer's simulator) and that each process's ids only increase. Each
//! row prints one line `ADVERSARY <registry> <row> … ids=N duplicates=D` (to stderr,
//! past the test harness's capture), duplicates decoded to their worker id.
//!
//! Map:
//! - [`harness`]: worker processes and their ids; [`tally`]: the count and the report;
//! - [`rows`]: the rows every registry runs (N processes of one config; other working
//!   directories and users; a holder frozen past its lease; the registry cut off; the
//!   clock skewed; records tampered with under a live holder);
//! - [`foreign`]: a foreign writer's simulator (Java Leaf, the fork) started just
//!   before, just after and racing a leafid of the same identity;
//! - one module per registry ([`fixed`], [`local`], [`zookeeper`], [`zookeeper_recycle`],
//!   [`mysql`], [`pool`], [`postgres`], [`statefulset`]): how to make a fresh config for it, its own adversaries (foreign writers,
//!   its records deleted or rewritten), and one `#[test]` per row.
//!
//! A new registry is added with one module here (a [`harness::Registry`] and the
//! [`matrix_rows!`] line) and one `mod` line below.
//!
//! Run one registry: `cargo test -p leafid --test adversary zookeeper_recycle::`.

#[path = "../support/delay_proxy.rs"]
#[allow(dead_code)]
mod delay_proxy;
#[path = "../support/fork_mysql.rs"]
mod fork_mysql;
// The simulators are their authors' (branches wt-recycle, wt-zk); lints they trip are
// theirs to settle.
#[path = "../support/fork_recycle.rs"]
#[allow(clippy::manual_is_multiple_of)]
mod fork_recycle;
#[path = "../support/java_leaf.rs"]
#[allow(clippy::collapsible_if)]
mod java_leaf;

mod foreign;
mod harness;
mod rows;
mod tally;
mod worker;

mod fixed;
mod local;
mod mysql;
mod pool;
mod postgres;
mod statefulset;
mod zookeeper;
mod zookeeper_recycle;

/// The worker entry: this test binary re-run with `--ignored --exact adversary_worker`.
#[test]
#[ignore = "run as a worker process by the matrix rows"]
fn adversary_worker() {
    worker::main();
}
