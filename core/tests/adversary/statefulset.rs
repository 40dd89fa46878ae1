//! `statefulset:///DIR?hostname=web-N`: the worker id is the pod's ordinal (plus the
//! offset), one holder per id on a host (the host claim `statefulset/<id>`, an abstract
//! Unix socket of the network namespace), and the bound in `DIR/worker-<id>.json`, which
//! every renew checks before writing (`docs/kubernetes.md`).
//!
//! Its adversaries: another pod of the same ordinal on this host (other working directory,
//! user, floor directory, even another StatefulSet whose offset lands on the same id: all
//! refused); a second pod of the ordinal on another host (its own network namespace, as a
//! force-deleted pod's replacement on another node) sharing the floor directory; and the
//! floor file deleted or rewritten lower by an operator under a live holder, on this host
//! and with a pod on another host, and the holder's renew stalled between its check and
//! its write (issue 28: prevented, by the lock on `worker-<n>.lock`). Two pods of one
//! ordinal sharing the floor directory whose file was deleted or lowered are "only
//! detected" (docs/kubernetes.md): the first to renew after the other's
//! write stops with `LeaseLost` within one heartbeat, and ids issued before that may
//! collide. Those rows count the second pod's ids as a foreign writer's, tolerate
//! duplicates only inside that window, print it, and assert that only one pod issues
//! after it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::harness::{
    now_ms, open_dir, pause, spawn, Registry, Spawn, Start, Tally, Target, Worker,
};
use crate::rows::{matrix_rows, tampered};
use crate::tally::time_of;

/// The `statefulset` row set.
pub struct Statefulset;

/// Ordinals for the rows, apart from the ones `tests/registry/statefulset.rs` uses (3 to
/// 7, 611 to 655, 907): one per row, since rows run in parallel and the host claim is
/// per worker id.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The generator's default heartbeat: a holder finds another pod's write at its next
/// renew, at most this long after it (docs/kubernetes.md, "within one heartbeat (3 s)").
const HEARTBEAT_MS: i64 = 3_000;

/// Slack on the heartbeat: the renew's own file writes (fsync) and the scheduler of a
/// loaded machine.
const MARGIN_MS: i64 = 500;

impl Registry for Statefulset {
    fn name(&self) -> &'static str {
        "statefulset"
    }

    fn target(&self, _row: &str) -> Target {
        let ordinal = 300 + (std::process::id() % 200) + NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = open_dir();
        Target {
            url: format!(
                "statefulset://{}?name=web&hostname=web-{ordinal}",
                dir.path().display()
            ),
            name: dir.path().display().to_string(),
            upstream: None,
            keep: vec![Box::new(dir)],
        }
    }

    /// Nothing it holds expires: a frozen holder keeps its host claim, so a newcomer on
    /// this host is refused.
    fn lease_life(&self) -> Option<std::time::Duration> {
        None
    }
}

matrix_rows!(Statefulset);

/// The floor directory of `t`.
fn floor_dir(t: &Target) -> PathBuf {
    PathBuf::from(&t.name)
}

/// The ordinal of `t` (`hostname=web-N`).
fn ordinal_of(t: &Target) -> u32 {
    t.url.rsplit("web-").next().unwrap().parse().unwrap()
}

/// Starts a worker in a network namespace of its own: another host for the host claim
/// (an abstract socket), as a pod on another node. Only the spawning thread enters the
/// namespace, and the worker inherits it. `None` when the namespace cannot be made
/// (not root).
fn spawn_on_another_host(label: &str, dir: &Path, how: Spawn) -> Option<Worker> {
    let (label, dir) = (label.to_string(), dir.to_path_buf());
    std::thread::spawn(move || {
        // SAFETY: unshare(2) of the network namespace moves only this thread, which
        // spawns the worker and ends.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        Some(spawn(&label, &dir, how))
    })
    .join()
    .unwrap()
}

/// Another pod with the same worker id on this host: the same URL from another working
/// directory as another user, the same ordinal with a floor directory of its own, and
/// another StatefulSet whose offset lands on the same id. All must be refused with
/// `WorkerIdInUse`.
#[test]
fn another_pod_with_the_same_ordinal_on_this_host_is_refused() {
    let t = Statefulset.target("other");
    let n = ordinal_of(&t);
    let dir = open_dir();
    let (cwd, own_floor, api_floor) = (open_dir(), open_dir(), open_dir());
    let mut tally = Tally::new(&Statefulset, "same ordinal on this host (3 spellings)");
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.url));
    assert!(a.live(), "{:?}", a.started());
    let others = [
        Spawn {
            cwd: Some(cwd.path().to_path_buf()),
            as_nobody: true,
            ..Spawn::url(&t.url)
        },
        Spawn::url(&format!(
            "statefulset://{}?name=web&hostname=web-{n}",
            own_floor.path().display()
        )),
        Spawn::url(&format!(
            "statefulset://{}?name=api&offset=10&hostname=api-{}",
            api_floor.path().display(),
            n - 10
        )),
    ];
    let mut ws: Vec<Worker> = others
        .into_iter()
        .enumerate()
        .map(|(i, how)| spawn(&format!("other{i}"), dir.path(), how))
        .collect();
    let starts: Vec<Start> = ws.iter_mut().map(Worker::started).collect();
    pause(2.0);
    ws.insert(0, a);
    tally.stop_all(ws);
    tally.finish();
    for (i, s) in starts.iter().enumerate() {
        assert!(
            matches!(s, Start::Refused(code, _) if code == "LEAF_WORKER_ID_IN_USE"),
            "other{i}, a second holder of worker id {n} on this host, was not refused: {s:?}"
        );
    }
}

