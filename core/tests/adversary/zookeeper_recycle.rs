//! `zookeeper-recycle://`: worker ids leased with a ZooKeeper session under
//! `/snowflake/{name}/recycle`. Its adversaries: the fork's `zk_recycle` holder on the
//! same name (issue 20 #6), a lease node or the whole tree deleted under a live holder,
//! a floor rewritten lower.

use std::time::Duration;

use crate::foreign::{foreign_rows, When};
use crate::fork_recycle::{ForkConfig, ForkServer};
use crate::harness::{unique, Registry, Spawn, Start, Target};
use crate::rows::{matrix_rows, outage_rows, restart_newcomer_row, tampered};
use crate::zookeeper::{admin, zk};

/// The `zookeeper-recycle` row set.
pub struct Recycle;

impl Registry for Recycle {
    fn name(&self) -> &'static str {
        "zookeeper-recycle"
    }

    fn target(&self, row: &str) -> Target {
        let name = unique(row);
        Target {
            url: format!("zookeeper-recycle://{}/{name}?ip=127.0.0.1&port=8080", zk()),
            name,
            upstream: Some(zk()),
            keep: Vec::new(),
        }
    }

    /// The session (6 s) has expired and its lease node is gone.
    fn lease_life(&self) -> Option<Duration> {
        Some(Duration::from_secs(8))
    }

    fn lease_after_cut(&self) -> Duration {
        Duration::from_millis(6_500)
    }

    /// `deleteall /snowflake/{name}`.
    fn wipe(&self, t: &Target) {
        admin::delete_all(&format!("/snowflake/{}", t.name));
    }
}

matrix_rows!(Recycle);
outage_rows!(Recycle);
restart_newcomer_row!(Recycle, false);
foreign_rows!(fork_row);

/// The fork's `zk_recycle` server (`RecyclableZookeeperHolder`) on the same name (issue
/// 20 #6), with a pool of two ids (`maxWorkId` 1) so that its pick lands where a
/// fleet's hundreds of starts would have cycled it: on the ids leafid hands out first.
fn fork_row(when: When) {
    let t = Recycle.target(&format!("fork{when:?}").to_lowercase());
    let cfg = ForkConfig {
        max_work_id: 1,
        ..ForkConfig::new(&zk(), &t.name)
    };
    crate::foreign::row(
        &Recycle,
        "fork zk_recycle server",
        when,
        &t,
        (2, false),
        move || {
            let mut f = ForkServer::start(&cfg)?;
            Ok(Box::new(move || {
                f.stop();
                (format!("worker {}", f.worker_id()), f.ids().to_vec())
            }))
        },
    );
}

fn recycle(t: &Target) -> String {
    format!("/snowflake/{}/recycle", t.name)
}

/// The holder's `lease/{id}` deleted: a newcomer can create it again.
#[test]
fn lease_node_deleted_under_a_live_holder() {
    let t = Recycle.target("lease");
    tampered(&Recycle, "lease node deleted under holder", &t, |a| {
        if let Start::Live(w) = a.started() {
            admin::delete_all(&format!("{}/lease/{w}", recycle(&t)));
        }
        vec![Spawn::url(&t.url), Spawn::url(&t.url)]
    });
}

/// `deleteall /snowflake/{name}/recycle` under a live holder: leases and floors gone.
#[test]
fn whole_tree_deleted_under_a_live_holder() {
    let t = Recycle.target("tree");
    tampered(&Recycle, "recycle tree deleted under holder", &t, |_| {
        admin::delete_all(&recycle(&t));
        vec![Spawn::url(&t.url), Spawn::url(&t.url)]
    });
}

/// The holder's floor `last/{id}` rewritten to 0 and its lease deleted (a restore of an
/// old snapshot): newcomers must still not reissue what the holder issued.
#[test]
fn floor_rewritten_under_a_live_holder() {
    let t = Recycle.target("floor");
    tampered(&Recycle, "floor rewritten + lease deleted", &t, |a| {
        if let Start::Live(w) = a.started() {
            admin::set(&format!("{}/last/{w}", recycle(&t)), r#"{"bound_ms":0}"#);
            admin::delete_all(&format!("{}/lease/{w}", recycle(&t)));
        }
        vec![Spawn::url(&t.url), Spawn::url(&t.url)]
    });
}
