//! `leafid serve` against the real MariaDB and ZooKeeper: every endpoint's status and
//! body as leaf-spec §5 describes Java Leaf's, error cases included.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::{create_tag, fresh, mysql_url, zk, Server};

fn leaf_error(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not Spring's JSON error ({e}): {body}"))
}

#[test]
fn segment_ids_are_plain_text_and_increase() {
    let tag = fresh("srv_seg");
    create_tag(&tag, 100);
    // --thread-chunk 0: strict order across requests, as Java Leaf gives ids.
    let server = Server::start(&["--url", &mysql_url(), "--thread-chunk", "0"]);
    let mut last = 0;
    for _ in 0..250 {
        let (status, ctype, body) = server.get(&format!("/api/segment/get/{tag}"));
        assert_eq!(status, 200, "{body}");
        assert!(ctype.starts_with("text/plain"), "{ctype}");
        let id: i64 = body
            .parse()
            .unwrap_or_else(|_| panic!("not a decimal id: {body:?}"));
        assert!(id > last, "{id} after {last}");
        last = id;
    }
    // 250 ids with step 100 crossed at least two segment boundaries.
    assert!(last > 250);
}

/// The default, per-thread chunks: requests on many connections at once (so on every
/// server thread) never get one id twice, across several segments.
#[test]
fn segment_ids_from_many_connections_at_once_are_unique() {
    let tag = fresh("srv_chunk");
    create_tag(&tag, 100);
    let server = Server::start(&["--url", &mysql_url()]);
    let url = format!("{}/api/segment/get/{tag}", server.base);
    let ids: Vec<i64> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    (0..150)
                        .map(|_| {
                            let (status, _, body) = support::get(&url);
                            assert_eq!(status, 200, "{body}");
                            body.parse::<i64>().unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect()
    });
    let unique: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an id was issued twice");
    assert!(ids.iter().all(|id| *id > 0));
}

/// A chunk past the core's limit is refused at start with the core's message.
#[test]
fn a_thread_chunk_past_the_limit_is_refused_at_start() {
    let out = support::leafid()
        .args(["serve", "--url", &mysql_url(), "--thread-chunk", "5000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("thread_chunk 5000 out of range"), "{err}");
}

#[test]
fn unknown_key_gets_leafs_minus_two_as_http_500() {
    let server = Server::start(&["--url", &mysql_url()]);
    let tag = fresh("srv_missing");
    let (status, ctype, body) = server.get(&format!("/api/segment/get/{tag}"));
    assert_eq!(status, 500);
    assert!(ctype.starts_with("application/json"), "{ctype}");
    let err = leaf_error(&body);
    assert_eq!(err["status"], 500);
    assert_eq!(err["error"], "Internal Server Error");
    assert_eq!(
        err["exception"],
        "com.sankuai.inf.leaf.server.exception.LeafServerException"
    );
    assert_eq!(err["message"], "Result{id=-2, status=EXCEPTION}");
    assert_eq!(err["path"], format!("/api/segment/get/{tag}"));
    assert!(err["timestamp"].as_u64().unwrap() > 1_600_000_000_000);
}

#[test]
fn browsers_get_springs_whitelabel_page_instead_of_json() {
    let server = Server::start(&["--url", &mysql_url()]);
    let url = format!("{}/api/segment/get/{}", server.base, fresh("srv_browser"));
    let (status, ctype, body) = support::get_accepting(&url, "text/html,application/xhtml+xml");
    assert_eq!(status, 500);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(body.contains("Whitelabel Error Page"), "{body}");
    assert!(
        body.contains("type=Internal Server Error, status=500"),
        "{body}"
    );
    assert!(body.contains("Result{id=-2, status=EXCEPTION}"), "{body}");
}

#[test]
fn empty_key_is_a_404_as_in_leaf() {
    let server = Server::start(&["--url", &mysql_url()]);
    for path in ["/api/segment/get/", "/api/snowflake/get/", "/no/such/page"] {
        let (status, _, body) = server.get(path);
        assert_eq!(status, 404, "{path}: {body}");
        let err = leaf_error(&body);
        assert_eq!(err["error"], "Not Found");
        assert_eq!(err["path"], path);
    }
}

#[test]
fn batch_returns_count_ids_one_per_line_within_the_limit() {
    let tag = fresh("srv_batch");
    create_tag(&tag, 1000);
    let server = Server::start(&["--url", &mysql_url()]);
    let (status, _, body) = server.get(&format!("/api/segment/get/{tag}?count=2500"));
    assert_eq!(status, 200);
    let ids: Vec<i64> = body.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 2500);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 2500);
    let over = leafid::limits::MAX_BATCH + 1;
    for bad in ["0", "-1", "x", &over.to_string()] {
        let (status, _, body) = server.get(&format!("/api/segment/get/{tag}?count={bad}"));
        assert_eq!(status, 400, "count={bad}: {body}");
        assert!(body.contains("count="), "{body}");
    }
}

