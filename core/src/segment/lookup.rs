//! Rate-limited store lookups of tags missing from a generator's cache.
//!
//! A tag created by another process, by Java Leaf or by SQL is not in the cache until
//! the next refresh. Rather than answer `TagNotFound` for up to a minute, a miss asks
//! the store once ("does this tag exist?"). Callers asking about the same name while
//! that lookup runs share it (however long it runs), and its answer stands for
//! [`LOOKUP_EVERY_MS`] from when it came: a caller polling a misspelt tag costs the
//! store at most one query per name per second. When a new lookup has not answered by
//! the end of a caller's wait, the name's previous answer, if it came within
//! [`FALLBACK_MS`], stands in for it: a slow store (or lookups queued behind others)
//! then still says "no such tag" to a client retrying a misspelt name, where it had
//! said so before. The names remembered are capped ([`MAX_REMEMBERED`], oldest
//! forgotten first), so a flood of distinct unknown names costs bounded memory. Per
//! process: a forked child starts afresh ([`LookupState`]), and at most
//! [`MAX_CONCURRENT_LOOKUPS`] query the store at once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap as HashMap;

/// How long one lookup's answer stands for its name (ms), from when it came.
pub const LOOKUP_EVERY_MS: i64 = 1_000;
/// How old a previous answer may be to stand in for a lookup still unanswered at the
/// end of a caller's wait (ms): the default refresh interval, so it is never older than
/// what the cache alone would say.
pub const FALLBACK_MS: i64 = 60_000;
/// How many names the rate limit remembers at most.
pub const MAX_REMEMBERED: usize = 1024;

/// What a finished lookup found: whether the tag exists, or the cause when the store
/// could not answer (so a caller hears "store unavailable", not "no such tag").
pub type Outcome = std::result::Result<bool, crate::Error>;

/// Where one lookup is: waiting for one of the [`MAX_CONCURRENT_LOOKUPS`] permits, at
/// the store, or answered (with the time of the answer, clock ms).
#[derive(Debug)]
pub enum Progress {
    /// Queued behind other lookups for a permit.
    Queued,
    /// Asking the store.
    Asking,
    /// Answered at `at_ms`.
    Done {
        /// What the store said.
        outcome: Outcome,
        /// When (the generator's clock, ms).
        at_ms: i64,
    },
}

/// The shared progress of one lookup, ending with its [`Outcome`]. A channel rather
/// than a once-cell, so that waiters only ever wait: the lookup is run by one task,
/// never by a waiter that may stop waiting halfway.
pub type Answer = tokio::sync::watch::Receiver<Progress>;

/// Where the task running a lookup sends its progress.
pub type Reply = tokio::sync::watch::Sender<Progress>;

/// A caller's view of a name's lookup: the current one, and the previous one's answer.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The lookup now running or answered.
    pub answer: Answer,
    /// The answer before it, when a new lookup replaced it.
    previous: Option<Answer>,
}

impl Shared {
    /// Whether the previous lookup answered "no such tag" within [`FALLBACK_MS`] of
    /// `now_ms`: what stands in while the current one has not answered.
    pub fn previously_absent(&self, now_ms: i64) -> bool {
        self.previous.as_ref().is_some_and(|p| {
            matches!(&*p.borrow(), Progress::Done { outcome: Ok(false), at_ms }
                if *at_ms <= now_ms && now_ms - *at_ms < FALLBACK_MS)
        })
    }
}

/// What a caller should do about a missing tag.
#[derive(Debug)]
pub enum Ask {
    /// Run this lookup (nobody asked about the name recently) and send its progress.
    Start(Reply, Shared),
    /// A lookup running or answered recently: wait on it (or read its answer).
    Join(Shared),
}

/// The lookups of the names asked about within [`FALLBACK_MS`], by name.
#[derive(Debug, Default)]
pub struct Lookups {
    by_name: HashMap<String, (i64, Shared)>,
    /// `(name, started at)`, oldest first: what to forget first.
    order: VecDeque<(String, i64)>,
}

