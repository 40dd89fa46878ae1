//! [`Tally`]: everything a row issued, from every source (leafid workers, foreign
//! simulators), the exact duplicate count (decoded to worker ids and the two sources),
//! and the row's one report line.

use std::collections::HashMap;

use crate::harness::{say, Registry, Worker};

/// Leaf's layout: 41 bits of time, 10 of worker id, 12 of sequence.
pub fn worker_of(id: i64) -> i64 {
    (id >> 12) & 0x3ff
}

/// The wall-clock ms an id of Leaf's layout was issued at.
pub fn time_of(id: i64) -> i64 {
    (id >> 22) + leafid::snowflake::LEAF_EPOCH_MS
}

/// Wall-clock ms now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Everything a row issued, from every source, and what went wrong.
pub struct Tally {
    registry: &'static str,
    row: String,
    sources: Vec<String>,
    seen: HashMap<i64, u16>,
    ids: u64,
    foreign: u64,
    duplicates: u64,
    /// (worker id, first source, second source) -> count.
    dup_by: HashMap<(i64, u16, u16), u64>,
    not_increasing: Vec<String>,
    notes: Vec<String>,
    refused: usize,
    /// `label: CODE` of each refused worker.
    refusals: Vec<String>,
    live: usize,
    /// Foreign writers' ids as sorted runs of consecutive ids (first, last), with their
    /// source: a simulator issues millions a second, too many for the map.
    foreign_runs: Vec<(Vec<(i64, i64)>, u16)>,
    /// The residual window (`fence.rs`): duplicates with a foreign writer issued at
    /// these times are measured and reported, not failed.
    window: Option<(i64, i64)>,
    /// Duplicates inside it, and the latest of their times.
    in_window: u64,
    window_last_ms: i64,
}

impl Tally {
    /// An empty tally for `row` of `registry`.
    pub fn new(registry: &dyn Registry, row: &str) -> Tally {
        Tally {
            registry: registry.name(),
            row: row.to_string(),
            sources: Vec::new(),
            seen: HashMap::new(),
            ids: 0,
            foreign: 0,
            duplicates: 0,
            dup_by: HashMap::new(),
            not_increasing: Vec::new(),
            notes: Vec::new(),
            refused: 0,
            refusals: Vec::new(),
            live: 0,
            foreign_runs: Vec::new(),
            window: None,
            in_window: 0,
            window_last_ms: i64::MIN,
        }
    }

    /// A remark for the report line.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Stops `w` and counts its ids.
    pub fn stop(&mut self, w: Worker) {
        let (label, ids, how) = w.stop();
        if let Some(code) = how.strip_prefix("refused ") {
            self.refused += 1;
            let code = code.split(';').next().unwrap_or("?");
            self.refusals.push(format!("{label}: {code}"));
        } else {
            self.live += 1;
        }
        self.add(&format!("{label} ({how})"), &ids);
    }

    /// Stops every worker (all told at once) and counts their ids.
    pub fn stop_all(&mut self, mut ws: Vec<Worker>) {
        ws.iter_mut().for_each(Worker::begin_stop);
        for w in ws {
            self.stop(w);
        }
    }

    /// Counts a foreign writer's ids (a Java Leaf or fork simulator), in issue order.
    /// They are checked against every leafid id when the row finishes.
    pub fn foreign(&mut self, label: &str, ids: &[i64]) {
        let me = self.sources.len() as u16;
        self.sources.push(label.to_string());
        if let Some(w) = ids.windows(2).find(|w| w[1] <= w[0]) {
            self.not_increasing
                .push(format!("{label}: {} then {}", w[0], w[1]));
        }
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for &id in ids {
            match runs.last_mut() {
                Some(last) if last.1 + 1 == id => last.1 = id,
                _ => runs.push((id, id)),
            }
        }
        runs.sort_unstable();
        self.foreign += ids.len() as u64;
        self.foreign_runs.push((runs, me));
    }

    /// Tolerates duplicates with a foreign writer issued between `from_ms` and `to_ms`
    /// (wall clock): fence.rs's residual window, where a foreign server started beside
    /// a live leafid issues before its first upload and no protocol can see it.
    pub fn residual_window(&mut self, from_ms: i64, to_ms: i64) {
        self.window = Some((from_ms, to_ms));
    }

    /// Every leafid id that a foreign writer issued too.
    fn check_foreign(&mut self) {
        for (runs, f) in &self.foreign_runs {
            for (&id, &src) in &self.seen {
                let i = runs.partition_point(|r| r.0 <= id);
                if i > 0 && runs[i - 1].1 >= id {
                    let at = time_of(id);
                    if self.window.is_some_and(|(a, b)| (a..=b).contains(&at)) {
                        self.in_window += 1;
                        self.window_last_ms = self.window_last_ms.max(at);
                        continue;
                    }
                    self.duplicates += 1;
                    *self.dup_by.entry((worker_of(id), *f, src)).or_default() += 1;
                }
            }
        }
    }

    fn add(&mut self, label: &str, ids: &[i64]) {
        let me = self.sources.len() as u16;
        self.sources.push(label.to_string());
        if let Some(w) = ids.windows(2).find(|w| w[1] <= w[0]) {
            self.not_increasing
                .push(format!("{label}: {} then {}", w[0], w[1]));
        }
        for &id in ids {
            if let Some(&first) = self.seen.get(&id) {
                self.duplicates += 1;
                *self.dup_by.entry((worker_of(id), first, me)).or_default() += 1;
            } else {
                self.seen.insert(id, me);
            }
        }
        self.ids += ids.len() as u64;
    }

    /// Prints the row's line and asserts: no duplicate, every source increasing.
    pub fn finish(mut self) {
        self.check_foreign();
        let verdict = if self.duplicates == 0 && self.not_increasing.is_empty() {
            "PASS"
        } else {
            "FAIL"
        };
        say(&format!(
            "ADVERSARY {:<17} {:<40} live={} refused={} ids={} foreign={} duplicates={} {verdict}{}",
            self.registry,
            self.row,
            self.live,
            self.refused,
            self.ids,
            self.foreign,
            self.duplicates,
            if self.notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.notes.join("; "))
            }
        ));
        if let Some((from, _)) = self.window.filter(|_| self.in_window > 0) {
            say(&format!(
                "    residual window: {} duplicates with the foreign writer, the last {} ms \
                 after it started (before its first upload; fence.rs)",
                self.in_window,
                self.window_last_ms - from
            ));
        }
        if !self.refusals.is_empty() {
            say(&format!("    refused: {}", self.refusals.join(", ")));
        }
        let mut detail = Vec::new();
        let mut by: Vec<_> = self.dup_by.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        for ((worker, a, b), n) in by.iter().take(6) {
            detail.push(format!(
                "{n} ids of worker {worker} issued by both {} and {}",
                self.sources[*a as usize], self.sources[*b as usize]
            ));
        }
        for d in &detail {
            say(&format!("    {d}"));
        }
        if verdict == "FAIL" {
            for s in &self.sources {
                say(&format!("    source {s}"));
            }
        }
        assert!(
            self.duplicates == 0,
            "{} / {}: {} duplicates: {}",
            self.registry,
            self.row,
            self.duplicates,
            detail.join("; ")
        );
        assert!(
            self.not_increasing.is_empty(),
            "{} / {}: ids went down: {:?}",
            self.registry,
            self.row,
            self.not_increasing
        );
    }
}
