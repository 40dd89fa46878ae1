//! The holder's watchers: they stop issuing ([`IssueLimit::lose`]) the moment the lease
//! is lost, rather than at the next renew.
//!
//! - [`session`]: a server reported the session ended (Expired), or it was closed.
//! - [`records`]: ZooKeeper watches on the holder's own records and on the pool: the
//!   lease node deleted, re-taken or written; `last/{id}` deleted or written by anyone
//!   but this holder ([`FloorState`] tells our own writes apart); the fork's
//!   `notuse`/`inuse` appearing under `/snowflake/{name}/recycle`, or that tree deleted.
//!
//! ZooKeeper watches are one-shot: each one is read and armed again in one call after it
//! fires, so nothing between the event and the new watch is missed. A watch that can no
//! longer fire because the connection dropped (`SessionLost`) is no loss: the holder
//! keeps issuing up to the bound `last/{id}` holds (fence rule 5), and every watch is
//! armed again, reading each record afresh, as soon as the session is back.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use super::foreign;
use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::IssueLimit;

/// What this holder knows of its `last/{id}`: the version it last read or wrote, and
/// whether a write of its own is in flight (whose result the watcher may see first).
#[derive(Debug)]
pub(super) struct FloorState {
    /// The version, -1 while the node is missing.
    version: AtomicI64,
    writing: AtomicBool,
}

impl FloorState {
    pub fn new(version: Option<i32>) -> FloorState {
        FloorState {
            version: AtomicI64::new(version.map_or(-1, i64::from)),
            writing: AtomicBool::new(false),
        }
    }

    /// The version last read or written, `None` while missing.
    pub fn version(&self) -> Option<i32> {
        let v = self.version.load(Ordering::SeqCst);
        (v >= 0).then_some(v as i32)
    }

    /// A write of our own is about to be sent.
    pub fn begin_write(&self) {
        self.writing.store(true, Ordering::SeqCst);
    }

    /// Our write succeeded and left the node at `version`.
    pub fn written(&self, version: i32) {
        self.version.store(i64::from(version), Ordering::SeqCst);
        self.writing.store(false, Ordering::SeqCst);
    }

    /// Our write failed.
    pub fn write_failed(&self) {
        self.writing.store(false, Ordering::SeqCst);
    }

    /// True when `seen` (the node's version, `None` when missing) is ours: the version
    /// we know, or the next one while a write of ours is in flight.
    pub fn is_ours(&self, seen: Option<i32>) -> bool {
        // `writing` first: `written` stores the version before clearing it.
        let writing = self.writing.load(Ordering::SeqCst);
        let known = self.version.load(Ordering::SeqCst);
        let seen = seen.map_or(-1, i64::from);
        seen == known || (writing && seen == known + 1)
    }
}

/// Stops issuing when the session ends (a server reported it expired, or it was
/// closed). A connection merely down is no loss (fence rule 5).
pub(super) fn session(
    client: &zk::Client,
    watching: Arc<AtomicBool>,
    limit: Arc<IssueLimit>,
    connect: String,
) -> tokio::task::JoinHandle<()> {
    let mut states = client.state_watcher();
    tokio::spawn(async move {
        let mut state = *states.borrow_and_update();
        loop {
            if state.is_terminated() {
                // SeqCst: pairs with the store in `Held::stop_watching`.
                if watching.load(Ordering::SeqCst) {
                    limit.lose();
                    tracing::warn!(%connect, ?state, "ZooKeeper session ended; worker id lease lost, issuing stopped");
                }
                return;
            }
            if state == zk::SessionState::Disconnected {
                tracing::info!(%connect, "ZooKeeper connection down; issuing goes on up to the last bound ZooKeeper holds");
            }
            state = match states.changed().await {
                Ok(()) => *states.borrow_and_update(),
                // The session task ended without a last word: as good as closed.
                Err(_) => zk::SessionState::Closed,
            };
        }
    })
}

/// The paths [`records`] watches.
#[derive(Debug)]
pub(super) struct Records {
    pub recycle_dir: String,
    pub lease_path: String,
    /// The lease node's version, which nobody but an operator changes.
    pub lease_version: i32,
    pub last_path: String,
    pub floor: Arc<FloorState>,
}

/// Watches the holder's records and the pool; stops issuing at the first sign of
/// another writer (see the module doc).
pub(super) fn records(
    client: &zk::Client,
    paths: Records,
    watching: Arc<AtomicBool>,
    limit: Arc<IssueLimit>,
) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    tokio::spawn(async move {
        let cause = watch_records(&client, &paths).await;
        if watching.load(Ordering::SeqCst) {
            limit.lose();
            tracing::warn!(cause = %cause, lease = %paths.lease_path,
                "worker id lease lost; issuing stopped");
        }
    })
}

