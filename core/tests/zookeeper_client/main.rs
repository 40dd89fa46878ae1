//! The core's own ZooKeeper client (`src/snowflake/registry/zk_client*`) against the
//! real ZooKeeper (`LEAFID_ZK`: `source .services/env`), one test binary, with an
//! independent client (the `zookeeper-client` crate) checking what reached the server.
//! Protocol cases no real server produces are unit tests beside the client.
//!
//! Run one module: `cargo test -p leafid --test zookeeper_client watches::`.

/// A chroot, digest credentials on every connection and the creator ACL.
mod chroot_and_auth;

/// One-shot watches fire, and complete with `SessionLost` when the session ends.
mod watches;

/// Arbitrary and hostile bytes through every reply decoder (the fuzz target under
/// proptest), and connect strings shown without their password.
mod arbitrary_input;