#[test]
fn cache_and_db_pages_show_the_tag() {
    let tag = fresh("srv_pages");
    create_tag(&tag, 50);
    let server = Server::start(&["--url", &mysql_url()]);
    let (status, _, id) = server.get(&format!("/api/segment/get/{tag}"));
    assert_eq!(status, 200);
    let id: i64 = id.parse().unwrap();

    let (status, ctype, html) = server.get("/cache");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    for col in [
        "name", "init", "next", "pos", "value0", "max0", "step0", "value1", "max1", "step1",
    ] {
        assert!(
            html.contains(&format!("<th>{col}</th>")),
            "column {col} missing"
        );
    }
    let row = html
        .lines()
        .find(|l| l.contains(&format!("<td>{tag}</td>")))
        .expect("tag row");
    let cells: Vec<&str> = row
        .trim_start_matches("<tr><td>")
        .trim_end_matches("</td></tr>")
        .split("</td><td>")
        .collect();
    assert_eq!(cells.len(), 10, "{row}");
    assert_eq!(cells[1], "true", "initialised: {row}");
    let pos: usize = cells[3].parse().unwrap();
    let value: i64 = cells[4 + 3 * pos].parse().unwrap();
    let max: i64 = cells[5 + 3 * pos].parse().unwrap();
    assert_eq!(value, id + 1, "the current segment's next id: {row}");
    assert!(max > id);

    let (status, _, html) = server.get("/db");
    assert_eq!(status, 200);
    for col in ["tag", "max", "step", "update"] {
        assert!(
            html.contains(&format!("<th>{col}</th>")),
            "column {col} missing"
        );
    }
    let row = html
        .lines()
        .find(|l| l.contains(&format!("<td>{tag}</td>")))
        .expect("tag row in /db");
    assert!(row.contains("<td>50</td>"), "step 50: {row}");
}

#[test]
fn monitor_pages_refuse_when_segment_mode_is_off() {
    let server = Server::start(&["--snowflake", "fixed:951"]);
    for path in ["/cache", "/db"] {
        let (status, _, body) = server.get(path);
        assert_eq!(status, 500);
        assert_eq!(
            leaf_error(&body)["message"],
            "You should config leaf.segment.enable=true first"
        );
    }
    // Leaf's ZeroIDGen: a disabled mode answers 0.
    assert_eq!(
        server.get("/api/segment/get/anything"),
        (200, "text/plain;charset=UTF-8".into(), "0".into())
    );
}

/// `?count=N` on a disabled mode is an error, not N equal zeros in a 200 (issue 20:
/// `0 0 0 0 0`); the single id stays Leaf's `0`. The error is Leaf's own for a page
/// of a disabled mode.
#[test]
fn a_batch_on_a_disabled_mode_is_an_error_not_equal_zeros() {
    let segment_off = Server::start(&["--snowflake", "fixed:958"]);
    let snowflake_off = Server::start(&["--url", &mysql_url()]);
    for (server, path, mode) in [
        (&segment_off, "/api/segment/get/anything", "segment"),
        (&snowflake_off, "/api/snowflake/get/anything", "snowflake"),
    ] {
        for count in ["5", "1"] {
            let (status, _, body) = server.get(&format!("{path}?count={count}"));
            assert_eq!(status, 500, "{path}?count={count}: {body}");
            let err = leaf_error(&body);
            assert_eq!(err["exception"], "java.lang.IllegalArgumentException");
            assert_eq!(
                err["message"],
                format!("You should config leaf.{mode}.enable=true first")
            );
            assert_eq!(err["path"], path);
        }
        assert_eq!(
            server.get(path),
            (200, "text/plain;charset=UTF-8".into(), "0".into())
        );
        // A bad count is still the 400 it is on an enabled mode.
        assert_eq!(server.get(&format!("{path}?count=0")).0, 400);
    }
}

