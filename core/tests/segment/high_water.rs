//! A tag's ids never go backwards in one generator, whatever an operator does to its
//! row: deleted and restored lower from a backup with a refresh in between, or dropped
//! and created again with a lower start (issue 20, row 7: a refresh between the delete
//! and the restore forgot the tag's buffer, and with it the guard; 150 ids reissued,
//! ids went from 250 back to 101). On the memory store, SQLite and the real MariaDB,
//! through every public way to take ids.

use crate::support::mysql;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::runtime::{block_on, BoxFuture};
use leafid::segment::store::memory::MemoryStore;
use leafid::segment::{Allocation, SegmentStore, TagRow};
use leafid::{Error, SegmentGenerator, SegmentOptions};

/// Where the table lives, and an operator's hands on its rows.
enum Table {
    Memory(Arc<MemoryStore>),
    /// The directory (removed on drop) and the file.
    Sqlite {
        _dir: tempfile::TempDir,
        path: String,
    },
    Mysql,
}

impl Table {
    fn all() -> Vec<Table> {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/ids.db", dir.path().display());
        vec![
            Table::Memory(Arc::new(MemoryStore::new())),
            Table::Sqlite { _dir: dir, path },
            Table::Mysql,
        ]
    }

    fn name(&self) -> &'static str {
        match self {
            Table::Memory(_) => "memory",
            Table::Sqlite { .. } => "sqlite",
            Table::Mysql => "mysql",
        }
    }

    /// A generator that loads a segment only when one is spent (so the rows the test
    /// writes are the ones loaded), waiting long enough for any refill.
    fn generator(&self) -> SegmentGenerator {
        let opts = SegmentOptions::default()
            .double_buffer(false)
            .wait_timeout(Duration::from_secs(5))
            .create_table(true);
        match self {
            Table::Memory(store) => {
                block_on(SegmentGenerator::with_store(store.clone(), opts)).unwrap()
            }
            Table::Sqlite { path, .. } => {
                SegmentGenerator::connect_blocking(&format!("sqlite://{path}"), opts).unwrap()
            }
            Table::Mysql => SegmentGenerator::connect_blocking(&mysql::mysql_url(), opts).unwrap(),
        }
    }

    /// `DELETE FROM leaf_alloc WHERE biz_tag = ?`.
    fn delete(&self, tag: &str) {
        match self {
            Table::Memory(store) => store.remove_tag(tag),
            _ => self.sql("DELETE FROM leaf_alloc WHERE biz_tag = ?", tag, None),
        }
    }

    /// The row put back as a backup had it (`max_id`, step 100).
    fn restore(&self, tag: &str, max_id: i64) {
        match self {
            Table::Memory(store) => store.put_row(tag, max_id, 100),
            _ => self.sql(
                "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, 100, 'backup')",
                tag,
                Some(max_id),
            ),
        }
    }

    fn sql(&self, statement: &'static str, tag: &str, max_id: Option<i64>) {
        let tag = tag.to_string();
        match self {
            Table::Memory(_) => unreachable!(),
            Table::Sqlite { path, .. } => {
                let url = format!("sqlite://{path}");
                block_on(async move {
                    use sqlx::Connection;
                    let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
                    let mut q = sqlx::query(statement).bind(tag);
                    if let Some(m) = max_id {
                        q = q.bind(m);
                    }
                    q.execute(&mut c).await.unwrap();
                })
            }
            Table::Mysql => {
                let url = mysql::mysql_url();
                block_on(async move {
                    use sqlx::Connection;
                    let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
                    let mut q = sqlx::query(statement).bind(tag);
                    if let Some(m) = max_id {
                        q = q.bind(m);
                    }
                    q.execute(&mut c).await.unwrap();
                })
            }
        }
    }
}

/// The public ways to take ids: each must go through the one guard.
#[derive(Debug, Clone, Copy)]
enum Path {
    NextId,
    NextIds,
    NextIdNow,
    NextIdAsync,
    NextIdsAsync,
    Handle,
    HandleIds,
    HandleAsync,
    HandleNow,
}

const PATHS: [Path; 9] = [
    Path::NextId,
    Path::NextIds,
    Path::NextIdNow,
    Path::NextIdAsync,
    Path::NextIdsAsync,
    Path::Handle,
    Path::HandleIds,
    Path::HandleAsync,
    Path::HandleNow,
];

