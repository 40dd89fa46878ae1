//! The core's own ZooKeeper client against a real ZooKeeper (`LEAFID_ZK`): a chroot
//! from the connect string puts every path below it, digest credentials are sent on
//! every connection (new and resumed) and the creator ACL keeps other identities out;
//! an independent client (the `zookeeper-client` crate) checks what reached the server.
//! Protocol cases no real server produces (replies out of order, pings with newer
//! zxids) are unit tests with a scripted peer in `src/snowflake/registry/zk_client.rs`.

use std::time::Duration;

use leafid::snowflake::registry::zk_client::{
    self as ours, Acl, CreateMode, Op, OpResult, ZkError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

/// A node name no other test (or earlier run) uses.
fn unique(tag: &str) -> String {
    format!(
        "leafid_test_zkc_{tag}_{}_{}",
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

/// The independent client, with digest credentials when given.
async fn independent(auth: Option<&str>) -> zk::Client {
    let mut c = zk::Client::connector().with_session_timeout(Duration::from_secs(6));
    if let Some(auth) = auth {
        c = c.with_auth("digest", auth.as_bytes());
    }
    c.connect(&zk_addr()).await.expect("connect to LEAFID_ZK")
}

#[tokio::test]
async fn a_chroot_puts_every_path_below_it_and_paths_come_back_relative_to_it() {
    let root = format!("/{}", unique("chroot"));
    let c = ours(&format!("{}{root}", zk_addr())).await;
    assert_eq!(c.chroot(), Some(root.as_str()));
    // The chroot node does not exist yet: mkdir creates it (its parent is `/`).
    c.mkdir("/snowflake/pool").await.unwrap();
    let seq = c
        .create(
            "/snowflake/pool/n-",
            b"one",
            CreateMode::PersistentSequential,
        )
        .await
        .unwrap();
    assert!(seq.starts_with("/snowflake/pool/n-"), "{seq}");
    let results = c
        .multi(&[Op::Create {
            path: "/snowflake/pool/m",
            data: b"two",
            mode: CreateMode::Persistent,
            acl: Acl::Open,
        }])
        .await
        .unwrap();
    assert_eq!(results, vec![OpResult::Create("/snowflake/pool/m".into())]);
    let stat = c
        .set_data("/snowflake/pool/m", b"three", None)
        .await
        .unwrap();
    let mut names = c.list_children("/snowflake/pool").await.unwrap();
    names.sort();
    assert_eq!(
        names,
        vec!["m".to_string(), seq["/snowflake/pool/".len()..].to_string()]
    );
    assert!(c.check_stat("/").await.unwrap().is_some());

    // What the server holds: all of it below the chroot, nothing at the top.
    let other = independent(None).await;
    let (data, server_stat) = other.get_data(&format!("{root}{seq}")).await.unwrap();
    assert_eq!(data, b"one");
    let (data, server_stat_m) = other
        .get_data(&format!("{root}/snowflake/pool/m"))
        .await
        .unwrap();
    assert_eq!(data, b"three");
    assert_eq!(server_stat_m.mtime, stat.mtime);
    assert!(server_stat.ctime > 0);
    assert!(other.check_stat(&seq).await.unwrap().is_none());

    c.delete("/snowflake/pool/m", None).await.unwrap();
    assert!(other
        .check_stat(&format!("{root}/snowflake/pool/m"))
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn mkdir_creates_a_missing_chroot_node_but_never_the_nodes_above_it() {
    let top = format!("/{}", unique("nochroot"));
    let c = ours(&format!("{}{top}/inner", zk_addr())).await;
    let e = c.mkdir("/snowflake").await.unwrap_err();
    assert!(
        matches!(e, ZkError::NoChroot(ref r) if *r == format!("{top}/inner")),
        "{e:?}"
    );
    let other = independent(None).await;
    assert!(other.check_stat(&top).await.unwrap().is_none());

    // With the parent there, the chroot node itself is made.
    other
        .create(
            &top,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    c.mkdir("/snowflake").await.unwrap();
    assert!(other
        .check_stat(&format!("{top}/inner/snowflake"))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn digest_credentials_are_sent_and_the_creator_acl_keeps_other_identities_out() {
    let path = format!("/{}", unique("acl"));
    // A password that needs percent-encoding in the connect string.
    let password = "p@ss/w:rd";
    let connect = ours::connect_string(&zk_addr(), None, Some(("leafid", password)));
    assert!(!ours::shown_connect(&connect).contains("p%40ss"));
    let c = ours(&connect).await;
    assert!(c.has_auth());
    c.create_with_acl(
        &path,
        b"floor",
        CreateMode::Persistent,
        Acl::CreatorAllAnyoneRead,
    )
    .await
    .unwrap();

    // The ACL the server stored: the digest identity with every permission, anyone
    // else read only.
    let nobody = independent(None).await;
    let (acl, _) = nobody.get_acl(&path).await.unwrap();
    assert_eq!(acl.len(), 2, "{acl:?}");
    assert!(
        acl.iter()
            .any(|a| a.scheme() == "digest" && a.id().starts_with("leafid:")),
        "{acl:?}"
    );
    assert!(
        acl.iter()
            .any(|a| a.scheme() == "world" && a.id() == "anyone"),
        "{acl:?}"
    );

    // Others may read, not write nor delete.
    assert_eq!(nobody.get_data(&path).await.unwrap().0, b"floor");
    assert_eq!(
        nobody.set_data(&path, b"0", None).await.unwrap_err(),
        zk::Error::NoAuth
    );
    let wrong = ours(&ours::connect_string(
        &zk_addr(),
        None,
        Some(("leafid", "other")),
    ))
    .await;
    assert_eq!(
        wrong.set_data(&path, b"0", None).await.unwrap_err(),
        ZkError::NoAuth
    );
    let unauthenticated = ours(&zk_addr()).await;
    assert!(!unauthenticated.has_auth());
    assert_eq!(
        unauthenticated
            .set_data(&path, b"0", None)
            .await
            .unwrap_err(),
        ZkError::NoAuth
    );
    // Without credentials the creator ACL cannot even be asked for.
    assert_eq!(
        unauthenticated
            .create_with_acl(
                &format!("{path}_x"),
                b"",
                CreateMode::Persistent,
                Acl::CreatorAllAnyoneRead
            )
            .await
            .unwrap_err(),
        ZkError::InvalidAcl
    );
    // The same credentials, from another client, may.
    let same = independent(Some(&format!("leafid:{password}"))).await;
    same.set_data(&path, b"floor2", None).await.unwrap();
    c.set_data(&path, b"floor3", None).await.unwrap();
}

/// Opens a bare connection resuming `session` and closes it without ending the session:
/// the server drops the client's own connection for it (one connection per session),
/// so the client must resume.
async fn kick(session: &ours::SessionInfo) {
    let mut s = tokio::net::TcpStream::connect(zk_addr()).await.unwrap();
    let mut req = Vec::new();
    req.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    req.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    req.extend_from_slice(&6000i32.to_be_bytes());
    req.extend_from_slice(&session.id.to_be_bytes());
    req.extend_from_slice(&(session.password.len() as i32).to_be_bytes());
    req.extend_from_slice(&session.password);
    req.push(0); // not read-only
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    s.write_all(&frame).await.unwrap();
    // The connect response, or EOF when the client already took the session back: the
    // server has dropped the client's old connection either way.
    let mut buf = [0u8; 64];
    let _ = s.read(&mut buf).await;
}

#[tokio::test]
async fn credentials_are_sent_again_when_the_session_resumes_on_a_new_connection() {
    let path = format!("/{}", unique("reauth"));
    let c = ours(&format!("leafid:pw@{}", zk_addr())).await;
    c.create_with_acl(
        &path,
        b"0",
        CreateMode::Persistent,
        Acl::CreatorAllAnyoneRead,
    )
    .await
    .unwrap();
    let session_before = c.session_id();
    kick(c.session()).await;
    // The old connection is gone: a call either fails with ConnectionLoss or goes over
    // the resumed connection, which must be authenticated again.
    let mut tries = 0;
    let result = loop {
        match c.set_data(&path, b"1", None).await {
            Err(ZkError::ConnectionLoss) if tries < 200 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            other => break other,
        }
    };
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(c.session_id(), session_before);
    c.create_with_acl(
        &format!("{path}_after"),
        b"",
        CreateMode::Persistent,
        Acl::CreatorAllAnyoneRead,
    )
    .await
    .unwrap();
}
