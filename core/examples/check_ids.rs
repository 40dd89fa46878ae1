//! Checks the id files of a cross-language run (`tests/cross/`): not one id in two
//! places, and ids strictly increasing within each file (one process's output).
//!
//! `cargo run -p leafid --example check_ids -- FILE…` prints one JSON line
//! (`{"files":N,"ids":N,"duplicates":N,"out_of_order":N,"first_duplicate":…}`) and exits
//! 1 when anything is wrong. A last line without a newline (a process killed mid-write)
//! is ignored. A file given as `--trend FILE` is checked for duplicates only: the HTTP
//! callers of a `leafid serve` whose threads take segment ids in chunks (its default)
//! get ids that increase as a trend, not strictly (`docs/segment.md`, "Order").

fn main() {
    let mut files: Vec<String> = Vec::new();
    let mut trend: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--trend" {
            let f = args.next().expect("--trend needs a file");
            trend.push(f.clone());
            files.push(f);
        } else {
            files.push(a);
        }
    }
    let mut all: Vec<i64> = Vec::new();
    let mut out_of_order = 0u64;
    let mut bad_files = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let complete = match text.rfind('\n') {
            Some(i) => &text[..i],
            None => "",
        };
        let strict = !trend.contains(f);
        let mut last = i64::MIN;
        for line in complete.lines().filter(|l| !l.is_empty()) {
            let id: i64 = line
                .parse()
                .unwrap_or_else(|e| panic!("{f}: {line:?}: {e}"));
            if strict && id <= last {
                out_of_order += 1;
                if bad_files.len() < 5 && !bad_files.contains(f) {
                    bad_files.push(f.clone());
                }
            }
            last = id;
            all.push(id);
        }
    }
    let total = all.len();
    all.sort_unstable();
    let mut duplicates = 0u64;
    let mut first_duplicate = None;
    for w in all.windows(2) {
        if w[0] == w[1] {
            duplicates += 1;
            first_duplicate.get_or_insert(w[0]);
        }
    }
    let negative = all.first().is_some_and(|&id| id < 0);
    println!(
        "{}",
        serde_json::json!({
            "files": files.len(), "ids": total, "duplicates": duplicates,
            "out_of_order": out_of_order, "negative": negative,
            "first_duplicate": first_duplicate, "out_of_order_files": bad_files,
        })
    );
    if duplicates > 0 || out_of_order > 0 || negative {
        std::process::exit(1);
    }
}
