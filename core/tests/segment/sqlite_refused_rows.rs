//! Segment mode on SQLite: rows leafid must refuse (written by hand or by other
//! tooling) and tags whose ids would pass `i64::MAX`.

use leafid::{Error, SegmentGenerator, SegmentOptions};
use sqlx::Row;

struct Db {
    _dir: tempfile::TempDir,
    path: String,
    gen: SegmentGenerator,
}

fn open() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/ids.db", dir.path().display());
    let gen =
        SegmentGenerator::connect_blocking(&format!("sqlite://{path}"), SegmentOptions::default())
            .unwrap();
    Db {
        _dir: dir,
        path,
        gen,
    }
}

impl Db {
    /// Runs SQL on the file directly, as an operator would.
    fn sql(&self, statement: &str) -> Vec<sqlx::sqlite::SqliteRow> {
        let (path, statement) = (self.path.clone(), statement.to_string());
        leafid::runtime::block_on(async move {
            let pool = sqlx::SqlitePool::connect(&format!("sqlite://{path}"))
                .await
                .unwrap();
            let rows = sqlx::query(sqlx::AssertSqlSafe(statement))
                .fetch_all(&pool)
                .await
                .unwrap();
            pool.close().await;
            rows
        })
    }

    fn refresh(&self) {
        let g = self.gen.clone();
        leafid::runtime::block_on(async move { g.refresh().await }).unwrap();
    }

    fn max_id(&self, tag: &str) -> (String, String) {
        let row = &self.sql(&format!(
            "SELECT typeof(max_id), CAST(max_id AS TEXT) FROM leaf_alloc WHERE biz_tag = '{tag}'"
        ))[0];
        (row.get(0), row.get(1))
    }
}

/// Issue 11: `create_tag(start=2**63-6, step=10)` was accepted; SQLite then stored
/// `max_id + step` as a REAL and the tag (and listing the table) broke for good.
#[test]
fn sqlite_create_tag_refuses_a_start_near_i64_max() {
    let db = open();
    let g = db.gen.clone();
    let err = leafid::runtime::block_on(async move {
        g.create_tag("near-the-top", i64::MAX - 5, 10, "").await
    })
    .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("near-the-top"), "{err}");
    assert!(db
        .sql("SELECT * FROM leaf_alloc WHERE biz_tag = 'near-the-top'")
        .is_empty());
}

/// Issue 11: a row near i64::MAX turned max_id into a REAL; now the refill is refused
/// in SQL, the row stays an integer, and the error is permanent and names the tag.
#[test]
fn sqlite_row_near_i64_max_never_becomes_real_and_is_a_permanent_error() {
    let db = open();
    let top = i64::MAX - 5;
    db.sql(&format!(
        "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('full', {top}, 10)"
    ));
    db.refresh();
    for _ in 0..2 {
        let err = db.gen.next_id("full").unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("\"full\"") && text.contains("max_id"),
            "{text}"
        );
        assert!(!text.contains("retry once it is back"), "{text}");
    }
    assert_eq!(db.max_id("full"), ("integer".to_string(), top.to_string()));
    // Listing the table still works.
    let g = db.gen.clone();
    let rows = leafid::runtime::block_on(async move { g.rows().await }).unwrap();
    assert_eq!(rows.iter().find(|r| r.tag == "full").unwrap().max_id, top);
}

/// Issue 11: a step of 0 or below was never validated: refills lowered max_id in the
/// shared table and handed out ranges again.
#[test]
fn sqlite_row_with_a_step_below_one_is_refused_and_max_id_stays() {
    let db = open();
    for (tag, step) in [("zero", 0), ("negative", -5)] {
        db.sql(&format!(
            "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('{tag}', 100, {step})"
        ));
        db.refresh();
        let err = db.gen.next_id(tag).unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{tag}: {err:?}");
        assert!(err.to_string().contains(tag), "{err}");
        assert_eq!(db.max_id(tag), ("integer".to_string(), "100".to_string()));
    }
}

/// Issue 20: one row whose `biz_tag` is not text (SQLite's dynamic typing: a BLOB, or a
/// number in a table made by hand without TEXT affinity) failed the listing of every
/// tag, so the whole store was unavailable. The row is skipped alone.
#[test]
fn sqlite_row_whose_tag_is_not_text_is_skipped_alone() {
    let db = open();
    db.sql("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('good', 1, 10)");
    db.sql("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (X'FF00', 1, 10)");
    db.sql("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (CAST(X'FF' AS TEXT), 1, 10)");
    db.refresh();
    assert_eq!(db.gen.tags(), vec!["good".to_string()]);
    assert!(db.gen.next_id("good").unwrap() >= 1);
    let g = db.gen.clone();
    let rows = leafid::runtime::block_on(async move { g.rows().await }).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.tag.as_str()).collect::<Vec<_>>(),
        ["good"]
    );
}
