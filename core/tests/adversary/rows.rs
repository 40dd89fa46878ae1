//! The rows every registry runs, and [`matrix_rows!`] that makes them `#[test]`s of a
//! registry module. A registry's own adversaries (foreign writers, its records tampered
//! with) use [`tampered`] and [`crate::harness`] directly.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{open_dir, pause, say, spawn, Registry, Spawn, Start, Tally, Worker};

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

/// Issue 30's rows (goal 6) as `#[test]`s of the calling module, for the networked
/// registry `$reg`: a holder cut off from its registry keeps issuing up to the bound the
/// registry holds (fence rule 5) while a newcomer takes its id after the lease ran out,
/// or at once after a wipe; a restart while the registry is down, then the heal. Each
/// runs twice at once, on targets of their own: with every clock in step, and with the
/// clocks apart ([`Clocks::Apart`]); each prints its line.
macro_rules! outage_rows {
    ($reg:expr) => {
        #[test]
        fn partitioned_holder_keeps_issuing_while_a_newcomer_takes_its_id() {
            crate::rows::in_step_and_apart(&$reg, crate::rows::partitioned)
        }
        #[test]
        fn registry_wiped_while_a_holder_is_cut_off() {
            crate::rows::in_step_and_apart(&$reg, crate::rows::wiped)
        }
        #[test]
        fn restart_during_an_outage_then_heal() {
            crate::rows::in_step_and_apart(&$reg, crate::rows::restarted)
        }
    };
}
pub(crate) use outage_rows;

/// [`restart_then_newcomer`], both [`Ending`]s, as `#[test]`s of the
/// calling module, for the registry `$reg`; `$handover`: whether its restart after a
/// close during an outage issues (an identity one process of a host holds at a time, on
/// a layout no Java Leaf or fork server shares: `postgres://?port=`) or waits for the
/// registry (leased ids: pools, recycle; `zookeeper://` and `mysql://?port=`, where
/// such a server may have started on the identity unseen).
macro_rules! restart_newcomer_row {
    ($reg:expr, $handover:expr) => {
        #[test]
        fn restart_during_an_outage_then_a_newcomer_takes_its_id() {
            crate::rows::restart_then_newcomer(&$reg, crate::rows::Ending::Killed)
        }
        #[test]
        fn closed_during_an_outage_restarted_on_its_handover_then_a_newcomer_takes_its_id() {
            crate::rows::restart_then_newcomer(
                &$reg,
                crate::rows::Ending::ClosedInOutage {
                    handover: $handover,
                },
            )
        }
    };
}
pub(crate) use restart_newcomer_row;

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

/// The outage rows' generator settings, one set for every process of a row (holders of
/// one identity share them, fence rule 5). Short, so that a row takes seconds: a cut-off
/// holder rides through at most the lookahead, and a name's first holder, which floors
/// at the registry's clock plus the reach (lookahead + max_skew + 1 s = 5 s), leads the
/// clock for at most twice that. A small reach also lets a newcomer that lost the
/// floor (a broken variant) issue, within the row, over the timestamps its predecessor
/// issued ahead of the clock.
pub struct Short {
    /// The heartbeat (ms).
    pub heartbeat_ms: u64,
    /// The lookahead (ms).
    pub lookahead_ms: u64,
    /// `max_skew` (ms).
    pub max_skew_ms: u64,
    /// Ids per second per worker: enough that every millisecond a worker issues in has
    /// ids at low sequence numbers (where two holders of one id collide), little CPU.
    pub rate: u64,
}

/// The outage rows' settings.
pub const SHORT: Short = Short {
    heartbeat_ms: 300,
    lookahead_ms: 2_000,
    max_skew_ms: 2_000,
    rate: 20_000,
};

/// In the `_clocks_apart` rows the holder's clock runs this far ahead of the registry's
/// and the newcomer's (or restarted process's) this far behind: 3 s apart, more than
/// `max_skew`, each within it of the registry (by a round trip's margin), the direction
/// in which a newcomer's own clock would floor it below what the holder issued.
pub const APART_S: f64 = 1.5;

/// Extra environment of a worker.
type Env = Vec<(String, String)>;

