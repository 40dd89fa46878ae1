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
//! Every heartbeat writes, in one conditional transaction, the generator's bound (a time
//! ahead of the clock) into leafid's own record `/snowflake/{name}/ids/{id}` and
//! [`fence::foreign_timestamp`] of it (never ahead of the clock) as the forever node's
//! `timestamp`. Bounds only grow, except the final renew at close, which writes the exact
//! last timestamp issued: that is safe because the generator has stopped issuing for good
//! before it asks, so no id of this worker carries a later timestamp, and it lets a quick
//! restart start at once instead of waiting out the heartbeat's look-ahead. A newcomer's
//! floor is the larger of the forever node's timestamp and the id's leafid record.
//!
//! **The fencing rule** ([`fence`]):
//! 1. *Bound held by the registry*: issuing goes up to the bound in `ids/{id}`, written
//!    only with a check of both nodes' versions as this holder last wrote them.
//! 2. *Own record missing or changed is a lost lease at once*: a failed check or a
//!    missing node at renew is [`Error::LeaseLost`], never "unavailable"; and between
//!    renewals a ZooKeeper watch on the forever node (`guard`) lowers the issue limit the
//!    moment the node is deleted or written by anyone else (a `mzxid` not its own), or
//!    the session ends.
//! 3. *Newcomers watch first* (`takeover`): a reused forever node is watched before the
//!    first id, [`fence::TAKEOVER_WATCH_AFTER_RELEASE`] when its last write is a leafid
//!    release marker, else [`fence::TAKEOVER_WATCH`] and until a recent write has aged
//!    past [`JAVA_LIVE_WINDOW`]; a write meanwhile is `WorkerIdInUse` naming the likely
//!    Java server. The worker id itself is claimed with an EPHEMERAL
//!    `/snowflake/{name}/ids/{id}/live`: a forever tree deleted and recreated under live
//!    holders (its sequence restarts at 0) cannot hand out a live holder's id, and the
//!    id's record floors whoever takes it next.
//! 4. *Leaf's field holds what Leaf would write*: never a future time, so a Java server
//!    restarted on this identity passes its `checkInitTimeStamp`, takes its normal path
//!    and uploads 1 s later, which the guard sees; with a future time it would fall back
//!    to its `workerID.properties` and never write again.
//! 5. *A holder out of touch stops* (`guard`): while the client reports `Disconnected`
//!    (no word from the server for 2/5 of the session timeout, 2.4 s at the default 6 s)
//!    the holder cannot see a deletion, so issuing is suspended (the limit lowered to the
//!    clock, the lease kept) until the connection is back and the next renew raises it.
//!    A newcomer with no `ids/{id}` record for its worker id (a new node, or a tree
//!    deleted by `deleteall /snowflake/{name}`: the sequence restarts at 0 and hands out
//!    a cut-off holder's id) watches its node for
//!    `max(`[`fence::TAKEOVER_WATCH`]`, 2/5 of its session timeout + `[`fence::TAKEOVER_MARGIN`]`)`
//!    (3.5 s at the default session timeout) before its first id: by then any holder of
//!    the deleted tree has either seen the deletion (its watch) or suspended. A
//!    re-acquire whose own last write is still the node's (its session expired) counts
//!    as released: [`fence::TAKEOVER_WATCH_AFTER_RELEASE`].
//!
//! The residual window: a Java server started on an identity a live leafid holds issues
//! from its start but writes only 1 s later; until the guard sees that write both issue.
//! Measured with the Java simulator (`tests/zookeeper_foreign.rs`): about 1 060 ms, and
//! about 41 000 duplicate ids in it with Leaf's layout at full speed on both sides.
//!
//! **One live holder per identity.** Leaf could assume one process per `ip:port` because
//! its server bound that port; a library inside multi-process servers cannot. So:
//! - every leafid holder keeps an EPHEMERAL node `/snowflake/{name}/holders/{ip}:{port}/live`
//!   (data `{"host","pid","since_ms"}`) while it issues; Java Leaf never reads
//!   `/snowflake/{name}/holders`. A second claimant finds it and gets
//!   [`Error::WorkerIdInUse`] naming the holder (or, when the holder was a process of this
//!   host that has died, waits up to the session timeout for ZooKeeper to remove it).
//!   Every renew first checks the node is still this session's.
//! - a Java Leaf server counts as live while its forever node was written within
//!   [`JAVA_LIVE_WINDOW`] (three of Leaf's 3 s upload intervals), judged by ZooKeeper's own
//!   clock: the node's `mtime` against the `ctime` of the `live` node just created. Start-up
//!   then watches the node until that window has passed: a node written again meanwhile
//!   (`mzxid` changed) is a live server, refused with `WorkerIdInUse`.
//! - a leafid holder that closes records the `mzxid` of its last write in
//!   `/snowflake/{name}/holders/{ip}:{port}` (persistent): a node last written by a
//!   leafid that let go is free at once, so a quick restart does not wait.
//!
//! Nodes are never deleted (as in Leaf): every new `ip:port` burns one id for good, and
//! past the layout's largest worker id (1023 with Leaf's layout) a new identity cannot
//! start. Every write to the forever node is conditional on the version this holder last
//! wrote, so a write by anyone else in between (another holder after this session
//! expired, a Java Leaf server) ends this holder's lease instead of being overwritten.
//! Unlike Leaf, the generator does not go on past the last bound ZooKeeper holds when
//! ZooKeeper is unreachable ([`WorkerRegistry::survives_outage`] is false): once this
//! session has expired, another process may take the identity with that bound as floor.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::zk_client as zk;
use super::{fence, system_now_ms, ClockReading, IssueLimit, Lease, WorkerRegistry};

