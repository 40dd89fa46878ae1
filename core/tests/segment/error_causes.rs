//! Errors keep their cause: against the real MariaDB and loopback ports that refuse or
//! stay silent, an error's `source()` is the driver's error (downcast to `sqlx::Error`
//! / `std::io::Error`) and `cause_kind()` says what it was. And with the default wait
//! (1 s), a MySQL outage reads as one: the first failed refill's cause, or "the store has
//! not answered", never "last store error: none".

use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::support::mysql;

use crate::support::delay_proxy;

use leafid::error::CauseKind;
use leafid::{Error, SegmentGenerator, SegmentOptions};
use mysql::{create, fresh_tag, mysql_url};

/// A loopback port nothing listens on: connecting to it is refused.
fn refusing_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The test database's URL with its host and port replaced by `127.0.0.1:port`.
fn url_at(port: u16) -> String {
    let url = url::Url::parse(&mysql_url()).unwrap();
    let mut url = url.clone();
    url.set_port(Some(port)).unwrap();
    url.to_string()
}

fn connect_err(url: &str) -> Error {
    SegmentGenerator::connect_blocking(url, SegmentOptions::default())
        .expect_err("connect must fail")
}

/// The sqlx error under `e`.
fn sqlx_source(e: &Error) -> &sqlx::Error {
    e.source()
        .and_then(|s| s.downcast_ref::<sqlx::Error>())
        .unwrap_or_else(|| panic!("no sqlx::Error under {e:?}"))
}

#[test]
fn refused_connection_keeps_the_io_error() {
    let e = connect_err(&url_at(refusing_port()));
    assert!(matches!(e, Error::StoreUnavailable { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::Refused), "{e}");
    let sqlx::Error::Io(io) = sqlx_source(&e) else {
        panic!("not an I/O error: {e:?}")
    };
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[test]
fn silent_server_is_a_time_out() {
    let upstream = url::Url::parse(&mysql_url()).unwrap();
    let proxy = delay_proxy::DelayProxy::start(format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap()
    ));
    proxy.set_blackhole(true);
    let e = connect_err(&url_at(proxy.addr.port()));
    assert!(matches!(e, Error::StoreUnavailable { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::TimedOut), "{e}");
    assert!(
        matches!(sqlx_source(&e), sqlx::Error::PoolTimedOut),
        "{e:?}"
    );
}

#[test]
fn wrong_password_is_access_denied_not_a_bad_option() {
    let mut url = url::Url::parse(&mysql_url()).unwrap();
    url.set_password(Some("not-the-password")).unwrap();
    let e = connect_err(url.as_str());
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert_eq!(e.code(), "LEAF_ACCESS_DENIED");
    assert_eq!(e.kind(), leafid::ErrorKind::Config);
    assert_eq!(e.cause_kind(), Some(CauseKind::LoginRefused), "{e}");
    assert!(matches!(sqlx_source(&e), sqlx::Error::Database(_)), "{e:?}");
    assert!(!e.to_string().contains("not-the-password"), "{e}");
}

#[test]
fn unknown_database_is_access_denied_not_found() {
    let mut url = url::Url::parse(&mysql_url()).unwrap();
    url.set_path(&format!("/no_such_db_{}", std::process::id()));
    let e = connect_err(url.as_str());
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::NotFound), "{e}");
}

