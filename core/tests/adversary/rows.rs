//! The rows every registry runs, and [`matrix_rows!`] that makes them `#[test]`s of a
//! registry module. A registry's own adversaries (foreign writers, its records tampered
//! with) use [`tampered`] and [`crate::harness`] directly.

use std::time::Duration;

use crate::harness::{open_dir, pause, say, spawn, Registry, Spawn, Tally, Worker};

/// The generic rows as `#[test]`s of the calling module, for the registry `$reg`.
macro_rules! matrix_rows {
    ($reg:expr) => {
        #[test]
        fn same_config_in_four_processes() {
            crate::rows::same_config(&$reg, 4)
        }
        #[test]
        fn same_config_from_other_directories_and_users() {
            crate::rows::directories_and_users(&$reg)
        }
        #[test]
        fn holder_frozen_past_its_lease_then_resumed() {
            crate::rows::frozen(&$reg)
        }
        #[test]
        fn registry_cut_off_then_back() {
            crate::rows::cut_off(&$reg)
        }
        #[test]
        fn registry_silent_then_back() {
            crate::rows::silent(&$reg)
        }
        #[test]
        fn clock_skewed() {
            crate::rows::clock_skewed(&$reg)
        }
    };
}
pub(crate) use matrix_rows;

/// Waits until every worker has started (holds an id or was refused).
fn all_started(ws: &mut [Worker]) {
    for w in ws.iter_mut() {
        w.started();
    }
}

/// `n` processes of one config, started at once.
pub fn same_config(reg: &dyn Registry, n: usize) {
    let row = format!("same config in {n} processes");
    let t = reg.target("same");
    let dir = open_dir();
    let mut ws: Vec<Worker> = (0..n)
        .map(|i| spawn(&format!("p{i}"), dir.path(), Spawn::url(&t.url)))
        .collect();
    all_started(&mut ws);
    pause(3.0);
    let mut tally = Tally::new(reg, &row);
    tally.stop_all(ws);
    tally.finish();
}

/// One config from three working directories, the third as another user (`nobody`)
/// when the test runs as root.
pub fn directories_and_users(reg: &dyn Registry) {
    let t = reg.cwd_target("dirs");
    let dir = open_dir();
    let cwds = [open_dir(), open_dir(), open_dir()];
    let mut tally = Tally::new(reg, "same config, other cwd and user");
    if !crate::harness::is_root() {
        let msg = "not root: every process runs as the same user";
        say(&format!("ADVERSARY {} note: {msg}", reg.name()));
        tally.note(msg);
    }
    let mut ws: Vec<Worker> = cwds
        .iter()
        .enumerate()
        .map(|(i, cwd)| {
            let how = Spawn {
                cwd: Some(cwd.path().to_path_buf()),
                as_nobody: i == 2,
                ..Spawn::url(&t.url)
            };
            spawn(&format!("cwd{i}"), dir.path(), how)
        })
        .collect();
    all_started(&mut ws);
    pause(3.0);
    tally.stop_all(ws);
    tally.finish();
}

/// A holder frozen with SIGSTOP past its session or lease while a newcomer (another
/// host for the registry: through a proxy) takes the identity, then resumed.
pub fn frozen(reg: &dyn Registry) {
    let t = reg.target("frozen");
    let dir = open_dir();
    let alias = t.proxy();
    let mut tally = Tally::new(reg, "holder SIGSTOPped past lease, resumed");
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.url));
    a.started();
    pause(1.0);
    a.signal(libc::SIGSTOP);
    let frozen = reg.lease_life().unwrap_or(Duration::from_secs(2));
    tally.note(format!("frozen {} s", frozen.as_secs()));
    std::thread::sleep(frozen);
    let url = alias
        .as_ref()
        .and_then(|p| t.via(p))
        .unwrap_or(t.url.clone());
    let mut b = spawn("newcomer", dir.path(), Spawn::url(&url));
    b.started();
    pause(2.0);
    a.signal(libc::SIGCONT);
    pause(2.5);
    tally.stop_all(vec![a, b]);
    tally.finish();
}

/// The holder's only way to the registry cut (connections dropped, new ones refused,
/// as a restarted or unreachable service) for its lease's life; a newcomer on another
/// path takes the identity; the path comes back.
pub fn cut_off(reg: &dyn Registry) {
    let t = reg.target("cut");
    let mut tally = Tally::new(reg, "registry cut off past lease, back");
    let Some(proxy) = t.proxy() else {
        tally.note("not applicable: no service");
        tally.finish();
        return;
    };
    let dir = open_dir();
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.via(&proxy).unwrap()));
    a.started();
    pause(1.0);
    proxy.set_down(true);
    std::thread::sleep(reg.lease_life().unwrap_or(Duration::from_secs(2)));
    let mut b = spawn("newcomer", dir.path(), Spawn::url(&t.url));
    b.started();
    pause(2.0);
    proxy.set_down(false);
    pause(3.0);
    tally.stop_all(vec![a, b]);
    tally.finish();
}

