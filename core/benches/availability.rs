//! Availability of snowflake mode per registry (issue 30), with default settings:
//!
//! 1. Time from constructing a generator to its first id: a new identity (fresh name,
//!    pool or port), a restart on a recorded identity (the previous generator closed),
//!    a restart after a crash (a child process SIGKILLed while holding the identity),
//!    and a wiped registry (its records deleted by hand after a close).
//! 2. Ids through a registry outage: a loopback proxy in front of the shared ZooKeeper,
//!    MariaDB or PostgreSQL goes silent (frozen: connections held, nothing passes) or
//!    refuses (open connections dropped, new ones closed at once) for `--outage` seconds
//!    while one thread calls the never-waiting `next_id_now` and another the blocking
//!    `next_id`, each at `--rate` calls a second on a generator of its own. Every
//!    generator is built before the first outage and is at least `--age` seconds old
//!    (default 150) when its outage starts: a holder's clock leads the real one after
//!    its start and catches up at half speed (issue 30's design), and until it has, its
//!    persisted bound lies less than the lookahead ahead of that clock (`--age 0` shows
//!    a holder cut off seconds after its start).
//!
//! It prints tables; nothing is asserted. The shared servers are never stopped: every
//! fault is the proxy's. MySQL and PostgreSQL registries run in a database of the
//! bench's own (created by the admin of `LEAFID_MYSQL_URL` / `LEAFID_PG_URL`, dropped at
//! the end); ZooKeeper names carry the process id and are deleted at the end.
//!
//! Run: `source .services/env && cargo bench -p leafid --bench availability --
//! [--runs 5] [--outage 60] [--age 150] [--warm 5] [--tail 20] [--rate 1000] [--part first|outage]
//! [--only zookeeper,mysql-pool,…]`. Under `cargo test` it runs one first-id round of
//! the registries that need no service (a smoke run of the harness).

#[path = "../tests/support/delay_proxy.rs"]
mod delay_proxy;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delay_proxy::DelayProxy;
use leafid::SnowflakeGenerator;

/// Set in a child process: the registry URL it holds until it is killed.
const CHILD_URL: &str = "LEAFID_AVAILABILITY_CHILD_URL";
/// Set in a child process: its cache directory (the parent's, as on one host).
const CHILD_CACHE: &str = "LEAFID_AVAILABILITY_CHILD_CACHE";
/// The ip of the host-bound identities (`?port=`): made up, so no real server's.
const IP: &str = "10.77.0.1";

struct Args {
    runs: usize,
    outage: u64,
    warm: u64,
    age: u64,
    tail: u64,
    rate: u64,
    first: bool,
    outages: bool,
    only: Option<Vec<String>>,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    let bench = argv.iter().any(|a| a == "--bench");
    let value = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    let num = |name: &str, default: u64| {
        value(name).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name} {v}"))
        })
    };
    let part = value("--part");
    Args {
        runs: num("--runs", if bench { 5 } else { 1 }) as usize,
        outage: num("--outage", 60),
        warm: num("--warm", 5),
        age: num("--age", 150),
        tail: num("--tail", 20),
        rate: num("--rate", 1000),
        first: part.as_deref() != Some("outage"),
        // Under `cargo test` (no `--bench`): the first-id smoke only.
        outages: bench && part.as_deref() != Some("first"),
        only: value("--only")
            .map(|v| v.split(',').map(str::to_string).collect())
            .or_else(|| {
                (!bench).then(|| vec!["local".into(), "fixed".into(), "statefulset".into()])
            }),
    }
}

/// The registries measured, by the label the tables show.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Local,
    Fixed,
    Statefulset,
    Zookeeper,
    ZookeeperRecycle,
    MysqlPort,
    MysqlPool,
    PostgresPool,
    PostgresPort,
}

