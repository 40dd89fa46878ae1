//! A live holder's watch on its forever node (fence rule 2, seen at once).
//!
//! From `acquire` to `release` a task on the core's runtime keeps a ZooKeeper watch on
//! the holder's forever node and lowers the generator's [`IssueLimit`] the moment the node
//! is deleted (a `deleteall`, a migration: the sequence restarts at 0 and a newcomer may
//! get this id) or written by anyone else (its `mzxid` is not this holder's last write:
//! a Java Leaf server restarted on this identity, an operator), rather than at the next
//! heartbeat. The holder's own writes hold [`OwnWrite`] while in flight, so the task
//! never mistakes them for a foreign one.
//!
//! Watches are not re-registered by the client: when one reports `SessionLost`, the task
//! reads the node again with a new watch. A session a server reports ended (expired,
//! closed) is a lost lease; a connection merely down is retried for as long as it takes,
//! and the node is checked again as soon as the session is back. On a loss the task also
//! gives the worker-id claim back, so a newcomer waiting for it starts with this holder's
//! bound as its floor.
//!
//! A connection down is no loss (fence rule 5): the holder cannot see a deletion then,
//! but it issues only up to the bound ZooKeeper holds (rule 1: renewals fail meanwhile),
//! and whoever takes the id or the wiped tree starts above that bound. So it keeps
//! issuing through the outage and stops at that bound.

use std::sync::Arc;
use std::time::Duration;

use crate::snowflake::registry::zk_client as zk;
use crate::snowflake::registry::IssueLimit;

/// The `mzxid` of the holder's last write to its forever node. Locked across each of the
/// holder's writes, so the guard compares only settled values.
pub(super) type OwnWrite = Arc<tokio::sync::Mutex<i64>>;

/// Aborts the guard task when dropped (at release, or when the registry goes).
#[derive(Debug)]
pub(super) struct Guard(tokio::task::JoinHandle<()>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts guarding `path` for the holder of worker `id` whose claim is `id_live`.
pub(super) fn start(
    client: zk::Client,
    path: String,
    id_live: String,
    own: OwnWrite,
    limit: Arc<IssueLimit>,
) -> Guard {
    Guard(crate::runtime::spawn(run(
        client, path, id_live, own, limit,
    )))
}

async fn run(
    client: zk::Client,
    path: String,
    id_live: String,
    own: OwnWrite,
    limit: Arc<IssueLimit>,
) {
    let why = watch(&client, &path, &own).await;
    tracing::warn!(cause = %why, "the forever node changed under this holder: stopping at once");
    limit.lose();
    // The generator has stopped; its bound is in ids/{id}: a newcomer waiting for this id
    // may take it now with that floor.
    if let Ok(Some(stat)) = client.check_stat(&id_live).await {
        if stat.ephemeral_owner == client.session_id() {
            let _ = client.delete(&id_live, Some(stat.version)).await;
        }
    }
}

/// Watches the forever node until it is deleted, written by another process, or the
/// session ends; returns why.
async fn watch(client: &zk::Client, path: &str, own: &OwnWrite) -> String {
    loop {
        let checked = {
            let mine = own.lock().await;
            client
                .watch_node(path)
                .await
                .map(|(stat, w)| (stat, w, *mine))
        };
        let watch = match checked {
            Ok((None, _, _)) => return format!("{path} was deleted"),
            Ok((Some(stat), _, mine)) if stat.mzxid != mine => {
                return format!(
                    "{path} was written by another process (zxid {:#x}, this holder last wrote {mine:#x}), \
                     most likely a Java Leaf server started with this ip:port",
                    stat.mzxid
                )
            }
            Ok((Some(_), watch, _)) => watch,
            Err(_) if client.state().is_terminated() => {
                return format!("the ZooKeeper session ended ({})", client.state())
            }
            Err(e) => {
                tracing::debug!(error = %e, %path, "cannot watch the forever node yet; retrying");
                let mut state = client.state_watcher();
                let _ = tokio::time::timeout(
                    Duration::from_millis(500),
                    state.wait_for(|s| *s != zk::SessionState::Disconnected),
                )
                .await;
                continue;
            }
        };
        // Whatever fired (a write of ours, a foreign one, a deletion, SessionLost), the
        // next round reads the node again.
        let _ = watch.await;
    }
}
