//! `fixed:N`: the id comes from configuration and nothing outside this host records it.
//! A second leafid with the same id (the "foreign writer" here) must be refused, from
//! any working directory, user or cache directory; a holder frozen or with its cache
//! file deleted keeps its id to itself.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::harness::{open_dir, pause, spawn, Registry, Spawn, Start, Tally, Target};
use crate::rows::{matrix_rows, tampered};

/// The `fixed` row set.
pub struct Fixed;

/// Ids for the rows, apart from the small ids other tests use (one id per row: rows run
/// in parallel and the host lock is per id).
static NEXT: AtomicU32 = AtomicU32::new(0);

impl Registry for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn target(&self, _row: &str) -> Target {
        let id = 600 + (std::process::id() % 300) + NEXT.fetch_add(1, Ordering::SeqCst);
        Target {
            url: format!("fixed:{}", id % 1024),
            name: id.to_string(),
            upstream: None,
            keep: Vec::new(),
        }
    }

    fn lease_life(&self) -> Option<std::time::Duration> {
        None
    }
}

matrix_rows!(Fixed);

/// The foreign writer of `fixed`: another leafid configured with the same id, from
/// another directory and user. It must be refused.
#[test]
fn another_leafid_with_the_same_id_is_refused() {
    let t = Fixed.target("other");
    let dir = open_dir();
    let cwd = open_dir();
    let mut tally = Tally::new(&Fixed, "foreign: another leafid, same fixed id");
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.url));
    assert!(a.live(), "{:?}", a.started());
    let mut b = spawn(
        "other",
        dir.path(),
        Spawn {
            cwd: Some(cwd.path().to_path_buf()),
            as_nobody: true,
            ..Spawn::url(&t.url)
        },
    );
    let refused = matches!(b.started(), Start::Refused(..));
    pause(2.0);
    tally.stop_all(vec![a, b]);
    tally.finish();
    assert!(refused, "a second holder of {} was not refused", t.url);
}

/// The holder's cache directory (its only record) removed under it, then a newcomer
/// with the same id.
#[test]
fn cache_removed_under_a_live_holder() {
    let t = Fixed.target("cache");
    tampered(&Fixed, "cache dir rm -rf under holder", &t, |a| {
        let _ = std::fs::remove_dir_all(&a.cache);
        vec![Spawn::url(&t.url)]
    });
}
