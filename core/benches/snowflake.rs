//! Snowflake mode's hot path.
//!
//! 1. Saturated throughput of one worker as a fraction of what the layout allows
//!    (4096 ids per ms with 12 sequence bits): ids counted per whole millisecond,
//!    decoded from the ids themselves, for single calls and for batches.
//! 2. Cost per call, with a wide-sequence layout (41 + 1 + 21 bits, 2 M ids per ms) so
//!    the per-ms limit does not hide the cost of the call itself; a bare CAS loop on an
//!    `AtomicU64` as the floor.
//!
//! 3. A thread sweep: 1, 2, 4 and 8 threads on one generator (41 + 3 + 19 bits), against a
//!    shared CAS loop. Measured for issue 24, not tuned: one CAS per id on the shared
//!    issuing word.
//!
//! Run: `cargo bench -p leafid --bench snowflake`. Figures: benches/README.md.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use leafid::{Layout, RegistryConfig, SnowflakeGenerator};

fn generator(layout: Layout, dir: &std::path::Path) -> SnowflakeGenerator {
    // A worker id has one holder per host: each generator of this run its own id, and
    // the next one when another process on the host holds it (other jobs run here too).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let ids = layout.max_worker_id() + 1;
    let mut last = None;
    for _ in 0..ids {
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % ids;
        match SnowflakeGenerator::builder()
            .registry(RegistryConfig::Fixed(id))
            .layout(layout)
            .cache_dir(dir)
            .build_blocking()
        {
            Ok(gen) => return gen,
            Err(e @ leafid::Error::WorkerIdInUse { .. }) => last = Some(e),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("every worker id of the layout is in use: {last:?}")
}

/// Issues ids for `run` and reports the share of each whole millisecond's capacity
/// that was used.
fn saturated(label: &str, batch: usize, run: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let gen = generator(Layout::default(), dir.path());
    let per_ms = gen.layout().ids_per_ms();
    let mut counts: Vec<u64> = Vec::new();
    let mut first_ms = None;
    let mut buf = vec![0i64; batch];
    let start = Instant::now();
    while start.elapsed() < run {
        if batch == 1 {
            buf[0] = gen.next_id().unwrap();
        } else {
            gen.fill(&mut buf).unwrap();
        }
        for &id in &buf {
            let ms = gen.decode(id).timestamp_ms;
            let base = *first_ms.get_or_insert(ms);
            let i = (ms - base) as usize;
            if counts.len() <= i {
                counts.resize(i + 1, 0);
            }
            counts[i] += 1;
        }
    }
    // Drop the first and last millisecond: the run did not cover them whole.
    let whole = &counts[1..counts.len() - 1];
    let ids: u64 = whole.iter().sum();
    let ms = whole.len() as u64;
    let fraction = ids as f64 / (ms * per_ms) as f64;
    // Leaf starts each ms at a random sequence in [0, 100): 49.5 lost on average.
    let reachable = (per_ms as f64 - 49.5) / per_ms as f64;
    // The median millisecond is immune to the ms lost when the scheduler takes the
    // core away (the machine is shared); the mean includes them.
    let mut sorted = whole.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    println!(
        "snowflake/saturated/{label}: {ids} ids in {ms} whole ms = {:.0} ids/ms = {:.2}% of the layout's {per_ms}/ms \
         ({:.2}% of the {:.2}% the random sequence start leaves reachable); median ms {median} ids = {:.2}%",
        ids as f64 / ms as f64,
        fraction * 100.0,
        fraction / reachable * 100.0,
        reachable * 100.0,
        median as f64 / per_ms as f64 * 100.0
    );
}

fn per_call(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let wide = Layout::new(41, 1, 21, leafid::snowflake::LEAF_EPOCH_MS).unwrap();
    let gen = generator(wide, dir.path());
    let floor = AtomicU64::new(0);
    let mut group = c.benchmark_group("snowflake/next_id");
    group.throughput(Throughput::Elements(1));
    group.bench_function("floor: AtomicU64 CAS loop", |b| {
        b.iter(|| {
            let mut cur = floor.load(Ordering::Acquire);
            loop {
                match floor.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => break black_box(cur + 1),
                    Err(a) => cur = a,
                }
            }
        })
    });
    group.bench_function("floor: SystemClock::now_millis (vDSO clock read)", |b| {
        b.iter(|| black_box(leafid::Clock::now_millis(&leafid::SystemClock)))
    });
    group.bench_function("leafid next_id (wide layout)", |b| {
        b.iter(|| black_box(gen.next_id().unwrap()))
    });
    group.finish();

    let mut group = c.benchmark_group("snowflake/batch");
    for n in [64usize, 1_000] {
        group.throughput(Throughput::Elements(n as u64));
        let mut buf = vec![0i64; n];
        group.bench_function(format!("fill {n} (wide layout)"), |b| {
            b.iter(|| {
                gen.fill(&mut buf).unwrap();
                black_box(buf[n - 1])
            })
        });
        group.bench_function(format!("next_ids {n} (wide layout)"), |b| {
            b.iter(|| black_box(gen.next_ids(n).unwrap()))
        });
    }
    group.finish();

    // Leaf's layout at full speed: the per-ms limit dominates (244 ns per id at best).
    let dir2 = tempfile::tempdir().unwrap();
    let leaf = generator(Layout::default(), dir2.path());
    let mut group = c.benchmark_group("snowflake/leaf-layout");
    group.throughput(Throughput::Elements(1));
    group.bench_function("next_id (saturated, 4096/ms)", |b| {
        b.iter(|| black_box(leaf.next_id().unwrap()))
    });
    group.finish();
}

/// Runs `op` `iters` times on each of `threads` threads at once; returns wall time.
fn threaded(threads: usize, iters: u64, op: impl Fn() + Send + Sync + 'static) -> Duration {
    let op = Arc::new(op);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (op, barrier) = (op.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    op();
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed()
}

/// One CAS on a shared word, retried until it lands: snowflake's issuing shape.
fn cas_increment(word: &AtomicU64) -> u64 {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        match word.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return cur + 1,
            Err(a) => cur = a,
        }
    }
}

fn thread_sweep(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // 524 288 ids per ms: far above what 8 threads reach, with 8 worker ids to choose
    // from (another job on the host may hold one).
    let wide = Layout::new(41, 3, 19, leafid::snowflake::LEAF_EPOCH_MS).unwrap();
    let gen = generator(wide, dir.path());
    let floor = Arc::new(AtomicU64::new(0));
    for threads in [1usize, 2, 4, 8] {
        let mut group = c.benchmark_group(format!("snowflake/sweep/{threads}-threads"));
        group.throughput(Throughput::Elements(threads as u64));
        let f = floor.clone();
        group.bench_function("floor: shared AtomicU64 CAS loop", |b| {
            let f = f.clone();
            b.iter_custom(move |iters| {
                let f = f.clone();
                threaded(threads, iters, move || {
                    black_box(cas_increment(&f));
                })
            })
        });
        let g = gen.clone();
        group.bench_function("leafid next_id (wide layout)", |b| {
            let g = g.clone();
            b.iter_custom(move |iters| {
                let g = g.clone();
                threaded(threads, iters, move || {
                    black_box(g.next_id().unwrap());
                })
            })
        });
        group.finish();
    }
}

criterion_group!(benches, per_call, thread_sweep);

fn main() {
    let run = Duration::from_secs(3);
    saturated("next_id", 1, run);
    saturated("fill-64", 64, run);
    saturated("fill-4096", 4096, run);
    benches();
    Criterion::default().configure_from_args().final_summary();
}
