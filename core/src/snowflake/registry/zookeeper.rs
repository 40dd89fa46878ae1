//! `zookeeper` — Leaf's own worker-id layout ("forever" mode), byte-compatible with Java Leaf.
//!
//! Every `ip:port` identity owns one PERSISTENT_SEQUENTIAL node
//! `/snowflake/{name}/forever/{ip}:{port}-0000000007`; the worker id is the integer after
//! the last `-` (so a `-` inside the ip or port cannot confuse it). The node's data is
//! exactly `{"ip":"…","port":"…","timestamp":N}` with the port as a JSON string and no
//! other field, because Java Leaf reads it with Jackson, which rejects unknown fields.
//!
//! Start-up lists the children: when one belongs to this `ip:port`, its id is reused and
//! its stored timestamp becomes the floor (the generator refuses, or waits for, a clock
//! behind it); otherwise a new node is created and the id is always parsed from the path
//! ZooKeeper returns (Java Leaf leaves the very first node's id unparsed at 0).
//!
//! Every heartbeat writes the generator's bound (a time ahead of the clock) as the
//! timestamp. Bounds only grow, except the final renew at close, which writes the exact
//! last timestamp issued: that is safe because the generator has stopped issuing for good
//! before it asks, so no id of this worker carries a later timestamp, and it lets a quick
//! restart start at once instead of waiting out the heartbeat's look-ahead.
//!
//! Nodes are never deleted (as in Leaf): every new `ip:port` burns one id for good, and
//! past the layout's largest worker id (1023 with Leaf's layout) a new identity cannot
//! start. The id belongs to the identity while ZooKeeper is down, so the generator may go
//! on with its cache file ([`WorkerRegistry::survives_outage`] is true).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::zk_client as zk;
use super::{IssueLimit, Lease, WorkerRegistry};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// Leaf's (Curator's) session timeout.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(6000);
/// How long a start-up waits for a ZooKeeper session before it gives up (and the
/// generator falls back to its cache file): short, so a down ensemble fails fast.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(3000);

/// The data of a forever node, field for field as Java Leaf's `Endpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Endpoint {
    pub ip: String,
    pub port: String,
    pub timestamp: i64,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Opens a ZooKeeper session, failing with [`Error::RegistryUnavailable`] within
/// `connect_timeout` when no server answers.
pub(crate) async fn connect(
    connect: &str,
    session_timeout: Duration,
    connect_timeout: Duration,
) -> Result<zk::Client> {
    zk::Client::connect(connect, session_timeout, connect_timeout)
        .await
        .map_err(|e| {
            Error::registry(format!(
                "cannot open a ZooKeeper session with {connect}: {e}"
            ))
        })
}

/// Turns a ZooKeeper error into [`Error::RegistryUnavailable`] naming the operation.
pub(crate) fn zk_err(connect: &str, op: &str, path: &str, e: zk::ZkError) -> Error {
    Error::registry(format!("ZooKeeper {connect}: {op} {path}: {e}"))
}

/// Splits a forever child `{ip}:{port}-{seq}` at the LAST `-`.
fn split_child(child: &str) -> Option<(&str, u32)> {
    let (addr, seq) = child.rsplit_once('-')?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((addr, seq.parse().ok()?))
}

/// Identities (`name/ip:port`) held by forever registries in this process: two
/// generators with one identity would share a worker id.
fn held_identities() -> &'static Mutex<HashSet<String>> {
    static HELD: std::sync::OnceLock<Mutex<HashSet<String>>> = std::sync::OnceLock::new();
    HELD.get_or_init(|| Mutex::new(HashSet::new()))
}

#[derive(Debug, Default)]
struct State {
    client: Option<zk::Client>,
    /// Our node's full path and worker id, once known.
    node: Option<(String, u32)>,
    /// Whether this registry holds its identity in [`held_identities`].
    claimed: bool,
}

/// Leaf's forever-mode registry. Connects at `acquire`; building it does no I/O.
#[derive(Debug)]
pub struct ZookeeperRegistry {
    connect: String,
    name: String,
    ip: String,
    port: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    state: tokio::sync::Mutex<State>,
}

