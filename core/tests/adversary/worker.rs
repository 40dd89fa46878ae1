//! A worker process of the matrix: this test binary re-run with `--ignored --exact
//! adversary_worker` and its orders in the environment (set by [`crate::harness`]).
//!
//! It builds one snowflake generator from `LEAFID_ADV_URL` (cache in `LEAFID_ADV_CACHE`;
//! `LEAFID_ADV_HEARTBEAT_MS`, `LEAFID_ADV_LOOKAHEAD_MS` and `LEAFID_ADV_MAX_SKEW_MS`,
//! when set, replace the builder's defaults: the outage rows' short settings,
//! `rows::SHORT`), prints `ADV ready <worker id>` or `ADV refused <code> <message>`,
//! then issues at up to `LEAFID_ADV_RATE` ids per second, appending each id (8 bytes,
//! little-endian) to `LEAFID_ADV_OUT`, until its stdin closes (or 120 s). It flushes
//! every few ids, so a process frozen or killed leaves on disk all it issued. Errors
//! while issuing are counted and retried after 5 ms (a holder that lost its lease keeps
//! trying, as a caller would). It closes the generator and prints `ADV done <ids>
//! <errors> <first>`.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The registry URL the worker builds its generator from.
pub const URL: &str = "LEAFID_ADV_URL";
/// The generator's cache directory.
pub const CACHE: &str = "LEAFID_ADV_CACHE";
/// Where the worker appends its ids.
pub const OUT: &str = "LEAFID_ADV_OUT";
/// Ids per second, at most.
pub const RATE: &str = "LEAFID_ADV_RATE";
/// The generator's heartbeat, in ms (else the builder's default).
pub const HEARTBEAT_MS: &str = "LEAFID_ADV_HEARTBEAT_MS";
/// The generator's lookahead, in ms (else the builder's default).
pub const LOOKAHEAD_MS: &str = "LEAFID_ADV_LOOKAHEAD_MS";
/// The generator's `max_skew`, in ms (else the builder's default).
pub const MAX_SKEW_MS: &str = "LEAFID_ADV_MAX_SKEW_MS";
/// A `statefulset` worker: every renew stalls this many ms between its check of the
/// bound file and its write (a hung volume), from its start on.
pub const STALL_WRITES_MS: &str = "LEAFID_ADV_STALL_WRITES_MS";

/// The longest a worker issues if nobody stops it.
const MAX_RUN: Duration = Duration::from_secs(120);

pub fn main() {
    let (Ok(url), Ok(out)) = (std::env::var(URL), std::env::var(OUT)) else {
        eprintln!("adversary_worker is started by the matrix rows, not by hand");
        return;
    };
    let rate: f64 = std::env::var(RATE)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50_000.0);
    let built = leafid::SnowflakeGenerator::builder()
        .registry_url(&url)
        .map(|b| match std::env::var(CACHE) {
            Ok(dir) => b.cache_dir(dir),
            Err(_) => b,
        })
        .map(|b| match ms_var(HEARTBEAT_MS) {
            Some(d) => b.heartbeat(d),
            None => b,
        })
        .map(|b| match ms_var(LOOKAHEAD_MS) {
            Some(d) => b.lookahead(d),
            None => b,
        })
        .map(|b| match ms_var(MAX_SKEW_MS) {
            Some(d) => b.max_skew(d),
            None => b,
        })
        .and_then(|b| b.build_blocking());
    let gen = match built {
        Ok(gen) => gen,
        Err(e) => {
            let msg = e.to_string().replace('\n', " ");
            println!("ADV refused {} {msg}", e.code());
            std::process::exit(0);
        }
    };
    if let Some(ms) = std::env::var(STALL_WRITES_MS)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // statefulset:///DIR?…: DIR is the floor directory.
        let dir = url::Url::parse(&url)
            .expect("a statefulset URL")
            .path()
            .to_string();
        leafid::snowflake::registry::statefulset::fault::stall_writes(
            std::path::Path::new(&dir),
            Duration::from_millis(ms),
            u64::MAX,
        );
    }
    println!("ADV ready {}", gen.worker_id());
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            stop.store(true, Ordering::SeqCst);
        });
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out)
        .expect("open LEAFID_ADV_OUT");
    let mut file = std::io::BufWriter::with_capacity(64 * 1024, file);
    let (mut ids, mut errors, mut first_error) = (0u64, 0u64, String::from("-"));
    let start = Instant::now();
    while !stop.load(Ordering::SeqCst) && start.elapsed() < MAX_RUN {
        if ids as f64 > rate * start.elapsed().as_secs_f64() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        for _ in 0..64 {
            match gen.next_id() {
                Ok(id) => {
                    ids += 1;
                    file.write_all(&id.to_le_bytes()).unwrap();
                }
                Err(e) => {
                    errors += 1;
                    if errors == 1 {
                        first_error = e.code().to_string();
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    break;
                }
            }
        }
        file.flush().unwrap();
    }
    file.flush().unwrap();
    gen.close();
    println!("ADV done {ids} {errors} {first_error}");
    std::process::exit(0);
}

/// A duration in ms from the environment variable `var`, when set.
fn ms_var(var: &str) -> Option<Duration> {
    let ms = std::env::var(var).ok()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}
