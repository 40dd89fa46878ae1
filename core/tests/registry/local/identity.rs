//! Issue 20, `local:` identities that mean one thing, with real processes:
//! - one configuration with a relative directory, started from two working directories,
//!   is refused in both (it used to lock two files and issue as worker 0 twice);
//! - the directory emptied (`rm -rf`, recreated) under a live holder: a newcomer in
//!   another process, with another cache directory (another user's), takes another
//!   worker id, and nothing is issued twice; the same directory is spelled two ways
//!   (through a symlink, with `.`) by the two processes;
//! - a directory whose canonical path is long and multi-byte still gives worker ids.
//!
//! Child processes are this test binary itself, started on an `#[ignore]`d entry point
//! with the parameters in environment variables.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::self_exec::test_name;
use leafid::SnowflakeGenerator;

const URL_VAR: &str = "LEAFID_TEST_IDENTITY_URL";
const CACHE_VAR: &str = "LEAFID_TEST_IDENTITY_CACHE";
/// Set: the child keeps issuing until its stdin closes, then writes every id here.
const OUT_VAR: &str = "LEAFID_TEST_IDENTITY_OUT";

fn build(url: &str, cache: &Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(1_500))
        .build_blocking()
}

/// Entry point of a child: builds a generator on `URL_VAR` and reports
/// `LEAFID-CHILD ok <worker id>` or `LEAFID-CHILD err <error>`. With `OUT_VAR`, it then
/// issues (about 250 ids a millisecond at most, riding out a lost lease) until its
/// stdin closes, and writes the ids to that file, one a line.
#[test]
#[ignore = "child process entry point, started by the tests below"]
fn identity_child_entry() {
    let url = std::env::var(URL_VAR).expect("started as a child");
    let cache = std::env::var_os(CACHE_VAR).expect("LEAFID_TEST_IDENTITY_CACHE");
    let gen = match build(&url, Path::new(&cache)) {
        Ok(gen) => gen,
        Err(e) => {
            println!("LEAFID-CHILD err {e:?}");
            return;
        }
    };
    println!("LEAFID-CHILD ok {}", gen.worker_id());
    std::io::stdout().flush().unwrap();
    let Some(out) = std::env::var_os(OUT_VAR) else {
        let _ = std::io::stdin().read_line(&mut String::new());
        gen.close();
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::spawn({
        let stop = stop.clone();
        move || {
            let _ = std::io::stdin().read_line(&mut String::new());
            stop.store(true, Ordering::SeqCst);
        }
    });
    let mut ids = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match gen.next_ids_now(250) {
            Ok(batch) => ids.extend(batch),
            // A lost lease (the directory emptied) and its re-acquire: wait it out.
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    gen.close();
    let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    std::fs::write(out, text.join("\n")).unwrap();
    println!("LEAFID-DONE");
}

struct Child_ {
    child: Child,
    /// `Ok(worker id)` or `Err(the error's Debug)`.
    outcome: Result<u32, String>,
    out: Option<PathBuf>,
}

// The caller waits for the child (or it exits when its stdin closes with the test).
#[allow(clippy::zombie_processes)]
fn spawn(url: &str, cwd: &Path, cache: &Path, out: Option<&Path>) -> Child_ {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--ignored",
            "--exact",
            test_name(module_path!(), "identity_child_entry").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(cwd)
        .env(URL_VAR, url)
        .env(CACHE_VAR, cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(out) = out {
        command.env(OUT_VAR, out);
    }
    let mut child = command.spawn().expect("spawn child test process");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "child exited before reporting");
        // The harness prints "test … ... " on the same line before the report.
        if let Some((_, rest)) = line.trim_end().split_once("LEAFID-CHILD ") {
            let outcome = match rest.split_once(' ') {
                Some(("ok", id)) => Ok(id.parse().unwrap()),
                Some((_, e)) => Err(e.to_string()),
                None => panic!("bad report {rest:?}"),
            };
            // Keep the pipe drained so the child never blocks writing.
            std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
            return Child_ {
                child,
                outcome,
                out: out.map(Path::to_path_buf),
            };
        }
    }
}

impl Child_ {
    /// Stops the child and returns the ids it wrote.
    fn finish(mut self) -> Vec<i64> {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
        let Some(out) = self.out else {
            return Vec::new();
        };
        let text = std::fs::read_to_string(out).unwrap();
        text.lines().map(|l| l.parse().unwrap()).collect()
    }
}

/// Issue 20 row 1: `local://workers` started from two working directories locked
/// `<cwd>/workers/worker-0.lock` twice and both processes issued as worker 0.
#[test]
fn one_relative_local_config_from_two_working_directories_is_refused() {
    let base = tempfile::tempdir().unwrap();
    for url in [
        "local://workers",
        "local:workers",
        "local://var/lib/leafid/workers",
    ] {
        let children: Vec<Child_> = ["a", "b"]
            .iter()
            .map(|d| {
                let cwd = base.path().join(d);
                std::fs::create_dir_all(&cwd).unwrap();
                spawn(url, &cwd, &base.path().join(format!("cache-{d}")), None)
            })
            .collect();
        for c in children {
            match &c.outcome {
                Err(e) => {
                    assert!(e.starts_with("InvalidUrl"), "{url}: {e}");
                    assert!(e.contains("local:///"), "{url}: the absolute form: {e}");
                }
                Ok(id) => panic!("{url} was accepted and issued as worker {id}"),
            }
            c.finish();
        }
        // Refused before any I/O: nothing was created in either working directory.
        for d in ["a", "b"] {
            let entries = std::fs::read_dir(base.path().join(d)).unwrap().count();
            assert_eq!(entries, 0, "{url}: a lock directory was created in {d}");
        }
    }
}

/// Issue 20 row 5: the directory emptied under a live holder (`rm -rf`, recreated by a
/// deploy). A newcomer in another process and another cache directory found a new,
/// unlocked lock file and no bound, took the holder's worker id and issued beside it.
/// The two spell the directory differently (a symlink and `.`), as two configs may.
#[test]
fn emptying_the_directory_under_a_live_holder_gives_a_newcomer_another_id() {
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("workers");
    let link = base.path().join("link");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();

    let holder = spawn(
        &format!("local://{}/.", link.display()),
        base.path(),
        &base.path().join("cache-holder"),
        Some(&base.path().join("holder.ids")),
    );
    let held = holder.outcome.clone().expect("the holder takes an id");

    // The operator's rm -rf and the deploy that recreates the directory.
    // (Again while the holder's heartbeat writes its bound file into it meanwhile.)
    while let Err(e) = std::fs::remove_dir_all(&real) {
        assert_eq!(e.kind(), std::io::ErrorKind::DirectoryNotEmpty, "{e}");
    }
    std::fs::create_dir_all(&real).unwrap();

    let newcomer = spawn(
        &format!("local://{}", real.display()),
        base.path(),
        &base.path().join("cache-newcomer"),
        Some(&base.path().join("newcomer.ids")),
    );
    let taken = newcomer.outcome.clone().expect("the newcomer takes an id");
    assert_ne!(
        taken, held,
        "the newcomer took the live holder's worker id {held}"
    );
    // Both issue for a while: the holder through its lost lease and re-acquire.
    std::thread::sleep(Duration::from_millis(1_500));
    let (a, b) = (holder.finish(), newcomer.finish());
    assert!(!a.is_empty() && !b.is_empty(), "{} {}", a.len(), b.len());
    let mut all = HashSet::with_capacity(a.len() + b.len());
    let duplicates = a.iter().chain(&b).filter(|&&id| !all.insert(id)).count();
    assert_eq!(
        duplicates,
        0,
        "duplicates among {} + {} ids",
        a.len(),
        b.len()
    );
}

/// Issue 20 (small): the identity of a `local:` worker id is the canonical directory; a
/// long multi-byte one (over 100 bytes) must still be claimable.
#[test]
fn a_long_multi_byte_directory_still_gives_worker_ids() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("美团点评分布式号段服务".repeat(4));
    assert!(dir.as_os_str().len() > 100);
    let cache = base.path().join("cache");
    let a = build(&format!("local://{}", dir.display()), &cache).unwrap();
    let b = build(&format!("local://{}", dir.display()), &cache).unwrap();
    assert_ne!(a.worker_id(), b.worker_id());
    assert!(a.next_id().unwrap() != b.next_id().unwrap());
}