/// A TCP forwarder to MariaDB that can start refusing: `refuse()` closes its listener
/// (so new connections are refused) and cuts the open ones.
struct Gate {
    port: u16,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Gate {
    fn open(upstream: String) -> Gate {
        let listener =
            leafid::runtime::block_on(async { TcpListener::bind("127.0.0.1:0").await.unwrap() });
        let port = listener.local_addr().unwrap().port();
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let t = tasks.clone();
        let accept = leafid::runtime::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let pump = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                t.lock().unwrap().push(pump.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Gate { port, tasks }
    }

    fn refuse(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
        // The listener goes with the accept task; wait until the port refuses.
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Spends `tag`'s buffered ids until a call fails (the default 1 s wait each time).
fn first_failure(gen: &SegmentGenerator, tag: &str) -> Error {
    for _ in 0..1000 {
        if let Err(e) = gen.next_id(tag) {
            return e;
        }
    }
    panic!("no failure after 1000 ids");
}

#[test]
fn outage_under_the_default_wait_reports_the_refusal() {
    let upstream = url::Url::parse(&mysql_url()).unwrap();
    let gate = Gate::open(format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap()
    ));
    let gen = SegmentGenerator::connect_blocking(
        &url_at(gate.port),
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    let tag = fresh_tag("cause-refused");
    create(&gen, &tag, 1, 5);
    gen.next_id(&tag).unwrap();
    gate.refuse();
    let e = first_failure(&gen, &tag);
    let text = e.to_string();
    assert!(!text.contains("last store error: none"), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    assert_eq!(e.cause_kind(), Some(CauseKind::Refused), "{e:?}");
    let stats = gen.stats().into_iter().find(|s| s.tag == tag).unwrap();
    let last = stats
        .last_error
        .expect("stats().last_error after a failed refill");
    assert!(last.to_lowercase().contains("refused"), "{last}");
    gen.close();
}

#[test]
fn outage_on_a_silent_network_says_the_store_has_not_answered() {
    let upstream = url::Url::parse(&mysql_url()).unwrap();
    let proxy = delay_proxy::DelayProxy::start(format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap()
    ));
    let gen = SegmentGenerator::connect_blocking(
        &url_at(proxy.addr.port()),
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    let tag = fresh_tag("cause-silent");
    create(&gen, &tag, 1, 5);
    gen.next_id(&tag).unwrap();
    proxy.set_blackhole(true);
    let e = first_failure(&gen, &tag);
    let text = e.to_string();
    assert!(!text.contains("last store error: none)"), "{text}");
    assert!(matches!(e, Error::SegmentsExhausted { .. }), "{e:?}");
    assert!(text.contains("has not answered"), "{text}");
    assert_eq!(e.cause_kind(), Some(CauseKind::TimedOut), "{e:?}");
    let io = e
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("an io::Error source");
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    proxy.set_blackhole(false);
    gen.close();
}

/// A MySQL port with nothing listening: the error says "refused" and where, not
/// "pool timed out", and never repeats "store unavailable" or shows the password.
#[test]
fn refused_mysql_names_the_root_cause() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("mysql://leaf:s3cretpw@127.0.0.1:{port}/leafid");
    let err = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("pool timed out"), "{text}");
    assert!(!text.contains("s3cretpw"), "{text}");
    assert_eq!(text.matches("store unavailable").count(), 1, "{text}");
}

/// A wrong password and an unknown database are configuration errors that say so:
/// `AccessDenied` (kind `Config`), not `InvalidConfig`, which is a bad option.
#[test]
fn wrong_password_and_unknown_database_are_configuration_errors() {
    let good = url::Url::parse(&mysql_url()).unwrap();
    let mut bad_pw = good.clone();
    bad_pw.set_password(Some("definitely-wrong-pw")).unwrap();
    let err =
        SegmentGenerator::connect_blocking(bad_pw.as_str(), SegmentOptions::default()).unwrap_err();
    assert!(matches!(err, Error::AccessDenied { .. }), "{err:?}");
    assert_eq!(err.kind(), leafid::ErrorKind::Config);
    assert!(err.to_string().contains("refused the login"), "{err}");
    assert!(!err.to_string().contains("definitely-wrong-pw"), "{err}");
    let mut bad_db = good.clone();
    bad_db.set_path("/no_such_db_leafid_12");
    let err =
        SegmentGenerator::connect_blocking(bad_db.as_str(), SegmentOptions::default()).unwrap_err();
    assert!(matches!(err, Error::AccessDenied { .. }), "{err:?}");
    assert_eq!(err.kind(), leafid::ErrorKind::Config);
    assert!(err.to_string().contains("no_such_db_leafid_12"), "{err}");
    // Issue 31: it says what to do, not only that access was denied.
    assert!(
        err.to_string()
            .contains("create the database or fix its name in the URL"),
        "{err}"
    );
}
