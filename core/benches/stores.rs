//! MySQL against PostgreSQL (direct and through PgBouncer) as a segment store, in one
//! run: what one refill costs (one `SegmentStore::allocate` round trip, p50/p99) and
//! what a `SegmentGenerator` issues per second when refills matter (a small step) and
//! when they do not (a large step).
//!
//! Every backend gets the same tag names and steps, and the backends take turns round
//! by round, so load from other processes on the machine falls on all of them alike:
//! the ratios PostgreSQL/MySQL are the figures to read, more than the absolute ones.
//!
//! Run: `cargo bench -p leafid --bench stores` (needs `LEAFID_MYSQL_URL`,
//! `LEAFID_PG_URL` and `LEAFID_PGBOUNCER_URL`, from `scripts/services.sh`; a backend
//! whose variable is unset is left out). Under `cargo test` it runs a short smoke
//! version. Figures: benches/README.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::segment::store::{self, SegmentStore};
use leafid::{SegmentGenerator, SegmentOptions};

/// The two steps of the ids/s rows: segments that last microseconds, so the rate is
/// the refill's, and segments long enough that the double buffer hides every refill.
const SMALL_STEP: i64 = 1_000;
const LARGE_STEP: i64 = 1_000_000;

/// How much each part of the run does; smaller under `cargo test`.
struct Plan {
    rounds: usize,
    allocs_per_round: usize,
    warmup_allocs: usize,
    issue_per_round: Duration,
}

struct Backend {
    name: &'static str,
    url: String,
    /// Round-trip time of each measured `allocate`.
    refill_ns: Vec<u64>,
    /// Per step: ids issued, seconds spent, refills, errors.
    issued: Vec<(i64, u64, f64, u64, u64)>,
}

fn tag(kind: &str, step: i64) -> String {
    format!("bench-stores-{kind}-{step}-{}", std::process::id())
}

/// Times `n` allocations of `step` ids from `tag`, one after the other, on the
/// runtime (no thread hop inside the measured span).
fn time_allocations(store: &Arc<dyn SegmentStore>, tag: &str, step: i64, n: usize) -> Vec<u64> {
    let (store, tag) = (store.clone(), tag.to_string());
    leafid::runtime::block_on(async move {
        let mut took = Vec::with_capacity(n);
        for _ in 0..n {
            let start = Instant::now();
            store.allocate(&tag, Some(step)).await.unwrap();
            took.push(start.elapsed().as_nanos() as u64);
        }
        took
    })
}

