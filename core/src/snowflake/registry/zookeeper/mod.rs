//! `zookeeper` — Leaf's own worker-id layout ("forever" mode), byte-compatible with Java Leaf.
//!
//! Every `ip:port` identity owns one PERSISTENT_SEQUENTIAL node
//! `/snowflake/{name}/forever/{ip}:{port}-0000000007`; the worker id is the integer after
//! the last `-` (so a `-` inside the ip or port cannot confuse it). The node's data is
//! exactly `{"ip":"…","port":"…","timestamp":N}` with the port as a JSON string and no
//! other field, because Java Leaf reads it with Jackson, which rejects unknown fields.
//!
//! Start-up lists the children: when one belongs to this `ip:port`, its id is reused and
//! its stored timestamp becomes the floor (ids start above it at once; a clock far behind
//! it is refused); otherwise a new node is created and the id is always parsed from the path
//! ZooKeeper returns (Java Leaf leaves the very first node's id unparsed at 0).
//!
//! Every heartbeat writes, in one conditional transaction, the generator's bound (a time
//! ahead of the clock) into leafid's own record `/snowflake/{name}/ids/{id}` and
//! [`fence::foreign_timestamp`](super::fence::foreign_timestamp) of it (never ahead of the clock) as the forever node's
//! `timestamp`. Bounds only grow, except the final renew at close, which writes the exact
//! last timestamp issued: that is safe because the generator has stopped issuing for good
//! before it asks, so no id of this worker carries a later timestamp, and it keeps a
//! quick restart's ids close to the clock instead of above the heartbeat's look-ahead. A newcomer's
//! floor is the larger of the forever node's timestamp and the id's leafid record.
//!
//! **The fencing rule** ([`fence`](super::fence)):
//! 1. *Bound held by the registry*: issuing goes up to the bound in `ids/{id}`, written
//!    only with a check of both nodes' versions as this holder last wrote them.
//! 2. *Own record missing or changed is a lost lease at once*: a failed check or a
//!    missing node at renew is [`Error::LeaseLost`](crate::Error::LeaseLost), never "unavailable"; and between
//!    renewals a ZooKeeper watch on the forever node (`guard`) lowers the issue limit the
//!    moment the node is deleted or written by anyone else (a `mzxid` not its own), or
//!    the session ends.
//! 3. *Newcomers watch first* (`takeover`), only where a Java Leaf server could be live
//!    on the node and still unseen: a reused forever node is watched before the first id
//!    for [`fence::TAKEOVER_WATCH_AFTER_RELEASE`](super::fence::TAKEOVER_WATCH_AFTER_RELEASE)
//!    (1.5 s: a Java server started since the last write uploads 1 s after its start),
//!    and, when that last write was a Java server's own, until
//!    [`fence::TAKEOVER_WATCH`](super::fence::TAKEOVER_WATCH) after it (by then a live one
//!    would have uploaded again); a write meanwhile is `WorkerIdInUse` naming the likely
//!    Java server. A node leafid just created is not watched: a Java server creates its
//!    node before it issues. The worker id itself is claimed with an EPHEMERAL
//!    `/snowflake/{name}/ids/{id}/live`: a forever tree deleted and recreated under live
//!    holders (its sequence restarts at 0) cannot hand out a live holder's id, and the
//!    id's record floors whoever takes it next.
//! 4. *Leaf's field holds what Leaf would write*: never a future time, so a Java server
//!    restarted on this identity passes its `checkInitTimeStamp`, takes its normal path
//!    and uploads 1 s later, which the guard sees; with a future time it would fall back
//!    to its `workerID.properties` and never write again.
//! 5. *A holder out of touch issues up to its bound; a newcomer never waits for it*
//!    (`guard`): while the client cannot reach a server the holder keeps issuing, up to
//!    the bound in `ids/{id}` (renewals fail meanwhile, rule 1), and stops there; it
//!    stops at once when a server reports its session expired, and re-acquires then. A
//!    newcomer with no `ids/{id}` record for its worker id (a new node, or a tree deleted
//!    by `deleteall /snowflake/{name}`: the sequence restarts at 0 and may hand out a
//!    cut-off holder's id) starts at once: its lease is unrecorded, so the generator
//!    floors it at ZooKeeper's clock plus the reach, above every bound written before.
//!
//! The residual window: a Java server started on an identity a live leafid holds issues
//! from its start but writes only 1 s later; until the guard sees that write both issue.
//! Measured with the Java simulator (`tests/registry/zookeeper/beside_java_leaf.rs`): about 1 060 ms, and
//! about 41 000 duplicate ids in it with Leaf's layout at full speed on both sides.
//!
//! **One live holder per identity.** Leaf could assume one process per `ip:port` because
//! its server bound that port; a library inside multi-process servers cannot. So:
//! - every leafid holder keeps an EPHEMERAL node `/snowflake/{name}/holders/{ip}:{port}/live`
//!   (data `{"host","pid","since_ms"}`) while it issues; Java Leaf never reads
//!   `/snowflake/{name}/holders`. A second claimant finds it and gets
//!   [`Error::WorkerIdInUse`](crate::Error::WorkerIdInUse) naming the holder. When the
//!   holder was this identity's previous process on this host and has died (SIGKILL, a
//!   crash: its session has not expired yet), the newcomer deletes its `live` nodes and
//!   takes over at once, with the bound it left in `ids/{id}` as the floor: the
//!   generator holds this host's lock on the identity before it acquires, so no live
//!   process of this host holds it. Every renew first checks the node is still this
//!   session's.
//! - a Java Leaf server counts as live while it uploads (every 3 s); start-up watches a
//!   reused node as rule 3 says: a node written again meanwhile (`mzxid` changed) is a
//!   live server, refused with `WorkerIdInUse`.
//! - a leafid holder that closes records the `mzxid` of its last write in
//!   `/snowflake/{name}/holders/{ip}:{port}` (persistent), and every renew writes
//!   `ids/{id}` in the forever node's transaction: either tells a node last written by
//!   leafid.
//!
//! Nodes are never deleted (as in Leaf): every new `ip:port` burns one id for good, and
//! past the layout's largest worker id (1023 with Leaf's layout) a new identity cannot
//! start. Every write to the forever node is conditional on the version this holder last
//! wrote, so a write by anyone else in between (another holder after this session
//! expired, a Java Leaf server) ends this holder's lease instead of being overwritten.
//! Like Leaf, a holder keeps issuing while ZooKeeper is unreachable, but only up to the
//! last bound ZooKeeper holds (the lookahead, 65 s by default;
//! [`WorkerRegistry::survives_outage`] is false): once this session has expired, another
//! process may take the identity with that bound as floor.
//!
//! The files: `layout.rs` (paths and node data), `holder.rs` (one live holder per
//! identity), `acquire.rs` (start-up), `takeover.rs` (fence rule 3 and the worker-id
//! claim), `guard.rs` (the watch between renewals), `renew.rs` (the heartbeat's
//! transaction), `release.rs` (letting go) and `session.rs` (sessions and errors).