/// The floor file deleted under a live holder, then the same URL started again on this
/// host: the holder's next renew finds the file gone (`LeaseLost`) and re-acquires from
/// its cache file's bound; the newcomer is refused by the host claim.
#[test]
fn floor_file_deleted_under_a_live_holder() {
    let t = Statefulset.target("rm");
    tampered(&Statefulset, "floor file rm under holder", &t, |a| {
        if let Start::Live(w) = a.started() {
            let _ = std::fs::remove_file(floor_dir(&t).join(format!("worker-{w}.json")));
        }
        vec![Spawn::url(&t.url)]
    });
}

/// The floor file rewritten to bound 0 (a restored backup) under a live holder, then
/// the same URL started again on this host.
#[test]
fn floor_file_rewritten_lower_under_a_live_holder() {
    let t = Statefulset.target("low");
    tampered(
        &Statefulset,
        "floor file rewritten to 0 under holder",
        &t,
        |a| {
            if let Start::Live(w) = a.started() {
                rewrite_lower(&floor_dir(&t), w);
            }
            vec![Spawn::url(&t.url)]
        },
    );
}

/// Writes bound 0 for worker id `w` in `dir`, as an operator restoring an old copy.
fn rewrite_lower(dir: &Path, w: u32) {
    let body = format!("{{\"worker_id\":{w},\"bound_ms\":0}}");
    std::fs::write(dir.join(format!("worker-{w}.json")), body).unwrap();
}

/// A second pod of the holder's ordinal on another host (its own network namespace)
/// sharing the floor directory, started twice at different points of the holder's
/// heartbeat: it reads the holder's bound and waits for it, by when the holder has
/// renewed, so it should be refused; if it does go live, the docs' window applies.
#[test]
fn second_pod_on_another_host_sharing_the_floor_dir() {
    other_host_row(
        "2nd pod, other host, shared floor dir",
        "share",
        2,
        |_, _| {},
    );
}

/// The floor file deleted under a live holder, then a pod of the same ordinal on another
/// host sharing the directory: it finds no floor and issues at once, and the holder
/// stops at its next renew. The documented window (docs/kubernetes.md: "ids issued
/// before that may collide").
#[test]
fn floor_file_deleted_then_a_pod_on_another_host() {
    other_host_row("floor rm, then pod on other host", "rmhost", 1, |dir, w| {
        let _ = std::fs::remove_file(dir.join(format!("worker-{w}.json")));
    });
}

/// The floor file rewritten to bound 0 under a live holder, then a pod of the same
/// ordinal on another host sharing the directory.
#[test]
fn floor_file_rewritten_lower_then_a_pod_on_another_host() {
    other_host_row(
        "floor rewritten 0, then pod other host",
        "lowhost",
        1,
        rewrite_lower,
    );
}

/// The force-deletion case: the holder frozen (a node the control plane cannot reach)
/// while a pod of its ordinal on another host, sharing the floor directory, takes over;
/// then the holder wakes. The newcomer waits for the holder's last bound and the holder
/// issues only below it, so no id may be issued twice here (no window: the holder wrote
/// nothing after the newcomer read the file); the woken holder's renew finds the
/// newcomer's write and stops.
#[test]
fn holder_frozen_while_a_pod_on_another_host_takes_over() {
    let t = Statefulset.target("frozenhost");
    let dir = open_dir();
    let mut tally = Tally::new(&Statefulset, "holder frozen, pod on other host, woken");
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.url));
    assert!(a.live(), "{:?}", a.started());
    pause(1.0);
    a.signal(libc::SIGSTOP);
    let Some(mut b) = spawn_on_another_host("pod", dir.path(), Spawn::url(&t.url)) else {
        a.signal(libc::SIGCONT);
        tally.note("not run: cannot make a network namespace (not root)");
        tally.stop(a);
        tally.finish();
        return;
    };
    let start = b.started();
    pause(2.0);
    a.signal(libc::SIGCONT);
    pause(4.0);
    tally.note(format!("pod {start:?}"));
    tally.stop_all(vec![a, b]);
    tally.finish();
    assert!(
        matches!(start, Start::Live(_)),
        "the pod on another host did not take over from the frozen holder: {start:?}"
    );
}