/// The holder's only way to the registry goes silent (connections stay open, nothing
/// passes: a partition, not a refusal) for its lease's life; a newcomer on another path
/// takes the identity; then what was held back passes on, late.
pub fn silent(reg: &dyn Registry) {
    let t = reg.target("silent");
    let mut tally = Tally::new(reg, "registry silent past lease, back");
    let Some(proxy) = t.proxy() else {
        tally.note("not applicable: no service");
        tally.finish();
        return;
    };
    let dir = open_dir();
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.via(&proxy).unwrap()));
    a.started();
    pause(1.0);
    proxy.set_blackhole(true);
    std::thread::sleep(reg.lease_life().unwrap_or(Duration::from_secs(2)));
    let mut b = spawn("newcomer", dir.path(), Spawn::url(&t.url));
    b.started();
    pause(2.0);
    proxy.set_blackhole(false);
    pause(3.0);
    tally.stop_all(vec![a, b]);
    tally.finish();
}

/// libfaketime, when installed (Debian's `faketime`): the wall clock moved by
/// `offset` in seconds (`+3`), the monotonic clock left alone.
fn faketime(offset: &str) -> Option<Vec<(String, String)>> {
    let lib = ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|a| format!("/usr/lib/{a}/faketime/libfaketime.so.1"))
        .find(|p| std::path::Path::new(p).exists())?;
    Some(vec![
        ("LD_PRELOAD".into(), lib),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
    ])
}

/// A holder whose clock runs 3 s ahead issues and closes; then one with the right
/// clock and one 3 s behind take the identity (the second through another path).
/// Within the registries' skew check (5 s), so the floors must do the work. Beside them
/// one 30 s ahead (through a third path), which the registries with a clock must
/// refuse. One cache directory for the first three (one host's restarts with its clock
/// stepped): the clock is the only adversary here.
pub fn clock_skewed(reg: &dyn Registry) {
    let t = reg.target("skew");
    let mut tally = Tally::new(reg, "clock skewed +3 s, then -3 s and +30 s");
    let (Some(ahead), Some(behind), Some(far)) = (faketime("+3"), faketime("-3"), faketime("+30"))
    else {
        tally.note("not run: libfaketime is not installed (apt-get install faketime)");
        tally.finish();
        return;
    };
    let dir = open_dir();
    let cache = Some(dir.path().join("cache"));
    let alias = t.proxy();
    let mut a = spawn(
        "ahead",
        dir.path(),
        Spawn {
            env: ahead,
            cache: cache.clone(),
            ..Spawn::url(&t.url)
        },
    );
    a.started();
    pause(2.0);
    tally.stop(a);
    let url = alias
        .as_ref()
        .and_then(|p| t.via(p))
        .unwrap_or(t.url.clone());
    let right = Spawn {
        cache: cache.clone(),
        ..Spawn::url(&t.url)
    };
    let mut ws = vec![
        spawn("right", dir.path(), right),
        spawn(
            "behind",
            dir.path(),
            Spawn {
                env: behind,
                cache,
                ..Spawn::url(&url)
            },
        ),
    ];
    let far_proxy = t.proxy();
    let far_url = far_proxy
        .as_ref()
        .and_then(|p| t.via(p))
        .unwrap_or(t.url.clone());
    ws.push(spawn(
        "far",
        dir.path(),
        Spawn {
            env: far,
            ..Spawn::url(&far_url)
        },
    ));
    all_started(&mut ws);
    pause(3.0);
    tally.stop_all(ws);
    tally.finish();
}

/// A live holder of `t`'s config, then `tamper` (which touches the records and returns
/// the newcomers to start), then every process issues on.
pub fn tampered(
    reg: &dyn Registry,
    row: &str,
    t: &crate::harness::Target,
    tamper: impl FnOnce(&mut Worker) -> Vec<Spawn>,
) {
    let dir = open_dir();
    let mut tally = Tally::new(reg, row);
    let mut a = spawn("holder", dir.path(), Spawn::url(&t.url));
    a.started();
    pause(1.0);
    let mut ws: Vec<Worker> = tamper(&mut a)
        .into_iter()
        .enumerate()
        .map(|(i, how)| spawn(&format!("newcomer{i}"), dir.path(), how))
        .collect();
    all_started(&mut ws);
    pause(2.5);
    ws.insert(0, a);
    tally.stop_all(ws);
    tally.finish();
}
