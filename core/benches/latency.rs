//! Latency profile of segment mode's `next_id()` with a slow and then an absent
//! database: a loopback proxy delays every packet to MariaDB by 50 ms (`DelayProxy`).
//!
//! Requests arrive at a fixed rate (open loop): a request's latency runs from when it
//! was due, so a stall delays every request that arrives during it, as it would in a
//! service. The double buffer loads the next segment in the background and should
//! keep p99.9 flat; a single buffer stalls at every segment boundary.
//!
//! Run: `cargo bench -p leafid --bench latency` (needs `LEAFID_MYSQL_URL`, from
//! `scripts/services.sh`). Under `cargo test` it runs a short smoke version.

#[path = "../tests/support/delay_proxy.rs"]
mod delay_proxy;

use std::time::{Duration, Instant};

use delay_proxy::DelayProxy;
use leafid::{SegmentGenerator, SegmentOptions};

struct Scenario {
    name: &'static str,
    double_buffer: bool,
    /// Seconds into the run at which the database disappears, and for how long.
    outage: Option<(f64, f64)>,
    /// How many seconds of traffic one segment holds.
    segment_secs: u64,
}

struct Profile {
    latencies_ns: Vec<u64>,
    errors: usize,
    refills: u64,
}

fn run(url: &str, proxy: &DelayProxy, s: &Scenario, rate: u64, secs: f64, step: i64) -> Profile {
    let opts = SegmentOptions::default()
        .double_buffer(s.double_buffer)
        .max_step(step)
        .wait_timeout(Duration::from_secs(5))
        .create_table(true);
    proxy.set_delay(Duration::ZERO);
    proxy.set_down(false);
    let gen = SegmentGenerator::connect_blocking(url, opts).unwrap();
    let tag = format!(
        "latency-{}-{}",
        s.name.replace([' ', ','], "-"),
        std::process::id()
    );
    let g = gen.clone();
    let t = tag.clone();
    match leafid::runtime::block_on(
        async move { g.create_tag(&t, 1, step, "latency profile").await },
    ) {
        Ok(()) | Err(leafid::Error::TagExists { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    let h = gen.tag(&tag).unwrap();
    h.next_id().unwrap();
    proxy.set_delay(Duration::from_millis(50));
    let total = (rate as f64 * secs) as u64;
    let mut latencies_ns = Vec::with_capacity(total as usize);
    let mut errors = 0;
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let start = Instant::now();
    let mut outage_state = 0;
    for i in 0..total {
        let due = start + interval * i as u32;
        if let Some((at, len)) = s.outage {
            let t = start.elapsed().as_secs_f64();
            if outage_state == 0 && t >= at {
                proxy.set_down(true);
                outage_state = 1;
            } else if outage_state == 1 && t >= at + len {
                proxy.set_down(false);
                outage_state = 2;
            }
        }
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        if h.next_id().is_err() {
            errors += 1;
        }
        latencies_ns.push(due.elapsed().as_nanos() as u64);
    }
    let refills = gen
        .stats()
        .iter()
        .find(|t| t.tag == tag)
        .map_or(0, |t| t.refills);
    gen.close();
    Profile {
        latencies_ns,
        errors,
        refills,
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn fmt(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let Ok(url) = std::env::var("LEAFID_MYSQL_URL") else {
        eprintln!("latency: LEAFID_MYSQL_URL not set; run scripts/services.sh start mysql");
        if full {
            std::process::exit(1);
        }
        return;
    };
    let parsed = url::Url::parse(&url).expect("LEAFID_MYSQL_URL");
    let upstream = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(3306)
    );
    let proxy = DelayProxy::start(upstream);
    let mut via = parsed.clone();
    via.set_port(Some(proxy.addr.port())).unwrap();
    // 20 000 ids/s for 12 s with segments of 20 000: a boundary every second.
    // 20 000 ids/s for 12 s; segments of 1 s of traffic cross a boundary every second.
    let (rate, secs) = if full { (20_000, 12.0) } else { (2_000, 1.0) };
    let outage = Some((secs / 3.0, 1.0));
    let scenario = |name, double_buffer, outage, segment_secs| Scenario {
        name,
        double_buffer,
        outage,
        segment_secs,
    };
    let scenarios = [
        scenario("double buffer", true, None, 1),
        scenario("single buffer", false, None, 1),
        scenario("double buffer, DB down 1 s", true, outage, 5),
        scenario("single buffer, DB down 1 s", false, outage, 5),
    ];
    println!(
        "next_id() latency, open loop at {rate} ids/s for {secs} s, MariaDB behind a 50 ms/packet proxy"
    );
    println!(
        "| scenario | segment | ids | errors | refills | p50 | p99 | p99.9 | p99.99 | max |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in &scenarios {
        let step = rate as i64 * s.segment_secs as i64;
        let mut p = run(via.as_str(), &proxy, s, rate, secs, step);
        p.latencies_ns.sort_unstable();
        let l = &p.latencies_ns;
        println!(
            "| {} | {} s | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            s.segment_secs,
            l.len(),
            p.errors,
            p.refills,
            fmt(percentile(l, 0.5)),
            fmt(percentile(l, 0.99)),
            fmt(percentile(l, 0.999)),
            fmt(percentile(l, 0.9999)),
            fmt(*l.last().unwrap()),
        );
    }
}
