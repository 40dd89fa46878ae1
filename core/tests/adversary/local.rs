//! `local:DIR`: file locks in one directory of one host. Its adversaries: a relative
//! directory spelled the same from other working directories (issue 20 #1), a lock file
//! unlinked and the whole directory removed under a live holder (#5). There is no foreign
//! writer of this format.

use crate::harness::{open_dir, unique, Registry, Spawn, Tally, Target};
use crate::rows::{matrix_rows, tampered};

/// The `local` row set.
pub struct Local;

impl Registry for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn target(&self, _row: &str) -> Target {
        let dir = open_dir();
        Target {
            url: format!("local://{}", dir.path().display()),
            name: dir.path().display().to_string(),
            upstream: None,
            keep: vec![Box::new(dir)],
        }
    }

    /// The README's own spelling, `local://name`: a relative directory.
    fn cwd_target(&self, row: &str) -> Target {
        let name = unique(row);
        Target {
            url: format!("local://{name}"),
            name,
            upstream: None,
            keep: Vec::new(),
        }
    }

    fn lease_life(&self) -> Option<std::time::Duration> {
        None
    }
}

matrix_rows!(Local);

/// The directory of `t` (a `local://` URL of an absolute path).
fn dir_of(t: &Target) -> std::path::PathBuf {
    std::path::PathBuf::from(t.url.strip_prefix("local://").unwrap())
}

#[test]
fn lock_file_unlinked_under_a_live_holder() {
    let t = Local.target("lock");
    tampered(&Local, "lock file unlinked under holder", &t, |a| {
        if let crate::harness::Start::Live(w) = a.started() {
            let _ = std::fs::remove_file(dir_of(&t).join(format!("worker-{w}.lock")));
        }
        vec![Spawn::url(&t.url), Spawn::url(&t.url)]
    });
}

#[test]
fn directory_removed_under_a_live_holder() {
    let t = Local.target("rmrf");
    tampered(&Local, "directory rm -rf under holder", &t, |_| {
        let _ = std::fs::remove_dir_all(dir_of(&t));
        vec![Spawn::url(&t.url), Spawn::url(&t.url)]
    });
}

/// No foreign writer uses `local:`'s files: reported as not applicable.
#[test]
fn foreign_writer_not_applicable() {
    let mut tally = Tally::new(&Local, "foreign writer");
    tally.note("not applicable: no foreign format");
    tally.finish();
}
