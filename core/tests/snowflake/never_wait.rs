//! Snowflake mode never blocks a caller that chose not to wait (issue 12): with the
//! registry behind a loopback proxy that blackholes (connections stay open, nothing
//! passes), `next_id_now` fails at once with the cause, `next_id_async` resolves once the
//! registry is back, `close_within` lets go at its deadline and a drop returns. Real
//! MariaDB and ZooKeeper (`LEAFID_MYSQL_URL`, `LEAFID_ZK`); waits are hang detectors
//! with generous limits, not timing assertions.

use std::collections::HashSet;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leafid::{Error, SnowflakeGenerator};

use crate::support::delay_proxy;
use delay_proxy::DelayProxy;

/// How long any step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
enum Backend {
    Mysql,
    Zookeeper,
}

fn unique(tag: &str) -> String {
    format!(
        "nw_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// A proxy in front of the backend's server.
fn proxy(backend: Backend) -> DelayProxy {
    DelayProxy::start(match backend {
        Backend::Mysql => {
            let u = url::Url::parse(&mysql()).unwrap();
            format!("{}:{}", u.host_str().unwrap(), u.port().unwrap())
        }
        Backend::Zookeeper => zk(),
    })
}

fn mysql() -> String {
    std::env::var("LEAFID_MYSQL_URL").expect("LEAFID_MYSQL_URL is not set: source .services/env")
}

fn zk() -> String {
    std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env")
}

/// Registry URLs for a fresh identity: through `proxy`, and directly.
fn urls(backend: Backend, tag: &str, proxy: &DelayProxy) -> (String, String) {
    let name = unique(tag);
    match backend {
        Backend::Mysql => {
            let base = mysql();
            let mut via = url::Url::parse(&base).unwrap();
            via.set_port(Some(proxy.addr.port())).unwrap();
            let params = |url: &str| {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}ip={name}&port=8080")
            };
            (params(via.as_str()), params(&base))
        }
        Backend::Zookeeper => {
            let params = "port=8080&ip=127.0.0.1&session_timeout_ms=3000&connect_timeout_ms=1000";
            (
                format!("zookeeper://{}/{name}?{params}", proxy.addr),
                format!("zookeeper://{}/{name}?{params}", zk()),
            )
        }
    }
}

/// A proxy and the URLs of a fresh identity through it and directly.
fn registry(backend: Backend, tag: &str) -> (DelayProxy, String, String) {
    let proxy = proxy(backend);
    let (via, direct) = urls(backend, tag, &proxy);
    (proxy, via, direct)
}

/// A short lookahead: a holder cut off from its registry issues up to its bound (fence
/// rule 5), and these tests wait for the bound to pass, one second after the cut.
fn build(url: &str, cache: &Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(200))
        .lookahead(Duration::from_secs(1))
        .build_blocking()
}

/// Issues with `next_id_now` until the gate shuts (the last persisted bound passed),
/// collecting the ids; returns the error that shut it.
fn issue_until_shut(gen: &SnowflakeGenerator, ids: &mut Vec<i64>) -> Error {
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < HANG, "the bound never expired");
        match gen.next_id_now() {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
}

/// Runs `f` on a thread; fails with `what` if it has not returned within [`HANG`].
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG).unwrap_or_else(|_| panic!("{what}"))
}

fn assert_increasing_and_distinct(ids: &[i64]) {
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids are not strictly increasing"
    );
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an id was issued twice");
}

