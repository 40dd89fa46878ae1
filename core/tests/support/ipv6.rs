//! A loopback proxy on `[::1]` in front of one of the shared services (which listen on
//! 127.0.0.1 only), for the tests of IPv6 literal hosts in URLs (issue 28, item 6).

#![allow(dead_code)] // each test binary that includes this file uses part of it

use super::delay_proxy::DelayProxy;

/// A proxy on `[::1]` forwarding to `upstream` (`127.0.0.1:port`), or `None`, with the
/// reason printed, on a host without IPv6 loopback (the test then has nothing to run).
pub fn proxy_on_ipv6_loopback(upstream: &str) -> Option<DelayProxy> {
    match DelayProxy::start_on("[::1]:0", upstream.to_string()) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("SKIPPED: no IPv6 loopback on this host (binding [::1]: {e})");
            None
        }
    }
}

/// `url` with its host and port replaced by the proxy's `[::1]:port`.
pub fn via_ipv6(url: &str, proxy: &DelayProxy) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_host(Some("[::1]")).unwrap();
    u.set_port(Some(proxy.addr.port())).unwrap();
    u.to_string()
}

/// `host:port` of a URL, for the proxy's upstream.
pub fn upstream_of(url: &str) -> String {
    let u = url::Url::parse(url).unwrap();
    format!("{}:{}", u.host_str().unwrap(), u.port().unwrap())
}
