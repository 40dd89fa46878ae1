//! Segment mode's hot path against a floor (a bare atomic counter) and against the
//! `uuid` crate's v4 and v7, the ids Rust services use today.
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
fn generator() -> (tempfile::TempDir, SegmentGenerator) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/bench.db", dir.path().display());
    let gen = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap();
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
    let (_dir, gen) = generator();
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

    let mut group = c.benchmark_group("next_id/2-threads");
    group.throughput(Throughput::Elements(2));
    let h = handle.clone();
    group.bench_function("leafid handle.next_id()", |b| {
        let h = h.clone();
        b.iter_custom(move |iters| {
            let h = h.clone();
            threaded(2, iters, move || {
                black_box(h.next_id().unwrap());
            })
        })
    });
    let g = gen.clone();
    group.bench_function("leafid gen.next_id(tag)", |b| {
        let g = g.clone();
        b.iter_custom(move |iters| {
            let g = g.clone();
            threaded(2, iters, move || {
                black_box(g.next_id("bench").unwrap());
            })
        })
    });
    group.finish();
}

fn batch(c: &mut Criterion) {
    let (_dir, gen) = generator();
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
    targets = single_id, batch
}
criterion_main!(benches);