const KINDS: [Kind; 9] = [
    Kind::Local,
    Kind::Fixed,
    Kind::Statefulset,
    Kind::Zookeeper,
    Kind::ZookeeperRecycle,
    Kind::MysqlPort,
    Kind::MysqlPool,
    Kind::PostgresPool,
    Kind::PostgresPort,
];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Fixed => "fixed",
            Kind::Statefulset => "statefulset",
            Kind::Zookeeper => "zookeeper",
            Kind::ZookeeperRecycle => "zookeeper-recycle",
            Kind::MysqlPort => "mysql-port",
            Kind::MysqlPool => "mysql-pool",
            Kind::PostgresPool => "postgres-pool",
            Kind::PostgresPort => "postgres-port",
        }
    }

    fn shown(self) -> &'static str {
        match self {
            Kind::Local => "`local:`",
            Kind::Fixed => "`fixed:`",
            Kind::Statefulset => "`statefulset:`",
            Kind::Zookeeper => "`zookeeper://`",
            Kind::ZookeeperRecycle => "`zookeeper-recycle://`",
            Kind::MysqlPort => "`mysql://?port=`",
            Kind::MysqlPool => "`mysql://?pool=`",
            Kind::PostgresPool => "`postgres://?pool=`",
            Kind::PostgresPort => "`postgres://?port=`",
        }
    }

    fn networked(self) -> bool {
        !matches!(self, Kind::Local | Kind::Fixed | Kind::Statefulset)
    }
}

/// Where the services are, and the bench's own places in them.
struct Env {
    /// Files of `local:`, `statefulset:` and the cache directories.
    dir: tempfile::TempDir,
    /// A tag in every ZooKeeper name, database and pool of this run.
    tag: String,
    zk: Option<String>,
    mysql: Option<url::Url>,
    pg: Option<url::Url>,
}

impl Env {
    fn new(needs: &[Kind]) -> Env {
        let tag = format!("avb{}", std::process::id());
        let var = |name: &str| std::env::var(name).ok();
        let own = |base: Option<String>| -> Option<url::Url> {
            let base = base?;
            let name = &tag;
            exec(&base, &format!("DROP DATABASE IF EXISTS {name}"));
            exec(&base, &format!("CREATE DATABASE {name}"));
            let mut u = url::Url::parse(&base).unwrap();
            u.set_path(&format!("/{name}"));
            Some(u)
        };
        let wants = |f: fn(Kind) -> bool| needs.iter().any(|&k| f(k));
        Env {
            dir: tempfile::tempdir().unwrap(),
            zk: var("LEAFID_ZK"),
            mysql: if wants(|k| matches!(k, Kind::MysqlPort | Kind::MysqlPool)) {
                own(var("LEAFID_MYSQL_URL"))
            } else {
                None
            },
            pg: if wants(|k| matches!(k, Kind::PostgresPort | Kind::PostgresPool)) {
                own(var("LEAFID_PG_URL"))
            } else {
                None
            },
            tag,
        }
    }

    /// Whether `kind`'s service is configured.
    fn has(&self, kind: Kind) -> bool {
        match kind {
            Kind::Zookeeper | Kind::ZookeeperRecycle => self.zk.is_some(),
            Kind::MysqlPort | Kind::MysqlPool => self.mysql.is_some(),
            Kind::PostgresPort | Kind::PostgresPool => self.pg.is_some(),
            _ => true,
        }
    }

    /// `host:port` of `kind`'s server (what a proxy forwards to).
    fn upstream(&self, kind: Kind) -> String {
        match kind {
            Kind::Zookeeper | Kind::ZookeeperRecycle => self.zk.clone().unwrap(),
            Kind::MysqlPort | Kind::MysqlPool => host_port(self.mysql.as_ref().unwrap()),
            _ => host_port(self.pg.as_ref().unwrap()),
        }
    }