impl Lookups {
    /// The lookup for `tag` at time `now_ms`: a running or recent one, or a new one to
    /// start (carrying the one it replaces as the fallback).
    pub fn ask(&mut self, tag: &str, now_ms: i64) -> Ask {
        self.forget_old(now_ms);
        let previous = match self.by_name.get(tag) {
            Some((_, shared)) => {
                let answered_at = match &*shared.answer.borrow() {
                    Progress::Done { at_ms, .. } => Some(*at_ms),
                    Progress::Queued | Progress::Asking => None,
                };
                let stands = match answered_at {
                    Some(at_ms) => fresh(at_ms, now_ms, LOOKUP_EVERY_MS),
                    // Still running: a second lookup of the name would only queue
                    // behind it for the same store. Unless its task is gone (the
                    // channel closed unanswered): then nothing would ever answer.
                    None => shared.answer.has_changed().is_ok(),
                };
                if stands {
                    return Ask::Join(shared.clone());
                }
                Some(shared.answer.clone())
            }
            None => None,
        };
        while self.order.len() >= MAX_REMEMBERED {
            self.pop_oldest();
        }
        let (reply, answer) = tokio::sync::watch::channel(Progress::Queued);
        let shared = Shared { answer, previous };
        self.by_name
            .insert(tag.to_string(), (now_ms, shared.clone()));
        self.order.push_back((tag.to_string(), now_ms));
        Ask::Start(reply, shared)
    }

    /// How many names are remembered (for tests of the bound).
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.by_name.len()
    }

    fn forget_old(&mut self, now_ms: i64) {
        while let Some((_, at)) = self.order.front() {
            if fresh(*at, now_ms, FALLBACK_MS) {
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

/// Whether something from `at` is less than `window` old at `now` (a clock that
/// stepped back counts as stale, so a lookup is never held off by it).
fn fresh(at: i64, now: i64, window: i64) -> bool {
    at <= now && now - at < window
}

/// How many lookups of missing tags may query the store at once.
const MAX_CONCURRENT_LOOKUPS: usize = 2;

/// Waits up to `wait` for a lookup's answer (the tag is then in the cache if found).
pub(super) async fn answered(mut answer: Answer, wait: Duration) {
    // An error means the lookup task is gone (its runtime shut down): nothing to wait for.
    let done = |p: &Progress| matches!(p, Progress::Done { .. });
    let _ = tokio::time::timeout(wait, answer.wait_for(done)).await;
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

    fn answer(reply: &Reply, found: bool, at_ms: i64) {
        reply.send_replace(Progress::Done {
            outcome: Ok(found),
            at_ms,
        });
    }

    #[test]
    fn a_running_lookup_is_shared_and_its_answer_stands_a_window_from_when_it_came() {
        let mut l = Lookups::default();
        let Ask::Start(a, _) = l.ask("a", 0) else {
            panic!("first ask starts")
        };
        // Running, however long: shared, never started twice.
        assert!(matches!(l.ask("a", 999), Ask::Join(_)));
        assert!(matches!(l.ask("a", 5_000), Ask::Join(_)));
        let Ask::Start(b, _) = l.ask("b", 999) else {
            panic!("another name starts its own")
        };
        answer(&a, false, 5_200);
        assert!(matches!(
            l.ask("a", 5_200 + LOOKUP_EVERY_MS - 1),
            Ask::Join(_)
        ));
        let now = 5_200 + LOOKUP_EVERY_MS;
        let Ask::Start(_a2, shared) = l.ask("a", now) else {
            panic!("a stale answer starts a new lookup")
        };
        // The new one is unanswered: the previous "no" stands in, for a while.
        assert!(shared.previously_absent(now));
        assert!(!shared.previously_absent(5_200 + FALLBACK_MS));
        // A clock that stepped back does not hold lookups off.
        assert!(matches!(l.ask("b", 10), Ask::Join(_))); // b still running
        answer(&b, true, 1_500);
        assert!(matches!(l.ask("b", 10), Ask::Start(..)));
    }

    #[test]
    fn a_lookup_whose_task_is_gone_is_started_again() {
        let mut l = Lookups::default();
        let Ask::Start(reply, _) = l.ask("a", 0) else {
            panic!("first ask starts")
        };
        drop(reply);
        assert!(matches!(l.ask("a", 1), Ask::Start(..)));
    }

    #[test]
    fn remembers_a_bounded_number_of_names() {
        let mut l = Lookups::default();
        let mut replies = Vec::new();
        for k in 0..MAX_REMEMBERED * 3 {
            if let Ask::Start(reply, _) = l.ask(&format!("tag-{k}"), 5) {
                replies.push(reply);
            }
        }
        assert_eq!(l.remembered(), MAX_REMEMBERED);
        assert!(l.order.len() <= MAX_REMEMBERED);
        // The newest names are the ones kept.
        assert!(matches!(
            l.ask(&format!("tag-{}", MAX_REMEMBERED * 3 - 1), 5),
            Ask::Join(_)
        ));
        // Once the fallback window passed, everything is forgotten.
        l.ask("x", 5 + FALLBACK_MS);
        assert_eq!(l.remembered(), 1);
    }
}
