//! Runs N `next_id` calls on a warm segment handle and N on a snowflake generator, for
//! counting syscalls from outside: `strace -f -c` over N = 1 000 000 and N = 10 000 000
//! shows the same syscall total, so the hot path makes none.
//!
//! `cargo run --release -p leafid --example hot_loop -- N`

fn main() -> leafid::Result<()> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("leafid-hot-{}", std::process::id()));
    let url = format!("sqlite://{}.db", dir.display());
    let gen = leafid::SegmentGenerator::connect_blocking(&url, Default::default())?;
    let g = gen.clone();
    // One segment covers the whole run, so no refill happens inside the loop.
    leafid::runtime::block_on(async move { g.create_tag("hot", 1, 2_000_000_000, "").await })?;
    let h = gen.tag("hot")?;
    let sf = leafid::snowflake::SnowflakeGenerator::builder()
        .registry(leafid::snowflake::RegistryConfig::Fixed(1))
        .layout(leafid::snowflake::Layout::new(
            41,
            1,
            21,
            leafid::snowflake::LEAF_EPOCH_MS,
        )?)
        .cache_dir(&dir)
        .build_blocking()?;
    h.next_id()?;
    sf.next_id()?;
    let mut sum = 0i64;
    for _ in 0..n {
        sum = sum.wrapping_add(h.next_id()?);
        sum = sum.wrapping_add(sf.next_id()?);
    }
    println!("{n} + {n} ids, checksum {sum}");
    gen.close();
    sf.close();
    let _ = std::fs::remove_file(format!("{}.db", dir.display()));
    Ok(())
}
