//! The `local` registry with real processes: each live process holds a distinct
//! worker id through a file lock, a SIGKILLed process's id is free again at once, and
//! the next holder respects the bound its predecessor persisted. Also fork(): a child
//! takes an id of its own instead of issuing with its parent's.
//!
//! Child processes are this test binary itself, started on an `#[ignore]`d entry
//! point with the parameters in environment variables.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::support::self_exec::test_name;
use leafid::snowflake::registry::WorkerCache;
use leafid::{Error, RegistryConfig, SnowflakeGenerator};

const DIR_VAR: &str = "LEAFID_TEST_LOCAL_DIR";
const CACHE_VAR: &str = "LEAFID_TEST_CACHE_DIR";
const IDS_PER_CHILD: usize = 5_000;

/// `LEAFID_TEST_WORKER_BITS` (in a child) narrows the worker id space, so a test can
/// leave a process exactly one free id.
const BITS_VAR: &str = "LEAFID_TEST_WORKER_BITS";
/// Set: the forked grandchild of `fork_entry` issues with `next_id_now`.
const NOW_VAR: &str = "LEAFID_TEST_FORK_NOW";
/// The fixed worker id `fork_entry` claims.
const FIXED_VAR: &str = "LEAFID_TEST_FORK_FIXED_ID";

fn local(dir: &Path, cache: &Path) -> SnowflakeGenerator {
    let bits: u8 = std::env::var(BITS_VAR)
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(10);
    local_with(dir, cache, bits)
}

fn local_with(dir: &Path, cache: &Path, worker_bits: u8) -> SnowflakeGenerator {
    let layout = leafid::Layout::new(
        41,
        worker_bits,
        22 - worker_bits,
        leafid::snowflake::LEAF_EPOCH_MS,
    )
    .expect("a layout of 63 bits");
    SnowflakeGenerator::builder()
        .registry(RegistryConfig::Local { dir: dir.into() })
        .layout(layout)
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_millis(1_500))
        .build_blocking()
        .expect("build local generator")
}

/// Entry point of a child process: takes a worker id, reports it and a batch of ids
/// on stdout, then holds the id until stdin closes or the process is killed.
#[test]
#[ignore = "child process entry point, started by the tests below"]
fn child_process_entry() {
    let dir = std::env::var_os(DIR_VAR).expect("started as a child with LEAFID_TEST_LOCAL_DIR");
    let cache = std::env::var_os(CACHE_VAR).expect("LEAFID_TEST_CACHE_DIR");
    let gen = local(Path::new(&dir), Path::new(&cache));
    let ids = gen.next_ids(IDS_PER_CHILD).unwrap();
    let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    println!("LEAFID-CHILD {} {}", gen.worker_id(), text.join(","));
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    gen.close();
}

struct Worker {
    child: Child,
    worker_id: u32,
    ids: Vec<i64>,
}

// The child is returned to the caller, which waits for it (or the test fails and the
// child exits when its stdin closes with the test process).
#[allow(clippy::zombie_processes)]
fn spawn_child(dir: &Path, cache: &Path) -> Worker {
    spawn_child_with(Command::new(std::env::current_exe().unwrap()), dir, cache)
}

// As above: the caller waits for the child.
#[allow(clippy::zombie_processes)]
fn spawn_child_with(mut command: Command, dir: &Path, cache: &Path) -> Worker {
    let mut child = command
        .args([
            "--ignored",
            "--exact",
            test_name(module_path!(), "child_process_entry").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir)
        .env(CACHE_VAR, cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child test process");
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "child exited before reporting its worker id");
        // The harness prints "test … ... " on the same line before the report.
        if let Some(rest) = line.trim_end().split_once("LEAFID-CHILD ").map(|(_, r)| r) {
            let (worker, ids) = rest.split_once(' ').unwrap();
            let ids = ids.split(',').map(|s| s.parse().unwrap()).collect();
            // Keep the pipe open (and drained) so the child is never blocked writing.
            std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
            return Worker {
                child,
                worker_id: worker.parse().unwrap(),
                ids,
            };
        }
    }
}