/// Why a round of watches ended.
enum Stop {
    /// The connection dropped: arm again once it is back.
    Dropped,
    /// The lease is lost, for this reason.
    Lost(String),
}

/// A failed watch call: a connection loss is [`Stop::Dropped`], anything else a loss.
fn failed(path: &str, e: zk::ZkError) -> Stop {
    match e {
        zk::ZkError::ConnectionLoss => Stop::Dropped,
        e => Stop::Lost(format!("cannot watch {path}: {e}")),
    }
}

/// Runs until a watch shows the lease lost; returns why.
async fn watch_records(client: &zk::Client, p: &Records) -> String {
    let mut states = client.state_watcher();
    loop {
        match watch_round(client, p).await {
            Stop::Lost(cause) => return cause,
            Stop::Dropped => {
                // Rule 5: issuing goes on meanwhile; the records are read again once the
                // session is back (or the session watcher reports its end).
                let state = match states
                    .wait_for(|s| *s != zk::SessionState::Disconnected)
                    .await
                {
                    Ok(s) => *s,
                    Err(_) => zk::SessionState::Closed,
                };
                if state.is_terminated() {
                    return format!("the ZooKeeper session ended ({state})");
                }
            }
        }
    }
}

/// Arms the three watches and follows them until one shows a loss or the connection
/// drops.
async fn watch_round(client: &zk::Client, p: &Records) -> Stop {
    let session = client.session_id();
    let pool = || async {
        match client.watch_children(&p.recycle_dir).await {
            Ok((children, w)) => {
                let found = foreign::fork_nodes(&children);
                if found.is_empty() {
                    Ok(w)
                } else {
                    Err(Stop::Lost(format!(
                        "the NotFound9 fork's zk_recycle layout appeared: {} under {}",
                        found.join(" and "),
                        p.recycle_dir
                    )))
                }
            }
            Err(zk::ZkError::NoNode) => Err(Stop::Lost(format!("{} was deleted", p.recycle_dir))),
            Err(e) => Err(failed(&p.recycle_dir, e)),
        }
    };
    let lease = || async {
        match client.watch_node(&p.lease_path).await {
            Ok((Some(stat), w)) if stat.ephemeral_owner == session => {
                if stat.version == p.lease_version {
                    Ok(w)
                } else {
                    Err(Stop::Lost(format!(
                        "{} was written by another writer",
                        p.lease_path
                    )))
                }
            }
            Ok((Some(stat), _)) => Err(Stop::Lost(format!(
                "{} is owned by session {:#x} now",
                p.lease_path, stat.ephemeral_owner
            ))),
            Ok((None, _)) => Err(Stop::Lost(format!("{} was deleted", p.lease_path))),
            Err(e) => Err(failed(&p.lease_path, e)),
        }
    };
    let floor = || async {
        match client.watch_node(&p.last_path).await {
            Ok((stat, w)) => {
                let seen = stat.map(|s| s.version);
                if p.floor.is_ours(seen) {
                    Ok(w)
                } else if seen.is_none() {
                    Err(Stop::Lost(format!("{} was deleted", p.last_path)))
                } else {
                    Err(Stop::Lost(format!(
                        "{} was written by another writer",
                        p.last_path
                    )))
                }
            }
            Err(e) => Err(failed(&p.last_path, e)),
        }
    };
    let (mut wp, mut wl, mut wf) = match (pool().await, lease().await, floor().await) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e,
    };
    loop {
        let (which, ev) = tokio::select! {
            ev = &mut wp => (0, ev),
            ev = &mut wl => (1, ev),
            ev = &mut wf => (2, ev),
        };
        if ev.kind == zk::WatchKind::SessionLost {
            return Stop::Dropped;
        }
        let step = match which {
            0 => pool().await.map(|w| wp = w),
            1 => lease().await.map(|w| wl = w),
            _ => floor().await.map(|w| wf = w),
        };
        if let Err(stop) = step {
            return stop;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_write_in_flight_is_not_another_writers() {
        let f = FloorState::new(None);
        assert!(f.is_ours(None));
        assert!(!f.is_ours(Some(0)), "created by someone else");
        f.begin_write();
        assert!(f.is_ours(Some(0)), "our create, seen before its reply");
        f.written(0);
        assert!(f.is_ours(Some(0)));
        assert!(!f.is_ours(None), "deleted");
        assert!(!f.is_ours(Some(1)), "written by someone else");
        f.begin_write();
        f.write_failed();
        assert!(!f.is_ours(Some(1)));
    }
}
