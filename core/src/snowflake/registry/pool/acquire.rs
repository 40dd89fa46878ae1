//! Taking a worker id: a free row of the pool (or this identity's row), else a new row,
//! else the exhaustion error naming the live holders. Uniqueness is the database's: a
//! take is an `UPDATE` conditional on the holder read and on the row being free by the
//! database's clock, an insert races on the primary key `(pool, worker_id)` (and, for
//! identities, the unique key `(pool, identity)`); a lost race reads the pool again.

use super::rows::{Slot, Taker};
use super::{Claim, PoolRegistry, FIRST_TERM};
use crate::error::{Error, Result};
use crate::snowflake::registry::fence;
use crate::snowflake::registry::host_lock::Holder;

/// How many times an acquire reads the pool again after losing a race for a row.
const ATTEMPTS: usize = 32;

/// How many live holders an exhaustion error names.
const NAMED: usize = 8;

/// A row taken: its worker id and the bound its last holder left (the floor).
pub(super) struct Taken {
    pub(super) worker_id: u32,
    pub(super) bound_ms: Option<i64>,
}

/// What one reading of the pool decided.
enum Step {
    Take(Slot, bool),
    Insert(i64),
}

impl PoolRegistry {
    /// How many ids the pool has under a layout whose largest worker id is `max`.
    fn size(&self, max: u32) -> Result<u32> {
        match &self.claim {
            Claim::Any { size: Some(n), .. } if *n > max.saturating_add(1) => {
                Err(Error::InvalidConfig(format!(
                    "pool_size={n} of {} is more than the layout's {} worker ids; use at most {}",
                    self.shown(),
                    max as u64 + 1,
                    max as u64 + 1
                )))
            }
            Claim::Any { size: Some(n), .. } => Ok(*n),
            _ => Ok(max.saturating_add(1)),
        }
    }

    pub(super) async fn take(&self, max_worker_id: u32) -> Result<Taken> {
        let size = self.size(max_worker_id)?;
        self.call("create table leafid_worker_pool", |b| b.ensure_schema())
            .await?;
        let me = serde_json::to_string(&Holder::this_process()).expect("a holder serializes");
        let taker = Taker {
            token: &self.token,
            info: &me,
            term_ms: FIRST_TERM.as_millis() as i64,
        };
        let pool = self.pool_name();
        for _ in 0..ATTEMPTS {
            let (slots, now) = self.call("read the pool", |b| b.list(pool)).await?;
            let taken = match self.choose(&slots, now, size)? {
                Step::Take(slot, force) => self
                    .call("take a worker id", |b| b.take(pool, &slot, force, &taker))
                    .await?
                    .then_some(slot.worker_id),
                Step::Insert(id) => {
                    let identity = match &self.claim {
                        Claim::Identity { ip_port } => Some(ip_port.as_str()),
                        Claim::Any { .. } => None,
                    };
                    self.call("insert a worker id", |b| {
                        b.insert(pool, id, identity, &taker)
                    })
                    .await?
                    .then_some(id)
                }
            };
            let Some(id) = taken else { continue };
            // The floor is read once the row is ours: every earlier holder's renew was
            // conditional on its own token, so none can commit after the take.
            let own = self
                .call("read the taken row", |b| b.read_own(pool, id))
                .await?;
            let bound_ms = match own {
                Some(o) if o.holder == self.token => o.bound_ms,
                _ => {
                    return Err(fence::lost(
                        id as u32,
                        format!(
                            "the row of worker {id} in {} changed while it was being taken",
                            self.shown()
                        ),
                    ))
                }
            };
            // Rule 5: no bound recorded (a new row, or one an operator rewrote) is an
            // unrecorded floor, which the generator puts above every bound any holder
            // can have written; nothing waits here.
            tracing::info!(worker_id = id, pool = %self.shown(), floor = bound_ms, "worker id leased");
            return Ok(Taken {
                worker_id: id as u32,
                bound_ms,
            });
        }
        Err(Error::registry(format!(
            "{}: lost the race for a worker id {ATTEMPTS} times in a row (many processes starting at once); retry",
            self.shown()
        )))
    }

