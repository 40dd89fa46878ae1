//! Segment mode's hot path against a floor (a bare atomic counter) and against the
//! `uuid` crate's v4 and v7, the ids Rust services use today; and a thread sweep (1 to 8
//! threads on one tag) of the strictly ordered and the chunked form.
//!
//! Run: `cargo bench -p leafid --bench segment`. Figures: benches/README.md.

use std::hint::black_box;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use leafid::{SegmentGenerator, SegmentOptions};

/// A generator on a throwaway SQLite file whose tag has a step large enough that the
/// measurement is the hot path, with refills as rare as in production.
fn generator(opts: SegmentOptions) -> (tempfile::TempDir, SegmentGenerator) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/bench.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, opts).unwrap();
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("bench", 1, 100_000_000, "").await })
        .unwrap();
    (dir, gen)
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

fn single_id(c: &mut Criterion) {
    let (_dir, gen) = generator(SegmentOptions::default());
    let handle = gen.tag("bench").unwrap();
    let floor = AtomicI64::new(0);
    let mut group = c.benchmark_group("next_id/1-thread");
    group.throughput(Throughput::Elements(1));
    group.bench_function("floor: AtomicI64::fetch_add", |b| {
        b.iter(|| black_box(floor.fetch_add(1, Ordering::Relaxed)))
    });
    group.bench_function("leafid handle.next_id()", |b| {
        b.iter(|| black_box(handle.next_id().unwrap()))
    });
    group.bench_function("leafid gen.next_id(tag)", |b| {
        b.iter(|| black_box(gen.next_id("bench").unwrap()))
    });
    group.bench_function("uuid::Uuid::now_v7()", |b| {
        b.iter(|| black_box(uuid::Uuid::now_v7()))
    });
    group.bench_function("uuid::Uuid::new_v4()", |b| {
        b.iter(|| black_box(uuid::Uuid::new_v4()))
    });
    group.finish();
}

/// The chunked form's chunk in these runs (`SegmentOptions::thread_chunk`).
const CHUNK: u64 = 1024;

/// Issue 24's thread sweep: 1, 2, 4 and 8 threads issuing from one tag at once, in the
/// strictly ordered form and the chunked form, against a shared `fetch_add` (what one
/// shared cursor costs at best) and uuid v7 on every thread (no shared state at all).
/// Criterion's throughput is the aggregate over all threads; the time is per round of
/// one id on every thread. This machine has 2 cores: past 2 threads is oversubscribed.
fn thread_sweep(c: &mut Criterion) {
    let (_dir, ordered) = generator(SegmentOptions::default());
    let (_dir2, chunked) = generator(SegmentOptions::default().thread_chunk(CHUNK));
    let floor = Arc::new(AtomicI64::new(0));
    for threads in [1usize, 2, 4, 8] {
        let mut group = c.benchmark_group(format!("sweep/{threads}-threads"));
        group.throughput(Throughput::Elements(threads as u64));
        let f = floor.clone();
        group.bench_function("floor: shared AtomicI64::fetch_add", |b| {
            let f = f.clone();
            b.iter_custom(move |iters| {
                let f = f.clone();
                threaded(threads, iters, move || {
                    black_box(f.fetch_add(1, Ordering::Relaxed));
                })
            })
        });
        group.bench_function("uuid::Uuid::now_v7() per thread", |b| {
            b.iter_custom(move |iters| {
                threaded(threads, iters, || {
                    black_box(uuid::Uuid::now_v7());
                })
            })
        });
        for (form, gen) in [("ordered", &ordered), ("chunked", &chunked)] {
            let h = gen.tag("bench").unwrap();
            group.bench_function(format!("leafid handle.next_id() {form}"), |b| {
                let h = h.clone();
                b.iter_custom(move |iters| {
                    let h = h.clone();
                    threaded(threads, iters, move || {
                        black_box(h.next_id().unwrap());
                    })
                })
            });
            let g = gen.clone();
            group.bench_function(format!("leafid gen.next_id(tag) {form}"), |b| {
                let g = g.clone();
                b.iter_custom(move |iters| {
                    let g = g.clone();
                    threaded(threads, iters, move || {
                        black_box(g.next_id("bench").unwrap());
                    })
                })
            });
        }
        group.finish();
    }
}

fn batch(c: &mut Criterion) {
    let (_dir, gen) = generator(SegmentOptions::default());
    let handle = gen.tag("bench").unwrap();
    let mut group = c.benchmark_group("next_ids");
    const N: usize = 1_000_000;
    group.throughput(Throughput::Elements(N as u64));
    let mut buf = vec![0i64; N];
    group.bench_function("leafid handle.fill(1M)", |b| {
        b.iter(|| {
            handle.fill(&mut buf).unwrap();
            black_box(&buf);
        })
    });
    group.bench_function("leafid handle.next_ids(1M)", |b| {
        b.iter(|| black_box(handle.next_ids(N).unwrap()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = single_id, batch, thread_sweep
}
criterion_main!(benches);
