//! The core ZooKeeper client's one-shot watches against a real ZooKeeper (`LEAFID_ZK`):
//! a data change, a delete, a creation and a child added each fire the watch set on the
//! path (also below a chroot, with the path as the caller gave it), and a session that
//! ends or a connection that drops completes every outstanding watch with `SessionLost`
//! (watches are not re-registered on a new connection).

use std::time::Duration;

use leafid::snowflake::registry::zk_client::{self as ours, CreateMode, WatchKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

/// A node name no other test (or earlier run) uses.
fn unique(tag: &str) -> String {
    format!(
        "leafid_test_zkw_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

async fn ours(connect: &str) -> ours::Client {
    ours::Client::connect(connect, Duration::from_secs(6), Duration::from_secs(3))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", ours::shown_connect(connect)))
}

/// A guard against a hang on broken code; no timing is asserted.
async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("the watch never fired")
}

#[tokio::test]
async fn a_data_change_a_delete_a_creation_and_a_child_added_each_fire() {
    let watcher = ours(&zk_addr()).await;
    let writer = ours(&zk_addr()).await;
    let path = format!("/{}", unique("fire"));

    // Created: a watch on a missing node.
    let (stat, created) = watcher.watch_node(&path).await.unwrap();
    assert_eq!(stat, None);
    writer
        .create(&path, b"a", CreateMode::Persistent)
        .await
        .unwrap();
    let e = within(created).await;
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::NodeCreated, &*path));

    // Data changed, by another session.
    let (stat, changed) = watcher.watch_node(&path).await.unwrap();
    let stat = stat.expect("the node exists");
    let written = writer.set_data(&path, b"b", None).await.unwrap();
    assert!(written.mzxid > stat.mzxid);
    let e = within(changed).await;
    assert_eq!(e.kind, WatchKind::NodeDataChanged);

    // A child added fires the children watch, not a node watch.
    let (children, kids) = watcher.watch_children(&path).await.unwrap();
    assert!(children.is_empty());
    let (_, node_watch) = watcher.watch_node(&path).await.unwrap();
    writer
        .create(&format!("{path}/c"), b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let e = within(kids).await;
    assert_eq!(
        (e.kind, e.path.as_str()),
        (WatchKind::NodeChildrenChanged, &*path)
    );

    // Deleted: the node watch set before fires (with NodeDeleted, the child's creation
    // did not fire it), and so does a children watch.
    let (_, kids) = watcher.watch_children(&path).await.unwrap();
    writer.delete(&format!("{path}/c"), None).await.unwrap();
    assert_eq!(within(kids).await.kind, WatchKind::NodeChildrenChanged);
    let (_, kids) = watcher.watch_children(&path).await.unwrap();
    writer.delete(&path, None).await.unwrap();
    assert_eq!(within(node_watch).await.kind, WatchKind::NodeDeleted);
    assert_eq!(within(kids).await.kind, WatchKind::NodeDeleted);

    // A missing node's children cannot be watched.
    assert_eq!(
        watcher.watch_children(&path).await.err(),
        Some(ours::ZkError::NoNode)
    );
}

#[tokio::test]
async fn watches_honour_the_chroot() {
    let root = format!("/{}", unique("chroot"));
    let watcher = ours(&format!("{}{root}", zk_addr())).await;
    watcher.mkdir("/n").await.unwrap();
    // The writer outside the chroot writes the full path.
    let writer = ours(&zk_addr()).await;
    let (_, w) = watcher.watch_node("/n").await.unwrap();
    writer
        .set_data(&format!("{root}/n"), b"x", None)
        .await
        .unwrap();
    let e = within(w).await;
    assert_eq!(
        (e.kind, e.path.as_str()),
        (WatchKind::NodeDataChanged, "/n")
    );
}

#[tokio::test]
async fn a_closed_session_fires_session_lost() {
    let path = format!("/{}", unique("closed"));
    let watcher = ours(&zk_addr()).await;
    watcher
        .create(&path, b"", CreateMode::Persistent)
        .await
        .unwrap();
    let (_, w) = watcher.watch_node(&path).await.unwrap();
    // Dropping the last clone closes the session: the watch can never fire.
    drop(watcher);
    let e = within(w).await;
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::SessionLost, &*path));
}

/// Takes `session` over on a bare connection, which makes the server drop the client's
/// own connection (one connection per session).
async fn kick(session: &ours::SessionInfo) {
    let mut s = tokio::net::TcpStream::connect(zk_addr()).await.unwrap();
    let mut req = Vec::new();
    req.extend_from_slice(&0i32.to_be_bytes());
    req.extend_from_slice(&0i64.to_be_bytes());
    req.extend_from_slice(&6000i32.to_be_bytes());
    req.extend_from_slice(&session.id.to_be_bytes());
    req.extend_from_slice(&(session.password.len() as i32).to_be_bytes());
    req.extend_from_slice(&session.password);
    req.push(0);
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    s.write_all(&frame).await.unwrap();
    let mut buf = [0u8; 64];
    let _ = s.read(&mut buf).await;
}

#[tokio::test]
async fn a_dropped_connection_fires_session_lost_even_when_the_session_resumes() {
    let path = format!("/{}", unique("kicked"));
    let watcher = ours(&zk_addr()).await;
    watcher
        .create(&path, b"", CreateMode::Persistent)
        .await
        .unwrap();
    let (_, w) = watcher.watch_node(&path).await.unwrap();
    kick(watcher.session()).await;
    let e = within(w).await;
    assert_eq!(e.kind, WatchKind::SessionLost);
    // The session itself lives on: a new watch on it fires as usual.
    let mut tries = 0;
    let (_, w) = loop {
        match watcher.watch_node(&path).await {
            Err(ours::ZkError::ConnectionLoss) if tries < 200 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            other => break other.unwrap(),
        }
    };
    let writer = ours(&zk_addr()).await;
    writer.set_data(&path, b"y", None).await.unwrap();
    assert_eq!(within(w).await.kind, WatchKind::NodeDataChanged);
}