    /// The URL of identity `k` of `kind` (a fresh `k`, a new identity), through
    /// `via` (a proxy's `host:port`) when given.
    fn url(&self, kind: Kind, k: u32, via: Option<&str>) -> String {
        let db = |base: &url::Url, query: String| {
            let mut u = base.clone();
            if let Some(via) = via {
                let (h, p) = via.rsplit_once(':').unwrap();
                u.set_host(Some(h)).unwrap();
                u.set_port(Some(p.parse().unwrap())).unwrap();
            }
            u.set_query(Some(&query));
            u.to_string()
        };
        let zk = || via.map_or_else(|| self.zk.clone().unwrap(), str::to_string);
        let tag = &self.tag;
        match kind {
            Kind::Local => format!("local://{}", self.path(&format!("local{k}")).display()),
            Kind::Fixed => format!("fixed:{}", host_wide(k)),
            Kind::Statefulset => format!(
                "statefulset://{}?name=avb&hostname=avb-{}",
                self.path(&format!("floor{k}")).display(),
                host_wide(k)
            ),
            Kind::Zookeeper => format!("zookeeper://{}/{tag}f{k}?ip={IP}&port=8080", zk()),
            Kind::ZookeeperRecycle => format!("zookeeper-recycle://{}/{tag}r{k}", zk()),
            Kind::MysqlPort => db(
                self.mysql.as_ref().unwrap(),
                format!("ip={IP}&port={}", 9000 + k),
            ),
            Kind::MysqlPool => db(self.mysql.as_ref().unwrap(), format!("pool=p{k}")),
            Kind::PostgresPool => db(self.pg.as_ref().unwrap(), format!("pool=p{k}")),
            Kind::PostgresPort => db(
                self.pg.as_ref().unwrap(),
                format!("ip={IP}&port={}", 9000 + k),
            ),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Deletes every record of identity `k` of `kind` by hand, as an operator would.
    fn wipe(&self, kind: Kind, k: u32) {
        let dir = |name: String| {
            let p = self.path(&name);
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        };
        let ip_port = format!("{IP}:{}", 9000 + k);
        match kind {
            Kind::Local => dir(format!("local{k}")),
            Kind::Fixed => {}
            Kind::Statefulset => dir(format!("floor{k}")),
            Kind::Zookeeper => zk_delete_all(
                self.zk.as_ref().unwrap(),
                &format!("/snowflake/{}f{k}", self.tag),
            ),
            Kind::ZookeeperRecycle => zk_delete_all(
                self.zk.as_ref().unwrap(),
                &format!("/snowflake/{}r{k}", self.tag),
            ),
            // The fork's row of this ip:port and leafid's lease of its worker id.
            Kind::MysqlPort => exec(
                self.mysql.as_ref().unwrap().as_str(),
                &format!(
                    "DELETE FROM leafid_worker_lease WHERE ip_port = '{ip_port}'; \
                     DELETE FROM leaf_workerid_alloc WHERE ip_port = '{ip_port}'"
                ),
            ),
            Kind::MysqlPool => exec(
                self.mysql.as_ref().unwrap().as_str(),
                &format!("DELETE FROM leafid_worker_pool WHERE pool = 'p{k}'"),
            ),
            Kind::PostgresPool => exec(
                self.pg.as_ref().unwrap().as_str(),
                &format!("DELETE FROM leafid_worker_pool WHERE pool = 'p{k}'"),
            ),
            Kind::PostgresPort => exec(
                self.pg.as_ref().unwrap().as_str(),
                &format!(
                    "DELETE FROM leafid_worker_pool WHERE pool = '' AND identity = '{ip_port}'"
                ),
            ),
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for (db, base) in [
            (&self.mysql, "LEAFID_MYSQL_URL"),
            (&self.pg, "LEAFID_PG_URL"),
        ] {
            if db.is_some() {
                let base = std::env::var(base).unwrap();
                let force = if base.starts_with("postgres") {
                    " WITH (FORCE)"
                } else {
                    ""
                };
                exec(
                    &base,
                    &format!("DROP DATABASE IF EXISTS {}{force}", self.tag),
                );
            }
        }
    }
}

/// The fixed id or ordinal of identity `k`. Their claims are shared by the whole host,
/// so each process takes a band of 60 ids by its pid (two runs at once, or a run beside
/// the tests, rarely meet), and no two cases of a run share one.
fn host_wide(k: u32) -> u32 {
    let band = 300 + 60 * (std::process::id() % 10);
    band + if k < 50 { k } else { 50 + k % 10 }
}

fn host_port(u: &url::Url) -> String {
    format!("{}:{}", u.host_str().unwrap(), u.port().unwrap())
}

/// Runs `sql` (one or more statements) on `url`.
fn exec(url: &str, sql: &str) {
    let (url, sql) = (url.to_string(), sql.to_string());
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        let result = if url.starts_with("mysql:") {
            let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut c)
                .await
                .map(drop)
        } else {
            let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut c)
                .await
                .map(drop)
        };
        // A table not made yet (nothing to wipe) is not an error here.
        if let Err(e) = result {
            eprintln!("availability: {sql}: {e}");
        }
    });
}

