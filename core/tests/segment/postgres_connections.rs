//! The `postgres://` store's connections against a real PostgreSQL (`LEAFID_PG_URL`):
//! a refused, silent or cut-off server and a refused login each say what happened
//! (the driver's error kept as the source), `sslmode` is libpq's, and the store works
//! behind PgBouncer in transaction mode (`LEAFID_PGBOUNCER_URL`); with the `tls`
//! feature, against a TLS-only server (`LEAFID_PG_TLS_URL`, `LEAFID_PG_TLS_CA`).

use std::collections::HashSet;
use std::error::Error as _;
use std::time::{Duration, Instant};

use leafid::error::CauseKind;
use leafid::{Error, SegmentGenerator, SegmentOptions};

use crate::support::postgres::{connect_err, create, fresh_tag, pg_url, refresh, url_with};

/// `LEAFID_PGBOUNCER_URL` (PgBouncer with `pool_mode = transaction` in front of the
/// same database), or a panic that says how to get it.
fn pgbouncer_url() -> String {
    std::env::var("LEAFID_PGBOUNCER_URL").expect(
        "LEAFID_PGBOUNCER_URL is not set: start PgBouncer in transaction mode in front of \
         LEAFID_PG_URL's database (scripts/services.sh) and export its URL",
    )
}

#[test]
fn a_refused_connection_keeps_the_io_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = connect_err(&url_with(|u| u.set_port(Some(port)).unwrap()));
    assert!(matches!(e, Error::StoreUnavailable { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::Refused), "{e}");
    assert!(e.to_string().contains("PostgreSQL at 127.0.0.1"), "{e}");
    let io = e.source().and_then(|s| s.downcast_ref::<sqlx::Error>());
    assert!(
        matches!(io, Some(sqlx::Error::Io(io)) if io.kind() == std::io::ErrorKind::ConnectionRefused),
        "{e:?}"
    );
}

/// The URL through a loopback proxy to the test database.
fn via(proxy: &crate::support::delay_proxy::DelayProxy) -> String {
    url_with(|u| u.set_port(Some(proxy.addr.port())).unwrap())
}

fn proxy() -> crate::support::delay_proxy::DelayProxy {
    let upstream = url::Url::parse(&pg_url()).unwrap();
    crate::support::delay_proxy::DelayProxy::start(format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap_or(5432)
    ))
}