impl Path {
    /// Whether the path waits for a refill (its first answer is then the refill's).
    fn waits(self) -> bool {
        !matches!(self, Path::NextIdNow | Path::HandleNow)
    }

    fn take(self, gen: &SegmentGenerator, tag: &str) -> leafid::Result<Vec<i64>> {
        match self {
            Path::NextId => gen.next_id(tag).map(|id| vec![id]),
            Path::NextIds => gen.next_ids(tag, 3),
            Path::NextIdNow => gen.next_id_now(tag).map(|id| vec![id]),
            Path::NextIdAsync => block_on(gen.next_id_async(tag)).map(|id| vec![id]),
            Path::NextIdsAsync => block_on(gen.next_ids_async(tag, 3)),
            Path::Handle => gen.tag(tag)?.next_id().map(|id| vec![id]),
            Path::HandleIds => gen.tag(tag)?.next_ids(3),
            Path::HandleAsync => block_on(gen.tag(tag)?.next_id_async()).map(|id| vec![id]),
            Path::HandleNow => gen.tag_now(tag)?.next_id_now().map(|id| vec![id]),
        }
    }
}

fn fresh(table: &Table, name: &str) -> String {
    mysql::fresh_tag(&format!("hw_{}_{name}", table.name()))
}

fn refresh(gen: &SegmentGenerator) {
    let g = gen.clone();
    block_on(async move { g.refresh().await }).unwrap();
}

fn create(gen: &SegmentGenerator, tag: &str, start: i64) {
    let (g, t) = (gen.clone(), tag.to_string());
    block_on(async move { g.create_tag(&t, start, 100, "test").await }).unwrap();
}

/// Creates `tag` (start 1, step 100) and takes ids 1..=200 without keeping a handle:
/// two segments loaded and spent, the row's `max_id` at 201.
fn issue_200(gen: &SegmentGenerator, tag: &str) -> Vec<i64> {
    create(gen, tag, 1);
    let mut ids = gen.next_ids(tag, 100).unwrap();
    while ids.len() < 200 {
        ids.push(gen.next_id(tag).unwrap());
    }
    assert_eq!(ids, (1..=200).collect::<Vec<_>>());
    ids
}

