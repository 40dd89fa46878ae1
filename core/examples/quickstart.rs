//! The main job on the embedded default: a SQLite file, one tag, a few ids.
//!
//! `cargo run -p leafid --example quickstart [path/to/ids.db]`

use leafid::{SegmentGenerator, SegmentOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> leafid::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        std::env::temp_dir()
            .join("leafid-quickstart.db")
            .display()
            .to_string()
    });
    // `segments`, not `gen`: `gen` is a reserved keyword in edition-2024 code.
    let segments =
        SegmentGenerator::connect(&format!("sqlite://{path}"), SegmentOptions::default()).await?;
    // A tag already in the file (the second run) is left as it is.
    segments.ensure_tag("order", 1, 1000, "order ids").await?;
    let order = segments.tag("order")?;
    let ids: Vec<i64> = (0..5)
        .map(|_| order.next_id())
        .collect::<leafid::Result<_>>()?;
    println!("store: sqlite://{path}");
    println!("order ids: {ids:?}");
    println!("a batch:   {:?}", segments.next_ids("order", 3)?);
    for s in segments.stats() {
        println!(
            "stats: tag={} step={} refills={} next_ready={}",
            s.tag, s.step, s.refills, s.next_ready
        );
    }
    segments.close();
    Ok(())
}
