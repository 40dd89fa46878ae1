//! `local:` directories reached by two paths: a symlink swapped under a live holder (a
//! deploy's `current -> release2`) and a bind mount (one directory, two canonical
//! paths, emptied under its holder). The worker ids are claimed under the configured
//! path, the canonical path and the directory's device and inode, so a newcomer is
//! refused the live holder's id in both (found by review; both failed before).

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leafid::{Clock, SnowflakeGenerator};

fn build(url: &str, cache: &Path, clock: Option<Arc<dyn Clock>>) -> SnowflakeGenerator {
    let mut b = SnowflakeGenerator::builder()
        .registry_url(url)
        .unwrap()
        .cache_dir(cache);
    if let Some(c) = clock {
        b = b.clock(c);
    }
    b.build_blocking().unwrap()
}

/// Issues from `gen` (batches of 250, one a millisecond) until `stop`.
fn issue(gen: Arc<SnowflakeGenerator>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<i64>> {
    std::thread::spawn(move || {
        let mut ids = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Ok(batch) = gen.next_ids_now(250) {
                ids.extend(batch);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        ids
    })
}

fn duplicates(a: &[i64], b: &[i64]) -> usize {
    let mut all = HashSet::with_capacity(a.len() + b.len());
    a.iter().chain(b).filter(|&&id| !all.insert(id)).count()
}

/// Runs `a` and `b` side by side for `ms` and counts ids issued by both.
fn race(a: Arc<SnowflakeGenerator>, b: Arc<SnowflakeGenerator>, ms: u64) -> (usize, usize, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ha, hb) = (issue(a, stop.clone()), issue(b, stop.clone()));
    std::thread::sleep(Duration::from_millis(ms));
    stop.store(true, Ordering::SeqCst);
    let (a, b) = (ha.join().unwrap(), hb.join().unwrap());
    (a.len(), b.len(), duplicates(&a, &b))
}

/// A `current`-style symlink in the configured directory, swapped by a deploy while the
/// old release's process still runs: `local:///…/current/workers` canonicalises to two
/// directories, and the holder's `check()` looks only at its own canonical path.
#[test]
fn a_symlink_swapped_under_a_live_holder_never_gives_its_id_to_a_newcomer() {
    let base = tempfile::tempdir().unwrap();
    let (r1, r2) = (base.path().join("release1"), base.path().join("release2"));
    std::fs::create_dir_all(r1.join("workers")).unwrap();
    std::fs::create_dir_all(r2.join("workers")).unwrap();
    let current = base.path().join("current");
    std::os::unix::fs::symlink(&r1, &current).unwrap();
    let url = format!("local://{}/workers", current.display());

    let old = Arc::new(build(&url, &base.path().join("cache-old"), None));
    // The deploy: `ln -sfn release2 current` (atomic rename of a new link).
    let tmp = base.path().join("current.new");
    std::os::unix::fs::symlink(&r2, &tmp).unwrap();
    std::fs::rename(&tmp, &current).unwrap();
    let new = Arc::new(build(&url, &base.path().join("cache-new"), None));
    eprintln!(
        "old worker {} new worker {}",
        old.worker_id(),
        new.worker_id()
    );
    // Past the old holder's heartbeat (3 s): it never notices.
    let (na, nb, dups) = race(old.clone(), new.clone(), 4_000);
    eprintln!(
        "symlink swap: {na} + {nb} ids, {dups} duplicates; after 4 s: workers {} and {}",
        old.worker_id(),
        new.worker_id()
    );
    assert_eq!(
        dups,
        0,
        "{dups} ids issued twice (workers {} and {})",
        old.worker_id(),
        new.worker_id()
    );
}

/// Child entry (run under `unshare -n`): issues until stdin closes, writes the ids.

#[test]
fn a_bind_mount_alias_of_an_emptied_directory_never_gives_a_live_id_away() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("workers");
    let alias = base.path().join("alias");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&alias).unwrap();
    let mounted = Command::new("mount")
        .arg("--bind")
        .arg(&dir)
        .arg(&alias)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("skipped: mount --bind is not permitted here");
        return;
    }
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _umount = Umount(alias.clone());
    let holder = Arc::new(build(
        &format!("local://{}", dir.display()),
        &base.path().join("ca"),
        None,
    ));
    for e in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let newcomer = Arc::new(build(
        &format!("local://{}", alias.display()),
        &base.path().join("cb"),
        None,
    ));
    eprintln!(
        "bind: holder {} newcomer {}",
        holder.worker_id(),
        newcomer.worker_id()
    );
    let (na, nb, dups) = race(holder.clone(), newcomer.clone(), 4_000);
    eprintln!("bind mount: {na} + {nb} ids, {dups} duplicates");
    assert_eq!(dups, 0, "{dups} ids issued twice");
}