/// `deleteall path` with an independent ZooKeeper client, as an operator with `zkCli`.
fn zk_delete_all(zk: &str, path: &str) {
    use zookeeper_client as zkc;
    let (zk, path) = (zk.to_string(), path.to_string());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let c = zkc::Client::connector()
            .with_session_timeout(Duration::from_secs(6))
            .connect(&zk)
            .await
            .expect("connect to LEAFID_ZK");
        let mut stack = vec![path];
        let mut order = Vec::new();
        while let Some(p) = stack.pop() {
            for child in c.list_children(&p).await.unwrap_or_default() {
                stack.push(format!("{p}/{child}"));
            }
            order.push(p);
        }
        for p in order.iter().rev() {
            let _ = c.delete(p, None).await;
        }
    })
}

/// A generator with default settings but for its cache directory (the bench's own, so
/// the user's `~/.cache/leafid` is never touched).
fn generator(url: &str, cache: &Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .build_blocking()
}

/// Milliseconds from constructing a generator to its first id, and the generator.
fn first_id(url: &str, cache: &Path) -> Result<(f64, SnowflakeGenerator), String> {
    let failed = |e: leafid::Error| {
        eprintln!("availability: {url}: {e}");
        e.code().to_string()
    };
    let t = Instant::now();
    let gen = generator(url, cache).map_err(failed)?;
    if let Err(e) = gen.next_id() {
        // Closed before the next run, which may want the same identity (a drop only
        // starts the close).
        gen.close();
        return Err(failed(e));
    }
    Ok((t.elapsed().as_secs_f64() * 1000.0, gen))
}

/// The child of the crash case: holds `url` and issues until it is killed.
fn child(url: &str, cache: &str) -> ! {
    match generator(url, Path::new(cache)).and_then(|g| g.next_id().map(|id| (g, id))) {
        Ok((gen, id)) => {
            println!("ready {id}");
            loop {
                std::thread::sleep(Duration::from_millis(10));
                let _ = gen.next_id_now();
            }
        }
        Err(e) => {
            eprintln!("availability: child {url}: {e}");
            println!("error {}", e.code());
            std::process::exit(1);
        }
    }
}

/// Starts a child holding `url`, waits for its first id and SIGKILLs it.
fn crash(url: &str, cache: &Path) -> Result<(), String> {
    // `/proc/self/exe` runs this very binary even after a rebuild replaced its file.
    let exe = Path::new("/proc/self/exe");
    let exe = if exe.exists() {
        exe.to_path_buf()
    } else {
        std::env::current_exe().unwrap()
    };
    let mut c = Command::new(exe)
        .env(CHILD_URL, url)
        .env(CHILD_CACHE, cache)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let _ = c.kill(); // SIGKILL
    let _ = c.wait();
    if line.starts_with("ready") {
        Ok(())
    } else {
        Err(format!("child: {}", line.trim()))
    }
}

/// One cell: the runs' median and max, and the failures by code.
#[derive(Default)]
struct Cell {
    ms: Vec<f64>,
    failed: BTreeMap<String, usize>,
}

impl Cell {
    fn add(&mut self, r: Result<(f64, SnowflakeGenerator), String>) {
        match r {
            Ok((ms, gen)) => {
                self.ms.push(ms);
                gen.close();
            }
            Err(code) => *self.failed.entry(code).or_default() += 1,
        }
    }

