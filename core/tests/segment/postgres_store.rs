//! Segment mode against a real PostgreSQL (`LEAFID_PG_URL`, e.g.
//! `postgres://leafid:leafid@127.0.0.1:5433/leafid`): the MySQL store's suite
//! (`segment_mysql.rs`) on the `postgres://` store — uniqueness across threads and
//! generators, restarts, another writer's SQL alongside, tags that are only data, the
//! missing table, the row guards, a row restored lower. What the user sees when the
//! database refuses, goes silent or sits behind PgBouncer or TLS is in
//! `segment_postgres_connections.rs`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leafid::runtime::block_on;
use leafid::{Error, SegmentGenerator, SegmentOptions};
use sqlx::Row;

use crate::support::postgres::{connect, create, fresh_tag, refresh, sql, url_with};

#[test]
fn two_generators_and_many_threads_never_share_an_id() {
    let a = connect(SegmentOptions::default());
    let b = connect(SegmentOptions::default());
    let tag = fresh_tag("uniq");
    create(&a, &tag, 1, 1000);
    refresh(&b);
    let mut threads = vec![];
    for gen in [&a, &b] {
        for t in 0..4 {
            let h = gen.tag(&tag).unwrap();
            threads.push(std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(125_000);
                while ids.len() < 125_000 {
                    if t == 0 && ids.len() % 5000 == 0 {
                        ids.extend(h.next_ids(100).unwrap());
                    } else {
                        ids.push(h.next_id().unwrap());
                    }
                }
                ids
            }));
        }
    }
    let mut all = HashSet::with_capacity(1_000_000);
    for t in threads {
        let ids = t.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids increase within a thread"
        );
        for id in ids {
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert!(all.len() >= 1_000_000);
    assert!(a.stats().iter().any(|s| s.tag == tag && s.refills > 2));
}

#[test]
fn a_restarted_generator_never_reissues() {
    let tag = fresh_tag("restart");
    let first = connect(SegmentOptions::default());
    create(&first, &tag, 1, 100);
    let issued = first.next_ids(&tag, 250).unwrap();
    first.close();
    drop(first);
    let second = connect(SegmentOptions::default());
    let next = second.next_id(&tag).unwrap();
    assert!(
        next > *issued.iter().max().unwrap(),
        "{next} was issued before"
    );
}

