//! The operator subcommands: `init`, `tags`, `create-tag`, `next`, `decode`, `stats`.
//!
//! They work on the store itself (the `leaf_alloc` table), not through a
//! `SegmentGenerator`: a generator loads a whole segment (`step` ids) per tag it touches,
//! which a command that runs for a moment would throw away. So `create-tag` reserves no
//! id (the first id anyone gets is `--start`), and `next -n N` raises `max_id` by exactly
//! N, Leaf's "custom step" update, and prints those N ids. Only `init` creates a
//! database: the others refuse a SQLite path that does not exist (a typo would otherwise
//! leave an empty database behind and "succeed"). Messages name CLI commands, not the
//! library calls the core's messages suggest.

use std::io::Write;
use std::sync::Arc;

use leafid::segment::store::{self, SegmentStore};
use leafid::Error;
use serde_json::json;

/// The store at `url`, for a command that must not create a database: a SQLite file
/// that does not exist is an error naming `leafid init`.
fn open_existing(url: &str) -> Result<Arc<dyn SegmentStore>, String> {
    if let Some(path) = sqlite_path(url) {
        if !std::path::Path::new(path).exists() {
            return Err(format!(
                "no SQLite database at {path:?}; check the path, or create it with `leafid init --url {}`",
                leafid::redact::url(url)
            ));
        }
    }
    open(url)
}

fn open(url: &str) -> Result<Arc<dyn SegmentStore>, String> {
    store::open(url).map_err(|e| describe(url, e))
}

/// The file of a `sqlite:` URL, as the core's SQLite store reads it.
fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    rest.split('?').next().filter(|p| !p.is_empty())
}

/// Runs a store call on the core's runtime (the drivers' pools live there).
async fn on_runtime<T: Send + 'static>(
    f: impl std::future::Future<Output = leafid::Result<T>> + Send + 'static,
) -> leafid::Result<T> {
    leafid::runtime::run(f).await
}

/// The store's error as a CLI message: the URL (without its password) first, and the
/// CLI command that fixes it instead of the library call the core suggests.
fn describe(url: &str, e: Error) -> String {
    format!("{}: {}", leafid::redact::url(url), advice(&e))
}

/// The store's error as the CLI says it: the CLI command that fixes it instead of the
/// library call the core suggests. `leafid serve`'s messages come from here too.
pub fn advice(e: &Error) -> String {
    match e {
        Error::TableMissing { table } => leafid::error::table_missing_message(
            table,
            "`leafid init` (or `leafid serve --create-table`)",
        ),
        Error::TagNotFound { tag } => {
            format!("tag {tag:?} not found; create it with `leafid create-tag {tag}`")
        }
        Error::TagExists { tag } => {
            format!("tag {tag:?} already exists; add --exist-ok to accept an existing tag")
        }
        _ => e.to_string(),
    }
}

/// `leafid init`: creates `leaf_alloc` when missing; says whether it did.
pub async fn init(url: &str) -> Result<(), String> {
    let existed = sqlite_path(url).map(|p| std::path::Path::new(p).exists());
    let st = open(url)?;
    let probe = st.clone();
    let before = on_runtime(async move { probe.tags().await }).await;
    match before {
        Ok(tags) => {
            println!(
                "table leaf_alloc already exists ({} tags); nothing to do",
                tags.len()
            );
            return Ok(());
        }
        Err(Error::TableMissing { .. }) => {}
        Err(e) => return Err(describe(url, e)),
    }
    let maker = st.clone();
    on_runtime(async move { maker.create_table().await })
        .await
        .map_err(|e| describe(url, e))?;
    if existed == Some(false) {
        println!(
            "created the SQLite database {:?}",
            sqlite_path(url).unwrap_or_default()
        );
    }
    println!("created table leaf_alloc in {}", leafid::redact::url(url));
    // The snowflake registries make their own tables on first use (the `mysql`
    // registry: leaf_workerid_alloc and leafid_worker_lease), so a fresh database
    // needs nothing more from `init`.
    Ok(())
}

