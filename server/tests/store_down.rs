//! `leafid serve` started while its MySQL store refuses connections: it starts anyway,
//! as Java Leaf does, answers Leaf's -1 and a 503 `/health` naming the cause, and issues
//! once the store is back, without a restart.

mod support;

#[path = "../../core/tests/support/delay_proxy.rs"]
mod delay_proxy;

use std::time::Duration;

use support::{create_tag, fresh, mysql_url, Server};

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