impl ZookeeperRegistry {
    /// A registry for identity `ip:port` under `/snowflake/{name}/forever` on the
    /// ensemble `connect` (`host:port[,host:port…]`).
    pub fn new(
        connect: impl Into<String>,
        name: impl Into<String>,
        ip: impl Into<String>,
        port: impl Into<String>,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> ZookeeperRegistry {
        ZookeeperRegistry {
            connect: connect.into(),
            name: name.into(),
            ip: ip.into(),
            port: port.into(),
            session_timeout,
            connect_timeout,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// `/snowflake/{name}/forever`.
    pub fn forever_path(&self) -> String {
        format!("/snowflake/{}/forever", self.name)
    }

    fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    fn identity_key(&self) -> String {
        format!("{}/{}", self.name, self.address())
    }

    fn err(&self, op: &str, path: &str, e: zk::ZkError) -> Error {
        zk_err(&self.connect, op, path, e)
    }

    /// A live client, reconnecting when the last session ended.
    async fn client(&self, st: &mut State) -> Result<zk::Client> {
        if let Some(c) = &st.client {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            tracing::info!(connect = %self.connect, "ZooKeeper session ended; opening a new one");
            st.client = None;
        }
        let c = connect(&self.connect, self.session_timeout, self.connect_timeout).await?;
        st.client = Some(c.clone());
        Ok(c)
    }

    /// Finds this identity's node: `(path, worker id)`. Other nodes that do not parse
    /// are skipped (logged); several own nodes resolve to the lowest id.
    async fn find_own(&self, client: &zk::Client) -> Result<Option<(String, u32)>> {
        let forever = self.forever_path();
        let children = match client.list_children(&forever).await {
            Ok(c) => c,
            Err(zk::ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(self.err("list children of", &forever, e)),
        };
        let own = self.address();
        let mut found: Option<(String, u32)> = None;
        for child in children {
            match split_child(&child) {
                Some((addr, id)) if addr == own => {
                    if let Some((prev, prev_id)) = &found {
                        tracing::warn!(kept = %prev, other = %child, "several forever nodes for one ip:port; using the lowest id");
                        if *prev_id <= id {
                            continue;
                        }
                    }
                    found = Some((child.clone(), id));
                }
                Some(_) => {}
                None => {
                    let (addr, _) = child.rsplit_once('-').unwrap_or((child.as_str(), ""));
                    if addr == own {
                        return Err(Error::Malformed {
                            what: "ZooKeeper node",
                            path: format!("{forever}/{child}"),
                            reason: "the part after the last '-' is not a sequence number".into(),
                        });
                    }
                    tracing::warn!(path = %format!("{forever}/{child}"), "skipping a forever node whose name is not ip:port-sequence");
                }
            }
        }
        Ok(found.map(|(child, id)| (format!("{forever}/{child}"), id)))
    }

    /// Reads our node's stored timestamp.
    async fn read_timestamp(&self, client: &zk::Client, path: &str) -> Result<i64> {
        let (data, _) = client
            .get_data(path)
            .await
            .map_err(|e| self.err("read", path, e))?;
        let ep: Endpoint = serde_json::from_slice(&data).map_err(|e| Error::Malformed {
            what: "ZooKeeper node",
            path: path.to_string(),
            reason: format!(
                "{e} (expected {{\"ip\":\"…\",\"port\":\"…\",\"timestamp\":N}}, found {:?})",
                String::from_utf8_lossy(&data)
            ),
        })?;
        Ok(ep.timestamp)
    }

    fn endpoint_bytes(&self, timestamp: i64) -> Vec<u8> {
        serde_json::to_vec(&Endpoint {
            ip: self.ip.clone(),
            port: self.port.clone(),
            timestamp,
        })
        .expect("an endpoint always serializes")
    }

    async fn take(&self, max_worker_id: u32) -> Result<Lease> {
        let mut st = self.state.lock().await;
        if !st.claimed {
            let mut held = held_identities().lock().unwrap_or_else(|p| p.into_inner());
            if !held.insert(self.identity_key()) {
                return Err(Error::InvalidConfig(format!(
                    "another snowflake generator in this process already uses ZooKeeper identity {} under {}; \
                     give each generator its own ?port= (two would share one worker id)",
                    self.address(),
                    self.forever_path()
                )));
            }
            st.claimed = true;
        }
        let client = self.client(&mut st).await?;
        let forever = self.forever_path();
        let (path, id, floor) = match self.find_own(&client).await? {
            Some((path, id)) => {
                let floor = self.read_timestamp(&client, &path).await?;
                tracing::info!(%path, worker_id = id, floor, "reusing this ip:port's forever node");
                (path, id, floor)
            }
            None => {
                client
                    .mkdir(&forever)
                    .await
                    .map_err(|e| self.err("create", &forever, e))?;
                let prefix = format!("{forever}/{}-", self.address());
                let path = client
                    .create(
                        &prefix,
                        &self.endpoint_bytes(now_ms()),
                        zk::CreateMode::PersistentSequential,
                    )
                    .await
                    .map_err(|e| self.err("create", &prefix, e))?;
                // The id is the sequence ZooKeeper appended to the name it returned.
                let seq: i64 = path
                    .strip_prefix(&prefix)
                    .and_then(|seq| seq.parse().ok())
                    .ok_or_else(|| Error::Malformed {
                        what: "ZooKeeper node",
                        path: path.clone(),
                        reason: format!("created under {prefix} without a sequence number"),
                    })?;
                let id = u32::try_from(seq).unwrap_or(u32::MAX);
                tracing::info!(%path, worker_id = id, "created a forever node for this ip:port");
                (path, id, i64::MIN)
            }
        };
        if id > max_worker_id {
            return Err(Error::WorkerIdExhausted {
                pool: format!(
                    "ZooKeeper {} {forever} (node {path} has sequence {id}; Leaf's forever nodes are never \
                     reused, every new ip:port takes the next number, so past {max_worker_id} no new identity fits: \
                     split the fleet over several leaf names, reuse ip:port identities, or use zookeeper-recycle)",
                    self.connect
                ),
                size: max_worker_id + 1,
            });
        }
        st.node = Some((path.clone(), id));
        Ok(Lease {
            worker_id: id,
            floor_ms: floor,
            location: format!("zookeeper {}{path}", self.connect),
        })
    }

    async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let mut st = self.state.lock().await;
        let client = self.client(&mut st).await?;
        let path = match &st.node {
            Some((path, id)) if *id == lease.worker_id => path.clone(),
            Some((path, id)) => {
                return Err(Error::LeaseLost {
                    worker_id: lease.worker_id,
                    cause: format!(
                        "this registry holds worker {id} ({path}), not {}",
                        lease.worker_id
                    ),
                })
            }
            None => {
                // Started from the cache file while ZooKeeper was down: find our node now.
                match self.find_own(&client).await? {
                    Some((path, id)) if id == lease.worker_id => {
                        tracing::info!(%path, "ZooKeeper is back; found this ip:port's forever node");
                        st.node = Some((path.clone(), id));
                        path
                    }
                    Some((path, id)) => {
                        return Err(Error::registry(format!(
                            "ZooKeeper gives this ip:port worker {id} ({path}), but the cache file gave {}; \
                             restart the generator to use ZooKeeper's id",
                            lease.worker_id
                        )))
                    }
                    None => {
                        return Err(Error::registry(format!(
                            "no forever node for {} under {}; restart the generator to register one",
                            self.address(),
                            self.forever_path()
                        )))
                    }
                }
            }
        };
        client
            .set_data(&path, &self.endpoint_bytes(bound_ms), None)
            .await
            .map_err(|e| self.err("write", &path, e))?;
        Ok(())
    }

    async fn drop_session(&self) {
        let mut st = self.state.lock().await;
        // Dropping the last client closes the session.
        st.client = None;
        st.node = None;
        if st.claimed {
            st.claimed = false;
            held_identities()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.identity_key());
        }
    }
}

impl Drop for ZookeeperRegistry {
    fn drop(&mut self) {
        if self.state.get_mut().claimed {
            held_identities()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.identity_key());
        }
    }
}

impl WorkerRegistry for ZookeeperRegistry {
    fn acquire(&self, max_worker_id: u32, _limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // A forever node cannot be lost, so the limit is never lowered.
        Box::pin(self.take(max_worker_id))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write(lease, bound_ms))
    }

