//! Watching a held row (fence rule 2), apart from taking and renewing it.
//!
//! [`poll_held`]: a live holder's task on the background runtime reads its row every
//! [`POLL`] and lowers the generator's [`IssueLimit`] at once when the row is deleted,
//! names another holder, or holds a bound this holder did not write (an operator's
//! `DELETE` or `UPDATE`, a restored dump, a dropped table), instead of waiting for the
//! next renew to find it. A poll that fails or gets no answer (the database down or
//! silent) proves nothing and changes nothing: the holder keeps issuing up to the bound
//! the table holds (fence rule 5), and the generator's limit stops it there.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::backend::Backend;
use super::rows::Own;
use super::CALL_TIMEOUT;
use crate::snowflake::registry::IssueLimit;

/// How often a holder reads its row.
pub(super) const POLL: Duration = Duration::from_millis(250);

/// How many values of `bound_ms` a holder accepts as its own: the last confirmed one and
/// the writes whose outcome it never learnt (a renew that timed out).
const ACCEPTED: usize = 4;

/// What the held row may hold as far as its holder knows, shared by its renews and its
/// poll task.
#[derive(Debug)]
pub(super) struct Written {
    /// `bound_ms` values this holder wrote (or found at takeover), the last confirmed
    /// one and any whose commit is unknown. Any other value is another writer's.
    accepted: Vec<Option<i64>>,
    /// Bumped before and after every renew: a poll that straddled one proves nothing.
    writes: u64,
}

impl Written {
    pub(super) fn new(seen: Option<i64>) -> Arc<Mutex<Written>> {
        Arc::new(Mutex::new(Written {
            accepted: vec![seen],
            writes: 0,
        }))
    }

    /// A renew of `bound` starts.
    pub(super) fn begin(&mut self, bound: i64) {
        self.writes += 1; // odd: a write in flight, the poll holds off
        if !self.accepted.contains(&Some(bound)) {
            self.accepted.push(Some(bound));
        }
        let excess = self.accepted.len().saturating_sub(ACCEPTED);
        self.accepted.drain(..excess);
    }

    /// The renew of `bound` ended; `confirmed` when it committed.
    pub(super) fn end(&mut self, bound: i64, confirmed: bool) {
        self.writes += 1;
        if confirmed {
            self.accepted = vec![Some(bound)];
        }
    }
}

/// Locks `w`; a poisoned lock still holds valid plain data.
pub(super) fn lock(w: &Mutex<Written>) -> std::sync::MutexGuard<'_, Written> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a live holder's poll task needs, owned.
pub(super) struct Poll {
    pub(super) backend: Arc<Backend>,
    pub(super) pool: String,
    pub(super) worker_id: u32,
    pub(super) token: String,
    /// Where, for messages ("pool orders in MySQL mysql://…").
    pub(super) shown: String,
    pub(super) written: Arc<Mutex<Written>>,
    pub(super) limit: Arc<IssueLimit>,
}

/// Why a reading of the held row means the lease is lost, if it does.
fn lost_because(own: &Option<Own>, token: &str, accepted: &[Option<i64>]) -> Option<&'static str> {
    match own {
        None => Some("was deleted"),
        Some(o) if o.holder != token => Some("names another holder (taken over or rewritten)"),
        Some(o) if !accepted.contains(&o.bound_ms) => {
            Some("holds a bound this holder did not write (rewritten or restored)")
        }
        Some(_) => None,
    }
}

/// Polls the held row every [`POLL`] until it finds it lost, then lowers the limit
/// (rule 2). Aborted by `release`.
pub(super) async fn poll_held(p: Poll) {
    let id = p.worker_id as i64;
    loop {
        tokio::time::sleep(POLL).await;
        let before = lock(&p.written).writes;
        if before % 2 == 1 {
            continue; // a renew is in flight
        }
        let outcome = tokio::time::timeout(CALL_TIMEOUT, p.backend.read_own(&p.pool, id)).await;
        let own = match outcome {
            Ok(Ok(own)) => own,
            Ok(Err(e)) if p.backend.table_gone(&e) => {
                let cause = format!(
                    "the table of {} is gone ({e}): dropped or restored from a dump, so another \
                     process may take worker {id} with no floor",
                    p.shown
                );
                tracing::warn!(worker_id = p.worker_id, %cause, "worker-id lease lost; issuing stops");
                p.limit.lose();
                return;
            }
            // Unreachable or silent: nothing is known about the row, issuing goes on up
            // to the bound it holds (rule 5); the reason is kept in the log.
            Ok(Err(e)) => {
                tracing::debug!(worker_id = p.worker_id, error = %e, "worker-id lease poll failed");
                continue;
            }
            Err(_) => continue,
        };
        let why = {
            let w = lock(&p.written);
            if w.writes != before {
                continue; // a renew straddled the read
            }
            match lost_because(&own, &p.token, &w.accepted) {
                Some(why) => why,
                None => continue,
            }
        };
        tracing::warn!(
            worker_id = p.worker_id,
            cause = %format!("the row of worker {id} in {} {why}", p.shown),
            "worker-id lease lost; issuing stops"
        );
        p.limit.lose();
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_lost_when_deleted_taken_or_rewritten() {
        let mine = |b| {
            Some(Own {
                holder: "t".into(),
                bound_ms: b,
            })
        };
        assert_eq!(lost_because(&mine(Some(5)), "t", &[Some(5)]), None);
        assert!(lost_because(&None, "t", &[Some(5)]).is_some());
        assert!(lost_because(&mine(Some(6)), "t", &[Some(5)]).is_some());
        assert!(lost_because(&mine(Some(5)), "u", &[Some(5)]).is_some());
        assert_eq!(lost_because(&mine(None), "t", &[None]), None);
    }

    #[test]
    fn an_unconfirmed_renew_keeps_both_values_until_one_commits() {
        let w = Written::new(Some(1));
        let mut w = lock(&w);
        w.begin(2);
        assert_eq!(w.writes % 2, 1);
        w.end(2, false);
        assert_eq!(w.accepted, vec![Some(1), Some(2)]);
        w.begin(3);
        w.end(3, true);
        assert_eq!(w.accepted, vec![Some(3)]);
        assert_eq!(w.writes % 2, 0);
    }
}