    fn show(&self) -> String {
        let mut ms = self.ms.clone();
        ms.sort_by(f64::total_cmp);
        let mut s = match ms.len() {
            0 => "—".to_string(),
            n => format!("{} / {}", fmt_ms(ms[n / 2]), fmt_ms(ms[n - 1])),
        };
        for (code, n) in &self.failed {
            s += &format!(" ({n} failed: {code})");
        }
        s
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Identities of the first-id cases (new ids use 1..=runs; the outages 200 and up).
const WARM: u32 = 0;
const RESTART: u32 = 100;
const CRASH: u32 = 101;
const WIPED: u32 = 102;

/// The first-id row of `kind`: new, restart, crash, wiped.
fn first_ids(env: &Env, kind: Kind, runs: usize) -> [Cell; 4] {
    let cache = env.path(&format!("cache-{}", kind.label()));
    let url = |k| env.url(kind, k, None);
    let warm = |k| {
        let _ = first_id(&url(k), &cache).map(|(_, g)| g.close());
    };
    // Tables made, connections and code paths warm: not measured.
    warm(WARM);
    let mut cells: [Cell; 4] = Default::default();
    for run in 1..=runs as u32 {
        cells[0].add(first_id(&url(run), &cache));
    }
    warm(RESTART);
    for _ in 0..runs {
        cells[1].add(first_id(&url(RESTART), &cache));
    }
    for _ in 0..runs {
        match crash(&url(CRASH), &cache) {
            Ok(()) => cells[2].add(first_id(&url(CRASH), &cache)),
            Err(e) => *cells[2].failed.entry(e).or_default() += 1,
        }
    }
    if kind != Kind::Fixed {
        warm(WIPED);
        for _ in 0..runs {
            env.wipe(kind, WIPED);
            cells[3].add(first_id(&url(WIPED), &cache));
        }
    }
    for k in (0..=runs as u32).chain([RESTART, CRASH, WIPED]) {
        env.wipe(kind, k);
    }
    cells
}

/// How an outage is played.
#[derive(Clone, Copy)]
enum Fault {
    /// Connections held open, nothing passes (a network dropping every packet).
    Frozen,
    /// Open connections dropped, new ones closed at once.
    Refused,
}

/// What one caller saw: when each id came (ms since the start) and the longest call.
struct Calls {
    ok_ms: Vec<u64>,
    longest_call: Duration,
    errors: BTreeMap<&'static str, usize>,
}

/// Calls `call` `rate` times a second until `stop`; a call that takes longer than its
/// slot pushes the schedule on (missed slots are skipped, not caught up).
fn caller(
    start: Instant,
    rate: u64,
    stop: Arc<AtomicBool>,
    call: impl Fn() -> leafid::Result<i64>,
) -> Calls {
    let slot = Duration::from_nanos(1_000_000_000 / rate);
    let mut calls = Calls {
        ok_ms: Vec::new(),
        longest_call: Duration::ZERO,
        errors: BTreeMap::new(),
    };
    let mut due = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        }
        let t = Instant::now();
        let r = call();
        let end = Instant::now();
        calls.longest_call = calls.longest_call.max(end - t);
        match r {
            Ok(_) => calls.ok_ms.push((end - start).as_millis() as u64),
            Err(e) => {
                let n = calls.errors.entry(e.code()).or_default();
                if *n == 0 {
                    // The first of each kind, with when: what a caller was told.
                    eprintln!("availability: at {} ms: {e}", (end - start).as_millis());
                }
                *n += 1;
            }
        }
        due = (due + slot).max(end);
    }
    calls
}

/// One outage row's figures for one caller.
struct Seen {
    seconds_with_ids: u64,
    /// Seconds into the outage of the first second without an id.
    stopped_after: Option<u64>,
    /// From the heal to the next id (`Some(None)`: none came), when ids had stopped
    /// by the heal.
    back_after_heal_ms: Option<Option<u64>>,
    /// The longest stretch without an id during the outage.
    longest_gap_ms: u64,
    /// The longest stretch without an id after the heal (a re-acquire).
    gap_after_heal_ms: u64,
}

