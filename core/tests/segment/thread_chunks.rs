//! Many threads in many processes on one tag, in both forms (`SegmentOptions::thread_chunk`
//! 0, strictly ordered, and > 0, chunked): every id is collected, none is issued twice,
//! and each thread's ids increase. Also the chunked form's two edges: a forked child
//! never issues from the chunk its forking thread inherited, and a closed generator
//! stops issuing from threads' chunks; and its hot path allocates nothing. The processes
//! are this test binary run again (`child_worker`), on the real MariaDB
//! (`LEAFID_MYSQL_URL`).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::process::Command;

use crate::support::mysql::{connect, create, fresh_tag, mysql_url};
use leafid::{Error, SegmentGenerator, SegmentOptions};

const THREADS: usize = 4;
const IDS_PER_THREAD: usize = 40_000;

/// Issues `IDS_PER_THREAD` ids on each of `THREADS` threads of one generator, mixing
/// the calls a service makes (by handle, by tag name, never-waiting, small batches);
/// returns each thread's ids in the order it got them.
fn issue(tag: &str, chunk: u64) -> Vec<Vec<i64>> {
    // A step that stays at 2000 ids: every thread crosses dozens of segment switches.
    let opts = SegmentOptions::default()
        .thread_chunk(chunk)
        .max_step(2_000)
        .wait_timeout(std::time::Duration::from_secs(10));
    let gen = SegmentGenerator::connect_blocking(&mysql_url(), opts).unwrap();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (gen, tag) = (gen.clone(), tag.to_string());
            std::thread::spawn(move || {
                let h = gen.tag(&tag).unwrap();
                let mut ids = Vec::with_capacity(IDS_PER_THREAD);
                while ids.len() < IDS_PER_THREAD {
                    match (t + ids.len()) % 1000 {
                        0 => ids.extend(h.next_ids(7).unwrap()),
                        1..=9 => ids.push(gen.next_id(&tag).unwrap()),
                        10..=19 => match h.next_id_now() {
                            Ok(id) => ids.push(id),
                            // A refill still loading: what a never-waiting call says.
                            Err(Error::SegmentsExhausted { .. }) => {}
                            Err(e) => panic!("{e:?}"),
                        },
                        _ => ids.push(h.next_id().unwrap()),
                    }
                }
                ids
            })
        })
        .collect();
    let out = threads.into_iter().map(|t| t.join().unwrap()).collect();
    gen.close();
    out
}

/// The worker process: runs only when the parent test starts this binary with the
/// variables set; writes one line per thread.
#[test]
fn child_worker() {
    let (Ok(tag), Ok(chunk), Ok(out)) = (
        std::env::var("LEAFID_CHILD_TAG"),
        std::env::var("LEAFID_CHILD_CHUNK"),
        std::env::var("LEAFID_CHILD_OUT"),
    ) else {
        return;
    };
    let per_thread = issue(&tag, chunk.parse().unwrap());
    let lines: Vec<String> = per_thread
        .iter()
        .map(|ids| {
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            ids.join(" ")
        })
        .collect();
    std::fs::write(out, lines.join("\n")).unwrap();
}

/// Issue 24's stress test: 4 processes × 4 threads on one MySQL tag whose small step
/// (2000 ids, kept there) makes every thread cross dozens of segment switches; three processes use the
/// chunked form (chunks of up to 64 and 4096), one the ordered form, all at once.
#[test]
fn threads_in_processes_on_one_mysql_tag_never_share_an_id_and_each_thread_increases() {
    let gen = connect(SegmentOptions::default());
    let tag = fresh_tag("threads");
    create(&gen, &tag, 1, 2_000);
    gen.close();
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = [64u64, 4096, 0, 64]
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let out = dir.path().join(format!("out-{i}.txt"));
            let child = Command::new(&exe)
                .args([
                    "--exact",
                    &crate::support::self_exec::test_name(module_path!(), "child_worker"),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("LEAFID_CHILD_TAG", &tag)
                .env("LEAFID_CHILD_CHUNK", chunk.to_string())
                .env("LEAFID_CHILD_OUT", &out)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let mut all = HashSet::new();
    let mut total = 0;
    for (mut child, out) in children {
        assert!(child.wait().unwrap().success(), "a worker process failed");
        let text = std::fs::read_to_string(out).unwrap();
        let threads: Vec<Vec<i64>> = text
            .lines()
            .map(|l| l.split(' ').map(|id| id.parse().unwrap()).collect())
            .collect();
        assert_eq!(threads.len(), THREADS);
        for ids in threads {
            assert!(ids.len() >= IDS_PER_THREAD);
            if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
                panic!("a thread's ids went from {} to {}", w[0], w[1]);
            }
            total += ids.len();
            for id in ids {
                assert!(all.insert(id), "id {id} issued twice");
            }
        }
    }
    assert_eq!(all.len(), total);
}

/// Forks; the child runs `f` with the write end of a pipe and leaves with its exit
/// code (1 on a panic). Returns everything it wrote, after checking it exited with 0.
fn in_child(f: impl FnOnce(&mut std::fs::File)) -> Vec<u8> {
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
        .map_or(1, |_| 0);
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
    let mut status = 0;
    // SAFETY: waits for the child we forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(status, 0, "child failed");
    bytes
}

/// The thread that forks carries its chunk into the child (thread-locals are copied);
/// the parent keeps issuing that chunk, so the child must never take from it.
#[test]
fn a_forked_child_never_issues_from_the_chunk_its_thread_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default().thread_chunk(64))
        .unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 100_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    // The first id comes from the slow path (first load), then chunks of 1, 2, 4, 8,
    // 16 and 32: the 65th id starts a chunk of 64, so 48 of its ids wait in this
    // thread's chunk when it forks.
    let before: Vec<i64> = (0..80).map(|_| h.next_id().unwrap()).collect();
    let child = in_child(|out| {
        for _ in 0..200 {
            out.write_all(&h.next_id().unwrap().to_le_bytes()).unwrap();
        }
    });
    let parent: Vec<i64> = (0..200).map(|_| h.next_id().unwrap()).collect();
    let child: Vec<i64> = child
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(child.len(), 200);
    let mut all = HashSet::new();
    for id in before.iter().chain(&parent).chain(&child) {
        assert!(all.insert(*id), "id {id} issued by both parent and child");
    }
    assert!(
        parent.windows(2).all(|w| w[0] < w[1]),
        "the parent's thread keeps its order"
    );
}

