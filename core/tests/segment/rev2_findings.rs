//! Review 2 (adversarial): failing tests for the PostgreSQL store.

use std::time::Duration;

use leafid::{SegmentGenerator, SegmentOptions};
use sqlx::Row;

use crate::support::postgres::{sql, url_with};

fn run(stmt: String) {
    sql(move |pool| {
        Box::pin(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(stmt))
                .execute(&pool)
                .await
                .unwrap();
        })
    });
}

fn max_id(schema: &str) -> i64 {
    let q = format!("SELECT max_id FROM {schema}.leaf_alloc WHERE biz_tag = 't'");
    sql(move |pool| {
        Box::pin(async move {
            let r = sqlx::raw_sql(sqlx::AssertSqlSafe(q))
                .fetch_one(&pool)
                .await
                .unwrap();
            r.try_get::<i64, _>("max_id").unwrap()
        })
    })
}

/// A `leaf_alloc` whose `step` is `bigint` (a natural port of Leaf's `int(11)`, and what
/// many schema converters emit): the UPDATE commits, then reading `step` as `i32` fails,
/// so every attempt (and every background retry) burns a whole step of the row and
/// issues nothing, reported as an outage.
#[test]
fn rev2_a_bigint_step_column_never_burns_ranges_without_issuing() {
    let schema = format!("rev2_bigint_{}", std::process::id());
    run(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.leaf_alloc (biz_tag varchar(128) PRIMARY KEY, \
         max_id bigint NOT NULL DEFAULT 1, step bigint NOT NULL, \
         description varchar(256), update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP); \
         INSERT INTO {schema}.leaf_alloc (biz_tag, max_id, step) VALUES ('t', 1, 1000)"
    ));
    let url = url_with(|u| {
        u.query_pairs_mut()
            .append_pair("options", &format!("-c search_path={schema}"));
    });
    let opts = SegmentOptions::default().wait_timeout(Duration::from_millis(300));
    let result = SegmentGenerator::connect_blocking(&url, opts).map(|gen| {
        let mut got = vec![];
        for _ in 0..5 {
            got.push(gen.next_id("t").map_err(|e| e.to_string()));
            std::thread::sleep(Duration::from_millis(300));
        }
        gen.close();
        got
    });
    let stored = max_id(&schema);
    run(format!("DROP SCHEMA {schema} CASCADE"));
    let issued = matches!(&result, Ok(v) if v.iter().any(|r| r.is_ok()));
    assert!(
        issued || stored == 1,
        "no id issued, yet the row was raised from 1 to {stored} ({} ids burnt); calls: {result:?}",
        stored - 1
    );
}

/// PostgreSQL compares `biz_tag` exactly: `Rev2-Case-…` and `rev2-case-…` are two rows,
/// each with its own range from 1. The high-water mark folds case (MySQL's collation),
/// so after one of them loaded 1..11 the other's first segment 1..11 is refused as
/// "lowered": a valid table on PostgreSQL stops issuing for one of the tags.
#[test]
fn rev2_two_pg_tags_differing_in_case_both_issue() {
    use crate::support::postgres::{connect, create, fresh_tag};
    let gen = connect(SegmentOptions::default());
    let lower = fresh_tag("rev2-case");
    let upper = lower.to_uppercase();
    create(&gen, &lower, 1, 10);
    create(&gen, &upper, 1, 10);
    let a = gen.next_id(&lower);
    let b = gen.next_id(&upper);
    gen.close();
    assert!(a.is_ok() && b.is_ok(), "{lower}: {a:?}\n{upper}: {b:?}");
}

/// A password holding `?` after digits (`4711?Kq`): the URL parser reads `4711` as the
/// port of host `leaf`, the rest as the query. `ambiguous_user_info` refuses `/` and `#`
/// there but not `?`, so the error names "PostgreSQL at leaf:4711": part of the password.
#[test]
fn rev2_a_password_with_a_question_mark_is_not_shown() {
    let url = "postgres://leaf:4711?Kq@127.0.0.1:5432/leafid";
    let e = SegmentGenerator::connect_blocking(
        url,
        SegmentOptions::default().wait_timeout(Duration::from_secs(2)),
    )
    .err()
    .map(|e| format!("{e} | {e:?}"))
    .unwrap_or_default();
    assert!(!e.contains("4711"), "password fragment shown: {e}");
}

/// Probe (passes if the chunked form holds): one thread, two stores' tags, generators
/// opened and closed in a loop on one shared store, chunks bigger than segments.
#[test]
fn rev2_probe_chunks_across_generators_on_one_thread() {
    use leafid::segment::store::memory::MemoryStore;
    use leafid::segment::SegmentStore;
    use std::collections::{HashMap, HashSet};
    use std::sync::Arc;
    let store = Arc::new(MemoryStore::new());
    for t in ["a", "b"] {
        let s = store.clone();
        leafid::runtime::block_on(async move { s.create_tag(t, 1, 7, "").await }).unwrap();
    }
    let mut seen: HashMap<&str, HashSet<i64>> = HashMap::new();
    for round in 0..40 {
        let opts = SegmentOptions::default()
            .thread_chunk(4096)
            .max_step(7)
            .wait_timeout(Duration::from_secs(5));
        let dyns: Arc<dyn SegmentStore> = store.clone();
        let g1 =
            leafid::runtime::block_on(SegmentGenerator::with_store(dyns.clone(), opts.clone()))
                .unwrap();
        let g2 = leafid::runtime::block_on(SegmentGenerator::with_store(dyns, opts)).unwrap();
        let mut last: HashMap<(usize, &str), i64> = HashMap::new();
        for k in 0..500usize {
            let (gi, g) = if (k + round) % 3 == 0 {
                (1, &g2)
            } else {
                (0, &g1)
            };
            let tag = if k % 5 == 0 { "b" } else { "a" };
            let ids: Vec<i64> = match k % 7 {
                0 => g.next_ids(tag, 3).unwrap(),
                1 => g.try_next_id(tag).into_iter().collect(),
                2 => g.tag(tag).unwrap().next_ids(9).unwrap(),
                _ => vec![g.next_id(tag).unwrap()],
            };
            for id in ids {
                assert!(
                    seen.entry(tag).or_default().insert(id),
                    "{tag} {id} twice (round {round}, k {k})"
                );
                let l = last.entry((gi, tag)).or_insert(0);
                assert!(id > *l, "{tag} gen{gi}: {id} after {l}");
                *l = id;
            }
        }
        g1.close();
        assert!(g1.next_id("a").is_err());
        if round % 2 == 0 {
            g2.close();
        }
    }
}
