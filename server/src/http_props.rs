//! Property test of the router: no request, however odd its method, path, query or
//! `Accept` header, makes a handler panic, and every answer is one Leaf gives (or our
//! documented 400 for a bad `?count=`). Runs in-process on a `memory:` store and a
//! `fixed:` worker id, so it needs no service.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use proptest::prelude::*;
use tower::ServiceExt;

use crate::http::{router, AppState};
use crate::metrics::Metrics;
use crate::store::SegmentSlot;

fn state() -> AppState {
    let segment =
        leafid::SegmentGenerator::connect_blocking("memory:", Default::default()).unwrap();
    let g = segment.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1000, "").await }).unwrap();
    // A worker id no other test of this host uses (fixed ids must be distinct host-wide).
    let snowflake = leafid::SnowflakeGenerator::builder()
        .registry_url("fixed:958")
        .unwrap()
        .build_blocking()
        .unwrap();
    let slot = SegmentSlot::ready(segment);
    AppState {
        segment: Some(slot.clone()),
        snowflake: Some(crate::snowflake::SnowflakeSlot::ready(snowflake.clone())),
        metrics: std::sync::Arc::new(Metrics::new()),
    }
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::PUT),
        Just(Method::DELETE),
        Just(Method::HEAD),
        Just(Method::OPTIONS),
        Just(Method::PATCH),
    ]
}

/// A path under each route (and none), with any printable text percent-encoded.
fn path() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just("/api/segment/get/"),
        Just("/api/snowflake/get/"),
        Just("/cache"),
        Just("/db"),
        Just("/decodeSnowflakeId"),
        Just("/health"),
        Just("/metrics"),
        Just("/"),
    ];
    let tail = prop_oneof![
        Just(String::new()),
        Just("t".to_string()),
        any::<String>(),
        "[a-z_/]{0,300}",
    ];
    (prefix, tail).prop_map(|(p, t)| format!("{p}{}", encode(&t, true)))
}

/// A query: `count` with odd values, `snowflakeId` with odd values, or anything.
fn query() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("1048577".to_string()),
        Just("18446744073709551616".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        "[0-9]{1,25}",
        any::<String>(),
    ];
    let key = prop_oneof![Just("count"), Just("snowflakeId"), Just("x")];
    prop_oneof![
        Just(String::new()),
        (key, value).prop_map(|(k, v)| format!("?{k}={}", encode(&v, false))),
        any::<String>().prop_map(|q| format!("?{}", encode(&q, false))),
    ]
}

/// Percent-encodes every byte a URI may not carry as is (and `/` unless `keep_slash`).
fn encode(s: &str, keep_slash: bool) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b'/' if keep_slash => "/".to_string(),
            b'=' | b'&' if !keep_slash => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_request_panics_and_every_answer_is_leafs(
        method in method(),
        path in path(),
        query in query(),
        browser in any::<bool>(),
    ) {
        let uri = format!("{path}{query}");
        let accept = if browser { "text/html,application/xhtml+xml" } else { "*/*" };
        let head = method == Method::HEAD;
        let req = Request::builder()
            .method(method)
            .uri(&uri)
            .header("accept", accept)
            .body(Body::empty())
            .unwrap();
        let app = router(STATE.with(|s| s.clone()));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let resp = rt.block_on(app.oneshot(req)).unwrap();
        let status = resp.status();
        // 406: Java's answer to /decodeSnowflakeId for a caller accepting no JSON.
        prop_assert!(
            [StatusCode::OK, StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND,
             StatusCode::METHOD_NOT_ALLOWED, StatusCode::NOT_ACCEPTABLE,
             StatusCode::INTERNAL_SERVER_ERROR]
                .contains(&status),
            "{uri}: {status}"
        );
        let body = rt.block_on(axum::body::to_bytes(resp.into_body(), 1 << 26)).unwrap();
        let body = String::from_utf8_lossy(&body);
        if status == StatusCode::INTERNAL_SERVER_ERROR && path.starts_with("/api/") && !head {
            // An id endpoint fails only with Leaf's Result{id=-N} (HEAD answers carry no body).
            prop_assert!(body.contains("Result{id=-"), "{uri}: {body}");
        }
    }
}

thread_local! {
    // One generator pair per test thread: building them per case would claim and
    // release the worker id thousands of times.
    static STATE: AppState = state();
}