/// Close ends issuing from threads' chunks too, not only from the shared cursor.
#[test]
fn a_closed_generator_stops_issuing_from_thread_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default().thread_chunk(64))
        .unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 100_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    for _ in 0..80 {
        h.next_id().unwrap(); // leaves 48 ids in this thread's chunk (see the fork test)
    }
    gen.close();
    assert!(matches!(h.next_id(), Err(Error::Closed)));
    assert!(matches!(gen.next_id("t"), Err(Error::Closed)));
    assert_eq!(h.try_next_id(), None);
}

/// The chunked form's batches come from the thread's chunk first, so a thread's ids
/// increase across single and batch calls alike.
#[test]
fn a_threads_batch_follows_its_single_ids_in_the_chunked_form() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default().thread_chunk(16))
        .unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    // Another thread takes chunks meanwhile, so the cursor is past this thread's chunk.
    let mut mine = vec![];
    for round in 0..50 {
        mine.push(h.next_id().unwrap());
        let other = h.clone();
        std::thread::spawn(move || {
            for _ in 0..20 {
                other.next_id().unwrap();
            }
        })
        .join()
        .unwrap();
        mine.extend(h.next_ids(round % 5 + 1).unwrap());
    }
    if let Some(w) = mine.windows(2).find(|w| w[0] >= w[1]) {
        panic!("this thread's ids went from {} to {}", w[0], w[1]);
    }
}

/// The same with the calls the bindings make for a synchronous batch or a waiting
/// call (`next_ids_async` and `next_id_async`, taken at call time or, when a refill is
/// due, on the runtime): the calling thread's ids still increase. Before, an async
/// batch came from the shared cursor while the thread kept the lower rest of its chunk,
/// and a waiting call took a runtime thread's chunk.
#[test]
fn a_threads_async_batches_and_waiting_calls_follow_its_single_ids_in_the_chunked_form() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    // A small step: refills are due often, so the runtime's paths run too.
    let opts = SegmentOptions::default().thread_chunk(16).max_step(100);
    let gen = SegmentGenerator::connect_blocking(&url, opts).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 100, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    let mut mine = vec![];
    for round in 0..300 {
        mine.push(h.next_id().unwrap());
        let other = h.clone();
        std::thread::spawn(move || {
            for _ in 0..20 {
                other.next_id().unwrap();
            }
        })
        .join()
        .unwrap();
        let batch = h.next_ids_async(round % 5 + 1);
        mine.extend(leafid::runtime::block_on(batch).unwrap());
        let one = h.next_id_async();
        mine.push(leafid::runtime::block_on(one).unwrap());
    }
    if let Some(w) = mine.windows(2).find(|w| w[0] >= w[1]) {
        panic!("this thread's ids went from {} to {}", w[0], w[1]);
    }
}

/// A thread that stops issuing while another runs through many segments does not come
/// back with the rest of its old chunk (review: `leafid serve`'s idle worker thread
/// answered 1001 hours later): chunks are given up at every segment switch.
#[test]
fn an_idle_threads_old_chunk_is_given_up_when_the_segment_switches() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let opts = SegmentOptions::default().thread_chunk(64).max_step(100);
    let gen = SegmentGenerator::connect_blocking(&url, opts).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 100, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    // This thread's chunks grow (1, 2, 4, 8, …): after 9 ids it holds several unused.
    for _ in 0..9 {
        h.next_id().unwrap();
    }
    let other = h.clone();
    let others_last =
        std::thread::spawn(move || (0..2_000).map(|_| other.next_id().unwrap()).max().unwrap())
            .join()
            .unwrap();
    let next = h.next_id().unwrap();
    assert!(
        next > others_last,
        "this thread came back with {next}, below {others_last} another thread issued since"
    );
}

