//! What this binary's tests of the never-waiting calls and of tag lookups share: a
//! blocking `create_tag` that keeps the error, generators on the test MariaDB through a
//! loopback proxy, and polling with a deadline.

use std::time::Duration;

use leafid::runtime::block_on;
use leafid::{SegmentGenerator, SegmentOptions};

use crate::support::delay_proxy;
use crate::support::mysql::mysql_url;

/// `create_tag`, blocking, keeping the error.
pub fn try_create(gen: &SegmentGenerator, tag: &str, start: i64, step: i64) -> leafid::Result<()> {
    let (g, t) = (gen.clone(), tag.to_string());
    block_on(async move { g.create_tag(&t, start, step, "test").await })
}

/// A generator on the test database through `proxy`.
pub fn via_proxy(proxy: &delay_proxy::DelayProxy, opts: SegmentOptions) -> SegmentGenerator {
    let mut url = url::Url::parse(&mysql_url()).unwrap();
    url.set_port(Some(proxy.addr.port())).unwrap();
    SegmentGenerator::connect_blocking(url.as_str(), opts).unwrap()
}

/// A loopback proxy in front of the test MariaDB.
pub fn proxy() -> delay_proxy::DelayProxy {
    let u = url::Url::parse(&mysql_url()).unwrap();
    delay_proxy::DelayProxy::start(format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()))
}

/// Polls `f` until it returns `Some`, for at most `secs` seconds.
pub fn eventually<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..secs * 100 {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("condition not met within {secs} s");
}
