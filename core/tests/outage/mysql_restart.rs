//! Segment mode while the real MariaDB is stopped and started (by `scripts/services.sh`)
//! mid-run. Its own test binary: cargo runs test binaries one after another, so no
//! other test sees the outage.

use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::mysql;

use mysql::{connect, create, fresh_tag};

use leafid::SegmentOptions;

fn services(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services.sh");
    let status = Command::new("bash")
        .arg(script)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "services.sh {args:?} failed");
}

/// Stops and starts MariaDB while threads issue ids: buffered ids keep flowing, callers
/// then see `StoreUnavailable` within the timeout, and issuing resumes on its own.
#[test]
fn database_restart_mid_run_loses_nothing_and_duplicates_nothing() {
    let gen = connect(SegmentOptions::default().wait_timeout(Duration::from_millis(500)));
    let tag = fresh_tag("outage");
    create(&gen, &tag, 1, 2000);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (h, stop) = (gen.tag(&tag).unwrap(), stop.clone());
            std::thread::spawn(move || {
                let (mut ids, mut errors) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match h.next_id() {
                        Ok(id) => ids.push(id),
                        Err(e) => {
                            errors.push(e.to_string());
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    if ids.len() % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                (ids, errors)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    services(&["stop", "mysql"]);
    std::thread::sleep(Duration::from_secs(3));
    services(&["start", "mysql"]);
    let after_restart = Instant::now();
    // Let the generator find the database again and issue past the outage.
    let deadline = after_restart + Duration::from_secs(30);
    let resumed = loop {
        if gen.next_id(&tag).is_ok() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let mut all = HashSet::new();
    let mut errors = vec![];
    for w in workers {
        let (ids, errs) = w.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing per thread");
        for id in ids {
            assert!(all.insert(id), "duplicate {id}");
        }
        errors.extend(errs);
    }
    assert!(resumed, "issuing did not resume after MariaDB came back");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("store unavailable") || e.contains("both segments spent")),
        "unexpected errors: {:?}",
        errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        !errors.is_empty(),
        "the outage was long enough to spend the buffer"
    );
}
