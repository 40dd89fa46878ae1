//! The foreign-writer rows: a faithful simulator of Java Leaf's or the NotFound9 fork's
//! holder (`core/tests/support/java_leaf.rs`, `fork_mysql.rs`, `fork_recycle.rs`) on
//! the identity a leafid holds, started just before, just after, or racing the leafid
//! start. For one identity (`zookeeper`, `mysql`), a leafid of it first issues and
//! closes cleanly, so the records are in the state a rolling replacement leaves (issue
//! 20 #3's release marker); for a pool, leafids hold every id the server may pick. The
//! simulators issue at full speed; their ids are checked against every
//! leafid id.

use std::sync::Mutex;

use leafid::snowflake::registry::fence::{FOREIGN_FIRST_UPLOAD, TAKEOVER_MARGIN};

use crate::harness::{now_ms, open_dir, pause, spawn, Registry, Spawn, Tally, Target, Worker};

/// When the foreign server starts, relative to the leafid.
#[derive(Debug, Clone, Copy)]
pub enum When {
    /// 300 ms before: the leafid starts inside the server's first second, before its
    /// first upload (the blind window).
    Before,
    /// Once the leafid holds its worker id (or was refused), plus 500 ms. Duplicates
    /// in the server's first [`FOREIGN_FIRST_UPLOAD`] + [`TAKEOVER_MARGIN`] are the
    /// residual window of `fence.rs`: measured and reported, not failed.
    After,
    /// At the same moment.
    Racing,
}

/// A started foreign server: stopping it (a `kill -9`) gives what it was (`worker 3`,
/// for the report) and every id it issued.
pub type Running = Box<dyn FnOnce() -> (String, Vec<i64>) + Send>;

/// One simulator at a time: each keeps millions of ids in memory.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The row: `start` starts the foreign server on the identity of `t.url`, beside `n`
/// leafid processes of that config (a pool's: enough to hold every id the foreign
/// server may pick). With `prelude`, a leafid of that config issues and closes first.
pub fn row(
    reg: &dyn Registry,
    who: &str,
    when: When,
    t: &Target,
    (n, prelude): (usize, bool),
    start: impl FnOnce() -> Result<Running, String> + Send + 'static,
) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let row = format!("foreign: {who} started {when:?}").to_lowercase();
    let mut tally = Tally::new(reg, &row);
    let dir = open_dir();
    if prelude {
        let mut p = spawn("prelude", dir.path(), Spawn::url(&t.url));
        p.started();
        pause(0.5);
        tally.stop(p);
    }
    let leafids = || -> Vec<Worker> {
        (0..n)
            .map(|i| spawn(&format!("leafid{i}"), dir.path(), Spawn::url(&t.url)))
            .collect()
    };
    let (mut ls, foreign) = match when {
        When::Before => {
            let f = start();
            pause(0.3);
            (leafids(), f)
        }
        When::After => {
            let mut ls = leafids();
            ls.iter_mut().for_each(|l| drop(l.started()));
            pause(0.5);
            // A server started beside a live holder issues until its first upload,
            // which the holder then sees: the one window fence.rs states as residual.
            let from = now_ms();
            // Plus the holder's detection: a ZooKeeper watch at once, a MySQL poll within
            // 250 ms, and a loaded 2-core machine's scheduling of both processes.
            let detection = std::time::Duration::from_millis(500);
            let until =
                from + (FOREIGN_FIRST_UPLOAD + TAKEOVER_MARGIN + detection).as_millis() as i64;
            tally.residual_window(from, until);
            (ls, start())
        }
        When::Racing => {
            let f = std::thread::spawn(start);
            let ls = leafids();
            (ls, f.join().unwrap())
        }
    };
    ls.iter_mut().for_each(|l| drop(l.started()));
    pause(3.0);
    tally.stop_all(ls);
    match foreign {
        Ok(stop) => {
            let (what, ids) = stop();
            tally.foreign(&format!("{who} ({what})"), &ids);
        }
        Err(e) => tally.note(format!("{who} did not start: {e}")),
    }
    tally.finish();
}

/// The three rows (`before`, `after`, `racing`) as `#[test]`s of the calling module:
/// `$row` is a `fn(When)` of that module.
macro_rules! foreign_rows {
    ($row:path) => {
        #[test]
        fn foreign_writer_started_just_before() {
            $row(crate::foreign::When::Before)
        }
        #[test]
        fn foreign_writer_started_just_after() {
            $row(crate::foreign::When::After)
        }
        #[test]
        fn foreign_writer_racing_the_start() {
            $row(crate::foreign::When::Racing)
        }
    };
}
pub(crate) use foreign_rows;

/// How far ahead of leafid's host the foreign server's clock runs in
/// [`skewed_after_older_leafid`]: within the default 5 s `max_skew`, and past the 3.5 s
/// takeover watch, so a floor taken from the foreign stamp alone lets ids collide.
pub const SKEW_AHEAD_MS: i64 = 4_500;

/// Issue 28 #1, for every registry that shares a layout with a foreign server: a leafid
/// holds the identity and closes (its own record keeps its bound), then a foreign server
/// on a host [`SKEW_AHEAD_MS`] ahead runs on it, uploads once and is killed, and a leafid
/// starts on it at once. The foreign stamp is newer than leafid's old bound and trails
/// what the server issued: no recorded floor, so the leafid waits out the skew. No
/// residual window: the server stopped before the leafid started, so no duplicate at all.
/// `start(ahead_ms)` starts the server; its `Running` stops it.
pub fn skewed_after_older_leafid(
    reg: &dyn Registry,
    who: &str,
    t: &Target,
    start: impl FnOnce(i64) -> Result<Running, String>,
) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let row = format!("foreign: {who} skewed ahead after an older leafid holder");
    let mut tally = Tally::new(reg, &row);
    let dir = open_dir();
    let mut p = spawn("older", dir.path(), Spawn::url(&t.url));
    p.started();
    pause(0.5);
    tally.stop(p);
    pause(0.5);
    match start(SKEW_AHEAD_MS) {
        Ok(stop) => {
            // Past its first upload (1 s after its start), then killed.
            pause(1.3);
            let (what, ids) = stop();
            let mut l = spawn("leafid", dir.path(), Spawn::url(&t.url));
            l.started();
            pause(1.5);
            tally.stop(l);
            tally.foreign(&format!("{who} +{SKEW_AHEAD_MS} ms ({what})"), &ids);
        }
        Err(e) => panic!("{who} did not start: {e}"),
    }
    tally.finish();
}