#[test]
fn decode_snowflake_id_renders_leafs_map() {
    let server = Server::start(&["--snowflake", "fixed:952"]);
    let id = ((1_567_733_700_834i64 - 1_288_834_974_657) << 22) | (39 << 12) | 3448;
    let (status, ctype, body) = server.get(&format!("/decodeSnowflakeId?snowflakeId={id}"));
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/json"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["timestamp"]
            .as_str()
            .unwrap()
            .starts_with("1567733700834(20"),
        "{body}"
    );
    assert_eq!(v["workerId"], "39");
    assert_eq!(v["sequenceId"], "3448");
    let (status, _, body) = server.get("/decodeSnowflakeId?snowflakeId=abc");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["errorMsg"],
        "snowflake Id反解析发生异常!"
    );
    let (status, _, _) = server.get("/decodeSnowflakeId");
    assert_eq!(status, 400);
}

#[test]
fn snowflake_from_zookeeper_issues_ids_that_decode_to_its_worker() {
    let name = fresh("srvsf");
    let url = format!("zookeeper://{}/{name}?port=9100", zk());
    // A short lookahead: a new worker id's ids lead the clock by about that (plus
    // max_skew and 1 s), and a stop waits for the clock to pass them.
    let server = Server::start(&["--snowflake", &url, "--lookahead", "4"]);
    let (status, _, health) = server.get("/health");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["status"], "UP");
    let worker = health["snowflake"]["workerId"].as_u64().unwrap();
    let mut ids = Vec::new();
    for _ in 0..50 {
        let (status, ctype, body) = server.get(&format!("/api/snowflake/get/{}", fresh("k")));
        assert_eq!(status, 200, "{body}");
        assert!(ctype.starts_with("text/plain"));
        ids.push(body.parse::<i64>().unwrap());
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let (_, _, decoded) = server.get(&format!("/decodeSnowflakeId?snowflakeId={}", ids[0]));
    let decoded: serde_json::Value = serde_json::from_str(&decoded).unwrap();
    assert_eq!(decoded["workerId"], worker.to_string());
    // SIGTERM: a clean exit that released the id, so the same identity starts again.
    assert!(
        server.stop(),
        "leafid serve did not exit cleanly on SIGTERM"
    );
    let again = Server::start(&["--snowflake", &url, "--lookahead", "4"]);
    let (_, _, health) = again.get("/health");
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(
        health["snowflake"]["workerId"].as_u64(),
        Some(worker),
        "Leaf's node is reused"
    );
}

/// Review of issue 30: on a layout Java Leaf shares, SIGTERM's exit waits until the
/// clock has passed the last id issued, so a Java server started on the identity once
/// `leafid serve` has exited never issues those ids again. A new worker id's ids lead
/// the clock (by the lookahead + max_skew + 1 s, 10 s here); before, the server exited
/// about a second after SIGTERM with its last id 9 s ahead (a Java Leaf simulator
/// started then reissued 162 098 of 163 840 ids).
#[test]
fn sigterm_on_leafs_layout_exits_once_the_clock_has_passed_the_last_id() {
    let url = format!(
        "zookeeper://{}/{}?ip=10.99.0.1&port=9101",
        zk(),
        fresh("srvlead")
    );
    let mut server = Server::start(&["--snowflake", &url, "--lookahead", "4"]);
    let (status, _, body) = server.get("/api/snowflake/get/x?count=100");
    assert_eq!(status, 200, "{body}");
    let last: i64 = body
        .lines()
        .map(|l| l.parse::<i64>().unwrap())
        .max()
        .unwrap();
    let last_ms = leafid::Layout::default().decode(last).timestamp_ms;
    let (clean, _) = server
        .stop_within(Duration::from_secs(60))
        .expect("leafid serve did not exit within 60 s of SIGTERM");
    let exited_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(clean, "leafid serve did not exit cleanly on SIGTERM");
    assert!(
        exited_ms > last_ms,
        "exited {} ms before the clock reached its last id",
        last_ms - exited_ms
    );
}