/// Another writer on the same row (Leaf's UPDATE then SELECT in one transaction, as a
/// Java Leaf patched for PostgreSQL runs it): no id of ours is inside its ranges.
#[test]
fn ids_never_overlap_another_writer_on_the_same_row() {
    // A refill may wait for the other writer's row lock on a busy machine: this test is
    // about overlap, not latency.
    let gen = connect(SegmentOptions::default().wait_timeout(Duration::from_secs(10)));
    let tag = fresh_tag("java");
    create(&gen, &tag, 1, 500);
    let ranges = Arc::new(Mutex::new(Vec::<(i64, i64)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let other = {
        let (tag, ranges, stop) = (tag.clone(), ranges.clone(), stop.clone());
        std::thread::spawn(move || {
            sql(move |pool| {
                Box::pin(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let mut tx = pool.begin().await.unwrap();
                        sqlx::query(
                            "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = $1",
                        )
                        .bind(&tag)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                        let row =
                            sqlx::query("SELECT max_id, step FROM leaf_alloc WHERE biz_tag = $1")
                                .bind(&tag)
                                .fetch_one(&mut *tx)
                                .await
                                .unwrap();
                        tx.commit().await.unwrap();
                        let (max, step): (i64, i32) = (row.get("max_id"), row.get("step"));
                        ranges.lock().unwrap().push((max - step as i64, max));
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
        })
    };
    // Issue while the other writer takes at least 20 ranges of its own.
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ranges.lock().unwrap().len() < 20 {
        assert!(Instant::now() < deadline, "the other writer did not run");
        ids.extend(gen.next_ids(&tag, 10_000).unwrap());
    }
    ids.extend(gen.next_ids(&tag, 10_000).unwrap());
    stop.store(true, Ordering::Relaxed);
    other.join().unwrap();
    let mut sorted = ranges.lock().unwrap().clone();
    sorted.sort();
    for id in &ids {
        let i = sorted.partition_point(|r| r.0 <= *id);
        if i > 0 {
            let (lo, hi) = sorted[i - 1];
            assert!(!(lo..hi).contains(id), "id {id} is inside {lo}..{hi}");
        }
    }
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
}

#[test]
fn a_tag_inserted_with_sql_appears_after_the_refresh() {
    let gen = connect(SegmentOptions::default().refresh_interval(Duration::from_millis(300)));
    let tag = fresh_tag("sql");
    let t = tag.clone();
    sql(move |pool| {
        Box::pin(async move {
            sqlx::query("INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES ($1, 1, 2000, 'by hand')")
                .bind(&t)
                .execute(&pool)
                .await
                .unwrap();
        })
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !gen.tags().contains(&tag) {
        assert!(Instant::now() < deadline, "tag never appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(gen.next_ids(&tag, 3).unwrap(), vec![1, 2, 3]);
    // The admin listing reads the row as written, its time as the database printed it.
    let g = gen.clone();
    let rows = block_on(async move { g.rows().await }).unwrap();
    let row = rows.iter().find(|r| r.tag == tag).expect("listed");
    assert_eq!(
        (row.step, row.description.as_deref()),
        (2000, Some("by hand"))
    );
    assert_eq!(
        row.update_time.len(),
        "2026-01-01 00:00:00".len(),
        "{row:?}"
    );
}

/// Quotes, backslashes and SQL in a tag are data, never statements: values travel as
/// escaped literals (no prepared statements, for PgBouncer).
#[test]
fn a_tag_with_quotes_and_backslashes_is_only_data() {
    let gen = connect(SegmentOptions::default());
    let tag = format!(r"{}'); DROP TABLE leaf_alloc; --\'\\", fresh_tag("q"));
    create(&gen, &tag, 1, 10);
    assert_eq!(
        gen.next_ids(&tag, 12).unwrap(),
        (1..=12).collect::<Vec<_>>()
    );
    assert!(gen.tags().contains(&tag));
    let t = tag.clone();
    let stored: i64 = sql(move |pool| {
        Box::pin(async move {
            sqlx::query("SELECT max_id FROM leaf_alloc WHERE biz_tag = $1")
                .bind(t)
                .fetch_one(&pool)
                .await
                .unwrap()
                .get(0)
        })
    });
    // Segments of 10 from 1 (the double buffer may have loaded a third one already).
    assert!(stored >= 21 && stored % 10 == 1, "max_id {stored}");
}

#[test]
fn a_missing_table_is_a_clear_error_until_create_table() {
    let schema = format!("leafid_empty_{}", std::process::id());
    let s = schema.clone();
    sql(move |pool| {
        Box::pin(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}"
            )))
            .execute(&pool)
            .await
            .unwrap();
        })
    });
    // The schema alone on the search path: `leaf_alloc` is not there.
    let other = url_with(|u| {
        u.query_pairs_mut()
            .append_pair("options", &format!("-c search_path={schema}"));
    });
    let err = SegmentGenerator::connect_blocking(&other, SegmentOptions::default()).unwrap_err();
    assert!(matches!(err, Error::TableMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("create_table"), "{err}");
    let gen =
        SegmentGenerator::connect_blocking(&other, SegmentOptions::default().create_table(true))
            .unwrap();
    assert!(gen.tags().is_empty());
    create(&gen, "first", 1, 10);
    assert_eq!(gen.next_ids("first", 3).unwrap(), vec![1, 2, 3]);
    gen.close();
    sql(move |pool| {
        Box::pin(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&pool)
                .await
                .unwrap();
        })
    });
}

#[test]
fn create_tag_refuses_a_start_near_i64_max() {
    let gen = connect(SegmentOptions::default());
    let tag = fresh_tag("top");
    let (g, t) = (gen.clone(), tag.clone());
    let err = block_on(async move { g.create_tag(&t, i64::MAX - 5, 10, "").await }).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains(&tag), "{err}");
}

/// Rows no segment can be reserved from (max_id near i64::MAX, a step of 0 or below)
/// are refused by the UPDATE's guard: a permanent error naming the tag, max_id as it was.
#[test]
fn bad_rows_are_permanent_errors_naming_the_tag_and_max_id_stays() {
    let gen = connect(SegmentOptions::default());
    let rows = [
        (fresh_tag("full"), i64::MAX - 5, 10),
        (fresh_tag("zero"), 100, 0),
        (fresh_tag("negative"), 100, -5),
        (fresh_tag("lowest"), 100, i32::MIN),
    ];
    for (tag, max_id, step) in rows.clone() {
        sql(move |pool| {
            Box::pin(async move {
                sqlx::query("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ($1, $2, $3)")
                    .bind(tag)
                    .bind(max_id)
                    .bind(step)
                    .execute(&pool)
                    .await
                    .unwrap();
            })
        });
    }
    refresh(&gen);
    for (tag, max_id, _) in rows {
        for _ in 0..2 {
            let err = gen.next_id(&tag).unwrap_err();
            assert!(matches!(err, Error::Malformed { .. }), "{tag}: {err:?}");
            let text = err.to_string();
            assert!(text.contains(&tag), "{text}");
        }
        let t = tag.clone();
        let now: i64 = sql(move |pool| {
            Box::pin(async move {
                let now = sqlx::query("SELECT max_id FROM leaf_alloc WHERE biz_tag = $1")
                    .bind(&t)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
                    .get(0);
                sqlx::query("DELETE FROM leaf_alloc WHERE biz_tag = $1")
                    .bind(&t)
                    .execute(&pool)
                    .await
                    .unwrap();
                now
            })
        });
        assert_eq!(now, max_id, "{tag}: max_id changed");
    }
}

/// A row restored from a backup below what this generator loaded is refused (the
/// generator's high-water mark), and ids go on above the mark once the row is.
#[test]
fn a_row_restored_lower_is_refused_and_ids_never_go_back() {
    let gen = connect(
        SegmentOptions::default()
            .double_buffer(false)
            .wait_timeout(Duration::from_secs(5)),
    );
    let tag = fresh_tag("restore");
    create(&gen, &tag, 1, 100);
    let mut ids = gen.next_ids(&tag, 100).unwrap();
    while ids.len() < 200 {
        ids.push(gen.next_id(&tag).unwrap());
    }
    assert_eq!(ids, (1..=200).collect::<Vec<_>>());
    let t = tag.clone();
    sql(move |pool| {
        Box::pin(async move {
            sqlx::query("UPDATE leaf_alloc SET max_id = 1 WHERE biz_tag = $1")
                .bind(t)
                .execute(&pool)
                .await
                .unwrap();
        })
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut refused = false;
    let next = loop {
        match gen.next_id(&tag) {
            Ok(id) => break id,
            Err(e @ Error::Malformed { .. }) => {
                assert!(e.to_string().contains("below 201"), "{e}");
                refused = true;
            }
            Err(e) => panic!("not the refusal: {e:?}"),
        }
        assert!(Instant::now() < deadline, "no id in 20 s");
    };
    assert!(refused, "the lowered row was admitted");
    assert!(next >= 201, "ids went backwards: {next} after 1..=200");
}

/// Issue 31: leafid's table in a schema of its own, named in the URL as docs/postgres.md
/// says (`?options=-csearch_path%3D<schema>`): missing there although `public` of the
/// same database has one, created there, and its ids apart from `public`'s.
#[test]
fn a_store_in_a_schema_of_its_own_by_the_urls_search_path() {
    use crate::support::own_database::{OwnDatabase, Server};
    let db = OwnDatabase::new(Server::Postgres, "schema");
    db.admin("CREATE SCHEMA ids");
    let in_public = SegmentGenerator::connect_blocking(
        &db.admin_url,
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    create(&in_public, "t", 1, 10);
    let url = format!("{}?options=-csearch_path%3Dids", db.admin_url);
    let err = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap_err();
    assert!(matches!(err, Error::TableMissing { .. }), "{err:?}");
    let in_ids =
        SegmentGenerator::connect_blocking(&url, SegmentOptions::default().create_table(true))
            .unwrap();
    create(&in_ids, "t", 1000, 10);
    assert_eq!(in_ids.next_ids("t", 2).unwrap(), vec![1000, 1001]);
    assert_eq!(in_public.next_ids("t", 1).unwrap(), vec![1]);
    // The row is in `ids`, where the URL put it.
    db.admin(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM ids.leaf_alloc \
         WHERE biz_tag = 't' AND max_id > 1000) THEN RAISE 'no row in ids'; END IF; END $$",
    );
    in_ids.close();
    in_public.close();
}