/// Issue 28 #2: the holder's every renew stalls 3.5 s between its check of the bound
/// file and its write (a hung NFS or CephFS volume), and a pod of its ordinal on another
/// host shares the floor directory. Check and write are one step under the lock, so the
/// pod's check never passes while the holder's write is still to land: it is refused (or,
/// having written first, the holder stops at its next renew). No duplicate at all: no
/// residual window here.
#[test]
fn holder_renew_stalled_between_check_and_write_then_a_pod_on_another_host() {
    let t = Statefulset.target("stall");
    let dir = open_dir();
    let mut tally = Tally::new(&Statefulset, "renew stalled 3.5 s, pod on other host");
    let stalled = Spawn {
        env: vec![(
            crate::worker::STALL_WRITES_MS.to_string(),
            "3500".to_string(),
        )],
        ..Spawn::url(&t.url)
    };
    let mut a = spawn("holder", dir.path(), stalled);
    assert!(a.live(), "{:?}", a.started());
    let mut pods = Vec::new();
    // Two pods, at other phases of the holder's stalls.
    for i in 0..2 {
        pause(if i == 0 { 1.0 } else { 2.5 });
        let Some(b) = spawn_on_another_host(&format!("pod{i}"), dir.path(), Spawn::url(&t.url))
        else {
            tally.note("not run: cannot make a network namespace (not root)");
            tally.stop(a);
            tally.finish();
            return;
        };
        pods.push(b);
    }
    for b in pods.iter_mut() {
        let start = b.started();
        tally.note(format!("{} {start:?}", b.label));
    }
    pause(4.0);
    pods.insert(0, a);
    tally.stop_all(pods);
    tally.finish();
}

/// A live holder; `tamper(floor dir, worker id)`; then `pods` pods of the same URL on
/// other hosts, 1.5 s apart (other phases of the holder's heartbeat). The pods' ids are
/// counted as a foreign writer's: duplicates with them are tolerated only from the first
/// pod's start until one heartbeat (plus a margin) after the last pod's start, and after
/// that window at most one process may still issue.
fn other_host_row(row: &str, tag: &str, pods: usize, tamper: impl FnOnce(&Path, u32)) {
    let t = Statefulset.target(tag);
    let dir = open_dir();
    let mut tally = Tally::new(&Statefulset, row);
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.url));
    let Start::Live(w) = a.started() else {
        panic!("the holder did not start: {:?}", a.started());
    };
    pause(1.0);
    let from = now_ms();
    tamper(&floor_dir(&t), w);
    let mut others = Vec::new();
    for i in 0..pods {
        if i > 0 {
            pause(1.5);
        }
        let Some(b) = spawn_on_another_host(&format!("pod{i}"), dir.path(), Spawn::url(&t.url))
        else {
            tally.note("not run: cannot make a network namespace (not root)");
            tally.stop(a);
            for b in others {
                tally.stop(b);
            }
            tally.finish();
            return;
        };
        others.push(b);
    }
    let mut last_ready = from;
    let mut starts = Vec::new();
    for b in others.iter_mut() {
        starts.push(b.started());
        last_ready = now_ms();
    }
    let to = last_ready + HEARTBEAT_MS + MARGIN_MS;
    // Past the window and one more heartbeat: a pod that re-acquires would show.
    pause(((to - now_ms()) as f64 / 1000.0).max(0.0) + 3.5);
    a.begin_stop();
    others.iter_mut().for_each(Worker::begin_stop);
    tally.stop(a);
    let holder_ids = read_ids(&dir.path().join("holder.ids"));
    let mut after: Vec<String> = Vec::new();
    let late = |ids: &[i64]| ids.iter().filter(|&&id| time_of(id) > to).count();
    if late(&holder_ids) > 0 {
        after.push(format!("holder ({} ids)", late(&holder_ids)));
    }
    tally.note(format!(
        "holder's last id {} ms after the first pod's start",
        holder_ids.last().map_or(0, |&id| time_of(id) - from)
    ));
    for (b, start) in others.into_iter().zip(&starts) {
        let (label, ids, how) = b.stop();
        if late(&ids) > 0 {
            after.push(format!("{label} ({} ids)", late(&ids)));
        }
        let shown = match start {
            Start::Live(_) => format!("{label} live, {} ids", ids.len()),
            Start::Refused(code, _) => format!("{label} refused {code}"),
        };
        tally.note(shown);
        tally.foreign(&format!("{label} on another host ({how})"), &ids);
    }
    tally.note(format!(
        "documented window: until 1 heartbeat after the last pod's start, {} ms",
        to - from
    ));
    tally.residual_window(from, to);
    tally.finish();
    assert!(
        after.len() <= 1,
        "{row}: more than one pod of ordinal {} issued after the window (docs/kubernetes.md: \
         the first to renew after the other's write stops within one heartbeat): {after:?}",
        ordinal_of(&t)
    );
}

/// A worker's id file (8 bytes little-endian each), in issue order.
fn read_ids(path: &Path) -> Vec<i64> {
    std::fs::read(path)
        .unwrap_or_default()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
