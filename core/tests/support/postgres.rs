//! Test support for the PostgreSQL tests: the URL (`LEAFID_PG_URL`), unique tags,
//! blocking wrappers of the admin calls, and SQL run beside leafid as an operator would.

#![allow(dead_code)] // each test binary that includes this file uses part of it

use leafid::runtime::block_on;
use leafid::{Error, SegmentGenerator, SegmentOptions};
use sqlx::postgres::PgPoolOptions;

/// `LEAFID_PG_URL`, or a panic that says how to get it.
pub fn pg_url() -> String {
    std::env::var("LEAFID_PG_URL").expect(
        "LEAFID_PG_URL is not set: start PostgreSQL (scripts/services.sh) and export \
         LEAFID_PG_URL=postgres://leafid:leafid@127.0.0.1:5433/leafid",
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
    SegmentGenerator::connect_blocking(&pg_url(), opts.create_table(true)).unwrap()
}

/// `create_tag`, blocking.
pub fn create(gen: &SegmentGenerator, tag: &str, start: i64, step: i64) {
    let (g, t) = (gen.clone(), tag.to_string());
    block_on(async move { g.create_tag(&t, start, step, "test").await }).unwrap();
}

/// `refresh`, blocking.
pub fn refresh(gen: &SegmentGenerator) {
    let g = gen.clone();
    block_on(async move { g.refresh().await }).unwrap();
}

/// Runs SQL on the test database directly, as an operator or another server would.
pub fn sql<T: Send + 'static>(
    f: impl for<'c> FnOnce(
            sqlx::PgPool,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>
        + Send
        + 'static,
) -> T {
    let url = pg_url();
    block_on(async move {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .unwrap();
        f(pool).await
    })
}

/// The test database's URL with one part changed.
pub fn url_with(change: impl FnOnce(&mut url::Url)) -> String {
    let mut url = url::Url::parse(&pg_url()).unwrap();
    change(&mut url);
    url.to_string()
}

/// The error of a generator's first connection to `url`.
pub fn connect_err(url: &str) -> Error {
    SegmentGenerator::connect_blocking(url, SegmentOptions::default())
        .expect_err("connect must fail")
}
