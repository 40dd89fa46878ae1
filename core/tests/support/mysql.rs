//! Test support for the MariaDB tests: the URL from `scripts/services.sh`, unique tags,
//! and blocking wrappers of the admin calls.

use leafid::{SegmentGenerator, SegmentOptions};

/// `LEAFID_MYSQL_URL`, or a panic that says how to get it.
pub fn mysql_url() -> String {
    std::env::var("LEAFID_MYSQL_URL").expect(
        "LEAFID_MYSQL_URL is not set: run `eval \"$(scripts/services.sh start mysql)\"` first",
    )
}

/// A tag name no other test (or earlier run) uses.
pub fn fresh_tag(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

/// A generator on the test database, creating `leaf_alloc` if needed.
pub fn connect(opts: SegmentOptions) -> SegmentGenerator {
    let opts = opts.create_table(true);
    SegmentGenerator::connect_blocking(&mysql_url(), opts).unwrap()
}

/// `create_tag`, blocking.
pub fn create(gen: &SegmentGenerator, tag: &str, start: i64, step: i64) {
    let (g, t) = (gen.clone(), tag.to_string());
    leafid::runtime::block_on(async move { g.create_tag(&t, start, step, "test").await }).unwrap();
}