use std::sync::Arc;
use std::time::Duration;

use super::zk_client as zk;
use super::{ClockReading, IssueLimit, Lease, WorkerRegistry};

mod acquire;
mod guard;
mod holder;
mod layout;
mod release;
mod renew;
mod session;
mod takeover;
use crate::error::Result;
use crate::runtime::BoxFuture;

pub(crate) use self::session::{session_err, zk_err};

/// Leaf's (Curator's) session timeout.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(6000);
/// How long a start-up waits for a ZooKeeper session before it gives up (and the
/// generator falls back to its cache file): short, so a down ensemble fails fast.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(3000);

#[derive(Debug, Default)]
struct State {
    client: Option<zk::Client>,
    /// Our node's full path, worker id and the data version we last saw or wrote.
    node: Option<(String, u32, i32)>,
    /// Whether this registry holds its identity in the in-process claims (`holder.rs`).
    claimed: bool,
    /// The session whose `live` node marks this registry as the identity's holder.
    live_session: Option<i64>,
    /// The `mzxid` of this holder's last write to the forever node.
    last_mzxid: Option<i64>,
    /// The data version of `ids/{id}` this holder last saw or wrote.
    id_version: i32,
    /// The forever node's `mzxid` as this holder last wrote (or took it over), shared
    /// with the guard.
    own: Option<self::guard::OwnWrite>,
    /// The watch on the forever node; dropping it stops the watch.
    guard: Option<self::guard::Guard>,
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
    /// The registry's clock, as seen by the last write (for the generator's clock check
    /// and the floor of an unrecorded lease). Apart from `state`, so taking it never
    /// finds it locked by a call in flight and skips it (review 2).
    reading: std::sync::Mutex<Option<ClockReading>>,
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
            reading: std::sync::Mutex::new(None),
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

    fn shared_with_foreign_servers(&self) -> bool {
        true
    }

    fn identity_is_configured(&self) -> bool {
        true
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
        self.reading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
