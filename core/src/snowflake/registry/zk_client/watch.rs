//! One-shot watches: what a [`Watch`] reports ([`WatchEvent`], [`WatchKind`]), the
//! registration a watched call hands to the session task, and the table the task
//! completes them from when the server's notification arrives (`fire`).
//!
//! Apart from the session task so that the watch semantics (which event fires which
//! kind of watch, and that a watch that can no longer fire reports
//! [`WatchKind::SessionLost`]) read in one place.

use tokio::sync::oneshot;

/// What fired a [`Watch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    /// The node was created (a watch set by [`Client::watch_node`](super::Client::watch_node) on a missing node).
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data was written (even with the same bytes).
    NodeDataChanged,
    /// A child was added or removed.
    NodeChildrenChanged,
    /// The watch can no longer fire: the connection dropped, the session moved to
    /// another server, expired or was closed. Watches are not re-registered; read the
    /// node again to learn what happened meanwhile.
    SessionLost,
}

/// What a [`Watch`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchKind,
    /// The watched path (relative to the chroot, as given to the call that set it).
    pub path: String,
}

/// Which of ZooKeeper's watch tables a watch is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum WatchClass {
    /// Set by `exists`: fires on created, deleted, data changed.
    Node,
    /// Set by `getChildren`: fires on children changed, deleted.
    Children,
}

/// A watch on its way to the session task.
pub(super) struct WatchReg {
    pub(super) class: WatchClass,
    /// The path as the server knows it (below the chroot): events name it so.
    pub(super) server_path: String,
    /// The path as the caller gave it, for the event.
    pub(super) client_path: String,
    pub(super) tx: oneshot::Sender<WatchEvent>,
}

/// A one-shot ZooKeeper watch: completes with the first event for its path and kind,
/// or with [`WatchKind::SessionLost`] once it can no longer fire (see the module doc).
/// Dropping it forgets the watch on this side (the server's one-shot entry stays until
/// it fires, harmlessly).
#[derive(Debug)]
pub struct Watch {
    pub(super) rx: oneshot::Receiver<WatchEvent>,
    pub(super) path: String,
}

impl std::future::Future for Watch {
    type Output = WatchEvent;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<WatchEvent> {
        match std::pin::Pin::new(&mut self.rx).poll(cx) {
            std::task::Poll::Ready(Ok(event)) => std::task::Poll::Ready(event),
            std::task::Poll::Ready(Err(_)) => std::task::Poll::Ready(WatchEvent {
                kind: WatchKind::SessionLost,
                path: self.path.clone(),
            }),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// Watches registered on the current connection, by server path and table.
pub(super) type WatchTable = std::collections::HashMap<(String, WatchClass), Vec<WatchReg>>;

/// Completes the watches in `watches` that a server notification (`kind`, server
/// `path`) fires.
pub(super) fn fire(watches: &mut WatchTable, kind: i32, path: &str) {
    let (event, classes): (WatchKind, &[WatchClass]) = match kind {
        1 => (WatchKind::NodeCreated, &[WatchClass::Node]),
        2 => (
            WatchKind::NodeDeleted,
            &[WatchClass::Node, WatchClass::Children],
        ),
        3 => (WatchKind::NodeDataChanged, &[WatchClass::Node]),
        4 => (WatchKind::NodeChildrenChanged, &[WatchClass::Children]),
        // -1: a state change (not sent over the wire for this session's own
        // state); 5..: watch-removed notices for calls this client never makes.
        _ => return,
    };
    for class in classes {
        for w in watches
            .remove(&(path.to_string(), *class))
            .unwrap_or_default()
        {
            let _ = w.tx.send(WatchEvent {
                kind: event,
                path: w.client_path,
            });
        }
    }
}
