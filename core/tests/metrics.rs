//! `leafid::metrics::text()`: the families of every live generator, with values that
//! follow what was issued, and dropped generators gone. Its own test binary: the text is
//! the whole process's, and another test's generator with the same worker id or tag
//! would add series these tests look for by label alone.
#![cfg(all(feature = "metrics", feature = "sqlite"))]

use std::collections::HashMap;

use leafid::{LeaseStatus, SegmentGenerator, SegmentOptions, SnowflakeGenerator};

/// Samples of the text by `name{labels}`, from lines that are neither comments nor
/// blank. (The Python suite parses the same text with `prometheus_client`'s parsers.)
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample is `series value`");
            (series.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

fn get(m: &HashMap<String, f64>, key: &str, text: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("{key} missing from:\n{text}"))
}

#[test]
fn segment_ids_issued_per_tag_equal_ids_taken_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("metrics_a", 1, 10, "").await }).unwrap();
    let h = gen.tag("metrics_a").unwrap();
    // 25 ids with a step of 10: two spent segments and a half-used third, by single
    // calls, a batch and the handle, so every issuing path is counted.
    for _ in 0..7 {
        gen.next_id("metrics_a").unwrap();
    }
    assert_eq!(gen.next_ids("metrics_a", 11).unwrap().len(), 11);
    for _ in 0..7 {
        h.next_id().unwrap();
    }
    assert_eq!(
        gen.stats()
            .iter()
            .find(|s| s.tag == "metrics_a")
            .unwrap()
            .issued,
        25
    );
    assert!(gen.next_id("metrics_missing_tag").is_err());

    let text = leafid::metrics::text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let m = samples(&text);
    let tag = "{tag=\"metrics_a\"}";
    assert_eq!(
        get(&m, &format!("leafid_segment_ids_issued_total{tag}"), &text),
        25.0
    );
    assert!(get(&m, &format!("leafid_segment_refills_total{tag}"), &text) >= 3.0);
    // The dynamic step doubles from the third load on (segments last far less than
    // 15 minutes here), and the preload of the next may have run: bounds, not values.
    assert!(get(&m, &format!("leafid_segment_step{tag}"), &text) >= 10.0);
    assert_eq!(
        get(&m, &format!("leafid_segment_initialized{tag}"), &text),
        1.0
    );
    assert!(get(&m, &format!("leafid_segment_remaining_ids{tag}"), &text) >= 1.0);
    let refills = get(&m, &format!("leafid_segment_refills_total{tag}"), &text);
    assert_eq!(
        get(
            &m,
            "leafid_segment_refill_duration_seconds_bucket{le=\"+Inf\",tag=\"metrics_a\"}",
            &text
        ),
        refills
    );
    assert_eq!(
        get(
            &m,
            "leafid_segment_refill_duration_seconds_count{tag=\"metrics_a\"}",
            &text
        ),
        refills
    );
    assert!(
        m.contains_key(&format!("leafid_segment_next_ready{tag}")),
        "{text}"
    );
    assert!(
        get(
            &m,
            "leafid_errors_total{mode=\"segment\",code=\"LEAF_TAG_NOT_FOUND\"}",
            &text
        ) >= 1.0
    );

    // A closed generator's tags leave the text. (A dropped one's leave once its last
    // background task lets go of it, which has no deadline to test against.)
    gen.close();
    assert!(!leafid::metrics::text().contains("metrics_a"));
    drop(h);
}

#[test]
fn snowflake_ids_issued_lease_and_bound_lead_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let sf = SnowflakeGenerator::builder()
        .registry_url("fixed:902")
        .unwrap()
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    // Enough ids to span several milliseconds, by single calls and batches.
    for _ in 0..5000 {
        sf.next_id().unwrap();
    }
    assert_eq!(sf.next_ids(3000).unwrap().len(), 3000);
    let stats = sf.stats();
    assert_eq!(stats.issued, 8000);
    assert_eq!(stats.lease, LeaseStatus::Held);
    assert!(stats.bound_lead_ms.unwrap() > 0, "{stats:?}");
    // `fixed:` has no clock to compare with.
    assert_eq!(stats.clock_skew_ms, None);

    let text = leafid::metrics::text();
    let m = samples(&text);
    let w = "worker_id=\"902\"";
    assert_eq!(
        get(
            &m,
            &format!("leafid_snowflake_ids_issued_total{{{w}}}"),
            &text
        ),
        8000.0
    );
    assert_eq!(
        get(
            &m,
            &format!("leafid_snowflake_lease_state{{{w},state=\"held\"}}"),
            &text
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            &format!("leafid_snowflake_lease_state{{{w},state=\"lost\"}}"),
            &text
        ),
        0.0
    );
    assert!(
        get(
            &m,
            &format!("leafid_snowflake_bound_lead_seconds{{{w}}}"),
            &text
        ) > 0.0
    );
    assert!(!text.contains(&format!("leafid_snowflake_clock_skew_seconds{{{w}}}")));

    // Closed: gone from the text (a closed generator issues nothing more).
    sf.close();
    assert!(!leafid::metrics::text().contains(w));
}

