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
