//! `leafid serve` started while its MySQL store refuses connections: it starts anyway,
//! as Java Leaf does, answers Leaf's -1 and a 503 `/health` naming the cause, and issues
//! once the store is back, without a restart. The same for its snowflake registry
//! (ZooKeeper down, a worker id held by another server): Leaf's -4 at once meanwhile.

mod support;

#[path = "../../core/tests/support/delay_proxy.rs"]
mod delay_proxy;

use std::time::{Duration, Instant};

use support::{create_tag, fresh, mysql_url, zk, Server};

#[test]
fn serve_starts_with_the_store_down_and_issues_once_it_is_back() {
    let tag = fresh("srv_down");
    create_tag(&tag, 100);
    let u = url::Url::parse(&mysql_url()).unwrap();
    let proxy =
        delay_proxy::DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()));
    proxy.set_down(true);
    let mut via = u.clone();
    via.set_port(Some(proxy.addr.port())).unwrap();
    let server = Server::start(&["--url", via.as_str()]);

    let (status, _, body) = server.get(&format!("/api/segment/get/{tag}"));
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Result{id=-1, status=EXCEPTION}"), "{body}");
    let (status, _, health) = server.get("/health");
    assert_eq!(status, 503, "{health}");
    assert!(
        health.contains("\"DOWN\"") && health.contains("cannot connect to MySQL"),
        "{health}"
    );
    let (status, _, db) = server.get("/db");
    assert_eq!(status, 500, "{db}");
    assert!(
        !db.contains("Result{id="),
        "a monitor page is not an id request: {db}"
    );
    let (status, _, cache) = server.get("/cache");
    assert_eq!(status, 200, "the monitor page renders with no tag: {cache}");
    if let Some(pw) = u.password() {
        for page in [&health, &db, &cache] {
            assert!(!page.contains(pw), "a secret in a page: {page}");
        }
    }

    proxy.set_down(false);
    // The retry runs at most 5 s apart; allow for a slow machine.
    let mut ids = Vec::new();
    for _ in 0..300 {
        let (status, _, body) = server.get(&format!("/api/segment/get/{tag}"));
        if status == 200 {
            ids.push(body.trim().parse::<i64>().unwrap());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ids.len(), 1, "no id within 30 s of the store coming back");
    let (status, _, body) = server.get("/health");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"connected\""), "{body}");
    assert!(server.stop(), "SIGTERM exit");
}