/// A generator whose step stays at `step` (`max_step` stops Leaf's doubling) and
/// its handle on the shared tag of that step.
fn generator(url: &str, step: i64) -> (SegmentGenerator, leafid::TagHandle) {
    let opts = SegmentOptions::default()
        .max_step(step)
        .wait_timeout(Duration::from_secs(5))
        .create_table(true);
    let gen = SegmentGenerator::connect_blocking(url, opts).unwrap();
    let (g, t) = (gen.clone(), tag("gen", step));
    // The PostgreSQL rows share one database: the second backend finds the tag there.
    match leafid::runtime::block_on(async move { g.create_tag(&t, 1, step, "bench").await }) {
        Ok(()) | Err(leafid::Error::TagExists { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    let h = gen.tag(&tag("gen", step)).unwrap();
    (gen, h)
}

/// Issues from `h` for `span`; returns ids issued, seconds and errors.
fn issue(h: &leafid::TagHandle, span: Duration) -> (u64, f64, u64) {
    let (mut ids, mut errors) = (0u64, 0u64);
    let start = Instant::now();
    loop {
        for _ in 0..1024 {
            match h.next_id() {
                Ok(id) => {
                    std::hint::black_box(id);
                    ids += 1;
                }
                Err(_) => errors += 1,
            }
        }
        if start.elapsed() >= span {
            return (ids, start.elapsed().as_secs_f64(), errors);
        }
    }
}

fn refills(gen: &SegmentGenerator, step: i64) -> u64 {
    let t = tag("gen", step);
    gen.stats()
        .iter()
        .find(|s| s.tag == t)
        .map_or(0, |s| s.refills)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn us(ns: u64) -> String {
    format!("{:.0} µs", ns as f64 / 1e3)
}

fn rate(ids: u64, secs: f64) -> f64 {
    ids as f64 / secs.max(1e-9)
}

fn mega(r: f64) -> String {
    format!("{:.2} M/s", r / 1e6)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let plan = if full {
        Plan {
            rounds: 5,
            allocs_per_round: 200,
            warmup_allocs: 50,
            issue_per_round: Duration::from_secs(1),
        }
    } else {
        Plan {
            rounds: 1,
            allocs_per_round: 5,
            warmup_allocs: 2,
            issue_per_round: Duration::from_millis(20),
        }
    };
    let mut backends: Vec<Backend> = [
        ("MySQL (MariaDB)", "LEAFID_MYSQL_URL"),
        ("PostgreSQL", "LEAFID_PG_URL"),
        ("PostgreSQL via PgBouncer", "LEAFID_PGBOUNCER_URL"),
    ]
    .into_iter()
    .filter_map(|(name, var)| match std::env::var(var) {
        Ok(url) => Some(Backend {
            name,
            url,
            refill_ns: Vec::new(),
            issued: Vec::new(),
        }),
        Err(_) => {
            eprintln!("stores: {var} not set; {name} left out (scripts/services.sh start)");
            None
        }
    })
    .collect();
    if backends.is_empty() {
        if full {
            std::process::exit(1);
        }
        return;
    }

    // Refill latency: the same tag name and step on every backend, in turns.
    let refill_tag = tag("alloc", SMALL_STEP);
    let stores: Vec<Arc<dyn SegmentStore>> = backends
        .iter()
        .map(|b| {
            let s = store::open(&b.url).unwrap();
            let (s2, t) = (s.clone(), refill_tag.clone());
            leafid::runtime::block_on(async move {
                s2.create_table().await?;
                match s2.create_tag(&t, 1, SMALL_STEP, "bench").await {
                    Err(leafid::Error::TagExists { .. }) => Ok(()),
                    other => other,
                }
            })
            .unwrap();
            time_allocations(&s, &refill_tag, SMALL_STEP, plan.warmup_allocs);
            s
        })
        .collect();
    for _ in 0..plan.rounds {
        for (b, s) in backends.iter_mut().zip(&stores) {
            let took = time_allocations(s, &refill_tag, SMALL_STEP, plan.allocs_per_round);
            b.refill_ns.extend(took);
        }
    }

    // ids/s through a generator, per step, backends in turns.
    for step in [SMALL_STEP, LARGE_STEP] {
        let gens: Vec<_> = backends.iter().map(|b| generator(&b.url, step)).collect();
        let mut sums = vec![(0u64, 0f64, 0u64); backends.len()];
        for _ in 0..plan.rounds {
            for ((_, h), sum) in gens.iter().zip(sums.iter_mut()) {
                let (ids, secs, errors) = issue(h, plan.issue_per_round);
                sum.0 += ids;
                sum.1 += secs;
                sum.2 += errors;
            }
        }
        for ((b, (gen, _)), (ids, secs, errors)) in backends.iter_mut().zip(&gens).zip(sums) {
            b.issued.push((step, ids, secs, refills(gen, step), errors));
            gen.close();
        }
    }

    println!(
        "Segment stores in one run: refill = one allocate() of {SMALL_STEP} ids ({} per backend); \
         ids/s = handle.next_id() on one thread, {} s per backend per step",
        plan.rounds * plan.allocs_per_round,
        plan.rounds as f64 * plan.issue_per_round.as_secs_f64(),
    );
    println!(
        "| backend | refill p50 | refill p99 | ids/s, step {SMALL_STEP} (refills, errors) | ids/s, step {LARGE_STEP} (refills, errors) |\n|---|---|---|---|---|"
    );
    let mut summary = Vec::new();
    for b in &mut backends {
        b.refill_ns.sort_unstable();
        let (p50, p99) = (
            percentile(&b.refill_ns, 0.5),
            percentile(&b.refill_ns, 0.99),
        );
        let rates: Vec<f64> = b.issued.iter().map(|i| rate(i.1, i.2)).collect();
        let cells: Vec<String> = b
            .issued
            .iter()
            .zip(&rates)
            .map(|(i, r)| format!("{} ({}, {})", mega(*r), i.3, i.4))
            .collect();
        println!(
            "| {} | {} | {} | {} | {} |",
            b.name,
            us(p50),
            us(p99),
            cells[0],
            cells[1]
        );
        summary.push((b.name, p50, p99, rates));
    }
    if let Some((base, rest)) = summary.split_first() {
        for (name, p50, p99, rates) in rest {
            println!(
                "{name} / {}: refill p50 {:.2}×, p99 {:.2}×; ids/s step {SMALL_STEP} {:.2}×, step {LARGE_STEP} {:.2}×",
                base.0,
                *p50 as f64 / base.1 as f64,
                *p99 as f64 / base.2 as f64,
                rates[0] / base.3[0],
                rates[1] / base.3[1],
            );
        }
    }
}
