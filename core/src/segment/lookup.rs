//! Rate-limited store lookups of tags missing from a generator's cache.
//!
//! A tag created by another process, by Java Leaf or by SQL is not in the cache until
//! the next refresh. Rather than answer `TagNotFound` for up to a minute, a miss asks
//! the store once ("does this tag exist?"). Callers asking about the same name while
//! that lookup runs share it, and its answer stands for [`LOOKUP_EVERY`]: a caller
//! polling a misspelt tag costs the store at most one query per name per second. The
//! names remembered are capped ([`MAX_REMEMBERED`], oldest forgotten first), so a flood
//! of distinct unknown names costs bounded memory. Per process: a forked child starts
//! afresh ([`LookupState`]), and at most [`MAX_CONCURRENT_LOOKUPS`] query the store at
//! once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap as HashMap;

/// How long one lookup's answer stands for its name (ms).
pub const LOOKUP_EVERY_MS: i64 = 1_000;
/// How many names the rate limit remembers at most.
pub const MAX_REMEMBERED: usize = 1024;

/// What a finished lookup found: whether the tag exists, or the cause when the store
/// could not answer (so a caller hears "store unavailable", not "no such tag").
pub type Outcome = std::result::Result<bool, crate::Error>;

/// The shared answer of one lookup: `None` while it runs, then its [`Outcome`].
/// A channel rather than a once-cell, so that waiters only ever wait: the lookup is run
/// by one task, never by a waiter that may stop waiting halfway.
pub type Answer = tokio::sync::watch::Receiver<Option<Outcome>>;

/// Where the task running a lookup sends its answer.
pub type Reply = tokio::sync::watch::Sender<Option<Outcome>>;

/// What a caller should do about a missing tag.
#[derive(Debug)]
pub enum Ask {
    /// Run this lookup (nobody asked about the name recently) and send its answer.
    Start(Reply, Answer),
    /// A lookup made recently: wait on it (or read its answer).
    Join(Answer),
}

/// The lookups of the last [`LOOKUP_EVERY_MS`], by name.
#[derive(Debug, Default)]
pub struct Lookups {
    by_name: HashMap<String, (i64, Answer)>,
    /// `(name, started at)`, oldest first: what to forget first.
    order: VecDeque<(String, i64)>,
}

impl Lookups {
    /// The lookup for `tag` at time `now_ms`: a recent one, or a new one to start.
    pub fn ask(&mut self, tag: &str, now_ms: i64) -> Ask {
        self.forget_old(now_ms);
        if let Some((at, answer)) = self.by_name.get(tag) {
            if fresh(*at, now_ms) {
                return Ask::Join(answer.clone());
            }
        }
        while self.order.len() >= MAX_REMEMBERED {
            self.pop_oldest();
        }
        let (reply, answer) = tokio::sync::watch::channel(None);
        self.by_name
            .insert(tag.to_string(), (now_ms, answer.clone()));
        self.order.push_back((tag.to_string(), now_ms));
        Ask::Start(reply, answer)
    }

    /// How many names are remembered (for tests of the bound).
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.by_name.len()
    }

    fn forget_old(&mut self, now_ms: i64) {
        while let Some((_, at)) = self.order.front() {
            if fresh(*at, now_ms) {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((name, at)) = self.order.pop_front() {
            // A name asked again later has a newer entry; only its own entry goes.
            if self.by_name.get(&name).is_some_and(|(a, _)| *a == at) {
                self.by_name.remove(&name);
            }
        }
    }
}

/// Whether a lookup started at `at` still stands at `now` (a clock that stepped back
/// counts as stale, so a lookup is never held off by it).
fn fresh(at: i64, now: i64) -> bool {
    at <= now && now - at < LOOKUP_EVERY_MS
}

/// How many lookups of missing tags may query the store at once.
const MAX_CONCURRENT_LOOKUPS: usize = 2;

/// Waits up to `wait` for a lookup's answer (the tag is then in the cache if found).
pub(super) async fn answered(mut answer: Answer, wait: Duration) {
    // An error means the lookup task is gone (its runtime shut down): nothing to wait for.
    let _ = tokio::time::timeout(wait, answer.wait_for(Option::is_some)).await;
}

/// The lookups of missing tags in one process.
#[derive(Debug)]
pub(super) struct LookupState {
    /// The fork epoch they belong to.
    pub(super) epoch: u64,
    pub(super) lookups: Lookups,
    /// At most [`MAX_CONCURRENT_LOOKUPS`] query the store at once.
    pub(super) slots: Arc<tokio::sync::Semaphore>,
}

impl LookupState {
    pub(super) fn new(epoch: u64) -> LookupState {
        LookupState {
            epoch,
            lookups: Lookups::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_LOOKUPS)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lookup_per_name_per_window() {
        let mut l = Lookups::default();
        assert!(matches!(l.ask("a", 0), Ask::Start(..)));
        assert!(matches!(l.ask("a", 999), Ask::Join(_)));
        assert!(matches!(l.ask("b", 999), Ask::Start(..)));
        assert!(matches!(l.ask("a", 1000), Ask::Start(..)));
        assert!(matches!(l.ask("a", 1500), Ask::Join(_)));
        // A clock that stepped back does not hold lookups off.
        assert!(matches!(l.ask("a", 10), Ask::Start(..)));
    }

    #[test]
    fn remembers_a_bounded_number_of_names() {
        let mut l = Lookups::default();
        for k in 0..MAX_REMEMBERED * 3 {
            l.ask(&format!("tag-{k}"), 5);
        }
        assert_eq!(l.remembered(), MAX_REMEMBERED);
        assert!(l.order.len() <= MAX_REMEMBERED);
        // The newest names are the ones kept.
        assert!(matches!(
            l.ask(&format!("tag-{}", MAX_REMEMBERED * 3 - 1), 5),
            Ask::Join(_)
        ));
        // Once the window passed, everything is forgotten.
        l.ask("x", 5 + LOOKUP_EVERY_MS);
        assert_eq!(l.remembered(), 1);
    }
}
