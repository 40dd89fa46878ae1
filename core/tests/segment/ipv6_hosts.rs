//! The MySQL and PostgreSQL stores on a URL whose host is an IPv6 literal
//! (`mysql://u:p@[::1]:3306/db`, issue 28 item 6), through a `[::1]` proxy in front of
//! the shared servers: the store connects and issues, and messages show the host in
//! brackets without the password.

use leafid::{SegmentGenerator, SegmentOptions};

use crate::support::ipv6::{proxy_on_ipv6_loopback, upstream_of, via_ipv6};

fn issues_through_ipv6_loopback(base: &str) {
    let Some(proxy) = proxy_on_ipv6_loopback(&upstream_of(base)) else {
        return;
    };
    let url = via_ipv6(base, &proxy);
    assert!(url.contains("@[::1]:"), "{url}");
    let gen =
        SegmentGenerator::connect_blocking(&url, SegmentOptions::default().create_table(true))
            .unwrap_or_else(|e| panic!("{e}"));
    let tag = format!("ipv6-{}-{}", std::process::id(), fastrand::u64(..));
    let g = gen.clone();
    let t = tag.clone();
    leafid::runtime::block_on(async move { g.create_tag(&t, 1, 10, "test").await }).unwrap();
    assert!(gen.next_id(&tag).unwrap() > 0);
    gen.close();
}

#[test]
fn the_mysql_store_connects_to_an_ipv6_literal_host() {
    issues_through_ipv6_loopback(&crate::support::mysql::mysql_url());
}

#[test]
fn the_postgres_store_connects_to_an_ipv6_literal_host() {
    issues_through_ipv6_loopback(&crate::support::postgres::pg_url());
}

/// A store that cannot connect to `[::1]` is refused (not "no such host": the brackets
/// never reach the resolver) and names the server as `[::1]:port`, password hidden.
#[test]
fn a_refused_ipv6_host_is_named_in_brackets_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for url in [
        format!("mysql://app:s3cr3t@[::1]:{port}/leafid"),
        format!("postgres://app:s3cr3t@[::1]:{port}/leafid"),
    ] {
        let e =
            SegmentGenerator::connect_blocking(&url, SegmentOptions::default().create_table(true))
                .unwrap_err();
        let text = format!("{e} {e:?}");
        assert_eq!(
            e.cause_kind(),
            Some(leafid::error::CauseKind::Refused),
            "{text}"
        );
        assert!(text.contains(&format!("[::1]:{port}")), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
    }
}