/// The clocks of an outage row's processes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clocks {
    /// Every process on the host's clock.
    InStep,
    /// The holder [`APART_S`] ahead, the newcomer as far behind (libfaketime).
    Apart,
}

impl Clocks {
    /// The row's name with its clocks.
    fn row(self, what: &str) -> String {
        match self {
            Clocks::InStep => what.to_string(),
            Clocks::Apart => format!("{what}, clocks ±{APART_S} s"),
        }
    }

    /// The holder's and the newcomer's extra environment; `None` when the clocks must be
    /// apart and libfaketime is not installed.
    fn env(self) -> Option<(Env, Env)> {
        match self {
            Clocks::InStep => Some((Vec::new(), Vec::new())),
            Clocks::Apart => Some((
                faketime(&format!("+{APART_S}"))?,
                faketime(&format!("-{APART_S}"))?,
            )),
        }
    }
}

/// Runs `row` with the clocks in step and, at the same time on a thread of its own,
/// apart: the pair takes the time of one (the rows mostly wait).
pub fn in_step_and_apart(reg: &dyn Registry, row: fn(&dyn Registry, Clocks)) {
    std::thread::scope(|s| {
        let apart = s.spawn(|| row(reg, Clocks::Apart));
        row(reg, Clocks::InStep);
        if let Err(panic) = apart.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

/// A worker of `url` with [`SHORT`] and `clock` (libfaketime's environment, or none).
fn short(url: &str, clock: &[(String, String)]) -> Spawn {
    use crate::worker::{HEARTBEAT_MS, LOOKAHEAD_MS, MAX_SKEW_MS, RATE};
    let mut env: Vec<(String, String)> = [
        (HEARTBEAT_MS, SHORT.heartbeat_ms),
        (LOOKAHEAD_MS, SHORT.lookahead_ms),
        (MAX_SKEW_MS, SHORT.max_skew_ms),
        (RATE, SHORT.rate),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend_from_slice(clock);
    Spawn {
        env,
        ..Spawn::url(url)
    }
}

/// The holder of an outage row: started, and its worker id (a row whose holder cannot
/// start tests nothing).
fn holder(reg: &dyn Registry, dir: &Path, how: Spawn) -> (Worker, u32) {
    let mut a = spawn("holder", dir, how);
    match a.started() {
        Start::Live(id) => (a, id),
        Start::Refused(code, msg) => {
            panic!("{}: the holder did not start: {code} {msg}", reg.name())
        }
    }
}

/// Starts newcomers (the `i`th as `how(i)`) until one holds worker `id`, `gap` apart,
/// at most 15; the others are stopped and counted. Panics when none does: the row would
/// have tested nothing.
fn newcomer_on(
    reg: &dyn Registry,
    tally: &mut Tally,
    dir: &Path,
    id: u32,
    gap: Duration,
    mut how: impl FnMut(usize) -> Spawn,
) -> Worker {
    for i in 0..15 {
        let mut w = spawn(&format!("newcomer{i}"), dir, how(i));
        if w.started() == Start::Live(id) {
            tally.note(format!("newcomer{i} took worker {id}"));
            return w;
        }
        tally.stop(w);
        std::thread::sleep(gap);
    }
    panic!(
        "{}: no newcomer took worker {id}: the row tested nothing",
        reg.name()
    );
}

/// A holder (through a proxy) partitioned from its registry (the proxy blackholes) keeps
/// issuing up to the bound its registry holds; once its session expired or its lease
/// row passed its term, a newcomer on the direct path takes its id (floored at that
/// bound); then the partition heals. Row 1 of issue 30 goal 6.
pub fn partitioned(reg: &dyn Registry, clocks: Clocks) {
    let mut tally = Tally::new(reg, &clocks.row("holder partitioned, newcomer takes id"));
    let Some((ahead, behind)) = clocks.env() else {
        tally.note("not run: libfaketime is not installed (apt-get install faketime)");
        return tally.finish();
    };
    let t = reg.target("part");
    let proxy = t.proxy().expect("an outage row needs a service");
    let dir = open_dir();
    let (a, id) = holder(reg, dir.path(), short(&t.via(&proxy).unwrap(), &ahead));
    pause(1.0);
    proxy.set_blackhole(true);
    let (cut, at_cut) = (Instant::now(), a.issued());
    std::thread::sleep(reg.lease_after_cut());
    let b = newcomer_on(
        reg,
        &mut tally,
        dir.path(),
        id,
        Duration::from_secs(1),
        |_| short(&t.url, &behind),
    );
    tally.note(format!(
        "holder issued {} ids cut off; newcomer {:.1} s after the cut",
        a.issued() - at_cut,
        cut.elapsed().as_secs_f64()
    ));
    pause(2.0);
    proxy.set_blackhole(false);
    pause(1.5);
    tally.stop_all(vec![a, b]);
    tally.finish();
}

/// A holder (through a proxy) cut off from its registry (the proxy refuses) keeps
/// issuing; the registry is wiped meanwhile ([`Registry::wipe`]) and a newcomer of
/// another identity starts at once on the holder's id (floored at the registry's clock
/// plus the reach); then the holder's path heals. Row 2 of issue 30 goal 6.
pub fn wiped(reg: &dyn Registry, clocks: Clocks) {
    let mut tally = Tally::new(reg, &clocks.row("registry wiped, holder cut off"));
    let Some((ahead, behind)) = clocks.env() else {
        tally.note("not run: libfaketime is not installed (apt-get install faketime)");
        return tally.finish();
    };
    let mut t = reg.target("wipe");
    let proxy = t.proxy().expect("an outage row needs a service");
    let dir = open_dir();
    let (a, id) = holder(reg, dir.path(), short(&t.via(&proxy).unwrap(), &ahead));
    pause(1.0);
    proxy.set_down(true);
    let (cut, at_cut) = (Instant::now(), a.issued());
    reg.wipe(&t);
    // Another try at once: nothing expires here, a try lands on a random free id.
    let b = newcomer_on(reg, &mut tally, dir.path(), id, Duration::ZERO, |i| {
        short(&reg.other(&mut t, i), &behind)
    });
    tally.note(format!(
        "newcomer {:.1} s after the cut",
        cut.elapsed().as_secs_f64()
    ));
    pause(2.5);
    tally.note(format!("holder issued {} ids cut off", a.issued() - at_cut));
    proxy.set_down(false);
    pause(1.5);
    tally.stop_all(vec![a, b]);
    tally.finish();
}

/// How long the registry stays down after a restart in [`restarted`]: past the reach,
/// so a restart that lost its predecessor's bound (a broken variant) would issue, within
/// the row, over the timestamps the predecessor issued ahead of the clock.
const RESTART_OUTAGE: Duration = Duration::from_millis(5_500);

/// Beside another holder of the name (on the direct path), a holder (through a proxy)
/// is killed (SIGKILL) and restarted with the registry refused, on the same cache
/// directory: it is refused (no registry lets a restart issue on its cache file alone,
/// see [`restart_then_newcomer`]) and started again after the heal.
/// Row 3 of issue 30 goal 6.
pub fn restarted(reg: &dyn Registry, clocks: Clocks) {
    let mut tally = Tally::new(reg, &clocks.row("restart during an outage, heal"));
    let Some((ahead, behind)) = clocks.env() else {
        tally.note("not run: libfaketime is not installed (apt-get install faketime)");
        return tally.finish();
    };
    let mut t = reg.target("restart");
    let proxy = t.proxy().expect("an outage row needs a service");
    let dir = open_dir();
    let via = t.via(&proxy).unwrap();
    let cache = Some(dir.path().join("holder.cache"));
    let with_cache = |clock: &[(String, String)]| Spawn {
        cache: cache.clone(),
        ..short(&via, clock)
    };
    let mut beside = spawn("beside", dir.path(), short(&reg.other(&mut t, 0), &[]));
    let (a, _) = holder(reg, dir.path(), with_cache(&ahead));
    beside.started();
    pause(1.0);
    a.signal(libc::SIGKILL);
    tally.stop(a);
    proxy.set_down(true);
    let down = Instant::now();
    let mut r = spawn("restarted", dir.path(), with_cache(&behind));
    let live = match r.started() {
        Start::Live(w) => {
            tally.note(format!(
                "restarted on worker {w} from its cache {:.1} s into the outage",
                down.elapsed().as_secs_f64()
            ));
            true
        }
        Start::Refused(code, _) => {
            tally.note(format!("restart refused while down ({code})"));
            false
        }
    };
    std::thread::sleep(RESTART_OUTAGE.saturating_sub(down.elapsed()));
    proxy.set_down(false);
    pause(2.0);
    let mut ws = vec![beside, r];
    if !live {
        let mut again = spawn("after heal", dir.path(), with_cache(&behind));
        again.started();
        pause(1.5);
        ws.push(again);
    }
    tally.stop_all(ws);
    tally.finish();
}

/// How the holder of [`restart_then_newcomer`] ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ending {
    /// SIGKILLed, then the registry refused: no registry lets a restart issue on its
    /// cache file alone. A restart that did (as `zookeeper://` and `?port=` did for a
    /// while in issue 30) duplicated the newcomer's ids: 9 938 on `zookeeper://`, 835 on
    /// `mysql://?port=`, 816 on `postgres://?port=`.
    Killed,
    /// Run past its lead, then closed 1 s into the registry's outage: where a handover
    /// is made (`handover`: `postgres://?port=`) the restart starts from it (the
    /// registry keeps the bound it confirmed); else it is refused.
    ClosedInOutage {
        /// Whether the restart takes a handover.
        handover: bool,
    },
}

/// A holder (through a proxy) ends as `ending` says and is restarted with the registry
/// refused, on the same cache directory, beside another holder; once the ended holder's
/// lease ran out, a newcomer on the direct path (the same identity on another path:
/// another host, or this host through another address) takes its id; then the heal.
/// No id twice.
pub fn restart_then_newcomer(reg: &dyn Registry, ending: Ending) {
    let (row, target) = match ending {
        Ending::Killed => ("restart during an outage, newcomer on its id", "restart"),
        Ending::ClosedInOutage { .. } => ("closed in an outage, handover, newcomer", "handover"),
    };
    let mut tally = Tally::new(reg, row);
    let mut t = reg.target(target);
    let proxy = t.proxy().expect("an outage row needs a service");
    let dir = open_dir();
    let via = t.via(&proxy).unwrap();
    let cache = Some(dir.path().join("holder.cache"));
    let with_cache = || Spawn {
        cache: cache.clone(),
        ..short(&via, &[])
    };
    let mut beside = spawn("beside", dir.path(), short(&reg.other(&mut t, 0), &[]));
    beside.started();
    let (a, id) = holder(reg, dir.path(), with_cache());
    let ended = match ending {
        Ending::Killed => {
            pause(1.0);
            a.signal(libc::SIGKILL);
            let killed = Instant::now();
            tally.stop(a);
            proxy.set_down(true);
            killed
        }
        Ending::ClosedInOutage { .. } => {
            // A new id's ids lead the clock by the reach for twice as long; a handover
            // leaves room only above the clock.
            let reach_ms = SHORT.lookahead_ms + SHORT.max_skew_ms + 1_000;
            pause((2 * reach_ms + 1_000) as f64 / 1_000.0);
            proxy.set_down(true);
            let down = Instant::now();
            // A few heartbeats fail: the holder is out of touch when it closes.
            pause(1.0);
            tally.stop(a);
            down
        }
    };
    let mut r = spawn("restarted", dir.path(), with_cache());
    let live = match r.started() {
        Start::Live(w) => {
            tally.note(format!(
                "restarted on worker {w} from its cache {:.1} s into the outage",
                ended.elapsed().as_secs_f64()
            ));
            true
        }
        Start::Refused(code, _) => {
            tally.note(format!("restart refused while down ({code})"));
            false
        }
    };
    let expected = matches!(ending, Ending::ClosedInOutage { handover: true });
    assert_eq!(
        live,
        expected,
        "{}: restarted during the outage: {live}, expected {expected}",
        reg.name()
    );
    std::thread::sleep(reg.lease_after_cut().saturating_sub(ended.elapsed()));
    let n = newcomer_on(
        reg,
        &mut tally,
        dir.path(),
        id,
        Duration::from_secs(1),
        |_| short(&t.url, &[]),
    );
    tally.note(format!(
        "newcomer {:.1} s into the outage",
        ended.elapsed().as_secs_f64()
    ));
    pause(1.5);
    proxy.set_down(false);
    pause(2.0);
    tally.stop_all(vec![beside, r, n]);
    tally.finish();
}
