//! `local:` when its lock directory is emptied after a holder exits (a deploy recreating
//! it): the next holder of the id finds no bound file and floors at the clock, so no
//! holder may have issued ahead of the clock (review of issue 30: one that started above
//! a crashed holder's bound led the clock, and 303 479 of its 305 408 ids were issued
//! again).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use leafid::snowflake::LEAF_EPOCH_MS;
use leafid::{Layout, RegistryConfig, SnowflakeGenerator};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The ids `gen` issues without waiting for `d`, each checked not to lead the clock.
fn issue_for(gen: &SnowflakeGenerator, d: Duration) -> Vec<i64> {
    let mut ids = Vec::new();
    let until = Instant::now() + d;
    while Instant::now() < until {
        match gen.next_ids_now(256) {
            Ok(batch) => {
                let now = now_ms();
                let last = gen.decode(*batch.last().unwrap()).timestamp_ms;
                assert!(last <= now, "an id {} ms ahead of the clock", last - now);
                ids.extend(batch);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    ids
}

#[test]
fn ids_issued_before_the_directory_is_emptied_are_never_issued_again() {
    // Two worker ids, so the second holder has no free id but the crashed one's.
    let layout = Layout::new(50, 1, 12, LEAF_EPOCH_MS).unwrap();
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("workers");
    std::fs::create_dir_all(&dir).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let build = || {
        SnowflakeGenerator::builder()
            .layout(layout)
            .registry(RegistryConfig::Local { dir: dir.clone() })
            .cache_dir(cache.path())
            .heartbeat(Duration::from_millis(100))
            .max_skew(Duration::from_millis(10))
            .build_blocking()
            .unwrap()
    };
    // A holder of id 0 crashed with its bound (within its reach) ahead of the clock.
    std::fs::write(
        dir.join("worker-0.json"),
        format!("{{\"worker_id\":0,\"bound_ms\":{}}}", now_ms() + 1_200),
    )
    .unwrap();
    let b = build();
    assert_eq!(b.worker_id(), 1);
    let a = build();
    assert_eq!(a.worker_id(), 0);
    let first = issue_for(&a, Duration::from_millis(200));
    assert!(a.close_within(Duration::from_secs(2)));
    drop(a);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    // B's next renew finds its lock file gone; it takes id 0, now free and unrecorded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.worker_id() != 0 {
        let _ = b.next_id_now();
        assert!(Instant::now() < deadline, "B never took id 0 again");
        std::thread::sleep(Duration::from_millis(5));
    }
    let seen: HashSet<i64> = first.iter().copied().collect();
    let again = issue_for(&b, Duration::from_millis(500))
        .into_iter()
        .filter(|id| seen.contains(id))
        .count();
    assert_eq!(again, 0, "ids of the first holder of id 0 issued again");
    b.close();
}
