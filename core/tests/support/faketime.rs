//! libfaketime (Debian's `faketime`) for a child process whose wall clock a test steps
//! while it runs: the process reads its offset from a file the test rewrites (`+10`
//! steps it 10 s ahead), and its monotonic clock is left alone, as a VM paused then
//! stepped by NTP sees it.

#![allow(dead_code)] // each test binary that includes this file uses part of it

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The preload library, or a panic that says how to install it.
pub fn lib() -> String {
    ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|a| format!("/usr/lib/{a}/faketime/libfaketime.so.1"))
        .find(|p| Path::new(p).exists())
        .expect("this test needs libfaketime: apt-get install faketime")
}

/// Makes `command`'s wall clock follow the offset in `file` (written `+0` here first),
/// read again at every reading of the clock.
pub fn follow(command: &mut Command, file: &Path) {
    if !file.exists() {
        std::fs::write(file, "+0\n").unwrap();
    }
    command
        .env("LD_PRELOAD", lib())
        .env("FAKETIME_TIMESTAMP_FILE", file)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env_remove("FAKETIME");
}

/// In a process started with [`follow`]: steps its wall clock (and that of every other
/// process following the same file) to `offset` (`+10`), and checks that it moved.
pub fn step(offset_s: i64) {
    let file = std::env::var("FAKETIME_TIMESTAMP_FILE").expect("started with faketime::follow");
    let before = now_ms();
    std::fs::write(&file, format!("{offset_s:+}\n")).unwrap();
    let moved = now_ms() - before;
    assert!(
        (moved - offset_s * 1000).abs() < 1_000,
        "libfaketime moved the clock {moved} ms, not {offset_s} s"
    );
}

/// Asks `gen` for ids without waiting, for up to 8 s after a clock step: `back <ms>
/// <first> <next>` (how long after the step ids came again, `first`, the id before the
/// step, and the first after) once one comes, else `stalled <errors> <last error>`.
pub fn ids_after_a_step(gen: &leafid::SnowflakeGenerator, first: i64) -> String {
    let step = Instant::now();
    let (mut errors, mut last) = (0, String::new());
    while step.elapsed() < Duration::from_secs(8) {
        match gen.next_id_now() {
            Ok(next) => return format!("back {} {first} {next}", step.elapsed().as_millis()),
            Err(e) => {
                errors += 1;
                last = e.to_string().replace('\n', " ");
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    format!("stalled {errors} {last}")
}

/// Runs `command` (a child entry that prints `LEAFID-CHILD ` and [`ids_after_a_step`]'s
/// report) and checks that ids came again within 5 s of the step, above the one before
/// it. The 5 s only catch the stall of the review of issue 30 (no id until a restart);
/// a heartbeat is 200 to 500 ms in these tests.
pub fn assert_ids_come_again(mut command: Command) {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = stdout
        .lines()
        .find_map(|l| l.split_once("LEAFID-CHILD ").map(|(_, s)| s.to_string()))
        .unwrap_or_else(|| {
            panic!(
                "the child said nothing: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    eprintln!("after the step: {said}");
    let back: Vec<i64> = match said.strip_prefix("back ") {
        Some(rest) => rest.split(' ').map(|n| n.parse().unwrap()).collect(),
        None => panic!("no id after the clock step: {said}"),
    };
    let (ms, first, next) = (back[0], back[1], back[2]);
    assert!(ms < 5_000, "ids came again only {ms} ms after the step");
    assert!(next > first, "{next} is not above {first}");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