#[test]
fn a_silent_server_is_a_time_out() {
    let proxy = proxy();
    proxy.set_blackhole(true);
    let e = connect_err(&via(&proxy));
    assert!(matches!(e, Error::StoreUnavailable { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::TimedOut), "{e}");
    let source = e.source().and_then(|s| s.downcast_ref::<sqlx::Error>());
    assert!(matches!(source, Some(sqlx::Error::PoolTimedOut)), "{e:?}");
}

/// The database cut off mid-run: a caller whose refill cannot be made hears why after
/// its wait (never "none"), and once the database is back ids go on above every id
/// issued before.
#[test]
fn an_outage_fails_callers_after_their_wait_and_ids_go_on_after_it() {
    let proxy = proxy();
    let gen = SegmentGenerator::connect_blocking(
        &via(&proxy),
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    let tag = fresh_tag("outage");
    create(&gen, &tag, 1, 5);
    let mut issued = vec![gen.next_id(&tag).unwrap()];
    proxy.set_down(true);
    let e = loop {
        match gen.next_id(&tag) {
            Ok(id) => issued.push(id),
            Err(e) => break e,
        }
        assert!(issued.len() < 1000, "no failure with the database down");
    };
    assert!(
        matches!(
            e,
            Error::SegmentsExhausted { .. } | Error::StoreUnavailable { .. }
        ),
        "{e:?}"
    );
    assert!(!e.to_string().contains("none"), "{e}");
    proxy.set_down(false);
    let deadline = Instant::now() + Duration::from_secs(20);
    let next = loop {
        if let Ok(id) = gen.next_id(&tag) {
            break id;
        }
        assert!(
            Instant::now() < deadline,
            "no id after the database came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        next > *issued.iter().max().unwrap(),
        "{next} after {issued:?}"
    );
    gen.close();
}

#[test]
fn a_wrong_password_is_access_denied_and_never_shown() {
    let e = connect_err(&url_with(|u| {
        u.set_password(Some("not-the-password")).unwrap()
    }));
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::LoginRefused), "{e}");
    assert!(!format!("{e} {e:?}").contains("not-the-password"), "{e}");
}

#[test]
fn an_unknown_database_is_access_denied_not_found() {
    let e = connect_err(&url_with(|u| {
        u.set_path(&format!("/no_such_db_{}", std::process::id()))
    }));
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert_eq!(e.cause_kind(), Some(CauseKind::NotFound), "{e}");
}

/// `sslmode` is libpq's: `disable` connects in clear, `require` is refused rather than
/// silently downgraded: before any I/O in a build without the `tls` feature, by the
/// server (which has no TLS here) in a build with it.
#[test]
fn sslmode_in_the_url_is_honoured() {
    let clear = url_with(|u| {
        u.query_pairs_mut().append_pair("sslmode", "disable");
    });
    let gen =
        SegmentGenerator::connect_blocking(&clear, SegmentOptions::default().create_table(true))
            .unwrap();
    let tag = fresh_tag("ssl");
    create(&gen, &tag, 1, 10);
    assert_eq!(gen.next_id(&tag).unwrap(), 1);
    // The test server has no TLS: `require` must fail, never fall back to clear text.
    let url = url_with(|u| {
        u.query_pairs_mut().append_pair("sslmode", "require");
    });
    let e = connect_err(&url);
    #[cfg(not(feature = "tls"))]
    assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
    #[cfg(feature = "tls")]
    assert!(matches!(e, Error::StoreUnavailable { .. }), "{e:?}");
    assert!(e.to_string().to_lowercase().contains("tls"), "{e}");
    let url = url_with(|u| {
        u.query_pairs_mut().append_pair("sslmode", "bogus");
    });
    let e = connect_err(&url);
    assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
}

/// Behind PgBouncer in transaction mode each statement may run on another server
/// connection: no prepared statement and no session state may be relied on. Two
/// generators through it, many refills each: no error, no duplicate.
#[test]
fn behind_pgbouncer_in_transaction_mode_ids_stay_unique() {
    let url = pgbouncer_url();
    let opts = || {
        SegmentOptions::default()
            .create_table(true)
            .wait_timeout(Duration::from_secs(10))
    };
    let a = SegmentGenerator::connect_blocking(&url, opts()).unwrap();
    let b = SegmentGenerator::connect_blocking(&url, opts()).unwrap();
    let tag = fresh_tag("bouncer");
    create(&a, &tag, 1, 50);
    refresh(&b);
    let mut threads = vec![];
    for gen in [&a, &b] {
        for _ in 0..3 {
            let h = gen.tag(&tag).unwrap();
            threads.push(std::thread::spawn(move || {
                (0..20_000)
                    .map(|_| h.next_id().unwrap())
                    .collect::<Vec<_>>()
            }));
        }
    }
    let mut all = HashSet::new();
    for t in threads {
        for id in t.join().unwrap() {
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert_eq!(all.len(), 120_000);
    assert!(a.stats().iter().any(|s| s.tag == tag && s.refills > 10));
}

/// `LEAFID_PG_TLS_URL` (a PostgreSQL that accepts only TLS: `hostssl` lines alone) and
/// `LEAFID_PG_TLS_CA` (the CA file of its certificate, issued for 127.0.0.1), or a panic
/// that says how to get them.
#[cfg(feature = "tls")]
fn pg_tls() -> (String, String) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: start a TLS-only PostgreSQL (scripts/services.sh) and export \
                 LEAFID_PG_TLS_URL and LEAFID_PG_TLS_CA"
            )
        })
    };
    (var("LEAFID_PG_TLS_URL"), var("LEAFID_PG_TLS_CA"))
}

/// With the `tls` feature, `sslmode` is libpq's on a server that requires TLS:
/// `verify-full` with the CA connects and issues; `disable` is refused by the server
/// (its `pg_hba.conf`), and `verify-full` without the CA refuses the certificate.
#[cfg(feature = "tls")]
#[test]
fn tls_sslmode_verify_full_connects_and_clear_text_is_refused() {
    let (url, ca) = pg_tls();
    let with = |query: &str| format!("{url}?{query}");
    let verified = with(&format!("sslmode=verify-full&sslrootcert={ca}"));
    let gen =
        SegmentGenerator::connect_blocking(&verified, SegmentOptions::default().create_table(true))
            .unwrap();
    let tag = fresh_tag("tls");
    create(&gen, &tag, 1, 10);
    assert_eq!(gen.next_ids(&tag, 3).unwrap(), vec![1, 2, 3]);
    gen.close();
    let e = connect_err(&with("sslmode=disable"));
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert!(e.to_string().contains("pg_hba.conf"), "{e}");
    let e = connect_err(&with("sslmode=verify-full"));
    assert!(
        matches!(e, Error::StoreUnavailable { .. }),
        "an unknown CA must not connect: {e:?}"
    );
}