/// `leafid tags`: one tag per line, sorted (or a JSON array).
pub async fn tags(url: &str, as_json: bool) -> Result<(), String> {
    let st = open_existing(url)?;
    let mut tags = on_runtime(async move { st.tags().await })
        .await
        .map_err(|e| describe(url, e))?;
    tags.sort();
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| e.to_string();
    if as_json {
        writeln!(out, "{}", json!(tags)).map_err(w)?;
    } else {
        for tag in tags {
            writeln!(out, "{tag}").map_err(w)?;
        }
    }
    Ok(())
}

/// `leafid create-tag`: inserts the row; reserves no id, so `start` is truly the
/// first id issued.
pub async fn create_tag(
    url: &str,
    tag: &str,
    start: i64,
    step: i64,
    description: &str,
    exist_ok: bool,
) -> Result<(), String> {
    store::validate_tag(tag).map_err(|e| e.to_string())?;
    store::validate_step(step).map_err(|e| e.to_string())?;
    store::validate_start(tag, start, step).map_err(|e| e.to_string())?;
    let st = open_existing(url)?;
    let (t, d) = (tag.to_string(), description.to_string());
    let created = on_runtime(async move { st.create_tag(&t, start, step, &d).await }).await;
    match created {
        Ok(()) => {
            println!("created tag {tag} (first id {start}, step {step})");
            Ok(())
        }
        Err(Error::TagExists { .. }) if exist_ok => {
            println!("tag {tag} already exists; left as it is");
            Ok(())
        }
        Err(e) => Err(describe(url, e)),
    }
}

/// `leafid next TAG -n N`: reserves exactly N ids (`max_id += N`) and prints them.
pub async fn next(url: &str, tag: &str, n: u64) -> Result<(), String> {
    if n == 0 || n > i32::MAX as u64 {
        return Err(format!("-n {n}: ask for 1 to {} ids", i32::MAX));
    }
    let st = open_existing(url)?;
    let t = tag.to_string();
    let got = on_runtime(async move { st.allocate(&t, Some(n as i64)).await })
        .await
        .map_err(|e| describe(url, e))?;
    let first = got.max_id - n as i64;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let w = |e: std::io::Error| e.to_string();
    for id in first..got.max_id {
        writeln!(out, "{id}").map_err(w)?;
    }
    out.flush().map_err(w)
}

/// `leafid decode ID`: Leaf's `/decodeSnowflakeId` map, as JSON. A negative or
/// non-numeric id is an error (exit 1): Leaf's layout never issues one.
pub fn decode(id: &str) -> Result<(), String> {
    let v = crate::pages::decode(id);
    let negative = id.trim_start().starts_with('-');
    if v.get("errorMsg").is_some() || negative {
        return Err(format!(
            "{id:?} is not a snowflake id (a non-negative decimal 64-bit integer)"
        ));
    }
    println!("{v}");
    Ok(())
}

/// `leafid stats`: the table's rows, tab-separated with a header (or a JSON array).
pub async fn stats(url: &str, as_json: bool) -> Result<(), String> {
    let st = open_existing(url)?;
    let rows = on_runtime(async move { st.rows().await })
        .await
        .map_err(|e| describe(url, e))?;
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| e.to_string();
    if as_json {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "tag": r.tag,
                    "max_id": r.max_id,
                    "step": r.step,
                    "update_time": r.update_time,
                    "description": r.description,
                })
            })
            .collect();
        return writeln!(out, "{}", json!(rows)).map_err(w);
    }
    writeln!(out, "tag\tmax_id\tstep\tupdate_time\tdescription").map_err(w)?;
    for r in rows {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            r.tag,
            r.max_id,
            r.step,
            r.update_time,
            r.description.unwrap_or_default()
        )
        .map_err(w)?;
    }
    Ok(())
}
