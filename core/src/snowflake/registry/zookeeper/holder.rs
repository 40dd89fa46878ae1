//! One live holder per identity: the in-process claim (two generators of one process
//! with one `ip:port`), and the EPHEMERAL `holders/{ip}:{port}/live` node a holder keeps
//! while it issues, with the release record it leaves when it lets go.
//!
//! Apart from acquire and release, which both use it, because this is the guard Leaf
//! did not need (its server bound the port) and leafid, a library inside multi-process
//! servers, does: see "One live holder per identity" in the module doc.

use std::collections::HashSet;
use std::sync::Mutex;

use super::layout::LiveRecord;
use super::{State, ZookeeperRegistry};
use crate::error::Result;
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::{system_now_ms, ClockReading};

/// How many times start-up creates a `live` node it keeps finding taken by a dead
/// predecessor (each time deleted): a bound for a loop that ends at the first try.
pub(super) const TAKEOVER_ATTEMPTS: usize = 4;

/// Identities (`name/ip:port`) held by forever registries in this process: two
/// generators with one identity would share a worker id.
pub(super) fn held_identities() -> &'static Mutex<HashSet<String>> {
    static HELD: std::sync::OnceLock<Mutex<HashSet<String>>> = std::sync::OnceLock::new();
    HELD.get_or_init(|| Mutex::new(HashSet::new()))
}

impl ZookeeperRegistry {
    /// This registry's `live` record, for `holders/…/live` and `ids/{id}/live`.
    pub(super) fn live_record(&self) -> Vec<u8> {
        serde_json::to_vec(&LiveRecord {
            host: crate::snowflake::registry::host_lock::host_name(),
            pid: std::process::id(),
            since_ms: system_now_ms(),
            address: Some(self.address()),
        })
        .expect("a live record always serializes")
    }

    /// True when `other` (a `live` node of another session) was left by this identity's
    /// previous holder on this host, now dead: SIGKILLed or crashed, its session not yet
    /// expired. The generator holds this host's lock on the identity before it acquires
    /// (`generator/session.rs`), so no other process of this host holds the identity, and
    /// the pid says the writer is gone: nothing can issue under that node any more, and
    /// its bound in `ids/{id}` floors whoever takes it.
    pub(super) fn dead_predecessor(&self, other: &LiveRecord) -> bool {
        other.host == crate::snowflake::registry::host_lock::host_name()
            && other.address.as_ref().is_none_or(|a| *a == self.address())
            && !crate::snowflake::registry::host_lock::pid_alive(other.pid)
    }

    /// Marks this session as the identity's live holder: creates the EPHEMERAL `live`
    /// node, or fails with `WorkerIdInUse` when another session has it. A node left by
    /// this host's dead predecessor ([`Self::dead_predecessor`]) is deleted and taken at
    /// once, rather than waited for until ZooKeeper expires its session. Records
    /// ZooKeeper's clock (the node's `ctime`) and returns it.
    pub(super) async fn claim_live(&self, client: &zk::Client, st: &mut State) -> Result<i64> {
        let live = self.live_path();
        let holder = self.holder_path();
        client
            .mkdir(&holder)
            .await
            .map_err(|e| self.err("create", &holder, e))?;
        let record = self.live_record();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let before = system_now_ms();
            let created = match client
                .create(&live, &record, zk::CreateMode::Ephemeral)
                .await
            {
                Ok(_) => true,
                Err(zk::ZkError::NodeExists) => false,
                Err(e) => return Err(self.err("create", &live, e)),
            };
            let (data, mut stat) = match client.get_data(&live).await {
                Ok(found) => found,
                // Its holder just let go: try again.
                Err(zk::ZkError::NoNode) if attempts < TAKEOVER_ATTEMPTS => continue,
                Err(e) => return Err(self.err("read", &live, e)),
            };
            if stat.ephemeral_owner == client.session_id() && !created {
                // Ours from before (this session claimed it already): its times are old,
                // so write it to read ZooKeeper's clock now.
                stat = client
                    .set_data(&live, &record, None)
                    .await
                    .map_err(|e| self.err("write", &live, e))?;
            }
            let after = system_now_ms();
            if stat.ephemeral_owner == client.session_id() {
                let now = stat.mtime;
                st.live_session = Some(client.session_id());
                *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(ClockReading {
                    registry_ms: now,
                    local_before_ms: before,
                    local_after_ms: after,
                    source: format!("ZooKeeper mtime of {live}"),
                });
                return Ok(now);
            }
            let other: Option<LiveRecord> = serde_json::from_slice(&data).ok();
            if attempts < TAKEOVER_ATTEMPTS
                && other.as_ref().is_some_and(|r| self.dead_predecessor(r))
            {
                // Conditional on the version read: a node another session made since is
                // left alone (and found on the next round).
                tracing::info!(%live, "the last holder of this identity on this host has exited; taking its place at once");
                match client.delete(&live, Some(stat.version)).await {
                    Ok(()) | Err(zk::ZkError::NoNode | zk::ZkError::BadVersion) => continue,
                    Err(e) => return Err(self.err("delete", &live, e)),
                }
            }
            let holder = match &other {
                Some(r) => format!(
                    "leafid pid {} on {} (since {} ms since the Unix epoch; ZooKeeper session {:#x})",
                    r.pid, r.host, r.since_ms, stat.ephemeral_owner
                ),
                None => format!("ZooKeeper session {:#x}", stat.ephemeral_owner),
            };
            return Err(self.in_use(None, holder));
        }
    }

    /// Gives up the `live` node (and records the last write as leafid's when `released`).
    pub(super) async fn let_go(&self, client: &zk::Client, st: &mut State, released: bool) {
        if st.live_session != Some(client.session_id()) {
            return;
        }
        if let (true, Some(mzxid)) = (released, st.last_mzxid) {
            let holder = self.holder_path();
            if let Err(e) = client
                .set_data(&holder, mzxid.to_string().as_bytes(), None)
                .await
            {
                tracing::warn!(error = %e, %holder, "cannot record the release of this identity; a restart waits for the forever node to age");
            }
        }
        if let Err(e) = client.delete(&self.live_path(), None).await {
            tracing::debug!(error = %e, "cannot delete the live node; it goes with the session");
        }
        st.live_session = None;
    }
}