fn seen(c: &Calls, fault_ms: u64, heal_ms: u64, end_ms: u64) -> Seen {
    let secs = (heal_ms - fault_ms).div_ceil(1000);
    let in_second = |s: u64| {
        let (a, b) = (
            fault_ms + s * 1000,
            (fault_ms + (s + 1) * 1000).min(heal_ms),
        );
        c.ok_ms.iter().any(|&t| t >= a && t < b)
    };
    let empty: Vec<u64> = (0..secs).filter(|&s| !in_second(s)).collect();
    // Ids flowing in the last second before the heal: nothing to come back from.
    let flowing = c.ok_ms.iter().any(|&t| t + 1000 >= heal_ms && t < heal_ms);
    let back = (!flowing).then(|| {
        c.ok_ms
            .iter()
            .find(|&&t| t >= heal_ms)
            .map(|&t| t - heal_ms)
    });
    // The longest stretch without an id in [from, to): a gap open at `from` counts
    // from `from`; the caller may finish one more call after `end_ms` was read.
    let gap = |from: u64, to: u64| {
        let mut prev = from;
        let mut gap = 0;
        for &t in c.ok_ms.iter().filter(|&&t| t >= from && t < to) {
            gap = gap.max(t - prev);
            prev = t;
        }
        gap.max(to.saturating_sub(prev))
    };
    Seen {
        seconds_with_ids: secs - empty.len() as u64,
        stopped_after: empty.first().copied(),
        back_after_heal_ms: back,
        longest_gap_ms: gap(fault_ms, heal_ms),
        gap_after_heal_ms: gap(heal_ms, end_ms),
    }
}

/// One outage's proxy and generators, made before any outage is played so that every
/// holder is `--age` seconds old when its outage starts.
struct Prepared {
    kind: Kind,
    fault: Fault,
    k: u32,
    proxy: DelayProxy,
    /// The never-waiting caller's generator and the blocking caller's, or why one
    /// did not start.
    gens: Result<[Arc<SnowflakeGenerator>; 2], &'static str>,
}

fn prepare(env: &Env, kind: Kind, fault: Fault, k: u32) -> Prepared {
    let proxy = DelayProxy::start(env.upstream(kind));
    let via = proxy.addr.to_string();
    let cache = env.path(&format!("cache-outage-{}-{k}", kind.label()));
    let build = |k| generator(&env.url(kind, k, Some(&via)), &cache).map(Arc::new);
    let gens = build(k).and_then(|a| Ok([a, build(k + 1)?])).map_err(|e| {
        eprintln!("availability: {} outage generator: {e}", kind.label());
        e.code()
    });
    Prepared {
        kind,
        fault,
        k,
        proxy,
        gens,
    }
}