    fn release<'a>(&'a self, _lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        // The node stays (it is this identity's for good); only the session ends.
        Box::pin(async move {
            self.drop_session().await;
            Ok(())
        })
    }

    fn survives_outage(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "zookeeper-{}-{}-{}",
            self.connect,
            self.name,
            self.address()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_names_split_at_the_last_dash() {
        assert_eq!(
            split_child("10.0.0.5:8080-0000000007"),
            Some(("10.0.0.5:8080", 7))
        );
        assert_eq!(split_child("host-a:80-0000000012"), Some(("host-a:80", 12)));
        assert_eq!(split_child("10.0.0.5:8080"), None);
        assert_eq!(split_child("10.0.0.5:8080-x1"), None);
        assert_eq!(split_child("10.0.0.5:8080-"), None);
    }

    #[test]
    fn endpoint_json_is_exactly_javas() {
        let r = ZookeeperRegistry::new(
            "127.0.0.1:2181",
            "leaf",
            "10.0.0.5",
            "8080",
            DEFAULT_SESSION_TIMEOUT,
            DEFAULT_CONNECT_TIMEOUT,
        );
        assert_eq!(
            String::from_utf8(r.endpoint_bytes(1_700_000_000_000)).unwrap(),
            r#"{"ip":"10.0.0.5","port":"8080","timestamp":1700000000000}"#
        );
    }
}