mod guard;
mod takeover;
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

/// Leaf's (Curator's) session timeout.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(6000);
/// How long a start-up waits for a ZooKeeper session before it gives up (and the
/// generator falls back to its cache file): short, so a down ensemble fails fast.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(3000);

/// How recently a forever node must have been written, by ZooKeeper's clock, for its
/// writer to count as a live Java Leaf server (Leaf uploads every 3 s).
pub const JAVA_LIVE_WINDOW: Duration = Duration::from_millis(9000);

/// How often start-up re-reads a live node whose holder has died on this host.
const POLL: Duration = Duration::from_millis(250);

/// What a leafid holder writes into its `live` node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LiveRecord {
    host: String,
    pid: u32,
    since_ms: i64,
}

/// The data of a forever node, field for field as Java Leaf's `Endpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Endpoint {
    pub ip: String,
    pub port: String,
    pub timestamp: i64,
}

/// Opens a ZooKeeper session, failing with [`Error::RegistryUnavailable`] within
/// `connect_timeout` when no server answers.
pub(crate) async fn connect(
    connect: &str,
    session_timeout: Duration,
    connect_timeout: Duration,
) -> Result<zk::Client> {
    super::fence::check_zookeeper_session_timeout(session_timeout)?;
    zk::Client::connect(connect, session_timeout, connect_timeout)
        .await
        .map_err(|e| session_err(&crate::redact::url(connect), e))
}

/// A failed session open as the user sees it (`shown`: the connect string, password
/// removed), the client's error kept as the source: refused credentials are
/// `AccessDenied` (retrying cannot help), anything else `RegistryUnavailable`.
pub(crate) fn session_err(shown: &str, e: zk::ZkError) -> Error {
    let text = format!("cannot open a ZooKeeper session with {shown}: {e}");
    match e {
        zk::ZkError::AuthFailed(_) => Error::access_denied(
            format!("{text}; check the user:password of the connect string"),
            crate::error::Cause::zk(e),
        ),
        e => Error::registry_with(text, crate::error::Cause::zk(e)),
    }
}