/// Review of this session: a second SIGTERM during that wait exits at once (the
/// operator chose to; the log says when a Java server may start). Before, the second
/// signal was ignored until the whole lead had passed.
#[test]
fn a_second_sigterm_cuts_the_wait_for_the_clock_short() {
    let url = format!(
        "zookeeper://{}/{}?ip=10.99.0.2&port=9102",
        zk(),
        fresh("srvlead2")
    );
    let mut server = Server::start(&["--snowflake", &url, "--lookahead", "4"]);
    let (status, _, body) = server.get("/api/snowflake/get/x");
    assert_eq!(status, 200, "{body}");
    let pid = server.pid() as libc::pid_t;
    let twice = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_500));
        // SAFETY: kill(2) on the test's own child; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    });
    // The first SIGTERM; the lead is about 10 s, so an exit within 6 s is the second's.
    let stopped = server.stop_within(Duration::from_secs(6));
    twice.join().unwrap();
    let (clean, took) = stopped.expect("the second SIGTERM did not end the wait");
    assert!(clean, "not a clean exit");
    assert!(
        took >= Duration::from_millis(1_500),
        "exited before the second signal: {took:?}"
    );
    let log: Vec<String> = server.log.try_iter().collect();
    assert!(
        log.iter().any(|l| l.contains("second signal")),
        "the log does not say the wait was cut short: {log:?}"
    );
}

#[test]
fn leaf_properties_run_both_modes() {
    // The services' MySQL URL in Leaf's JDBC form.
    let url = url::Url::parse(&mysql_url()).unwrap();
    let name = fresh("srvprops");
    let props = format!(
        "leaf.name={name}\nleaf.segment.enable=true\n\
         leaf.jdbc.url=jdbc:mysql://{}:{}{}?useUnicode=true&characterEncoding=utf8\n\
         leaf.jdbc.username={}\nleaf.jdbc.password={}\n\
         leaf.snowflake.enable=true\nleaf.snowflake.zk.address={}\nleaf.snowflake.port=9200\n",
        url.host_str().unwrap(),
        url.port().unwrap_or(3306),
        url.path(),
        url.username(),
        url.password().unwrap_or(""),
        zk()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leaf.properties");
    std::fs::write(&path, props).unwrap();
    let tag = fresh("srv_props");
    create_tag(&tag, 100);
    let server = Server::start(&["--config", path.to_str().unwrap(), "--lookahead", "4"]);
    let (status, _, body) = server.get(&format!("/api/segment/get/{tag}"));
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = server.get("/api/snowflake/get/x");
    assert_eq!(status, 200, "{body}");
    // The password never reaches the log.
    let log: Vec<String> = server.log.try_iter().collect();
    if let Some(pw) = url.password().filter(|p| p.len() >= 3) {
        assert!(log.iter().all(|l| !l.contains(pw)), "password in the log");
    }
}

#[test]
fn bad_leaf_properties_name_the_key_and_the_form() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leaf.properties");
    std::fs::write(&path, "leaf.segment.enable=false\nleaf.name=x\nleaf.snowflake.zk.address=127.0.0.1:1\nleaf.snowflake.port=http\n").unwrap();
    let out = support::leafid()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("leaf.snowflake.port") && err.contains("expected an integer"),
        "{err}"
    );
}

#[test]
fn a_tag_created_after_start_is_served_at_its_first_request() {
    let server = Server::start(&["--url", &mysql_url()]);
    let tag = fresh("srv_late");
    create_tag(&tag, 100);
    // Not in the server's cache yet: the handler awaits the store lookup instead of -2.
    let (status, _, body) = server.get(&format!("/api/segment/get/{tag}"));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.parse::<i64>().unwrap() > 100,
        "after the creator's first segment: {body}"
    );
}

#[test]
fn odd_requests_get_answers_and_the_server_keeps_serving() {
    let tag = fresh("srv_odd");
    create_tag(&tag, 100);
    let server = Server::start(&["--url", &mysql_url(), "--snowflake", "fixed:955"]);
    let long = "k".repeat(10_000);
    let cases: &[(&str, u16)] = &[
        ("/api/segment/get/%FF%FE", 400),           // not UTF-8
        (&format!("/api/segment/get/{long}"), 500), // longer than biz_tag's 128: -2
        ("/api/segment/get/%20", 500),
        ("/api/segment/get/a%2Fb", 500),
        ("/api/segment/get/x?count=99999999999999999999999", 400),
        ("/api/snowflake/get/x?count=0", 400),
        ("/decodeSnowflakeId?snowflakeId=-1", 200),
        ("/decodeSnowflakeId?snowflakeId=99999999999999999999", 200),
    ];
    for (path, expected) in cases {
        let (status, _, body) = server.get(path);
        assert_eq!(status, *expected, "{path}: {body}");
    }
    let (status, _, body) = server.get(&format!("/api/segment/get/{long}"));
    assert_eq!(
        leaf_error(&body)["message"],
        "Result{id=-2, status=EXCEPTION}",
        "{status}"
    );
    assert_eq!(server.get(&format!("/api/segment/get/{tag}")).0, 200);
    assert!(server.stop(), "clean exit after odd requests");
}