#[test]
fn live_processes_hold_distinct_ids_and_a_killed_ones_id_is_reused_above_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let caches = tempfile::tempdir().unwrap();
    let mut workers: Vec<Worker> = (0..3)
        .map(|i| spawn_child(dir.path(), &caches.path().join(format!("c{i}"))))
        .collect();
    let held: HashSet<u32> = workers.iter().map(|w| w.worker_id).collect();
    assert_eq!(
        held.len(),
        3,
        "three live processes, three distinct worker ids"
    );

    let mut all: HashSet<i64> = HashSet::new();
    for w in &workers {
        assert_eq!(w.ids.len(), IDS_PER_CHILD);
        for &id in &w.ids {
            assert!(all.insert(id), "duplicate id {id}");
        }
    }

    // SIGKILL the middle one: no close, no release; the kernel drops its lock.
    let mut victim = workers.remove(1);
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    let bound = WorkerCache::at(dir.path().join(format!("worker-{}.json", victim.worker_id)))
        .read()
        .unwrap()
        .expect("the killed worker's heartbeat left a bound")
        .bound_ms;
    let last_issued = victim
        .ids
        .iter()
        .map(|&i| leafid::decode(i, &Default::default()).timestamp_ms)
        .max()
        .unwrap();
    assert!(
        bound >= last_issued,
        "bound {bound} covers every issued id ({last_issued})"
    );

    // Once the bound has passed, a new process takes the freed id (the lowest free one
    // whose floor is past; before that it would prefer a fresh id) and starts above it.
    while leafid::clock::system().now_millis() <= bound {
        std::thread::sleep(Duration::from_millis(50));
    }
    let next = spawn_child(dir.path(), &caches.path().join("c-next"));
    assert_eq!(
        next.worker_id, victim.worker_id,
        "the killed process's id is free again"
    );
    let first_ts = leafid::decode(next.ids[0], &Default::default()).timestamp_ms;
    assert!(
        first_ts > bound,
        "first id at {first_ts} must be above the predecessor's bound {bound}"
    );
    for &id in &next.ids {
        assert!(all.insert(id), "duplicate id {id} after reuse");
    }
    workers.push(next);

    // A clean exit releases too: close one through stdin, and the id is taken again.
    let mut quitter = workers.remove(0);
    drop(quitter.child.stdin.take());
    assert!(quitter.child.wait().unwrap().success());
    let again = spawn_child(dir.path(), &caches.path().join("c-again"));
    assert_eq!(again.worker_id, quitter.worker_id);
    for &id in &again.ids {
        assert!(all.insert(id), "duplicate id {id} after clean reuse");
    }
    workers.push(again);

    for mut w in workers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
}

#[test]
fn generators_in_one_process_get_distinct_ids_and_close_frees_them() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let a = local(dir.path(), cache.path());
    let b = local(dir.path(), cache.path());
    assert_ne!(a.worker_id(), b.worker_id());
    let last = a.next_id().unwrap();
    let freed = a.worker_id();
    a.close();
    let persisted = WorkerCache::at(dir.path().join(format!("worker-{freed}.json")))
        .read()
        .unwrap()
        .unwrap();
    assert_eq!(
        persisted.bound_ms,
        leafid::decode(last, &Default::default()).timestamp_ms
    );
    let c = local(dir.path(), cache.path());
    assert_eq!(c.worker_id(), freed);
    assert!(c.next_id().unwrap() > last);
}

#[test]
fn pool_exhaustion_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let layout = leafid::Layout::new(43, 1, 19, leafid::snowflake::LEAF_EPOCH_MS).unwrap();
    let build = || {
        SnowflakeGenerator::builder()
            .registry(RegistryConfig::Local {
                dir: dir.path().into(),
            })
            .layout(layout)
            .cache_dir(cache.path())
            .build_blocking()
    };
    let _a = build().unwrap();
    let _b = build().unwrap();
    match build() {
        Err(Error::WorkerIdExhausted { size, .. }) => assert_eq!(size, 2),
        other => panic!("expected WorkerIdExhausted, got {other:?}"),
    }
}

#[test]
fn malformed_bound_file_refuses_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("worker-0.json"), "garbage").unwrap();
    let e = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Local {
            dir: dir.path().into(),
        })
        .cache_dir(cache.path())
        .build_blocking()
        .unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
    assert!(e.to_string().contains("worker-0.json"), "{e}");
}