/// Turns a ZooKeeper error into [`Error::RegistryUnavailable`] naming the operation,
/// the client's error kept as the source.
pub(crate) fn zk_err(connect: &str, op: &str, path: &str, e: zk::ZkError) -> Error {
    Error::registry_with(
        format!(
            "ZooKeeper {}: {op} {path}: {e}",
            crate::redact::url(connect)
        ),
        crate::error::Cause::zk(e),
    )
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
    /// Our node's full path, worker id and the data version we last saw or wrote.
    node: Option<(String, u32, i32)>,
    /// Whether this registry holds its identity in [`held_identities`].
    claimed: bool,
    /// The session whose `live` node marks this registry as the identity's holder.
    live_session: Option<i64>,
    /// The `mzxid` of this holder's last write to the forever node.
    last_mzxid: Option<i64>,
    /// The data version of `ids/{id}` this holder last saw or wrote.
    id_version: i32,
    /// The forever node's `mzxid` as this holder last wrote (or took it over), shared
    /// with the guard.
    own: Option<guard::OwnWrite>,
    /// The watch on the forever node; dropping it stops the watch.
    guard: Option<guard::Guard>,
    /// The registry's clock, as seen by the last write (for the generator's clock check).
    reading: Option<ClockReading>,
}

/// Leaf's forever-mode registry. Connects at `acquire`; building it does no I/O.
pub struct ZookeeperRegistry {
    connect: String,
    name: String,
    ip: String,
    port: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    state: tokio::sync::Mutex<State>,
}