/// Takes ids through `path` until some come: every answer before is an error (the
/// waiting paths' first one the refusal, `Malformed`), and every id is at or above
/// 201, the end of the highest segment loaded before.
///
/// The row is at `max_id` 1 when this starts: its next two loads (starting at 1 and
/// 101) are refused, and every refused load still moves the row a step, so the third
/// (201) is taken. The first load may be started by a lookup or `create_tag`, but a
/// waiting caller starts the second itself at the latest and waits for it, so it
/// always hears a refusal.
fn after_the_refusal(gen: &SegmentGenerator, tag: &str, path: Path, what: &str) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = true;
    let mut refused = false;
    loop {
        match path.take(gen, tag) {
            Ok(ids) => {
                assert!(
                    refused || !path.waits(),
                    "{what} {path:?}: no refusal, {ids:?}"
                );
                assert!(
                    ids.iter().all(|&id| id >= 201),
                    "{what} {path:?}: ids went backwards: {ids:?} after 1..=200"
                );
                return ids;
            }
            Err(e @ Error::Malformed { .. }) => {
                assert!(e.to_string().contains("below 201"), "{what} {path:?}: {e}");
                refused = true;
            }
            Err(e) if first && path.waits() => panic!("{what} {path:?}: not the refusal: {e:?}"),
            // The never-waiting paths: a lookup or refill in the background meanwhile.
            Err(_) => {}
        }
        first = false;
        assert!(Instant::now() < deadline, "{what} {path:?}: no id in 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The issue's case: the row deleted, a refresh, then the row restored from a backup
/// taken before the tag's first segment (`max_id` 1). Refused on every path; once the
/// store's row is above the mark again (each refused load still moves it), ids go on
/// from 201. Before the fix: ids 1.. again.
#[test]
fn a_row_restored_lower_after_a_refresh_is_refused_on_every_path() {
    for table in Table::all() {
        let gen = table.generator();
        for path in PATHS {
            let tag = fresh(&table, "restore");
            issue_200(&gen, &tag);
            table.delete(&tag);
            refresh(&gen);
            assert!(!gen.tags().contains(&tag), "{}: still listed", table.name());
            table.restore(&tag, 1);
            after_the_refusal(&gen, &tag, path, table.name());
        }
        gen.close();
    }
}

/// The tag dropped and created again through `create_tag` with a lower start, with
/// and without a refresh in between: refused as well.
#[test]
fn a_tag_dropped_and_created_again_lower_is_refused() {
    for table in Table::all() {
        let gen = table.generator();
        for with_refresh in [true, false] {
            for path in [Path::NextId, Path::NextIdAsync, Path::Handle] {
                let tag = fresh(&table, "recreate");
                issue_200(&gen, &tag);
                table.delete(&tag);
                if with_refresh {
                    refresh(&gen);
                }
                // Succeeds: the row is made; its first load is what is refused.
                create(&gen, &tag, 1);
                let what = format!("{} refresh={with_refresh}", table.name());
                after_the_refusal(&gen, &tag, path, &what);
            }
        }
        gen.close();
    }
}

/// The normal paths are unchanged: refreshes with the row present keep ids
/// consecutive, and a row restored higher is taken at once, with no refusal.
#[test]
fn refreshes_and_a_higher_restore_go_on_as_before() {
    for table in Table::all() {
        let gen = table.generator();
        let tag = fresh(&table, "normal");
        let mut ids = issue_200(&gen, &tag);
        for _ in 0..3 {
            refresh(&gen);
            ids.extend(gen.next_ids(&tag, 50).unwrap());
        }
        assert_eq!(ids, (1..=350).collect::<Vec<_>>(), "{}", table.name());
        table.delete(&tag);
        refresh(&gen);
        table.restore(&tag, 1_000);
        assert_eq!(gen.next_id(&tag).unwrap(), 1_000, "{}", table.name());
        assert_eq!(gen.tag(&tag).unwrap().next_id().unwrap(), 1_001);
        gen.close();
    }
}

/// A store whose row was restored from a backup: every allocation hands out the same
/// range again (what a lowered, or deleted and recreated, `leaf_alloc` row does).
#[derive(Debug, Clone)]
struct Restored {
    inner: Arc<MemoryStore>,
}

impl SegmentStore for Restored {
    fn allocate<'a>(
        &'a self,
        _tag: &'a str,
        _step: Option<i64>,
    ) -> BoxFuture<'a, leafid::Result<Allocation>> {
        Box::pin(async {
            Ok(Allocation {
                max_id: 11,
                step: 10,
            })
        })
    }
    fn tags(&self) -> BoxFuture<'_, leafid::Result<Vec<String>>> {
        self.inner.tags()
    }
    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, leafid::Result<bool>> {
        self.inner.has_tag(tag)
    }
    fn rows(&self) -> BoxFuture<'_, leafid::Result<Vec<TagRow>>> {
        self.inner.rows()
    }
    fn create_table(&self) -> BoxFuture<'_, leafid::Result<()>> {
        self.inner.create_table()
    }
    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        d: &'a str,
    ) -> BoxFuture<'a, leafid::Result<()>> {
        self.inner.create_tag(tag, start, step, d)
    }
    fn reopen(&self) -> leafid::Result<Arc<dyn SegmentStore>> {
        Ok(Arc::new(self.clone()))
    }
}

/// A row that hands out a range at or below one already loaded is refused (found by
/// review: the refill trusted the database and issued 1..10 twice).
#[test]
fn a_segment_below_one_already_loaded_is_refused() {
    let inner = Arc::new(MemoryStore::new());
    let store = Arc::new(Restored {
        inner: inner.clone(),
    });
    let opts = SegmentOptions::default().double_buffer(false);
    let gen = block_on(SegmentGenerator::with_store(store, opts)).unwrap();
    let g = gen.clone();
    block_on(async move { g.create_tag("again", 1, 10, "").await }).unwrap();
    let mut ids = Vec::new();
    let e = loop {
        match gen.next_id("again") {
            Ok(id) => ids.push(id),
            Err(e) => break e,
        }
        assert!(ids.len() <= 10, "ids repeated: {ids:?}");
    };
    assert_eq!(ids, (1..=10).collect::<Vec<_>>());
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
}