/// Issue 28, item 3: within one long segment (step 1 000 000, no switch to give chunks
/// up), a thread that paused with part of its chunk must not come back with ids far
/// below what another thread issued meanwhile. Before, it did: 500 057 below after the
/// other thread's 500 000 ids, where docs/segment.md promises less than `n` × threads.
#[test]
fn an_idle_thread_trails_another_by_less_than_a_chunk_per_thread_in_a_long_segment() {
    const CHUNK: u64 = 64;
    const THREADS: i64 = 2;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let opts = SegmentOptions::default().thread_chunk(CHUNK);
    let gen = SegmentGenerator::connect_blocking(&url, opts).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1_000_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    // This thread's chunks grow 1, 2, 4, … 64: after 100 ids it holds 28 unused.
    let mut mine = (0..100).map(|_| h.next_id().unwrap()).collect::<Vec<_>>();
    // One other thread (so two threads take chunks) issues while this one is idle: a
    // little (less than the bound, so this thread may keep its chunk), then ever more,
    // all inside one segment. Each burst's last id comes back before this thread's call.
    let (bursts, burst_rx) = std::sync::mpsc::channel::<usize>();
    let (lasts_tx, lasts) = std::sync::mpsc::channel();
    let other = h.clone();
    let worker = std::thread::spawn(move || {
        for burst in burst_rx {
            let last = (0..burst).map(|_| other.next_id().unwrap()).max().unwrap();
            lasts_tx.send(last).unwrap();
        }
    });
    let mut trails = vec![];
    for burst in [10, 100, 1_000, 10_000, 500_000] {
        bursts.send(burst).unwrap();
        let others_last = lasts.recv().unwrap();
        let next = h.next_id().unwrap();
        trails.push((burst, others_last - next));
        mine.push(next);
    }
    drop(bursts);
    worker.join().unwrap();
    assert!(
        trails.iter().all(|(_, t)| *t < CHUNK as i64 * THREADS),
        "(other thread's ids, how far this thread's next id came below its last): \
         {trails:?}; the bound is {CHUNK} × {THREADS} threads"
    );
    assert!(
        mine.windows(2).all(|w| w[0] < w[1]),
        "this thread's ids increase"
    );
    assert!(
        *mine.last().unwrap() < 1_000_000,
        "all in the first segment: no switch gave the chunk up"
    );
}

/// One answer taken in several calls on whichever thread runs it (`leafid serve`'s
/// streamed batch) increases: `next_ids_ordered_async` takes from the shared cursor,
/// never from the calling thread's chunk. Here a thread holds the rest of an old chunk
/// while another thread takes the answer's first part from the cursor; a later part
/// taken on the first thread by `next_ids_async` comes from its chunk, below the first
/// part (issue 29 review: streamed batches not increasing with `--thread-chunk 64`).
#[test]
fn an_ordered_batch_comes_above_earlier_ids_though_the_thread_holds_an_older_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default().thread_chunk(64))
        .unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1_000_000, "").await }).unwrap();
    // This thread's chunks grow 1, 2, 4, … 64: after 100 ids it holds 28 unused.
    for _ in 0..100 {
        gen.next_id("t").unwrap();
    }
    let other = gen.clone();
    let first = std::thread::spawn(move || {
        leafid::runtime::block_on(other.next_ids_async("t", 16)).unwrap()
    })
    .join()
    .unwrap();
    let rest = leafid::runtime::block_on(gen.next_ids_ordered_async("t", 16)).unwrap();
    let answer: Vec<i64> = first.iter().chain(&rest).copied().collect();
    if let Some(w) = answer.windows(2).find(|w| w[0] >= w[1]) {
        panic!("the answer went from {} to {}: {answer:?}", w[0], w[1]);
    }
}

/// A batch of no ids takes nothing and gives nothing up: the thread's next id still
/// comes from its chunk. Before, `next_ids_at_hand(0)` and `next_ids_async(0)` gave the
/// chunk up (a gap), as for a batch that does not fit in it.
#[test]
fn a_batch_of_no_ids_keeps_the_threads_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default().thread_chunk(16))
        .unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("t", 1, 1_000, "").await }).unwrap();
    let h = gen.tag("t").unwrap();
    // The slow path's single id (the first segment), then chunks of 1 and 2: the last
    // still holds an id.
    let first = h.next_id().unwrap();
    assert_eq!(h.next_id().unwrap(), first + 1);
    assert_eq!(h.next_id().unwrap(), first + 2);
    assert_eq!(h.next_ids_at_hand(0), Some(vec![]));
    assert_eq!(gen.next_ids_at_hand("t", 0), Some(vec![]));
    let ids = leafid::runtime::block_on(h.next_ids_async(0)).unwrap();
    assert!(ids.is_empty());
    assert_eq!(h.next_id().unwrap(), first + 3, "from the chunk, no gap");
}
