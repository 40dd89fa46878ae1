//! The operator subcommands: `tags`, `create-tag`, `next`, `decode`, `stats`.

use std::io::Write;

use leafid::{SegmentGenerator, SegmentOptions};

async fn connect(url: &str, tags: Vec<String>) -> Result<SegmentGenerator, String> {
    let opts = SegmentOptions::default().tags(tags);
    SegmentGenerator::connect(url, opts)
        .await
        .map_err(|e| format!("{}: {e}", leafid::redact::url(url)))
}

/// `leafid tags`: one tag per line, sorted.
pub async fn tags(url: &str) -> Result<(), String> {
    let gen = connect(url, Vec::new()).await?;
    let mut out = std::io::stdout().lock();
    for tag in gen.tags() {
        writeln!(out, "{tag}").map_err(|e| e.to_string())?;
    }
    gen.close();
    Ok(())
}

/// `leafid create-tag`.
pub async fn create_tag(
    url: &str,
    tag: &str,
    start: i64,
    step: i64,
    description: &str,
) -> Result<(), String> {
    let gen = connect(url, Vec::new()).await?;
    let created = gen.create_tag(tag, start, step, description).await;
    gen.close();
    created.map_err(|e| e.to_string())?;
    println!("created {tag} (first id {start}, step {step})");
    Ok(())
}

/// `leafid next TAG -n N`: N ids, one per line.
pub async fn next(url: &str, tag: &str, n: u64) -> Result<(), String> {
    let gen = connect(url, vec![tag.to_string()]).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut left = n;
    while left > 0 {
        let chunk = left.min(leafid::limits::MAX_BATCH as u64) as usize;
        let ids = gen
            .next_ids_async(tag, chunk)
            .await
            .map_err(|e| e.to_string())?;
        for id in ids {
            writeln!(out, "{id}").map_err(|e| e.to_string())?;
        }
        left -= chunk as u64;
    }
    out.flush().map_err(|e| e.to_string())?;
    gen.close();
    Ok(())
}

/// `leafid decode ID`: Leaf's `/decodeSnowflakeId` map, as JSON.
pub fn decode(id: &str) -> Result<(), String> {
    let v = crate::pages::decode(id);
    if v.get("errorMsg").is_some() {
        return Err(format!(
            "{id:?} is not a snowflake id (a decimal 64-bit integer)"
        ));
    }
    println!("{v}");
    Ok(())
}

/// `leafid stats`: the table's rows, tab-separated with a header.
pub async fn stats(url: &str) -> Result<(), String> {
    let gen = connect(url, Vec::new()).await?;
    let rows = gen.rows().await.map_err(|e| e.to_string())?;
    gen.close();
    let mut out = std::io::stdout().lock();
    let mut line = |s: String| writeln!(out, "{s}").map_err(|e| e.to_string());
    line("tag\tmax_id\tstep\tupdate_time\tdescription".into())?;
    for r in rows {
        line(format!(
            "{}\t{}\t{}\t{}\t{}",
            r.tag,
            r.max_id,
            r.step,
            r.update_time,
            r.description.unwrap_or_default()
        ))?;
    }
    Ok(())
}
