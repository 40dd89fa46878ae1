//! A worker for the cross-language runs (`tests/cross/`): issues ids from one tag or one
//! snowflake registry and writes them, one per line, to a file; errors go to stderr.
//!
//! ```text
//! cargo run -p leafid --example issue_ids -- segment URL TAG SECONDS OUT
//! cargo run -p leafid --example issue_ids -- snowflake REGISTRY_URL SECONDS OUT
//! ```
//! It issues for SECONDS seconds, at most `LEAFID_WORKER_RATE` ids per second (default
//! 50 000), writes each error as `unix_ms CODE` to `OUT.err`, then prints one JSON
//! summary line (`{"ids":N,"errors":N,"first_error":"…","worker_id":N|null,"out":OUT}`)
//! to stdout.
//!
//! With `LEAFID_START_BARRIER=DIR` it creates `DIR/PID.ready` once its generator is
//! built (or refused), and a built one waits for `DIR/go` before issuing: the runner
//! starts every worker of a shared-config run, and lets them issue once all of them
//! have claimed their worker ids, so each claim is made while the others hold theirs.

use std::io::Write;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: issue_ids segment URL TAG SECONDS OUT | snowflake REGISTRY SECONDS OUT";
    let out_arg = args.last().cloned().unwrap_or_default();
    let (mut next, seconds, out, worker_id): (Next, f64, String, Option<u32>) =
        match args.first().map(String::as_str) {
            Some("segment") if args.len() == 5 => {
                let gen = leafid::SegmentGenerator::connect_blocking(&args[1], Default::default())
                    .unwrap_or_else(|e| fail(&e, &out_arg));
                let h = gen.tag(&args[2]).unwrap_or_else(|e| fail(&e, &out_arg));
                (
                    Box::new(move || h.next_id()),
                    args[3].parse().expect(usage),
                    args[4].clone(),
                    None,
                )
            }
            Some("snowflake") if args.len() == 4 => snowflake(&args[1], &args[2], &args[3]),
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        };
    barrier(true);
    let file = std::fs::File::create(&out).expect("cannot create the output file");
    let mut file = std::io::BufWriter::new(file);
    let mut error_log = std::fs::File::create(format!("{out}.err")).expect("cannot create OUT.err");
    let rate: f64 = std::env::var("LEAFID_WORKER_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50_000.0);
    let (mut ids, mut errors, mut first_error) = (0u64, 0u64, String::new());
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        if ids as f64 > rate * start.elapsed().as_secs_f64() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        for _ in 0..64 {
            match next() {
                Ok(id) => {
                    ids += 1;
                    writeln!(file, "{id}").unwrap();
                }
                Err(e) => {
                    errors += 1;
                    writeln!(error_log, "{} {}", monotonic_ms(), e.code()).unwrap();
                    if first_error.is_empty() {
                        first_error = format!("{}: {e}", e.code());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    break;
                }
            }
        }
        // Flush often, so a worker killed with SIGKILL leaves what it issued on disk.
        file.flush().unwrap();
    }
    file.flush().unwrap();
    if let Some(gen) = SNOWFLAKE.get() {
        gen.close();
    }
    println!(
        "{}",
        serde_json::json!({"ids": ids, "errors": errors, "first_error": first_error,
                           "worker_id": worker_id, "out": out})
    );
}

/// `LEAFID_START_BARRIER`: reports this worker's claim as made, then (when it holds a
/// generator) waits for the runner's go.
fn barrier(wait: bool) {
    let Ok(dir) = std::env::var("LEAFID_START_BARRIER") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    std::fs::write(dir.join(format!("{}.ready", std::process::id())), "")
        .expect("cannot write to LEAFID_START_BARRIER");
    while wait && !dir.join("go").exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// CLOCK_MONOTONIC in ms: one clock for every process on the host that faketime (with
/// FAKETIME_DONT_FAKE_MONOTONIC) leaves alone, so the orchestrator can place errors in
/// time even for a worker whose wall clock is faked.
fn monotonic_ms() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u128 * 1000 + ts.tv_nsec as u128 / 1_000_000
}

type Next = Box<dyn FnMut() -> leafid::Result<i64>>;

/// The snowflake generator of a `snowflake` run, for `main` to close.
static SNOWFLAKE: std::sync::OnceLock<leafid::snowflake::SnowflakeGenerator> =
    std::sync::OnceLock::new();

fn snowflake(registry: &str, seconds: &str, out: &str) -> (Next, f64, String, Option<u32>) {
    let mut builder = leafid::snowflake::SnowflakeGenerator::builder()
        .registry_url(registry)
        .unwrap_or_else(|e| fail(&e, out));
    if let Ok(dir) = std::env::var("LEAFID_CACHE_DIR") {
        builder = builder.cache_dir(dir);
    }
    let gen = builder.build_blocking().unwrap_or_else(|e| fail(&e, out));
    let worker_id = gen.worker_id();
    eprintln!("worker id {worker_id}");
    // Closed at the end of `main` (a clean exit gives the worker id back at once, as the
    // Python and Node workers do); a SIGKILLed worker never gets there.
    let _ = SNOWFLAKE.set(gen.clone());
    (
        Box::new(move || gen.next_id()),
        seconds.parse().expect("SECONDS"),
        out.to_string(),
        Some(worker_id),
    )
}

fn fail(e: &leafid::Error, out: &str) -> ! {
    eprintln!("{}: {e}", e.code());
    barrier(false);
    println!(
        "{}",
        serde_json::json!({"ids": 0, "errors": 1, "first_error": format!("{}: {e}", e.code()),
                           "worker_id": null, "out": out})
    );
    std::process::exit(1);
}
