//! Issue 30, goal 4: a process restarted while its registry is down issues again from
//! its cache file on identities that are this host's own (`zookeeper://` and `?port=`),
//! as Java Leaf does from `workerID.properties`, and takes its lease for real once the
//! registry is back, with every id above the ones before. Leased ids (pools,
//! `zookeeper-recycle`) still wait for the registry.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use leafid::{Error, SnowflakeGenerator};

use crate::support::delay_proxy::DelayProxy;

fn unique(tag: &str) -> String {
    format!(
        "rio_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn build(url: &str, cache: &Path) -> leafid::Result<SnowflakeGenerator> {
    SnowflakeGenerator::builder()
        .registry_url(url)?
        .cache_dir(cache)
        .heartbeat(Duration::from_millis(300))
        .lookahead(Duration::from_secs(8))
        .build_blocking()
}

const URL_VAR: &str = "LEAFID_TEST_RIO_URL";
const CACHE_VAR: &str = "LEAFID_TEST_RIO_CACHE";

/// The child of [`restart_while_down`]: holds the identity, prints its last id, and
/// waits to be killed.
#[test]
#[ignore = "run as a child process by the tests below"]
fn holder_child() {
    let (Ok(url), Ok(cache)) = (std::env::var(URL_VAR), std::env::var(CACHE_VAR)) else {
        return;
    };
    let g = build(&url, Path::new(&cache)).unwrap();
    let ids = g.next_ids(500).unwrap();
    println!("LAST {}", ids.last().unwrap());
    std::thread::sleep(Duration::from_secs(120));
}

/// Runs a generator through `url` (its registry behind `proxy`) in a child process,
/// kills it (SIGKILL: nothing released, its lease left to expire), restarts it here
/// with the registry refused, then heals.
fn restart_while_down(url: &str, proxy: &DelayProxy) {
    use std::io::BufRead;
    let cache = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "--ignored", "--nocapture"])
        .arg(crate::support::self_exec::test_name(
            module_path!(),
            "holder_child",
        ))
        .env(URL_VAR, url)
        .env(CACHE_VAR, cache.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut last = None;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        if let Some(n) = line.unwrap().strip_prefix("LAST ") {
            last = Some(n.trim().parse::<i64>().unwrap());
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut seen: Vec<i64> = vec![last.expect("the child issued no id")];
    proxy.set_down(true);
    let started = Instant::now();
    let second = build(url, cache.path())
        .unwrap_or_else(|e| panic!("{url}: a restart while the registry is down failed: {e:?}"));
    // Hang-catcher only: the registry's connect timeout (3 s) plus slack.
    assert!(started.elapsed() < Duration::from_secs(15));
    let during = second.next_ids(500).unwrap();
    assert!(during[0] > *seen.last().unwrap(), "{url}: ids went back");
    seen.extend(during);
    proxy.set_down(false);
    assert_eq!(
        second.stats().clock_skew_ms,
        None,
        "no registry reading yet"
    );
    // Once the registry is back the lease is taken for real (its clock read, so the skew
    // is known); issuing never stops meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    while second.stats().clock_skew_ms.is_none() {
        let id = second.next_id().unwrap();
        assert!(id > *seen.last().unwrap());
        seen.push(id);
        assert!(
            Instant::now() < deadline,
            "{url}: the lease was never taken after the heal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    seen.extend(second.next_ids(500).unwrap());
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "{url}: an id issued twice");
    second.close();
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_forever_restart_while_zookeeper_is_down_issues_from_the_cache() {
    let zk = std::env::var("LEAFID_ZK").expect("source .services/env");
    let proxy = DelayProxy::start(zk);
    let url = format!(
        "zookeeper://{}/{}?port=8080&ip=10.9.{}.{}",
        proxy.addr,
        unique("zk"),
        fastrand::u8(..),
        fastrand::u8(1..)
    );
    restart_while_down(&url, &proxy);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_port_restart_while_the_database_is_down_issues_from_the_cache() {
    let base = std::env::var("LEAFID_MYSQL_URL").expect("source .services/env");
    let mut u = url::Url::parse(&base).unwrap();
    let proxy = DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()));
    u.set_host(Some("127.0.0.1")).unwrap();
    u.set_port(Some(proxy.addr.port())).unwrap();
    let sep = if u.as_str().contains('?') { '&' } else { '?' };
    let url = format!("{u}{sep}port=8080&ip={}", unique("my"));
    restart_while_down(&url, &proxy);
}

#[cfg(feature = "mysql")]
#[test]
fn a_pool_restart_while_the_database_is_down_waits_for_the_database() {
    let base = std::env::var("LEAFID_MYSQL_URL").expect("source .services/env");
    let mut u = url::Url::parse(&base).unwrap();
    let proxy = DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()));
    u.set_host(Some("127.0.0.1")).unwrap();
    u.set_port(Some(proxy.addr.port())).unwrap();
    let sep = if u.as_str().contains('?') { '&' } else { '?' };
    let url = format!("{u}{sep}pool={}", unique("pool"));
    let cache = tempfile::tempdir().unwrap();
    let first = build(&url, cache.path()).unwrap();
    first.next_id().unwrap();
    first.close();
    proxy.set_down(true);
    match build(&url, cache.path()) {
        Err(Error::RegistryUnavailable { .. } | Error::StoreUnavailable { .. }) => {}
        other => panic!("a pool id was taken without the database: {other:?}"),
    }
    proxy.set_down(false);
}
