//! A forked child never issues an id its parent could issue: it drops the inherited
//! segments and loads its own from the shared SQLite file.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;

#[test]
fn forked_child_issues_from_its_own_segments() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = leafid::SegmentGenerator::connect_blocking(&url, Default::default()).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    let before = h.next_id().unwrap(); // the parent holds a loaded segment now

    let mut fds = [0; 2];
    // SAFETY: plain pipe(2) into a two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only uses leafid (which is fork-aware), writes to a pipe and
    // leaves with _exit, so no destructor of the parent's state runs twice.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: fds[1] is the pipe's write end, owned by this child.
            let mut out = unsafe { std::fs::File::from_raw_fd(fds[1]) };
            for _ in 0..3000 {
                let id = h.next_id().unwrap();
                out.write_all(&id.to_le_bytes()).unwrap();
            }
        }))
        .map_or(1, |_| 0);
        // SAFETY: ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: fds[1] belongs to the child now; close our copy so read() sees EOF.
    unsafe { libc::close(fds[1]) };
    let parent: Vec<i64> = (0..3000).map(|_| h.next_id().unwrap()).collect();
    let mut bytes = vec![];
    // SAFETY: fds[0] is the pipe's read end, owned by the parent.
    unsafe { std::fs::File::from_raw_fd(fds[0]) }
        .read_to_end(&mut bytes)
        .unwrap();
    let mut status = 0;
    // SAFETY: waits for the child we forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(status, 0, "child failed");
    let child: Vec<i64> = bytes
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(child.len(), 3000);
    let mut all = HashSet::new();
    all.insert(before);
    for id in parent.iter().chain(&child) {
        assert!(all.insert(*id), "id {id} issued by both parent and child");
    }
}

/// Forks; the child runs `f` with the write end of a pipe and leaves with its exit
/// code (1 on a panic). Returns the child's pid and everything it wrote.
fn in_child(f: impl FnOnce(&mut std::fs::File) -> i32) -> (i32, Vec<u8>) {
    let mut fds = [0; 2];
    // SAFETY: plain pipe(2) into a two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only uses leafid (which is fork-aware), writes to a pipe and
    // leaves with _exit, so no destructor of the parent's state runs twice.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: fds[1] is the pipe's write end, owned by this child.
            let mut out = unsafe { std::fs::File::from_raw_fd(fds[1]) };
            f(&mut out)
        }))
        .unwrap_or(1);
        // SAFETY: ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: fds[1] belongs to the child now; close our copy so read() sees EOF.
    unsafe { libc::close(fds[1]) };
    let mut bytes = vec![];
    // SAFETY: fds[0] is the pipe's read end, owned by the parent.
    unsafe { std::fs::File::from_raw_fd(fds[0]) }
        .read_to_end(&mut bytes)
        .unwrap();
    (pid, bytes)
}

fn wait(pid: i32) -> i32 {
    let mut status = 0;
    // SAFETY: waits for a child we forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

/// Issue 11: on `memory:` the child's reopen error was swallowed and the child went
/// on allocating from its copy of the parent's table: ids issued by both processes.
#[test]
fn forked_child_refuses_the_memory_store_and_shares_no_range() {
    use leafid::segment::store::memory::MemoryStore;
    use leafid::segment::SegmentStore;
    let store = std::sync::Arc::new(MemoryStore::new());
    let s = store.clone();
    leafid::runtime::block_on(async move { s.create_tag("t", 1, 100, "").await }).unwrap();
    let dynstore: std::sync::Arc<dyn SegmentStore> = store;
    let gen = leafid::runtime::block_on(leafid::SegmentGenerator::with_store(
        dynstore,
        Default::default(),
    ))
    .unwrap();
    let h = gen.tag("t").unwrap();
    let mut parent = HashSet::new();
    parent.insert(h.next_id().unwrap());

    let (pid, report) = in_child(|out| {
        let mut got = 0;
        let mut errors = vec![];
        for _ in 0..300 {
            match h.next_id() {
                Ok(id) => {
                    got += 1;
                    out.write_all(&id.to_le_bytes()).unwrap();
                }
                Err(e) => errors.push(e),
            }
        }
        if let Err(e) = gen.next_ids("t", 5) {
            errors.push(e);
        }
        if got > 0 {
            return 2;
        }
        let clear = errors.iter().all(|e| {
            e.code() == "LEAF_INVALID_CONFIG"
                && e.to_string().contains("memory store cannot follow a fork")
        });
        if clear {
            0
        } else {
            eprintln!("child errors: {errors:?}");
            3
        }
    });
    for _ in 0..300 {
        parent.insert(h.next_id().unwrap());
    }
    let status = wait(pid);
    let child: Vec<i64> = report
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let shared = child.iter().filter(|id| parent.contains(id)).count();
    assert_eq!(
        (libc::WEXITSTATUS(status), child.len(), shared),
        (0, 0, 0),
        "child exit code (2: it issued ids, 3: an unclear error), ids it issued, ids both issued"
    );
}

/// Issue 11: SQLite's process-global mutexes and sqlx's connection threads were not
/// covered by the fork locks: a fork while a parent's statement ran could leave the
/// child's refills waiting forever on a mutex held by a thread the child does not
/// have. Forks here land while two parent threads refill (step 1: a statement per
/// id) and a third lists the table; every child must get its own ids promptly.
#[test]
fn forks_during_parent_sqlite_statements_never_hang_or_share_ids() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let opts = leafid::SegmentOptions::default().wait_timeout(std::time::Duration::from_secs(60));
    let gen = leafid::SegmentGenerator::connect_blocking(&url, opts).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    h.next_id().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let parent_ids = Arc::new(Mutex::new(Vec::new()));
    let mut busy = vec![];
    for k in 0..3 {
        let (stop, ids, gen, h) = (stop.clone(), parent_ids.clone(), gen.clone(), h.clone());
        busy.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if k == 2 {
                    let g = gen.clone();
                    leafid::runtime::block_on(async move { g.rows().await }).unwrap();
                } else {
                    let id = h.next_id().unwrap();
                    ids.lock().unwrap().push(id);
                }
                // Leave the file's write lock free now and then, so the children are
                // not starved by the parent (that would be SQLite's busy timeout, not
                // the fork).
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }));
    }

    let mut all: HashSet<i64> = HashSet::new();
    for round in 0..30 {
        let why = dir.path().join(format!("child-{round}.err"));
        let (pid, bytes) = in_child(|out| {
            // A watchdog, not a timing assertion: a child whose refills hang (the bug)
            // is killed instead of hanging the test; a healthy one needs milliseconds.
            // SAFETY: alarm(2) only arms a signal for this process.
            unsafe { libc::alarm(120) };
            for _ in 0..20 {
                match h.next_id() {
                    Ok(id) => out.write_all(&id.to_le_bytes()).unwrap(),
                    Err(e) => {
                        std::fs::write(&why, e.to_string()).unwrap();
                        return 2;
                    }
                }
            }
            0
        });
        let status = wait(pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child {round} failed (status {status:#x}; a SIGALRM kill means its refills hung): {}",
            std::fs::read_to_string(&why).unwrap_or_default()
        );
        assert_eq!(bytes.len(), 20 * 8, "child {round}");
        for c in bytes.chunks(8) {
            let id = i64::from_le_bytes(c.try_into().unwrap());
            assert!(all.insert(id), "id {id} issued by two children");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    for id in parent_ids.lock().unwrap().iter() {
        assert!(all.insert(*id), "id {id} issued by the parent and a child");
    }
}
