//! Snowflake's hot path allocates nothing: a counting allocator watches one thread
//! while it takes a million ids one by one and in batches through `fill` (heartbeats
//! run on the background runtime, not on the caller's thread).

use crate::counting_alloc;

use counting_alloc::allocations_during;

#[test]
fn snowflake_next_id_and_fill_allocate_nothing() {
    // The counter works: one Vec is one allocation.
    assert_eq!(
        allocations_during(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8)))),
        1
    );
    let dir = tempfile::tempdir().unwrap();
    let gen = leafid::SnowflakeGenerator::builder()
        .registry(leafid::RegistryConfig::Fixed(3))
        .cache_dir(dir.path())
        .build_blocking()
        .unwrap();
    gen.next_id().unwrap();
    let mut buf = [0i64; 64];
    let n = allocations_during(|| {
        for _ in 0..1_000_000 {
            std::hint::black_box(gen.next_id().unwrap());
        }
        for _ in 0..1_000 {
            gen.fill(&mut buf).unwrap();
        }
    });
    assert_eq!(n, 0, "{n} allocations on the hot path");
}