    /// Which row to try, from one reading of the pool.
    fn choose(&self, slots: &[Slot], now: i64, size: u32) -> Result<Step> {
        let present = |id: i64| slots.iter().any(|s| s.worker_id == id);
        // The first few ids no row has yet, one picked at random so that processes
        // starting together rarely race for the same one.
        let missing: Vec<i64> = (0..size as i64).filter(|i| !present(*i)).take(8).collect();
        let fresh = (!missing.is_empty()).then(|| missing[fastrand::usize(..missing.len())]);
        match &self.claim {
            Claim::Identity { ip_port } => {
                match slots
                    .iter()
                    .find(|s| s.identity.as_deref() == Some(ip_port))
                {
                    // An identity's row edited to a value no worker id has: refused
                    // before it is taken, never cast to a small id.
                    Some(s) if u32::try_from(s.worker_id).is_err() => Err(Error::Malformed {
                        what: "leafid_worker_pool row",
                        path: format!("{} identity {ip_port}", self.shown()),
                        reason: format!(
                            "worker_id {} is not a worker id; delete the row (after \
                             stopping its holder) so the identity gets a new one",
                            s.worker_id
                        ),
                    }),
                    Some(s) if s.free(now) => Ok(Step::Take(s.clone(), false)),
                    Some(s) if holder_dead(s) || self.ours(s) => Ok(Step::Take(s.clone(), true)),
                    Some(s) => Err(Error::WorkerIdInUse {
                        identity: format!("{} worker {}", self.shown(), s.worker_id),
                        worker_id: u32::try_from(s.worker_id).ok(),
                        holder: live_holder(s, now),
                        advice: crate::snowflake::registry::IN_USE_ADVICE.into(),
                    }),
                    None => fresh
                        .map(Step::Insert)
                        .ok_or_else(|| self.exhausted(slots, now, size)),
                }
            }
            Claim::Any { .. } => {
                let free: Vec<&Slot> = slots
                    .iter()
                    .filter(|s| s.in_pool(size) && s.free(now))
                    .collect();
                // A row still naming this registry (a lease it lost to a rewritten bound,
                // or whose release failed) is its own to take back first.
                let mine = slots.iter().find(|s| s.in_pool(size) && self.ours(s));
                if let Some(s) = mine {
                    return Ok(Step::Take(s.clone(), true));
                }
                if !free.is_empty() {
                    let s = free[fastrand::usize(..free.len())];
                    return Ok(Step::Take(s.clone(), false));
                }
                fresh
                    .map(Step::Insert)
                    .ok_or_else(|| self.exhausted(slots, now, size))
            }
        }
    }

    /// True when `s` still names this registry's token: the take stays conditional on
    /// it doing so, so no other holder can be displaced.
    fn ours(&self, s: &Slot) -> bool {
        s.holder == self.token
    }

    /// Every id of the pool leased: the error names the size and the live holders.
    fn exhausted(&self, slots: &[Slot], now: i64, size: u32) -> Error {
        let live: Vec<String> = slots
            .iter()
            .filter(|s| s.in_pool(size) && !s.free(now))
            .map(|s| format!("worker {}: {}", s.worker_id, live_holder(s, now)))
            .collect();
        let more = live.len().saturating_sub(NAMED);
        let mut named = live.into_iter().take(NAMED).collect::<Vec<_>>().join("; ");
        if more > 0 {
            named.push_str(&format!("; and {more} more"));
        }
        Error::WorkerIdExhausted {
            pool: format!(
                "{} (pool size {size}; live holders: {named}; a holder that died frees its id \
                 once its lease has passed, {} s after its last renew at most; raise ?pool_size= \
                 or stop a holder)",
                self.shown(),
                super::LEASE_TERM.as_secs()
            ),
            size,
        }
    }
}

/// The holder of a row, for messages: host and pid, and how long its lease runs.
fn live_holder(s: &Slot, now: i64) -> String {
    let who = serde_json::from_str::<Holder>(&s.holder_info)
        .map(|h| h.to_string())
        .unwrap_or_else(|_| "another process".into());
    format!(
        "{who}, lease {} ms more unless renewed",
        (s.expires_ms - now).max(0)
    )
}

/// A holder of this host (and pid namespace) whose process has exited (SIGKILL, a
/// crash): an identity's restart takes its row at once, the floor still its last bound.
fn holder_dead(s: &Slot) -> bool {
    !s.holder.is_empty()
        && serde_json::from_str::<Holder>(&s.holder_info).is_ok_and(|h| super::dead_here(&h))
}