/// Entry point of a child that forks: the forked grandchild must issue under an id
/// of its own (local registry) or be refused (fixed registry).
#[test]
#[ignore = "child process entry point, started by fork_child_takes_its_own_worker_id"]
fn fork_entry() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        panic!("started as a child with LEAFID_TEST_LOCAL_DIR");
    };
    let cache = std::env::var_os(CACHE_VAR).unwrap();
    let gen = local(Path::new(&dir), Path::new(&cache));
    // Each test that runs this entry passes its own id: fixed ids are claimed host-wide.
    let fixed_id: u32 = std::env::var(FIXED_VAR).unwrap().parse().unwrap();
    let fixed = SnowflakeGenerator::builder()
        .registry(RegistryConfig::Fixed(fixed_id))
        .cache_dir(Path::new(&cache))
        .build_blocking()
        .unwrap();
    let parent_id = gen.next_id().unwrap();
    fixed.next_id().unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: a plain pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fork in a test process; the child only runs leafid code and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let issued = if std::env::var_os(NOW_VAR).is_some() {
            now_in_child(&gen)
        } else {
            gen.next_id()
        };
        let report = match issued {
            Ok(id) => {
                let fixed_result = match fixed.next_id() {
                    Err(Error::InvalidConfig(m)) if m.contains("fork") => "refused",
                    Err(_) => "other-error",
                    Ok(_) => "issued",
                };
                format!("{} {} {}\n", gen.worker_id(), id, fixed_result)
            }
            Err(e) => format!("error {e}\n"),
        };
        // SAFETY: writes a buffer we own to the pipe, then leaves without running the
        // parent's atexit handlers or test harness.
        unsafe {
            libc::write(fds[1], report.as_ptr().cast(), report.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end so the read sees EOF.
    unsafe { libc::close(fds[1]) };
    let mut buf = vec![0u8; 256];
    // SAFETY: reads into a buffer we own.
    let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
    let mut status = 0;
    // SAFETY: waits for the child we forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let child = String::from_utf8_lossy(&buf[..n.max(0) as usize])
        .trim()
        .to_string();
    // The parent keeps issuing under its own id.
    let after = gen.next_id().unwrap();
    println!(
        "LEAFID-FORK parent={} parent_id={} after={} child={}",
        gen.worker_id(),
        parent_id,
        after,
        child
    );
}

/// `next_id_now` in a forked child: the first call fails at once with
/// `RegistryUnavailable` (the child's own worker id is being acquired in the
/// background), later ones issue under that id. `Err` text for anything else.
fn now_in_child(gen: &SnowflakeGenerator) -> leafid::Result<i64> {
    match gen.next_id_now() {
        Err(Error::RegistryUnavailable { .. }) => {}
        Ok(_) => return Err(Error::Closed), // reported as an error: it should not issue yet
        Err(e) => return Err(e),
    }
    let started = std::time::Instant::now();
    loop {
        match gen.next_id_now() {
            Err(Error::RegistryUnavailable { .. })
                if started.elapsed() < Duration::from_secs(60) =>
            {
                std::thread::sleep(Duration::from_millis(5))
            }
            other => return other,
        }
    }
}

#[test]
fn fork_child_takes_its_own_worker_id() {
    fork_child_check(false);
}

#[test]
fn fork_child_next_id_now_fails_at_once_then_takes_its_own_worker_id() {
    fork_child_check(true);
}

fn fork_child_check(now: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        test_name(module_path!(), "fork_entry").as_str(),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(DIR_VAR, dir.path())
    .env(CACHE_VAR, cache.path())
    .env(FIXED_VAR, if now { "813" } else { "812" });
    if now {
        cmd.env(NOW_VAR, "1");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("LEAFID-FORK ").map(|(_, r)| r))
        .unwrap_or_else(|| {
            panic!(
                "no report; stdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |k: &str| {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap()
            .to_string()
    };
    let parent: u32 = field("parent").parse().unwrap();
    let parent_id: i64 = field("parent_id").parse().unwrap();
    let child_part = line.split_once("child=").unwrap().1;
    let parts: Vec<&str> = child_part.split(' ').collect();
    assert_ne!(parts[0], "error", "child failed: {child_part}");
    let child_worker: u32 = parts[0].parse().unwrap();
    let child_id: i64 = parts[1].parse().unwrap();
    assert_ne!(
        child_worker, parent,
        "the forked child must not issue with its parent's worker id"
    );
    assert_eq!(
        leafid::decode(child_id, &Default::default()).worker_id,
        child_worker
    );
    assert!(
        child_id > parent_id,
        "the child starts above the parent's last timestamp"
    );
    assert_eq!(
        parts[2], "refused",
        "a fixed-id generator must refuse in the child"
    );
}

#[test]
fn restart_with_the_clock_set_back_never_reissues_a_killed_processes_ids() {
    // Leaf issue #216 with whole processes: the first holder of an id is SIGKILLed,
    // the next one starts with its clock one second behind (libfaketime). It must wait
    // until its clock passes everything the first may have issued.
    let faketime = Path::new("/usr/bin/faketime");
    assert!(
        faketime.exists(),
        "this test needs faketime (Debian package `faketime`): apt-get install faketime"
    );
    let dir = tempfile::tempdir().unwrap();
    let caches = tempfile::tempdir().unwrap();
    // One worker bit: the first child takes one id and this process the other, so the
    // restarted child has no fresh id to prefer and must take (and wait for) the first's.
    let mut one_bit = Command::new(std::env::current_exe().unwrap());
    one_bit.env(BITS_VAR, "1");
    let mut first = spawn_child_with(one_bit, dir.path(), &caches.path().join("a"));
    let other = local_with(dir.path(), &caches.path().join("p"), 1);
    assert_ne!(other.worker_id(), first.worker_id);
    let last_issued = first
        .ids
        .iter()
        .map(|&i| leafid::decode(i, &Default::default()).timestamp_ms)
        .max()
        .unwrap();
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut behind = Command::new(faketime);
    behind
        .env(BITS_VAR, "1")
        .arg("-f")
        .arg("-1s")
        .arg(std::env::current_exe().unwrap());
    let mut second = spawn_child_with(behind, dir.path(), &caches.path().join("b"));
    assert_eq!(second.worker_id, first.worker_id);
    let first_ts = leafid::decode(second.ids[0], &Default::default()).timestamp_ms;
    assert!(
        first_ts > last_issued,
        "restarted worker issued at {first_ts}, not above its predecessor's {last_issued}"
    );
    let earlier: HashSet<i64> = first.ids.iter().copied().collect();
    assert!(second.ids.iter().all(|id| !earlier.contains(id)));
    // A clean exit through stdin: killing faketime would orphan the program it runs.
    drop(second.child.stdin.take());
    assert!(second.child.wait().unwrap().success());
    other.close();
}
