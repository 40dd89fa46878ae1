//! Segment mode against the real MariaDB started by `scripts/services.sh`
//! (`LEAFID_MYSQL_URL`): uniqueness across generators and threads, restarts, a Java
//! Leaf server's SQL running alongside. The database going away mid-run is in
//! `tests/outage/mysql_restart.rs`, its own test binary, so it cannot disturb these tests.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::mysql;

use mysql::{connect, create, fresh_tag, mysql_url};

use leafid::{Error, SegmentGenerator, SegmentOptions};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::Row;

fn refresh(gen: &SegmentGenerator) {
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.refresh().await }).unwrap();
}

/// Runs SQL on the test database directly, as an operator or another server would.
fn sql<T: Send + 'static>(
    f: impl for<'c> FnOnce(
            sqlx::MySqlPool,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>
        + Send
        + 'static,
) -> T {
    let url = mysql_url();
    leafid::runtime::block_on(async move {
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .unwrap();
        f(pool).await
    })
}

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

#[test]
fn ids_never_overlap_a_java_leaf_server_on_the_same_table() {
    let gen = connect(SegmentOptions::default());
    let tag = fresh_tag("java");
    create(&gen, &tag, 1, 500);
    let leaf_ranges = Arc::new(Mutex::new(Vec::<(i64, i64)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Leaf's own allocation: UPDATE then SELECT in one transaction (IDAllocDaoImpl).
    let java = {
        let (tag, ranges, stop) = (tag.clone(), leaf_ranges.clone(), stop.clone());
        std::thread::spawn(move || {
            sql(move |pool| {
                Box::pin(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let mut tx = pool.begin().await.unwrap();
                        sqlx::query(
                            "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?",
                        )
                        .bind(&tag)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                        let row = sqlx::query(
                            "SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?",
                        )
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
    // The Java side connects on its own thread; on a loaded machine leafid's 200 000
    // ids could all be issued before its first allocation, proving nothing. Start
    // leafid only once Leaf has taken a range, so the two interleave.
    let started = Instant::now();
    while leaf_ranges.lock().unwrap().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the Java-side loop never allocated"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ids = gen.next_ids(&tag, 200_000).unwrap();
    stop.store(true, Ordering::Relaxed);
    java.join().unwrap();
    let ranges = leaf_ranges.lock().unwrap();
    assert!(!ranges.is_empty(), "the Java-side loop ran");
    let mut sorted = ranges.clone();
    sorted.sort();
    for id in &ids {
        let i = sorted.partition_point(|r| r.0 <= *id);
        if i > 0 {
            let (lo, hi) = sorted[i - 1];
            assert!(
                !(lo..hi).contains(id),
                "id {id} is inside Leaf's range {lo}..{hi}"
            );
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
            sqlx::query("INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES (?, 1, 2000, 'by hand')")
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
}

#[test]
fn a_missing_table_is_a_clear_error() {
    let url = mysql_url();
    let db = format!("leafid_empty_{}", std::process::id());
    let d = db.clone();
    sql(move |pool| {
        Box::pin(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "CREATE DATABASE IF NOT EXISTS {d}"
            )))
            .execute(&pool)
            .await
            .unwrap();
        })
    });
    let (base, _) = url.rsplit_once('/').unwrap();
    let other = format!("{base}/{db}");
    let err = SegmentGenerator::connect_blocking(&other, SegmentOptions::default()).unwrap_err();
    assert!(matches!(err, Error::TableMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("create_table"));
    let gen =
        SegmentGenerator::connect_blocking(&other, SegmentOptions::default().create_table(true))
            .unwrap();
    assert!(gen.tags().is_empty());
}

#[test]
fn a_down_database_at_connect_is_store_unavailable() {
    let err = SegmentGenerator::connect_blocking(
        "mysql://root:leafid@127.0.0.1:1/leafid",
        SegmentOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
}

/// Issue 11: `create_tag(start=2**63-6, step=10)` was accepted; on MySQL every refill
/// then failed with error 1690, reported as "retry once it is back".
#[test]
fn mysql_create_tag_refuses_a_start_near_i64_max() {
    let gen = connect(SegmentOptions::default());
    let tag = fresh_tag("top");
    let (g, t) = (gen.clone(), tag.clone());
    let err =
        leafid::runtime::block_on(async move { g.create_tag(&t, i64::MAX - 5, 10, "").await })
            .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains(&tag), "{err}");
}

/// Issue 11: rows leafid cannot reserve from (max_id near i64::MAX, a step of 0 or
/// below, as an operator or Java Leaf tooling may write) are refused by the UPDATE's
/// guard: a permanent error naming the tag, and max_id is left as it was.
#[test]
fn mysql_bad_rows_are_permanent_errors_naming_the_tag_and_max_id_stays() {
    let gen = connect(SegmentOptions::default());
    let rows = [
        (fresh_tag("full"), i64::MAX - 5, 10),
        (fresh_tag("zero"), 100, 0),
        (fresh_tag("negative"), 100, -5),
    ];
    for (tag, max_id, step) in rows.clone() {
        sql(move |pool| {
            Box::pin(async move {
                sqlx::query("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (?, ?, ?)")
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
            assert!(!text.contains("retry once it is back"), "{text}");
        }
        let t = tag.clone();
        let now: i64 = sql(move |pool| {
            Box::pin(async move {
                sqlx::query("SELECT max_id FROM leaf_alloc WHERE biz_tag = ?")
                    .bind(t)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
                    .get(0)
            })
        });
        assert_eq!(now, max_id, "{tag}: max_id changed");
        // Leave the shared table clean.
        sql(move |pool| {
            Box::pin(async move {
                sqlx::query("DELETE FROM leaf_alloc WHERE biz_tag = ?")
                    .bind(tag)
                    .execute(&pool)
                    .await
                    .unwrap();
            })
        });
    }
}

/// Issue 11: `create_table` made `leaf_alloc` without a character set, so on a server
/// (or database) whose default is latin1 a multibyte tag failed with error 1366.
#[test]
fn create_table_declares_utf8mb4_so_multibyte_tags_work_on_a_latin1_database() {
    let url = mysql_url();
    let db = format!("leafid_latin1_{}", std::process::id());
    let d = db.clone();
    sql(move |pool| {
        Box::pin(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {d}; CREATE DATABASE {d} DEFAULT CHARACTER SET latin1"
            )))
            .execute(&pool)
            .await
            .unwrap();
        })
    });
    let (base, _) = url.rsplit_once('/').unwrap();
    let gen = SegmentGenerator::connect_blocking(
        &format!("{base}/{db}"),
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    let tag = "订单-überweisung-🧾";
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag(tag, 1, 10, "").await }).unwrap();
    assert_eq!(gen.next_ids(tag, 3).unwrap(), vec![1, 2, 3]);
    assert_eq!(gen.tags(), vec![tag.to_string()]);
    gen.close();
    let d = db.clone();
    let ddl: String = sql(move |pool| {
        Box::pin(async move {
            let ddl: String = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SHOW CREATE TABLE {d}.leaf_alloc"
            )))
            .fetch_one(&pool)
            .await
            .unwrap()
            .get(1);
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE {d}")))
                .execute(&pool)
                .await
                .unwrap();
            ddl
        })
    });
    assert!(ddl.contains("utf8mb4"), "{ddl}");
}
