//! `/metrics` is valid Prometheus text exposition and counts what the server did.

mod support;

use std::collections::HashMap;

use support::{create_tag, fresh, mysql_url, Server};

/// Parses the text format line by line: `# HELP`/`# TYPE` lines, `# EOF`, and samples
/// `name{labels} value`; every sample's family must have a TYPE. Returns samples by
/// `name{labels}`.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram", "info", "unknown"].contains(&kind),
                "{line}"
            );
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line == "# EOF" {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample: {line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels[1..labels.len() - 1].split("\",") {
                    let (k, v) = pair
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("bad label: {line}"));
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}"
                    );
                    assert!(!v.trim_end_matches('"').contains('"'), "{line}");
                }
            }
        }
        // A counter's samples end in `_total`, a histogram's in `_bucket`/`_sum`/`_count`.
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| types.contains_key(*f)))
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample without # TYPE: {line}");
        samples.insert(series.to_string(), value);
    }
    samples
}

#[test]
fn metrics_count_ids_errors_and_show_segment_state() {
    let tag = fresh("srv_metrics");
    create_tag(&tag, 100);
    // --thread-chunk 0: exact counts (with chunks the counter also counts the ids held
    // in server threads' chunks, as `stats()` does; docs/segment.md, "Order").
    let server = Server::start(&[
        "--url",
        &mysql_url(),
        "--snowflake",
        "fixed:953",
        "--thread-chunk",
        "0",
    ]);
    for _ in 0..5 {
        assert_eq!(server.get(&format!("/api/segment/get/{tag}")).0, 200);
    }
    assert_eq!(
        server.get(&format!("/api/segment/get/{tag}?count=10")).0,
        200
    );
    assert_eq!(server.get("/api/snowflake/get/x").0, 200);
    let missing = fresh("srv_metrics_none");
    assert_eq!(server.get(&format!("/api/segment/get/{missing}")).0, 500);

    let (status, ctype, text) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(ctype.contains("openmetrics-text"), "{ctype}");
    let m = parse(&text);
    let get = |k: &str| {
        *m.get(k)
            .unwrap_or_else(|| panic!("{k} missing from:\n{text}"))
    };
    assert_eq!(
        get(&format!("leafid_segment_ids_issued_total{{tag=\"{tag}\"}}")),
        15.0
    );
    assert_eq!(
        get("leafid_snowflake_ids_issued_total{worker_id=\"953\"}"),
        1.0
    );
    assert_eq!(
        get("leafid_http_errors_total{mode=\"segment\",code=\"-2\",error=\"TagNotFound\"}"),
        1.0
    );
    // The core's count of the same failure, by its error code (one per request).
    assert_eq!(
        get("leafid_errors_total{mode=\"segment\",code=\"LEAF_TAG_NOT_FOUND\"}"),
        1.0
    );
    assert_eq!(get(&format!("leafid_segment_step{{tag=\"{tag}\"}}")), 100.0);
    assert!(get(&format!("leafid_segment_refills_total{{tag=\"{tag}\"}}")) >= 1.0);
    assert_eq!(
        get(&format!("leafid_segment_initialized{{tag=\"{tag}\"}}")),
        1.0
    );
    // The readiness gauge exists per tag (its value depends on the refill's timing).
    assert!(m.contains_key(&format!("leafid_segment_next_ready{{tag=\"{tag}\"}}")));
    // The core's families for the snowflake worker: its lease is held, its bound ahead.
    assert_eq!(
        get("leafid_snowflake_lease_state{worker_id=\"953\",state=\"held\"}"),
        1.0
    );
    assert!(get("leafid_snowflake_bound_lead_seconds{worker_id=\"953\"}") > 0.0);
    // Refill latency: one histogram per tag, its +Inf bucket counting every refill.
    let refills = get(&format!("leafid_segment_refills_total{{tag=\"{tag}\"}}"));
    assert_eq!(
        get(&format!(
            "leafid_segment_refill_duration_seconds_bucket{{le=\"+Inf\",tag=\"{tag}\"}}"
        )),
        refills
    );
}
