//! `zookeeper-recycle` leases and floors carry a reading of ZooKeeper's clock; floors
//! written with credentials cannot be changed or deleted without them; the password
//! never shows. Against a real ZooKeeper (`LEAFID_ZK`).

use std::sync::Arc;
use std::time::Duration;

use leafid::snowflake::registry::{IssueLimit, WorkerRegistry, ZookeeperRecycleRegistry};
use leafid::{Error, SnowflakeGenerator};
use zookeeper_client as zk;

use super::harness::*;

#[test]
fn a_lease_and_each_floor_write_come_with_a_reading_of_zookeepers_clock() {
    let name = unique_name("clock");
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name.clone(),
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    assert_eq!(reg.take_clock_reading(), None);
    let r = reg.clone();
    let lease =
        leafid::runtime::block_on(async move { r.acquire(3, IssueLimit::closed()).await }).unwrap();
    let lease_path = format!("/snowflake/{name}/recycle/lease/{}", lease.worker_id);
    let last_path = format!("/snowflake/{name}/recycle/last/{}", lease.worker_id);
    let addr = zk_addr();
    let stat_of = move |path: String| {
        let addr = addr.clone();
        leafid::runtime::block_on(async move {
            let c = zk::Client::connect(&addr).await.unwrap();
            c.check_stat(&path).await.unwrap().expect("node exists")
        })
    };

    // Acquire: the ctime of the lease node it created.
    let reading = reg.take_clock_reading().expect("a reading after acquire");
    assert_eq!(reading.registry_ms, stat_of(lease_path.clone()).ctime);
    assert!(reading.source.contains(&lease_path), "{}", reading.source);
    assert!(reading.local_before_ms <= reading.local_after_ms);
    // Taken means gone.
    assert_eq!(reg.take_clock_reading(), None);

    // The first renew creates `last/{id}`, the next ones set it: the mtime each time.
    for bound in [1_000, 2_000] {
        let r = reg.clone();
        let l = lease.clone();
        leafid::runtime::block_on(async move { r.renew(&l, bound).await }).unwrap();
        let reading = reg.take_clock_reading().expect("a reading after renew");
        assert_eq!(reading.registry_ms, stat_of(last_path.clone()).mtime);
        assert!(reading.source.contains(&last_path), "{}", reading.source);
        assert!(reading.local_before_ms <= reading.local_after_ms);
    }
    let r = reg.clone();
    leafid::runtime::block_on(async move { r.release(&lease).await }).unwrap();
}

#[test]
fn floors_written_with_credentials_cannot_be_changed_or_deleted_without_them() {
    let chroot = unique_name("chroot").replace('-', "_");
    let name = unique_name("acl");
    let cache = tempfile::tempdir().unwrap();
    // The password needs percent-encoding; it must never show.
    let url = format!(
        "zookeeper-recycle://leafid:n0t%40shown@{}/{chroot}/{name}?ip=10.0.0.1&port=1&session_timeout_ms=1000",
        zk_addr()
    );
    let g = SnowflakeGenerator::builder()
        .registry_url(&url)
        .unwrap()
        .layout(small())
        .cache_dir(cache.path())
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(600))
        .build_blocking()
        .unwrap();
    // An id is issued only once a bound was written to `last/{id}`.
    g.next_id().unwrap();
    let id = g.worker_id();
    let last_dir = format!("/{chroot}/snowflake/{name}/recycle/last");
    let floor = format!("{last_dir}/{id}");
    let addr = zk_addr();
    leafid::runtime::block_on(async move {
        let nobody = zk::Client::connect(&addr).await.unwrap();
        // Below the chroot, readable by anyone.
        let (data, _) = nobody.get_data(&floor).await.unwrap();
        assert!(String::from_utf8(data).unwrap().contains("bound_ms"));
        // Neither the floor nor its directory takes a write from another identity:
        // no lower floor, no delete-and-recreate.
        for path in [&floor, &last_dir] {
            let (acl, _) = nobody.get_acl(path).await.unwrap();
            assert!(
                acl.iter()
                    .any(|a| a.scheme() == "digest" && a.id().starts_with("leafid:")),
                "{path}: {acl:?}"
            );
        }
        assert_eq!(
            nobody
                .set_data(&floor, br#"{"bound_ms":0}"#, None)
                .await
                .unwrap_err(),
            zk::Error::NoAuth
        );
        assert_eq!(
            nobody.delete(&floor, None).await.unwrap_err(),
            zk::Error::NoAuth
        );
        let sneaky = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        assert_eq!(
            nobody
                .create(&format!("{last_dir}/9"), br#"{"bound_ms":0}"#, &sneaky)
                .await
                .unwrap_err(),
            zk::Error::NoAuth
        );
    });
    g.close();
    // Nor does the password reach the cache file's name.
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!file.contains("n0t"), "{file}");
    }
}

#[test]
fn the_password_never_shows_in_descriptions_leases_or_errors() {
    let name = unique_name("shown");
    let connect = format!("leafid:n0tshown@{}", zk_addr());
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        connect,
        name,
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    assert!(!reg.describe().contains("n0tshown"), "{}", reg.describe());
    assert!(reg.describe().contains("leafid:***@"), "{}", reg.describe());
    assert!(!format!("{reg:?}").contains("n0tshown"));
    let r = reg.clone();
    let lease =
        leafid::runtime::block_on(async move { r.acquire(0, IssueLimit::closed()).await }).unwrap();
    assert!(!lease.location.contains("n0tshown"), "{}", lease.location);
    // A pool of one: a second holder fails, and says where without the password.
    let other = Arc::new(ZookeeperRecycleRegistry::new(
        format!("leafid:n0tshown@{}", zk_addr()),
        reg.lease_dir().split('/').nth(2).unwrap().to_string(),
        "10.0.0.2",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let o = other.clone();
    let err = leafid::runtime::block_on(async move { o.acquire(0, IssueLimit::closed()).await })
        .unwrap_err();
    assert!(matches!(err, Error::WorkerIdExhausted { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("n0tshown"), "{err:?}");
    // An unreachable ensemble: the error names it without the password.
    let down = ZookeeperRecycleRegistry::new(
        "leafid:n0tshown@127.0.0.1:1",
        "x",
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(500),
    );
    let err = leafid::runtime::block_on(async move { down.acquire(0, IssueLimit::closed()).await })
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains("n0tshown"), "{err:?}");
    let r = reg.clone();
    leafid::runtime::block_on(async move { r.release(&lease).await }).unwrap();
}
