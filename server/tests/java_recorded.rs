//! `leafid serve` request by request against Java Leaf's recorded answers
//! (tests/data/leaf-http-recorded, copied from ../shared/leaf-http-recorded: the real
//! Leaf 1.0.1 server, its set-up in that README). For every recorded request, the same
//! request to leafid in the same state must give the same status, the same content type
//! and a body of the same shape (an id, Spring's error with the same message, the same
//! decode map, a monitor table), except the deliberate differences listed in
//! [`deliberate`] and in server/README.md's compatibility table.

mod support;

#[path = "../../core/tests/support/delay_proxy.rs"]
mod delay_proxy;

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;
use support::{leafid, FreshDatabase, Server};

/// One recorded exchange.
struct Recorded {
    method: String,
    path: String,
    accept: Option<String>,
    status: u16,
    ctype: String,
    allow: Option<String>,
    body: String,
}

fn load(file: &str) -> Vec<Recorded> {
    let path = format!(
        "{}/tests/data/leaf-http-recorded/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let rows: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    rows.into_iter()
        .map(|r| {
            let j = &r["java"];
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            Recorded {
                method: s(&r["method"]),
                path: s(&r["path"]),
                accept: r["accept"].as_str().map(str::to_string),
                status: j["status"].as_u64().map_or(0, |s| s as u16),
                ctype: s(&j["content_type"]),
                allow: j["headers"]["allow"].as_str().map(str::to_string),
                body: s(&j["body"]),
            }
        })
        .collect()
}

/// One HTTP/1.1 exchange over a fresh connection, exactly as asked (no `Accept` when
/// `None`): (status, content type, allow, body).
fn send(
    base: &str,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> (u16, String, Option<String>, String) {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {a}\r\n"));
    }
    req.push_str("Content-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut ctype = String::new();
    let mut allow = None;
    for l in lines {
        let (k, v) = l.split_once(':').unwrap();
        match k.to_ascii_lowercase().as_str() {
            "content-type" => ctype = v.trim().to_string(),
            "allow" => allow = Some(v.trim().to_string()),
            "transfer-encoding" => panic!("chunked answer to {method} {path}"),
            _ => {}
        }
    }
    (status, ctype, allow, body.to_string())
}

/// What a body is, without what legitimately differs (ids issued, timestamps, dates).
fn shape(ctype: &str, body: &str) -> String {
    if body.is_empty() {
        return "empty".into();
    }
    if body.contains("Whitelabel Error Page") {
        let cut = |after: &str| {
            body.split_once(after)
                .map(|(_, rest)| rest.split("</div>").next().unwrap_or("").to_string())
                .unwrap_or_default()
        };
        let kind = cut("There was an unexpected error ");
        let message = body
            .split("</div><div>")
            .last()
            .unwrap_or("")
            .trim_end_matches("</div></body></html>");
        return format!("whitelabel {kind} {message}");
    }
    if ctype.starts_with("text/html") {
        return if body.contains("<table") {
            "monitor table"
        } else {
            "html"
        }
        .into();
    }
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if v.get("error").is_some() {
            return format!(
                "spring-error {} {} {} {} {}",
                v["status"], v["error"], v["exception"], v["message"], v["path"]
            );
        }
        if v.get("errorMsg").is_some() {
            return format!("decode-error {}", v["errorMsg"]);
        }
        if let Some(ts) = v["timestamp"].as_str() {
            let ms = ts.split('(').next().unwrap_or("");
            return format!("decode {ms} w{} s{}", v["workerId"], v["sequenceId"]);
        }
        if v.is_i64() {
            return if body == "0" {
                "zero".into()
            } else {
                "id".into()
            };
        }
        return format!("json {v}");
    }
    let lines: Vec<&str> = body.lines().collect();
    if lines.iter().all(|l| l.parse::<i64>().is_ok()) {
        return match lines.len() {
            1 if body == "0" => "zero".into(),
            1 => "id".into(),
            n => format!("ids:{n}"),
        };
    }
    format!("text {body}")
}

/// leafid's own answer where it deliberately differs from Java Leaf (documented in
/// server/README.md): (status, content type, shape). `None`: compare with Java.
fn deliberate(file: &str, r: &Recorded) -> Option<(u16, &'static str, String)> {
    const JSON: &str = "application/json;charset=UTF-8";
    const TEXT: &str = "text/plain;charset=UTF-8";
    let leaf_err = |code: i64| {
        format!(
            "spring-error 500 \"Internal Server Error\" \"com.sankuai.inf.leaf.server.exception.LeafServerException\" \"Result{{id={code}, status=EXCEPTION}}\" \"{}\"",
            r.path
        )
    };
    match (file, r.path.as_str()) {
        // Java's suffix matching: `dot.tag` is looked up as `dot`, `tagA.json` as `tagA`
        // with a JSON content type. leafid takes the key as it is.
        ("main", "/api/segment/get/dot.tag") => Some((200, TEXT, "id".into())),
        ("main", "/api/segment/get/tagA.json") => Some((500, JSON, leaf_err(-2))),
        // leafid's batch form; Java ignores `count` and answers one id.
        ("main", "/api/segment/get/tagA?count=3") => Some((200, TEXT, "ids:3".into())),
        ("main", "/api/snowflake/get/x?count=2") => Some((200, TEXT, "ids:2".into())),
        // A key leafid has not seen, with the store down: leafid looks keys up in the
        // table (a tag made elsewhere serves at once), cannot, and says so (-3, store
        // error); Java answers from its cache alone (-2, no such key).
        ("dbdown", "/api/segment/get/nokey" | "/api/segment/get/newtag") => {
            Some((500, JSON, leaf_err(-3)))
        }
        // Java ships Bootstrap for its pages; leafid's pages link no stylesheet.
        ("main", "/css/bootstrap.min.css") => Some((
            404,
            JSON,
            format!(
                "spring-error 404 \"Not Found\" null \"No message available\" \"{}\"",
                r.path
            ),
        )),
        _ => None,
    }
}

fn compare(file: &str, server: &Server, rows: &[Recorded]) -> Vec<String> {
    let mut diffs = Vec::new();
    for r in rows {
        if r.status == 0 {
            continue; // Java gave no answer (timed out): nothing to compare.
        }
        let (status, ctype, allow, body) =
            send(&server.base, &r.method, &r.path, r.accept.as_deref());
        let got = (status, ctype.clone(), shape(&ctype, &body));
        let want = match deliberate(file, r) {
            Some((s, c, b)) => (s, c.to_string(), b),
            None => (r.status, r.ctype.clone(), shape(&r.ctype, &r.body)),
        };
        if got != want || allow != r.allow {
            diffs.push(format!(
                "{file}: {} {} (Accept {:?}): leafid {got:?} allow {allow:?}, want {want:?} allow {:?}",
                r.method, r.path, r.accept, r.allow
            ));
        }
    }
    diffs
}

/// A database with Leaf's set-up: `tagA` (step 1000), `tagB` (100), `dot.tag`,
/// `leaf-segment-test`, and more.
fn database(extra: &[(&str, i64)]) -> FreshDatabase {
    let db = FreshDatabase::create("srv_javacmp");
    let run = |args: &[&str]| {
        let out = leafid()
            .args(args)
            .env("LEAFID_URL", &db.url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["init"]);
    let tags = [
        ("tagA", 1000),
        ("tagB", 100),
        ("dot.tag", 1000),
        ("leaf-segment-test", 1000),
    ];
    for (tag, step) in tags.iter().chain(extra) {
        run(&["create-tag", tag, "--step", &step.to_string()]);
    }
    db
}

fn serve(args: &[&str]) -> (Server, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = leafid();
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("XDG_CACHE_HOME", cache.path());
    (Server::spawn(cmd), cache)
}

#[test]
fn both_modes_up_answer_every_recorded_request_as_java() {
    let db = database(&[]);
    let (server, _cache) = serve(&["--url", &db.url, "--snowflake", "fixed:1"]);
    let diffs = compare("main", &server, &load("main.json"));
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn disabled_modes_answer_every_recorded_request_as_java() {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("leaf.properties");
    std::fs::write(
        &props,
        "leaf.name=leafjava.test\nleaf.segment.enable=false\nleaf.snowflake.enable=false\n",
    )
    .unwrap();
    let (server, _cache) = serve(&["--config", props.to_str().unwrap()]);
    let diffs = compare("disabled", &server, &load("disabled.json"));
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn database_down_while_serving_answers_every_recorded_request_as_java() {
    let db = database(&[("downT", 5)]);
    let u = url::Url::parse(&db.url).unwrap();
    let proxy =
        delay_proxy::DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()));
    let mut via = u.clone();
    via.set_port(Some(proxy.addr.port())).unwrap();
    // `--thread-chunk 0`: one Java server hands out one cursor, so once `downT` is spent
    // every request gets -3. With chunks, a worker thread may still hold a few of the
    // buffered ids after another thread's request found the segment spent (a 200 after
    // the first 500), which is right for leafid but not the order this replay compares.
    let (server, _cache) = serve(&[
        "--url",
        via.as_str(),
        "--snowflake",
        "fixed:2",
        "--thread-chunk",
        "0",
    ]);
    // Both tags loaded while the store is up, as on the Java server.
    assert_eq!(
        send(&server.base, "GET", "/api/segment/get/tagA", None).0,
        200
    );
    assert_eq!(
        send(&server.base, "GET", "/api/segment/get/downT", None).0,
        200
    );
    proxy.set_down(true);
    // `downT` (step 5) spent: what is buffered is served, then -3.
    let mut spent = false;
    for _ in 0..40 {
        let (status, _, _, body) = send(&server.base, "GET", "/api/segment/get/downT", None);
        if status == 500 {
            assert!(body.contains("Result{id=-3"), "{body}");
            spent = true;
            break;
        }
    }
    assert!(spent, "downT never ran out with the store down");
    let diffs = compare("dbdown", &server, &load("dbdown.json"));
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}
