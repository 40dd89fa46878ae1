//! Uniqueness under load: several generators with distinct workers, each driven by
//! several threads at full speed on the system clock for a couple of seconds. Every id
//! is collected; not one may repeat, and each thread must see strictly increasing ids.

use std::time::{Duration, Instant};

use leafid::{RegistryConfig, SnowflakeGenerator};

const RUN: Duration = Duration::from_secs(2);
/// Per-thread cap so the test's memory stays bounded on fast machines.
const MAX_PER_THREAD: usize = 1_500_000;

#[test]
fn saturated_generators_on_threads_never_repeat_an_id() {
    let cache = tempfile::tempdir().unwrap();
    let locks = tempfile::tempdir().unwrap();
    let gens: Vec<SnowflakeGenerator> = vec![
        SnowflakeGenerator::builder()
            .registry(RegistryConfig::Fixed(1))
            .cache_dir(cache.path())
            .build_blocking()
            .unwrap(),
        SnowflakeGenerator::builder()
            .registry(RegistryConfig::Fixed(2))
            .cache_dir(cache.path())
            .build_blocking()
            .unwrap(),
        SnowflakeGenerator::builder()
            .registry(RegistryConfig::Local {
                dir: locks.path().into(),
            })
            .cache_dir(cache.path())
            .build_blocking()
            .unwrap(),
    ];
    let workers: Vec<u32> = gens.iter().map(|g| g.worker_id()).collect();
    assert_eq!(
        workers
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3
    );

    let mut handles = Vec::new();
    for (gi, g) in gens.iter().enumerate() {
        for t in 0..2 {
            let g = g.clone();
            handles.push(std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(MAX_PER_THREAD);
                let start = Instant::now();
                let mut batch = [0i64; 64];
                while ids.len() + batch.len() <= MAX_PER_THREAD && start.elapsed() < RUN {
                    // One thread of each generator uses single calls, the other batches.
                    if t == 0 {
                        for _ in 0..64 {
                            ids.push(g.next_id().expect("next_id"));
                        }
                    } else {
                        g.fill(&mut batch).expect("fill");
                        ids.extend_from_slice(&batch);
                    }
                }
                (gi, ids)
            }));
        }
    }
    let mut all = Vec::new();
    for h in handles {
        let (gi, ids) = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids of one thread must strictly increase"
        );
        assert!(ids.iter().all(|&id| id > 0));
        let worker = gens[gi].worker_id();
        assert!(ids
            .iter()
            .all(|&id| gens[gi].decode(id).worker_id == worker));
        all.extend(ids);
    }
    let total = all.len();
    assert!(total > 100_000, "too few ids to mean anything: {total}");
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "{} duplicate ids", total - all.len());
}