#[test]
fn serve_refuses_to_start_on_a_store_that_refuses_its_configuration() {
    // Not worth retrying: a wrong password stays wrong; the operator gets the message.
    let mut u = url::Url::parse(&mysql_url()).unwrap();
    u.set_password(Some("certainly-not-the-password")).unwrap();
    let out = support::leafid()
        .args(["serve", "--listen", "127.0.0.1:0", "--url", u.as_str()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("segment store"), "{stderr}");
    assert!(
        !stderr.contains("certainly-not-the-password"),
        "the password shown: {stderr}"
    );
}

/// A request that cannot be answered gets Leaf's error within this: it catches the 10 s
/// a waiting call took (the core's `MAX_ASYNC_WAIT`), with room for a slow machine.
const AT_ONCE: Duration = Duration::from_secs(2);

/// GETs `path` until it answers 200 or `limit` passes: the body, or `None`.
fn first_200(server: &Server, path: &str, limit: Duration) -> Option<(String, Duration)> {
    let start = Instant::now();
    while start.elapsed() < limit {
        let (status, _, body) = server.get(path);
        if status == 200 {
            return Some((body, start.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The snowflake part of `/health`, and its status.
fn snowflake_health(server: &Server) -> (u16, serde_json::Value) {
    let (status, _, body) = server.get("/health");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    (status, v)
}

/// A snowflake request gets Leaf's -4 at once, and `/health` is 503 with a `waitingOn`
/// that contains `phrase`.
fn snowflake_waits_on(server: &Server, phrase: &str) {
    let asked = Instant::now();
    let (status, _, body) = server.get("/api/snowflake/get/x");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Result{id=-4, status=EXCEPTION}"), "{body}");
    assert!(
        asked.elapsed() < AT_ONCE,
        "not at once: {:?}",
        asked.elapsed()
    );
    let (status, health) = snowflake_health(server);
    assert_eq!(status, 503, "{health}");
    let why = health["snowflake"]["waitingOn"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains(phrase), "{health}");
}

#[test]
fn serve_starts_with_the_registry_down_answers_leafs_error_at_once_and_issues_once_it_is_back() {
    let tag = fresh("srv_zkdown");
    create_tag(&tag, 100);
    let proxy = delay_proxy::DelayProxy::start(zk());
    proxy.set_down(true);
    let url = format!("zookeeper-recycle://{}/{}", proxy.addr, fresh("srvzkdown"));
    let server = Server::start(&["--url", &mysql_url(), "--snowflake", &url]);
    assert!(
        server.startup.iter().any(|l| l.contains("retrying")),
        "the log says the registry is retried: {:?}",
        server.startup
    );

    let (status, _, body) = server.get(&format!("/api/segment/get/{tag}"));
    assert_eq!(status, 200, "segment mode serves meanwhile: {body}");
    let asked = Instant::now();
    let (status, _, body) = server.get("/api/snowflake/get/x");
    let took = asked.elapsed();
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Result{id=-4, status=EXCEPTION}"), "{body}");
    assert!(took < AT_ONCE, "Leaf's error after {took:?}, not at once");
    let (status, health) = snowflake_health(&server);
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["status"], "DOWN", "{health}");
    assert_eq!(health["segmentStore"], "connected", "{health}");
    let why = health["snowflake"]["waitingOn"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("unavailable"), "{health}");

    proxy.set_down(false);
    // The retry runs at most 5 s apart (and a ZooKeeper connect may take its 3 s
    // timeout); allow for a slow machine.
    let healed = first_200(&server, "/api/snowflake/get/x", Duration::from_secs(60));
    let (id, after) = healed.expect("no snowflake id within 60 s of the registry coming back");
    eprintln!("first snowflake id {after:?} after the heal");
    assert!(id.trim().parse::<i64>().unwrap() > 0);
    let (status, health) = snowflake_health(&server);
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "UP", "{health}");
    assert!(health["snowflake"]["workerId"].is_u64(), "{health}");
    assert!(server.stop(), "SIGTERM exit");
}

#[test]
fn serve_retries_a_worker_id_in_use_at_start_instead_of_exiting() {
    // Two servers given one identity: the second waits for it (as after a SIGKILL, for
    // a predecessor whose session has not expired yet) instead of exiting.
    let url = format!("zookeeper://{}/{}?port=9310", zk(), fresh("srvinuse"));
    // A short lookahead: each stop waits until the clock passes the last id, which a
    // new worker id's ids lead by about the lookahead + max_skew + 1 s.
    let first = Server::start(&["--snowflake", &url, "--lookahead", "4"]);
    let (status, _, _) = first.get("/api/snowflake/get/x");
    assert_eq!(status, 200);
    let second = Server::start(&["--snowflake", &url, "--lookahead", "4"]);
    assert!(
        second
            .startup
            .iter()
            .any(|l| l.contains("in use") && l.contains("retrying")),
        "the log names the holder and says it retries: {:?}",
        second.startup
    );
    snowflake_waits_on(&second, "in use");

    assert!(first.stop(), "SIGTERM exit releases the identity");
    let taken = first_200(&second, "/api/snowflake/get/x", Duration::from_secs(60));
    assert!(
        taken.is_some(),
        "the second server never took the released identity"
    );
    let (status, health) = snowflake_health(&second);
    assert_eq!(status, 200, "{health}");
    assert!(second.stop());
}

#[test]
fn serve_listens_while_its_first_registry_attempt_hangs_and_issues_once_it_answers() {
    // A registry that accepts the connection and never answers (a silent network, a
    // frozen ZooKeeper): with a 120 s connect timeout, the first attempt hangs for
    // 2 minutes. Before, the server did not listen until that attempt ended (here:
    // not within the 60 s the helper waits for "listening on").
    let proxy = delay_proxy::DelayProxy::start(zk());
    proxy.set_blackhole(true);
    let url = format!(
        "zookeeper-recycle://{}/{}?connect_timeout_ms=120000",
        proxy.addr,
        fresh("srvzksilent")
    );
    let server = Server::start(&["--snowflake", &url]);
    assert!(
        server
            .startup
            .iter()
            .any(|l| l.contains("no answer to the first attempt")),
        "the log says why it listens without the generator: {:?}",
        server.startup
    );
    snowflake_waits_on(&server, "has not answered yet");

    proxy.set_blackhole(false);
    let healed = first_200(&server, "/api/snowflake/get/x", Duration::from_secs(60));
    let (id, after) = healed.expect("no snowflake id within 60 s of the registry answering");
    eprintln!("first snowflake id {after:?} after the registry answered");
    assert!(id.trim().parse::<i64>().unwrap() > 0);
    let (status, health) = snowflake_health(&server);
    assert_eq!(status, 200, "{health}");
    assert!(server.stop(), "SIGTERM exit");
}

#[test]
fn serve_restarted_by_sigterm_during_a_registry_outage_serves_from_the_handover_at_once() {
    // Java Leaf restarted while ZooKeeper is down serves from its workerID.properties;
    // leafid on `postgres://?port=` (a layout no Java or fork server shares), after a
    // clean stop during the outage, serves from the bound the database still holds,
    // handed over in its cache file. Before: -4 until the database answered.
    let mut u =
        url::Url::parse(&std::env::var("LEAFID_PG_URL").expect("source .services/env")).unwrap();
    let proxy =
        delay_proxy::DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()));
    u.set_port(Some(proxy.addr.port())).unwrap();
    u.set_query(Some(&format!("port=9311&ip={}", fresh("srvhandover"))));
    let url = u.to_string();
    // A lookahead of 10 s leaves a handover of about 3 to 6 s after the stop below.
    let args = ["--snowflake", url.as_str(), "--lookahead", "10"];
    // A new identity's ids lead the clock (a handover is taken only once they no longer
    // do): wait until the first server's id is behind the clock, so the second server
    // starts at the clock, as a server that has run a while.
    let first = Server::start(&args);
    let (status, _, body) = first.get("/api/snowflake/get/x");
    assert_eq!(status, 200, "{body}");
    let led_until =
        leafid::snowflake::decode(body.trim().parse().unwrap(), &Default::default()).timestamp_ms;
    assert!(first.stop(), "SIGTERM exit");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    std::thread::sleep(Duration::from_millis(
        (led_until - now() + 200).clamp(0, 60_000) as u64,
    ));
    let second = Server::start(&args);
    let (status, _, body) = second.get("/api/snowflake/get/x");
    assert_eq!(status, 200, "{body}");
    let before: i64 = body.trim().parse().unwrap();
    proxy.set_down(true);
    // Past a heartbeat (3 s): a registry call has failed, so the stop knows the
    // registry is out of touch (a stop before any call failed hands nothing over).
    std::thread::sleep(Duration::from_millis(4_000));
    assert!(second.stop(), "SIGTERM exit during the outage");
    let third = Server::start(&args);
    let (status, _, body) = third.get("/api/snowflake/get/x");
    assert_eq!(status, 200, "no id from the handover: {body}");
    let id: i64 = body.trim().parse().unwrap();
    assert!(id > before, "{id} is not above {before}");
    proxy.set_down(false);
    assert!(third.stop(), "SIGTERM exit");
}