/// A registry with a clock (ZooKeeper's `mtime` of the lease node) gives a skew reading;
/// `fixed:` (above) has none. Needs `LEAFID_ZK` (scripts/services.sh).
#[cfg(feature = "zookeeper")]
#[test]
fn snowflake_clock_skew_shows_for_a_registry_with_a_clock() {
    let zk = std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env`",
    );
    let name = format!(
        "metrics_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let dir = tempfile::tempdir().unwrap();
    let sf = SnowflakeGenerator::builder()
        .registry_url(&format!(
            "zookeeper-recycle://{zk}/{name}?ip=10.0.0.1&port=1&session_timeout_ms=1000"
        ))
        .unwrap()
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    sf.next_id().unwrap();
    let stats = sf.stats();
    // Same host: within the allowed skew, or the build would have been refused.
    let skew = stats.clock_skew_ms.expect("a reading of ZooKeeper's clock");
    assert!(skew.abs() <= 5_000, "{stats:?}");
    let text = leafid::metrics::text();
    let series = format!(
        "leafid_snowflake_clock_skew_seconds{{worker_id=\"{}\"}}",
        stats.worker_id
    );
    let m = samples(&text);
    assert_eq!(get(&m, &series, &text), skew as f64 / 1000.0);
    sf.close();
}

/// A tag is any text the table holds: quotes, backslashes and newlines in it are
/// escaped, so they neither break the scrape nor add series (review: a tag made
/// `leafid_injected_total` lines and `# EOF`s appear).
#[test]
fn odd_tags_are_escaped_and_cannot_inject_series() {
    let gen = SegmentGenerator::connect_blocking("memory:", SegmentOptions::default()).unwrap();
    let tags = [
        "x\"} 1\nleafid_injected_total{a=\"b\"} 42\n# EOF\nz{tag=\"",
        "say \"hi\"",
        "end\\",
    ];
    for tag in tags {
        let (g, t) = (gen.clone(), tag.to_string());
        leafid::runtime::block_on(async move { g.create_tag(&t, 1, 10, "").await }).unwrap();
        gen.next_id(tag).unwrap();
    }
    let text = leafid::metrics::text();
    assert!(
        !text.lines().any(|l| l.starts_with("leafid_injected")),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| *l == "# EOF").count(), 1, "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains(r#"leafid_segment_ids_issued_total{tag="say \"hi\""} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"leafid_segment_ids_issued_total{tag="end\\"} 1"#),
        "{text}"
    );
    gen.close();
}

/// Two generators of one process with the same tag (two databases) are two series, not
/// two samples of one series, of which Prometheus would keep one (review).
#[test]
fn one_tag_in_two_generators_is_two_series() {
    let gens: Vec<_> = (0..2)
        .map(|_| SegmentGenerator::connect_blocking("memory:", SegmentOptions::default()).unwrap())
        .collect();
    for (i, gen) in gens.iter().enumerate() {
        let g = gen.clone();
        leafid::runtime::block_on(async move { g.create_tag("metrics_dup", 1, 10, "").await })
            .unwrap();
        for _ in 0..=i {
            gen.next_id("metrics_dup").unwrap();
        }
    }
    let text = leafid::metrics::text();
    let issued: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("leafid_segment_ids_issued_total{tag=\"metrics_dup\""))
        .collect();
    assert_eq!(issued.len(), 2, "{text}");
    assert!(
        issued.iter().all(|l| l.contains(",generator=\"")),
        "{issued:?}"
    );
    assert_ne!(issued[0].split(' ').next(), issued[1].split(' ').next());
    let mut values: Vec<&str> = issued
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    values.sort();
    assert_eq!(values, ["1", "2"]);
    for gen in gens {
        gen.close();
    }
    let text = leafid::metrics::text();
    assert!(
        !text.contains("metrics_dup"),
        "closed generators left: {text}"
    );
}
