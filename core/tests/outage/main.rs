//! The real services stopped and started mid-run (by `scripts/services.sh` with the
//! same `LEAFID_*` variables as the tests: `source .services/env`). Their own test
//! binary: cargo runs test binaries one after another, so no other test sees an outage.
//! The MariaDB and the ZooKeeper outages touch different servers and may overlap.
//!
//! Against shared services, run these on a private copy instead (other ports, its own
//! `LEAFID_SERVICES_DIR`), since they stop the servers they are given:
//! `LEAFID_SERVICES_DIR=/tmp/x LEAFID_MYSQL_PORT=… LEAFID_ZK_PORT=… scripts/services.sh start`.

/// Shared test support (`tests/support/`), the parts this binary uses.
#[path = "../support"]
mod support {
    pub mod mysql;
}

/// Segment mode while MariaDB restarts: nothing lost, nothing issued twice.
mod mysql_restart;

/// ZooKeeper registries while ZooKeeper restarts.
mod zookeeper_restart;