/// `next_id_now` during a blackhole: fails with `RegistryUnavailable` on every call
/// without waiting for the registry, and issues again (above every earlier id) once the
/// registry is back.
fn now_fails_at_once_then_resumes(backend: Backend) {
    let (proxy, via, _) = registry(backend, "now");
    let cache = tempfile::tempdir().unwrap();
    let gen = build(&via, cache.path()).unwrap();
    let mut ids = gen.next_ids_now(100).unwrap();
    proxy.set_blackhole(true);
    let first = issue_until_shut(&gen, &mut ids);
    assert!(
        matches!(first, Error::RegistryUnavailable { .. }),
        "{first:?}"
    );
    // Forty calls, each past the retry backoff so each may start a persist: a call that
    // waited for the registry (at least its call timeout, seconds) would make these
    // take minutes; with the registry still silent every one fails with the cause.
    let g = gen.clone();
    let errors = returns(
        "next_id_now waited for the blackholed registry",
        move || {
            (0..40)
                .map(|_| {
                    std::thread::sleep(Duration::from_millis(150));
                    g.next_id_now()
                })
                .collect::<Vec<_>>()
        },
    );
    // RegistryUnavailable while the registry is silent (a ZooKeeper session is lost
    // only when a server says so); LeaseLost where a registry tells a lost lease itself.
    for e in errors {
        assert!(
            matches!(
                e,
                Err(Error::RegistryUnavailable { .. }) | Err(Error::LeaseLost { .. })
            ),
            "{e:?}"
        );
    }
    proxy.set_blackhole(false);
    let started = Instant::now();
    let resumed = loop {
        assert!(started.elapsed() < HANG, "ids never resumed");
        match gen.next_id_now() {
            Ok(id) => break id,
            Err(Error::RegistryUnavailable { .. }) | Err(Error::LeaseLost { .. }) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    ids.push(resumed);
    ids.extend(gen.next_ids_now(1_000).unwrap());
    assert_increasing_and_distinct(&ids);
    gen.close();
}

#[test]
fn mysql_next_id_now_fails_at_once_while_blackholed_and_resumes_after() {
    now_fails_at_once_then_resumes(Backend::Mysql);
}

#[test]
fn zookeeper_next_id_now_fails_at_once_while_blackholed_and_resumes_after() {
    now_fails_at_once_then_resumes(Backend::Zookeeper);
}

/// Many `next_id_async` callers waiting through a blackhole: all resolve once the
/// registry is back, with distinct ids above every earlier one.
fn async_waiters_resolve_after_the_registry_is_back(backend: Backend) {
    let (proxy, via, _) = registry(backend, "async");
    let cache = tempfile::tempdir().unwrap();
    let gen = build(&via, cache.path()).unwrap();
    let mut before = gen.next_ids_now(100).unwrap();
    proxy.set_blackhole(true);
    issue_until_shut(&gen, &mut before);
    let waiters: Vec<_> = (0..200)
        .map(|_| leafid::runtime::spawn(gen.next_id_async()))
        .collect();
    let batch = leafid::runtime::spawn(gen.next_ids_async(50));
    // Let them wait on the silent registry, then bring it back.
    std::thread::sleep(Duration::from_millis(500));
    proxy.set_blackhole(false);
    let got = returns("async waiters never resolved", move || {
        leafid::runtime::block_on(async move {
            let mut ids = Vec::new();
            for w in waiters {
                ids.push(w.await.unwrap());
            }
            (ids, batch.await.unwrap())
        })
    });
    let (singles, batch) = got;
    let mut ids: Vec<i64> = singles
        .into_iter()
        .map(|r| r.expect("an async waiter failed"))
        .collect();
    let batch = batch.expect("the async batch failed");
    assert_increasing_and_distinct(&batch);
    ids.extend(batch);
    let last_before = *before.last().unwrap();
    assert!(
        ids.iter().all(|&id| id > last_before),
        "an id below one issued before"
    );
    ids.sort_unstable();
    assert_increasing_and_distinct(&ids);
    gen.close();
}

#[test]
fn mysql_async_waiters_resolve_with_distinct_ids_once_the_registry_is_back() {
    async_waiters_resolve_after_the_registry_is_back(Backend::Mysql);
}

#[test]
fn zookeeper_async_waiters_resolve_with_distinct_ids_once_the_registry_is_back() {
    async_waiters_resolve_after_the_registry_is_back(Backend::Zookeeper);
}

/// `close_within` with the registry blackholed lets go (`false`), and the same
/// identity can be held again once the registry is back or the lease expired; its
/// ids are above every id of the closed generator.
fn close_lets_go_and_the_identity_comes_back(backend: Backend) {
    let (proxy, via, direct) = registry(backend, "close");
    let cache = tempfile::tempdir().unwrap();
    let a = build(&via, cache.path()).unwrap();
    let ids_a = a.next_ids(1_000).unwrap();
    proxy.set_blackhole(true);
    let a2 = a.clone();
    let released = returns("close_within blocked past its deadline", move || {
        a2.close_within(Duration::from_millis(300))
    });
    assert!(
        !released,
        "the release cannot have completed through a blackhole"
    );
    assert!(matches!(a.next_id_now(), Err(Error::Closed)));
    proxy.set_blackhole(false);
    let started = Instant::now();
    let b = loop {
        assert!(started.elapsed() < HANG, "the identity never came back");
        match build(&direct, cache.path()) {
            Ok(b) => break b,
            Err(Error::WorkerIdInUse { .. } | Error::ClockBehindRegistry { .. }) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    let id_b = b.next_id().unwrap();
    assert_eq!(b.worker_id(), a.worker_id());
    assert!(id_b > *ids_a.last().unwrap());
    b.close();
}

#[test]
fn mysql_close_within_a_blackhole_lets_go_and_the_identity_comes_back() {
    close_lets_go_and_the_identity_comes_back(Backend::Mysql);
}

#[test]
fn zookeeper_close_within_a_blackhole_lets_go_and_the_identity_comes_back() {
    close_lets_go_and_the_identity_comes_back(Backend::Zookeeper);
}

/// Dropping the last clone while the registry is blackholed returns (the close goes on
/// in the background); so does `close_async`.
fn drop_returns(backend: Backend) {
    let (proxy, via, _) = registry(backend, "drop");
    let cache = tempfile::tempdir().unwrap();
    let gen = build(&via, cache.path()).unwrap();
    let other = build(&urls(backend, "drop2", &proxy).0, cache.path()).unwrap();
    gen.next_ids(100).unwrap();
    proxy.set_blackhole(true);
    returns("drop blocked", move || drop(gen));
    let closing = other.close_async();
    assert!(matches!(other.next_id_now(), Err(Error::Closed)));
    returns("close_async never resolved", move || {
        leafid::runtime::block_on(closing)
    });
    proxy.set_blackhole(false);
}

#[test]
fn mysql_drop_with_the_registry_blackholed_returns() {
    drop_returns(Backend::Mysql);
}

#[test]
fn zookeeper_drop_with_the_registry_blackholed_returns() {
    drop_returns(Backend::Zookeeper);
}

/// The blocking `next_id` may wait for the registry, but only as long as the
/// registry's timeouts: through a blackhole it fails with `RegistryUnavailable` (once
/// it hung for good on a statement without a timeout, holding the lease state).
#[test]
fn mysql_blocking_next_id_through_a_blackhole_fails_instead_of_hanging() {
    let (proxy, via, _) = registry(Backend::Mysql, "block");
    let cache = tempfile::tempdir().unwrap();
    let gen = build(&via, cache.path()).unwrap();
    gen.next_ids(100).unwrap();
    proxy.set_blackhole(true);
    let g = gen.clone();
    let err = returns(
        "the blocking next_id hung on the blackholed registry",
        move || loop {
            if let Err(e) = g.next_id() {
                return e;
            }
        },
    );
    assert!(matches!(err, Error::RegistryUnavailable { .. }), "{err:?}");
    proxy.set_blackhole(false);
    gen.close();
}

/// `next_id_now` sleeps out only a backward step too small to count as waiting (twice
/// the step at most 10 ms); a larger one, which the blocking call sleeps out under a
/// wider `max_backward`, fails at once with `ClockMovedBackwards`.
#[test]
fn next_id_now_sleeps_out_only_a_tiny_backward_step() {
    let cache = tempfile::tempdir().unwrap();
    let clock = leafid::ManualClock::new(1_700_000_000_000);
    let gen = SnowflakeGenerator::builder()
        .registry(leafid::snowflake::RegistryConfig::Fixed(811))
        .clock(clock.clone())
        .cache_dir(cache.path())
        .max_backward(Duration::from_millis(100))
        .build_blocking()
        .unwrap();
    let a = gen.next_id_now().unwrap();
    clock.advance(-3);
    let b = gen.next_id_now().unwrap();
    assert!(b > a);
    clock.advance(-50);
    let err = gen.next_id_now().unwrap_err();
    assert!(
        matches!(err, Error::ClockMovedBackwards { offset_ms } if offset_ms >= 50),
        "{err:?}"
    );
    let c = gen.next_id().unwrap();
    assert!(c > b);
    gen.close();
}

/// With the registry answering, `close_within` and `close_async` report the release
/// done, and a later close of the same generator says so too.
#[test]
fn close_reports_a_completed_release() {
    let cache = tempfile::tempdir().unwrap();
    let build_fixed = |id| {
        SnowflakeGenerator::builder()
            .registry(leafid::snowflake::RegistryConfig::Fixed(id))
            .cache_dir(cache.path())
            .build_blocking()
            .unwrap()
    };
    let a = build_fixed(814);
    a.next_id().unwrap();
    assert!(a.close_within(HANG));
    assert!(a.close_within(Duration::ZERO), "already released");
    let b = build_fixed(815);
    b.next_id().unwrap();
    let closing = b.close_async();
    assert!(matches!(b.next_id_now(), Err(Error::Closed)));
    assert!(leafid::runtime::block_on(closing));
}

/// A drop no longer waits for the release, yet a generator built right after it for
/// the same identity starts (it waits for that release) instead of failing with
/// `WorkerIdInUse`; its ids are above the dropped one's.
#[test]
fn a_generator_built_right_after_a_drop_of_its_identity_starts() {
    let cache = tempfile::tempdir().unwrap();
    let build_fixed = || {
        SnowflakeGenerator::builder()
            .registry(leafid::snowflake::RegistryConfig::Fixed(816))
            .cache_dir(cache.path())
            .build_blocking()
    };
    let mut last = 0;
    for _ in 0..20 {
        let gen = build_fixed().expect("built right after the previous one was dropped");
        let id = gen.next_id().unwrap();
        assert!(id > last);
        last = id;
        drop(gen);
    }
}

/// A MySQL registry that refuses connections is reported with the root cause, not
/// the pool's bare "timed out" (issue 12).
#[test]
fn mysql_registry_refused_names_the_root_cause() {
    // A loopback port with nothing listening: bind one, note it, let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut url = url::Url::parse(&mysql()).unwrap();
    url.set_port(Some(port)).unwrap();
    let url = format!("{url}?ip={}&port=8080", unique("refused"));
    let cache = tempfile::tempdir().unwrap();
    let e = SnowflakeGenerator::builder()
        .registry_url(&url)
        .unwrap()
        .cache_dir(cache.path())
        .startup_wait(Duration::from_millis(100))
        .build_blocking()
        .expect_err("nothing listens there");
    let shown = e.to_string();
    assert!(shown.to_lowercase().contains("refused"), "{shown}");
    assert!(!shown.contains("leafid@"), "password shown: {shown}");
}