/// One outage: rows for the never-waiting and the blocking caller.
fn outage(env: &Env, p: Prepared, a: &Args) -> Vec<String> {
    let Prepared {
        kind,
        fault,
        k,
        proxy,
        gens,
    } = p;
    let fault_name = match fault {
        Fault::Frozen => "frozen",
        Fault::Refused => "refused",
    };
    let gens = match gens {
        Ok(gens) => gens,
        Err(code) => {
            return vec![format!(
                "| {} | {fault_name} | — | start failed: {code} |",
                kind.shown()
            )]
        }
    };
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    eprintln!("availability: {} {fault_name}:", kind.label());
    let threads: Vec<_> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let (g, stop, rate) = (g.clone(), stop.clone(), a.rate);
            std::thread::spawn(move || {
                if i == 0 {
                    caller(start, rate, stop, || g.next_id_now())
                } else {
                    caller(start, rate, stop, || g.next_id())
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(a.warm));
    let fault_ms = start.elapsed().as_millis() as u64;
    match fault {
        Fault::Frozen => proxy.set_blackhole(true),
        Fault::Refused => proxy.set_down(true),
    }
    std::thread::sleep(Duration::from_secs(a.outage));
    let heal_ms = start.elapsed().as_millis() as u64;
    match fault {
        Fault::Frozen => proxy.set_blackhole(false),
        Fault::Refused => proxy.set_down(false),
    }
    std::thread::sleep(Duration::from_secs(a.tail));
    stop.store(true, Ordering::Relaxed);
    let end_ms = start.elapsed().as_millis() as u64;
    let calls: Vec<Calls> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for g in &gens {
        g.close();
    }
    for k in [k, k + 1] {
        env.wipe(kind, k);
    }
    calls
        .iter()
        .zip(["`next_id_now`", "`next_id`"])
        .map(|(c, how)| {
            let s = seen(c, fault_ms, heal_ms, end_ms);
            let errors: Vec<String> = c
                .errors
                .iter()
                .map(|(code, n)| format!("{code} ×{n}"))
                .collect();
            format!(
                "| {} | {fault_name} | {how} | {} of {} | {} | {} | {} | {} ms | {} ms | {} ms | {} |",
                kind.shown(),
                s.seconds_with_ids,
                a.outage,
                a.outage - s.seconds_with_ids,
                s.stopped_after.map_or("—".into(), |s| format!("{s} s")),
                match s.back_after_heal_ms {
                    None => "—".into(),
                    Some(None) => format!("none in {} s", a.tail),
                    Some(Some(ms)) => format!("{:.2} s", ms as f64 / 1000.0),
                },
                s.longest_gap_ms,
                s.gap_after_heal_ms,
                c.longest_call.as_millis(),
                if errors.is_empty() {
                    "—".into()
                } else {
                    errors.join(", ")
                },
            )
        })
        .collect()
}

fn main() {
    if let (Ok(url), Ok(cache)) = (std::env::var(CHILD_URL), std::env::var(CHILD_CACHE)) {
        child(&url, &cache);
    }
    let a = args();
    let kinds: Vec<Kind> = KINDS
        .into_iter()
        .filter(|k| {
            a.only
                .as_ref()
                .is_none_or(|o| o.iter().any(|l| l == k.label()))
        })
        .collect();
    let env = Env::new(&kinds);
    let kinds: Vec<Kind> = kinds
        .into_iter()
        .filter(|&k| {
            let has = env.has(k);
            if !has {
                eprintln!("availability: {} skipped (source .services/env)", k.label());
            }
            has
        })
        .collect();
    if a.first {
        println!(
            "\nTime to the first id from constructing a generator, median / max of {} runs\n",
            a.runs
        );
        println!("| registry | new identity | restart (closed) | restart after SIGKILL | wiped registry |");
        println!("|---|---|---|---|---|");
        for &kind in &kinds {
            let cells = first_ids(&env, kind, a.runs);
            let wiped = if kind == Kind::Fixed {
                "(no records)".into()
            } else {
                cells[3].show()
            };
            println!(
                "| {} | {} | {} | {} | {wiped} |",
                kind.shown(),
                cells[0].show(),
                cells[1].show(),
                cells[2].show()
            );
        }
    }
    if a.outages {
        println!(
            "\nA registry outage of {} s: calls at {}/s per caller (each on a generator of its own, \
             started at least {} s before the outage), from {} s before it to {} s after the heal\n",
            a.outage,
            a.rate,
            a.age.max(a.warm),
            a.warm,
            a.tail
        );
        println!(
            "| registry | outage | caller | seconds with ids | seconds without | first second without | \
             ids back after the heal | longest gap in the outage | after the heal | longest call | errors |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        let mut k = 200;
        let mut prepared = Vec::new();
        for &kind in kinds.iter().filter(|k| k.networked()) {
            for fault in [Fault::Frozen, Fault::Refused] {
                prepared.push(prepare(&env, kind, fault, k));
                k += 2;
            }
        }
        // The holders age before the first outage (the later ones age more on the way).
        std::thread::sleep(Duration::from_secs(a.age.saturating_sub(a.warm)));
        for p in prepared {
            for row in outage(&env, p, &a) {
                println!("{row}");
            }
        }
    }
}