/// By hand: the connect string may carry a password.
impl std::fmt::Debug for ZookeeperRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZookeeperRegistry")
            .field("connect", &crate::redact::url(&self.connect))
            .field("name", &self.name)
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
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

    /// `/snowflake/{name}/holders/{ip}:{port}`: leafid's release record for this identity.
    fn holder_path(&self) -> String {
        format!("/snowflake/{}/holders/{}", self.name, self.address())
    }

    /// The EPHEMERAL node of this identity's live leafid holder.
    fn live_path(&self) -> String {
        format!("{}/live", self.holder_path())
    }

    /// How messages name this identity.
    fn identity(&self) -> String {
        format!(
            "ZooKeeper {} {}/{}",
            crate::redact::url(&self.connect),
            self.forever_path(),
            self.address()
        )
    }

    fn in_use(&self, worker_id: Option<u32>, holder: String) -> Error {
        Error::WorkerIdInUse {
            identity: self.identity(),
            worker_id,
            holder,
            advice: super::IN_USE_ADVICE.into(),
        }
    }

    /// Marks this session as the identity's live holder: creates the EPHEMERAL `live`
    /// node, or fails with `WorkerIdInUse` when another session has it. Records
    /// ZooKeeper's clock (the node's `ctime`) and returns it.
    async fn claim_live(&self, client: &zk::Client, st: &mut State) -> Result<i64> {
        let live = self.live_path();
        let holder = self.holder_path();
        client
            .mkdir(&holder)
            .await
            .map_err(|e| self.err("create", &holder, e))?;
        let record = serde_json::to_vec(&LiveRecord {
            host: super::host_lock::host_name(),
            pid: std::process::id(),
            since_ms: system_now_ms(),
        })
        .expect("a live record always serializes");
        let give_up =
            tokio::time::Instant::now() + client.session_timeout() + Duration::from_secs(1);
        loop {
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
                // Its holder just let go: try again (bounded like the wait below).
                Err(zk::ZkError::NoNode) if tokio::time::Instant::now() < give_up => continue,
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
                st.reading = Some(ClockReading {
                    registry_ms: now,
                    local_before_ms: before,
                    local_after_ms: after,
                    source: format!("ZooKeeper mtime of {live}"),
                });
                return Ok(now);
            }
            let other: Option<LiveRecord> = serde_json::from_slice(&data).ok();
            let holder = match &other {
                Some(r) => format!(
                    "leafid pid {} on {} (since {} ms since the Unix epoch; ZooKeeper session {:#x})",
                    r.pid, r.host, r.since_ms, stat.ephemeral_owner
                ),
                None => format!("ZooKeeper session {:#x}", stat.ephemeral_owner),
            };
            // A holder of this host that has died: its node goes within the session timeout.
            let dead_here = other.as_ref().is_some_and(|r| {
                r.host == super::host_lock::host_name() && !super::host_lock::pid_alive(r.pid)
            });
            if !dead_here || tokio::time::Instant::now() >= give_up {
                return Err(self.in_use(None, holder));
            }
            tracing::info!(%live, "the last holder of this identity has exited; waiting for ZooKeeper to end its session");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Gives up the `live` node (and records the last write as leafid's when `released`).
    async fn let_go(&self, client: &zk::Client, st: &mut State, released: bool) {
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

    fn err(&self, op: &str, path: &str, e: zk::ZkError) -> Error {
        zk_err(&self.connect, op, path, e)
    }

    /// A live client, reconnecting when the last session ended.
    async fn client(&self, st: &mut State) -> Result<zk::Client> {
        if let Some(c) = &st.client {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            tracing::info!(connect = %crate::redact::url(&self.connect), "ZooKeeper session ended; opening a new one");
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
    /// Reads our node's stored timestamp and its data version.
    async fn read_timestamp(&self, client: &zk::Client, path: &str) -> Result<(i64, i32)> {
        let (data, stat) = client
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
        Ok((ep.timestamp, stat.version))
    }

    fn endpoint_bytes(&self, timestamp: i64) -> Vec<u8> {
        serde_json::to_vec(&Endpoint {
            ip: self.ip.clone(),
            port: self.port.clone(),
            timestamp,
        })
        .expect("an endpoint always serializes")
    }

    async fn take(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> Result<Lease> {
        let mut st = self.state.lock().await;
        st.guard = None;
        if !st.claimed {
            let mut held = held_identities().lock().unwrap_or_else(|p| p.into_inner());
            if !held.insert(self.identity_key()) {
                return Err(self.in_use(
                    None,
                    format!(
                        "another snowflake generator in this process (pid {})",
                        std::process::id()
                    ),
                ));
            }
            st.claimed = true;
        }
        let client = self.client(&mut st).await?;
        let zk_now = self.claim_live(&client, &mut st).await?;
        let taken = self
            .take_node(&client, &mut st, max_worker_id, zk_now)
            .await;
        match &taken {
            Ok(lease) => {
                let (path, id, _) = st.node.clone().expect("take_node set the node");
                let own = st.own.clone().expect("take_node set the own write");
                debug_assert_eq!(id, lease.worker_id);
                st.guard = Some(guard::start(
                    client.clone(),
                    path,
                    self.id_live_path(id),
                    own,
                    limit,
                ));
            }
            Err(_) => {
                if let Some((_, id, _)) = st.node.take() {
                    self.unclaim_worker(&client, id).await;
                }
                self.let_go(&client, &mut st, false).await;
            }
        }
        taken
    }

    async fn take_node(
        &self,
        client: &zk::Client,
        st: &mut State,
        max_worker_id: u32,
        zk_now: i64,
    ) -> Result<Lease> {
        let client = client.clone();
        let forever = self.forever_path();
        let (path, id, floor, version, mzxid) = match self.find_own(&client).await? {
            Some((path, id)) => {
                // Claim the id first: a node of a recreated tree may carry a live
                // holder's id.
                st.node = Some((path.clone(), id, 0));
                let claimed = self.claim_worker(&client, id).await?;
                st.id_version = claimed.version;
                let unfloored = claimed.bound_ms == i64::MIN;
                let seen = self
                    .watch_takeover(&client, &path, id, zk_now, st.last_mzxid, unfloored)
                    .await?;
                let (stamp, version) = self.read_timestamp(&client, &path).await?;
                if version != seen.version {
                    return Err(self.in_use(
                        Some(id),
                        format!("a process that wrote {path} right after this start watched it"),
                    ));
                }
                let floor = stamp.max(claimed.bound_ms);
                tracing::info!(%path, worker_id = id, floor, "reusing this ip:port's forever node");
                (path, id, floor, version, seen.mzxid)
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
                        // ZooKeeper's clock, not ours: a local clock far ahead (refused
                        // by the skew check right after) must not become the floor.
                        &self.endpoint_bytes(zk_now),
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
                // Our write: a release right after (a refused start) records it, so the
                // next start need not wait for the node to age.
                let stat = client
                    .check_stat(&path)
                    .await
                    .map_err(|e| self.err("read", &path, e))?
                    .ok_or_else(|| self.vanished(&path))?;
                if stat.version != 0 {
                    return Err(self.in_use(
                        Some(id),
                        format!("a process that wrote {path} the moment this start created it"),
                    ));
                }
                st.last_mzxid = Some(stat.mzxid);
                if id <= max_worker_id {
                    st.node = Some((path.clone(), id, 0));
                    // A tree recreated under live holders restarts its sequence at 0:
                    // the id itself must be free, and its last holder's bound is the floor.
                    let claimed = self.claim_worker(&client, id).await?;
                    st.id_version = claimed.version;
                    if claimed.bound_ms == i64::MIN {
                        // Rule 5: no record of the id's last holder, which may be a holder
                        // of a deleted tree that is cut off and cannot see the deletion:
                        // it has stopped after this wait.
                        let watch_for = Self::unfloored_watch(&client);
                        tracing::info!(%path, worker_id = id, watch_ms = watch_for.as_millis() as u64,
                            "no floor recorded for this worker id: waiting out any holder out of touch");
                        self.watch_unchanged(&client, &path, id, stat, watch_for)
                            .await?;
                    }
                    (path, id, claimed.bound_ms, 0, stat.mzxid)
                } else {
                    (path, id, i64::MIN, 0, stat.mzxid)
                }
            }
        };
        if id > max_worker_id {
            return Err(Error::WorkerIdExhausted {
                pool: format!(
                    "ZooKeeper {} {forever} (node {path} has sequence {id}; Leaf's forever nodes are never \
                     reused, every new ip:port takes the next number, so past {max_worker_id} no new identity fits: \
                     split the fleet over several leaf names, reuse ip:port identities, or use zookeeper-recycle)",
                    crate::redact::url(&self.connect)
                ),
                size: max_worker_id + 1,
            });
        }
        st.node = Some((path.clone(), id, version));
        st.own = Some(Arc::new(tokio::sync::Mutex::new(mzxid)));
        Ok(Lease {
            worker_id: id,
            floor_ms: floor,
            location: format!("zookeeper {}{path}", crate::redact::url(&self.connect)),
        })
    }

    async fn write(&self, lease: &Lease, bound_ms: i64) -> Result<()> {
        let mut st = self.state.lock().await;
        let client = self.client(&mut st).await?;
        let (path, version) = match &st.node {
            Some((path, id, version)) if *id == lease.worker_id => (path.clone(), *version),
            Some((path, id, _)) => {
                return Err(Error::LeaseLost {
                    worker_id: lease.worker_id,
                    cause: format!(
                        "this registry holds worker {id} ({path}), not {}",
                        lease.worker_id
                    ),
                })
            }
            None => {
                return Err(Error::LeaseLost {
                    worker_id: lease.worker_id,
                    cause: format!("{} holds no forever node", self.identity()),
                })
            }
        };
        // Still the live holder? A new session (the old one expired) claims again; a
        // `live` node of another session means someone else now holds this identity.
        let live = self.live_path();
        if st.live_session != Some(client.session_id()) {
            match self.claim_live(&client, &mut st).await {
                Ok(_) => {}
                Err(Error::WorkerIdInUse { holder, .. }) => {
                    return Err(Error::LeaseLost {
                        worker_id: lease.worker_id,
                        cause: format!("{} is now held by {holder}", self.identity()),
                    })
                }
                Err(e) => return Err(e),
            }
        } else {
            match client.check_stat(&live).await {
                Ok(Some(stat)) if stat.ephemeral_owner == client.session_id() => {}
                Ok(_) => {
                    st.live_session = None;
                    return Err(Error::LeaseLost {
                        worker_id: lease.worker_id,
                        cause: format!("{live} was deleted or taken by another session"),
                    });
                }
                Err(e) => return Err(self.err("read", &live, e)),
            }
        }
        let before = system_now_ms();
        let id_path = self.id_path(lease.worker_id);
        let own = st.own.clone();
        // Held across the write: the guard compares the node only with settled writes.
        let mut own_guard = match &own {
            Some(o) => Some(o.lock().await),
            None => None,
        };
        // Conditional on the versions this holder last wrote: a write by anyone else in
        // between means another holder (or a Java Leaf server) has used this node, so
        // this lease is over; overwriting could lower the bound it issued under. Leaf's
        // own field gets only what Leaf would write (rule 4); leafid's bound goes into
        // ids/{id}, in the same transaction.
        let forever_data = self.endpoint_bytes(fence::foreign_timestamp(bound_ms));
        let id_data = self.id_record_bytes(bound_ms);
        let ops = [
            zk::Op::Check {
                path: &path,
                version,
            },
            zk::Op::SetData {
                path: &path,
                data: &forever_data,
            },
            zk::Op::Check {
                path: &id_path,
                version: st.id_version,
            },
            zk::Op::SetData {
                path: &id_path,
                data: &id_data,
            },
        ];
        let (stat, id_stat) = match client.multi(&ops).await {
            Ok(results) => match (&results[1], &results[3]) {
                (zk::OpResult::SetData(a), zk::OpResult::SetData(b)) => (*a, *b),
                _ => {
                    return Err(self.err(
                        "write",
                        &path,
                        zk::ZkError::Protocol("unexpected multi results".into()),
                    ))
                }
            },
            Err(zk::MultiError {
                op: Some(i),
                error: e @ (zk::ZkError::BadVersion | zk::ZkError::NoNode),
            }) => {
                let which = if i < 2 { &path } else { &id_path };
                let what = if e == zk::ZkError::NoNode {
                    "was deleted"
                } else {
                    "was written by another process since this holder's last write"
                };
                return Err(fence::lost(lease.worker_id, format!("{which} {what}")));
            }
            Err(e) => return Err(self.err("write", &path, e.error)),
        };
        if let Some(g) = own_guard.as_mut() {
            **g = stat.mzxid;
        }
        drop(own_guard);
        if let Some(node) = st.node.as_mut() {
            node.2 = stat.version;
        }
        st.id_version = id_stat.version;
        st.last_mzxid = Some(stat.mzxid);
        st.reading = Some(ClockReading {
            registry_ms: stat.mtime,
            local_before_ms: before,
            local_after_ms: system_now_ms(),
            source: format!("ZooKeeper mtime of {path}"),
        });
        Ok(())
    }

    async fn drop_session(&self) {
        let mut st = self.state.lock().await;
        st.guard = None;
        st.own = None;
        if let Some(client) = st.client.clone() {
            if !client.state().is_terminated() {
                if let Some((_, id, _)) = &st.node {
                    self.unclaim_worker(&client, *id).await;
                }
                self.let_go(&client, &mut st, true).await;
            }
        }
        // `last_mzxid` stays: a re-acquire that finds it still the node's counts the
        // node as released (its own generator stopped issuing before).
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
    fn acquire(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        // The guard lowers the limit the moment the forever node is deleted or written
        // by another process.
        Box::pin(self.take(max_worker_id, limit))
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
        // No: another claimant can take the identity once this session has expired on
        // the server, and its floor is the last bound written HERE; a bound kept only in
        // the local cache file would let this holder issue above it. Issuing goes on
        // through an outage only up to the last bound ZooKeeper has (the lookahead).
        false
    }

    fn describe(&self) -> String {
        format!(
            "zookeeper-{}-{}-{}",
            crate::redact::url(&self.connect),
            self.name,
            self.address()
        )
    }

    fn host_identity(&self) -> Option<String> {
        // The ensemble is part of the identity (two clusters are two registries); its
        // credentials never are.
        let hosts = self
            .connect
            .rsplit_once('@')
            .map_or(self.connect.as_str(), |(_, h)| h);
        Some(format!(
            "zookeeper/{hosts}/{}/{}",
            self.name,
            self.address()
        ))
    }

    fn take_clock_reading(&self) -> Option<ClockReading> {
        self.state.try_lock().ok()?.reading.take()
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
    fn debug_never_shows_the_password() {
        let r = ZookeeperRegistry::new(
            "alice:s3cretPW@127.0.0.1:2181",
            "leaf",
            "10.0.0.5",
            "8080",
            DEFAULT_SESSION_TIMEOUT,
            DEFAULT_CONNECT_TIMEOUT,
        );
        let shown = format!("{r:?} {}", r.describe());
        assert!(!shown.contains("s3cretPW"), "{shown}");
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
