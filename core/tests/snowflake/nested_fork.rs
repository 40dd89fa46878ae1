//! Nested pools (a gunicorn master forks a worker, which forks again): a process
//! forked while its parent is itself re-acquiring a worker id after a fork must get a
//! worker id of its own. The parent's "re-acquiring" claim was a flag the grandchild
//! inherited set, with no thread of its own to clear it: the grandchild never got a
//! worker id (issue 20).
//!
//! Real processes: this test binary started on an `#[ignore]`d entry point (P1), which
//! forks P2, which starts re-acquiring and forks P3 at once. The local registry keeps
//! P2's re-acquire under way for a few seconds: every free worker id carries a floor
//! (a crashed holder's look-ahead) ahead of the clock, which a newcomer waits out.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::self_exec::test_name;
use leafid::snowflake::registry::{CacheEntry, WorkerCache};
use leafid::{Error, RegistryConfig, SnowflakeGenerator};

const DIR_VAR: &str = "LEAFID_TEST_NESTED_DIR";
const CACHE_VAR: &str = "LEAFID_TEST_NESTED_CACHE";
/// Worker ids 0..=3: P1 takes 0, P2 and P3 two of the three with floors ahead.
const WORKER_BITS: u8 = 2;
/// How far ahead of the clock the free ids' floors are: the length of P2's re-acquire.
const FLOOR_AHEAD_MS: i64 = 2_500;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn generator(dir: &Path, cache: &Path) -> SnowflakeGenerator {
    let layout = leafid::Layout::new(
        41,
        WORKER_BITS,
        22 - WORKER_BITS,
        leafid::snowflake::LEAF_EPOCH_MS,
    )
    .unwrap();
    SnowflakeGenerator::builder()
        .registry(RegistryConfig::Local { dir: dir.into() })
        .layout(layout)
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(1_500))
        .build_blocking()
        .expect("build local generator")
}

/// `next_id_now` until it issues (the re-acquire runs in the background meanwhile), at
/// most 30 s: "worker-id id" or "error …".
fn issue_now(gen: &SnowflakeGenerator) -> String {
    let started = Instant::now();
    loop {
        match gen.next_id_now() {
            Ok(id) => return format!("{} {id}", gen.worker_id()),
            Err(Error::RegistryUnavailable { .. })
                if started.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return format!("error {e}"),
        }
    }
}

/// Forks; the child runs `child` and writes what it returns to a pipe, then `_exit`s.
/// Returns (pid, read end).
fn fork_reporting(child: impl FnOnce() -> String) -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: a plain pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fork in a test process; the child only runs leafid code and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: the child's copy of the read end.
        unsafe { libc::close(fds[0]) };
        let report = child() + "\n";
        // SAFETY: writes a buffer we own, then leaves without the harness's exit path.
        unsafe {
            libc::write(fds[1], report.as_ptr().cast(), report.len());
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the write end, so the read sees EOF when the child exits.
    unsafe { libc::close(fds[1]) };
    (pid, fds[0])
}

/// Reads a child's report and reaps it.
fn report_of(pid: i32, fd: i32) -> String {
    let mut buf = vec![0u8; 512];
    let mut len = 0;
    loop {
        // SAFETY: reads into the unread tail of a buffer we own.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 || len + n as usize == buf.len() {
            len += n.max(0) as usize;
            break;
        }
        len += n as usize;
    }
    let mut status = 0;
    // SAFETY: closes our read end and waits for the child we forked.
    unsafe {
        libc::close(fd);
        libc::waitpid(pid, &mut status, 0);
    }
    String::from_utf8_lossy(&buf[..len]).trim().to_string()
}

/// P1: holds worker 0, forks P2; P2 starts re-acquiring (`next_id_now` claims it and
/// returns at once) and forks P3 while that runs; both then issue.
#[test]
#[ignore = "child process entry point, started by a_grandchild_forked_mid_reacquire_gets_a_worker_id"]
fn nested_fork_entry() {
    let dir = std::env::var_os(DIR_VAR).expect("started with LEAFID_TEST_NESTED_DIR");
    let cache = std::env::var_os(CACHE_VAR).unwrap();
    let gen = generator(Path::new(&dir), Path::new(&cache));
    let p1_id = gen.next_id().unwrap();
    let (p2, p2_out) = fork_reporting(|| {
        // Claims the re-acquire and starts it in the background.
        let first = match gen.next_id_now() {
            Err(Error::RegistryUnavailable { .. }) => "pending".to_string(),
            other => format!("unexpected {other:?}"),
        };
        let (p3, p3_out) = fork_reporting(|| issue_now(&gen));
        let mine = issue_now(&gen);
        format!("{first} {mine} | {}", report_of(p3, p3_out))
    });
    let p2_report = report_of(p2, p2_out);
    println!(
        "LEAFID-NESTED p1={} {p1_id} p2={p2_report}",
        gen.worker_id()
    );
}

#[test]
fn a_grandchild_forked_mid_reacquire_gets_a_worker_id() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    // Worker ids 1..=3 were held by a process that crashed with its look-ahead ahead of
    // the clock: whoever takes one waits that out (P2's re-acquire, then P3's).
    let ahead = now_ms() + FLOOR_AHEAD_MS;
    for id in 1..=3u32 {
        WorkerCache::at(dir.path().join(format!("worker-{id}.json")))
            .write(CacheEntry {
                worker_id: id,
                bound_ms: ahead,
                handover: None,
            })
            .unwrap();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            test_name(module_path!(), "nested_fork_entry").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir.path())
        .env(CACHE_VAR, cache.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("LEAFID-NESTED ").map(|(_, r)| r))
        .unwrap_or_else(|| {
            panic!(
                "no report; stdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    // "p1=W ID p2=pending W ID | W ID"
    let (p1, rest) = line.split_once(" p2=").unwrap();
    let p1_worker: u32 = p1
        .trim_start_matches("p1=")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (p2, p3) = rest.split_once(" | ").unwrap();
    assert!(p2.starts_with("pending "), "P2's first call: {line}");
    let worker = |report: &str, who: &str| -> u32 {
        assert!(!report.contains("error"), "{who} got no worker id: {line}");
        report
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{who}: {line}"))
    };
    let p2_worker = worker(p2.trim_start_matches("pending "), "P2");
    let p3_worker = worker(p3, "P3 (forked mid-reacquire)");
    assert_eq!(p1_worker, 0, "{line}");
    let mut all = [p1_worker, p2_worker, p3_worker];
    all.sort_unstable();
    assert!(
        all.windows(2).all(|w| w[0] != w[1]),
        "shared worker ids: {line}"
    );
}
