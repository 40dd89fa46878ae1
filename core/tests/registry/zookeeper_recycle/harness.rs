//! What the `zookeeper-recycle` tests share: the ZooKeeper address, unique leaf names,
//! the small layout (a pool of four ids), generators on a registry the test keeps a
//! handle to, and ending a holder's session from outside.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::snowflake::registry::zk_client::Client as ZkClient;
use leafid::snowflake::registry::ZookeeperRecycleRegistry;
use leafid::snowflake::LEAF_EPOCH_MS;
use leafid::{Error, Layout, SnowflakeGenerator};
use zookeeper_client as zk;

pub fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

pub fn unique_name(tag: &str) -> String {
    format!(
        "leafid-test-recycle-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Ends the session `reg` holds its lease with, from outside, and returns once ZooKeeper
/// has freed the lease node (gone, or re-taken by another session).
///
/// A twin client attaches to the session and closes it. The holder's own client, kicked
/// off its connection by the attach, may re-attach first and keep the session alive (the
/// twin's close then fails quietly), and attaching can race with the holder's traffic and
/// come back SessionExpired: so repeat until an observer sees the node's owner change.
/// Returns the id of the session it ended.
pub fn end_held_session(reg: &Arc<ZookeeperRecycleRegistry>, name: &str) -> i64 {
    let r = reg.clone();
    let (id, info) = leafid::runtime::block_on(async move { r.held_session().await }).unwrap();
    let session = info.id;
    let path = format!("/snowflake/{name}/recycle/lease/{id}");
    let addr = zk_addr();
    leafid::runtime::block_on(async move {
        let observer = zk::Client::connect(&addr).await.unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            match observer.check_stat(&path).await.unwrap() {
                Some(stat) if stat.ephemeral_owner == session => {}
                _ => return session,
            }
            assert!(Instant::now() < until, "session {session:#x} never ended");
            let twin = ZkClient::attach(
                &addr,
                info.clone(),
                Duration::from_secs(6),
                Duration::from_secs(3),
            )
            .await;
            // Dropping the twin closes the shared session. An attach that fails (expired,
            // or the server dropping a session already closing) is retried above.
            if let Ok(twin) = twin {
                drop(twin);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Two worker bits: a pool of four ids.
pub fn small() -> Layout {
    Layout::new(41, 2, 20, LEAF_EPOCH_MS).unwrap()
}

pub fn url(name: &str) -> String {
    // 1 s: the shortest session the test ZooKeeper grants, so killed holders free fast.
    format!(
        "zookeeper-recycle://{}/{name}?ip=10.0.0.1&port=1&session_timeout_ms=1000",
        zk_addr()
    )
}

pub fn gen(
    name: &str,
    layout: Layout,
    cache: &std::path::Path,
) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(&url(name))?
        .layout(layout)
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(600))
        .build_blocking()
}

/// A generator on a registry the test keeps a handle to, heartbeat every 100 ms.
pub fn watched_generator(
    name: &str,
    cache: &std::path::Path,
) -> (Arc<ZookeeperRecycleRegistry>, SnowflakeGenerator) {
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name,
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let g = SnowflakeGenerator::builder()
        .custom_registry(reg.clone())
        .layout(small())
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(100))
        .lookahead(Duration::from_millis(500))
        .build_blocking()
        .unwrap();
    (reg, g)
}

/// Retries while the pool is full (ids of killed holders free after their session
/// timeout), and through a connection lost mid-start (a 1 s session on a loaded machine).
pub fn gen_when_free(name: &str, layout: Layout, cache: &std::path::Path) -> SnowflakeGenerator {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match gen(name, layout, cache) {
            Ok(g) => return g,
            Err(Error::WorkerIdExhausted { .. } | Error::RegistryUnavailable { .. })
                if Instant::now() < until =>
            {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("cannot take a worker id: {e}"),
        }
    }
}
