//! A scripted peer on loopback speaking ZooKeeper's wire protocol, for replies no
//! real server sends on purpose: replies out of order or for unknown xids (a server
//! answers each connection's requests strictly in order; only a broken server or a
//! broken middlebox would do otherwise), and pings or watch events carrying a zxid
//! newer than anything this client was answered (a real server's ping replies carry
//! its own latest zxid, but making a second server lag behind it on cue is beyond a
//! test). The real server covers everything else (`core/tests/zookeeper_client/`).
//!
//! A file of its own: these tests need the codec, the handshake and the session task at
//! once, and are longer than any one of them.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::codec::{In, Out, OP_AUTH, XID_AUTH, XID_PING, XID_WATCH_EVENT};
use super::handshake::read_frame;
use super::{Client, SessionState, ZkError};

/// Reads one frame from the client.
async fn recv(s: &mut TcpStream) -> Vec<u8> {
    read_frame(s).await.expect("a frame from the client")
}

async fn send(s: &mut TcpStream, out: Out) {
    s.write_all(&out.framed())
        .await
        .expect("write to the client");
}

/// Accepts a connection and answers its connect request: session 0x42, 120 s, so
/// that within a test's guard the client neither pings nor drops a connection
/// for silence. Returns the stream and the last zxid the client said it had seen.
async fn accept(l: &TcpListener) -> (TcpStream, i64) {
    let (mut s, _) = l.accept().await.unwrap();
    let req = recv(&mut s).await;
    let mut r = In(&req);
    r.i32().unwrap();
    let last_zxid = r.i64().unwrap();
    let mut resp = Out::default();
    resp.i32(0)
        .i32(120_000)
        .i64(0x42)
        .bytes(&[7; 16])
        .bool(false);
    send(&mut s, resp).await;
    (s, last_zxid)
}

/// The xid of a request frame.
fn xid_of(frame: &[u8]) -> i32 {
    In(frame).i32().unwrap()
}

fn reply(xid: i32, zxid: i64, err: i32) -> Out {
    let mut o = Out::default();
    o.i32(xid).i64(zxid).i32(err);
    o
}

fn stat_bytes(o: &mut Out) {
    o.i64(1)
        .i64(2)
        .i64(3)
        .i64(4)
        .i32(0)
        .i32(0)
        .i32(0)
        .i64(0)
        .i32(0)
        .i32(0)
        .i64(0);
}

/// A guard against a hang on broken code; no timing is asserted.
async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("the client never answered")
}

async fn wait_for(client: &Client, want: SessionState) {
    let mut w = client.state_watcher();
    within(w.wait_for(|s| *s == want)).await.unwrap();
}

#[tokio::test]
async fn a_reply_for_an_unknown_xid_drops_the_connection() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let peer = async {
        let (mut s, _) = accept(&l).await;
        let req = recv(&mut s).await;
        send(&mut s, reply(xid_of(&req) + 1000, 5, 0)).await;
        // The client must close this connection (nothing else comes first)…
        assert!(
            read_frame(&mut s).await.is_err(),
            "the connection stayed open"
        );
        // …and resume the session on a new one.
        let (s2, _) = accept(&l).await;
        (s, s2)
    };
    let client = async {
        let c = Client::connect(&addr, Duration::from_secs(30), Duration::from_secs(5))
            .await
            .unwrap();
        let r = c.check_stat("/x").await;
        (c, r)
    };
    let (_peer, (c, r)) = within(async { tokio::join!(peer, client) }).await;
    assert_eq!(r, Err(ZkError::ConnectionLoss));
    wait_for(&c, SessionState::SyncConnected).await;
}

#[tokio::test]
async fn a_reply_for_a_later_call_than_the_oldest_fails_both_calls() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let c = Client::connect(&addr, Duration::from_secs(30), Duration::from_secs(5));
    let (peer, c) = within(async { tokio::join!(accept(&l), c) }).await;
    let (mut s, _) = peer;
    let c = c.unwrap();
    let first = c.check_stat("/a");
    let second = c.check_stat("/b");
    let peer = async {
        let r1 = recv(&mut s).await;
        let r2 = recv(&mut s).await;
        assert_eq!(xid_of(&r2), xid_of(&r1) + 1);
        // The second call's reply first: a well-formed exists reply, wrong order.
        let mut out = reply(xid_of(&r2), 9, 0);
        stat_bytes(&mut out);
        send(&mut s, out).await;
        s
    };
    let (_s, a, b) = within(async { tokio::join!(peer, first, second) }).await;
    assert_eq!(a, Err(ZkError::ConnectionLoss));
    assert_eq!(b, Err(ZkError::ConnectionLoss));
}

#[tokio::test]
async fn resume_sends_the_zxid_of_the_last_reply_not_of_pings_or_events() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let c = Client::connect(&addr, Duration::from_secs(30), Duration::from_secs(5));
    let (peer, c) = within(async { tokio::join!(accept(&l), c) }).await;
    let (mut s, first_zxid) = peer;
    assert_eq!(first_zxid, 0);
    let c = c.unwrap();
    let call = c.check_stat("/a");
    let peer = async {
        let req = recv(&mut s).await;
        // A watch event and a ping reply with zxids the client never saw a
        // reply for, then the reply (zxid 5), then another ping.
        let mut event = reply(XID_WATCH_EVENT, 900, 0);
        event.i32(3).i32(3).str("/a");
        send(&mut s, event).await;
        send(&mut s, reply(XID_PING, 901, 0)).await;
        send(&mut s, reply(xid_of(&req), 5, -101)).await;
        send(&mut s, reply(XID_PING, 902, 0)).await;
        s
    };
    let (s, r) = within(async { tokio::join!(peer, call) }).await;
    assert_eq!(r, Ok(None));
    // Drop the connection: the client resumes and says which zxid it has seen.
    drop(s);
    let (_s2, resumed_zxid) = within(accept(&l)).await;
    assert_eq!(resumed_zxid, 5);
}

#[tokio::test]
async fn refused_credentials_fail_the_connect_without_retrying() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let peer = async {
        let (mut s, _) = accept(&l).await;
        let auth = recv(&mut s).await;
        let mut r = In(&auth);
        assert_eq!(r.i32().unwrap(), XID_AUTH);
        assert_eq!(r.i32().unwrap(), OP_AUTH);
        r.i32().unwrap();
        assert_eq!(r.string().unwrap(), "digest");
        assert_eq!(r.bytes().unwrap(), b"leaf:pw".to_vec());
        send(&mut s, reply(XID_AUTH, 0, -115)).await;
        s
    };
    // Two hosts, both this peer, which answers one connection only: a client
    // that tried the next host would wait out its connect timeout there and
    // end with NoHosts instead.
    let connect = format!("leaf:pw@{addr},{addr}");
    let client = Client::connect(&connect, Duration::from_secs(30), Duration::from_secs(5));
    let (_s, r) = within(async { tokio::join!(peer, client) }).await;
    match r {
        Err(ZkError::AuthFailed(msg)) => {
            assert!(msg.contains("leaf") && !msg.contains("pw"), "{msg}")
        }
        other => panic!("expected AuthFailed, got {other:?}"),
    }
}
