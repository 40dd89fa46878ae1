//! Watching `max_timestamp` for another writer (fence rules 2 and 3).
//!
//! The fork's Java server writes `UPDATE leaf_workerid_alloc SET max_timestamp = now
//! WHERE id = ?` 1 s after it starts and every 3 s after, without reading anything: a
//! value there that this holder did not write is another writer, almost always that
//! server. Two watches look for it:
//! - [`MysqlRegistry::watch_takeover`]: a newcomer taking a row a fork server may be
//!   using unseen polls it before its first id, for at most
//!   [`fence::TAKEOVER_WATCH_AFTER_RELEASE`] (longer only until [`fence::TAKEOVER_WATCH`]
//!   after a fork server's own recent stamp; `lease.rs` decides);
//! - [`poll_held`]: a live holder's task on the background runtime, polling every
//!   [`POLL`], lowers the generator's [`IssueLimit`] at once on a foreign value, a
//!   deleted or re-assigned row, a lease row that is no longer this holder's, or a
//!   table that no longer exists (`ER_NO_SUCH_TABLE`, a restore from a dump), instead
//!   of waiting for the next heartbeat's conditional write to find it.
//!
//! Fence rule 5: a poll that fails or gets no answer (the database down or silent)
//! proves nothing and changes nothing. The holder keeps issuing up to the bound the
//! lease row holds, and the generator's limit stops it there; a newcomer floors at that
//! bound, or above any bound when it finds no lease row.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::Row;

use super::{MysqlRegistry, CALL_TIMEOUT};
use crate::error::{Error, Result};
use crate::snowflake::registry::{fence, IssueLimit};

/// How often both watches read the row: well inside the fork's 1 s first upload.
pub(super) const POLL: Duration = Duration::from_millis(250);

/// What `max_timestamp` may hold as far as this holder knows, shared by its renews and
/// its poll task.
#[derive(Debug)]
pub(super) struct Written {
    /// The value this holder last wrote (or found at takeover), plus one being written
    /// whose outcome is not known yet. Any other value is a foreign write. `None` is SQL
    /// NULL (a row written by hand).
    pub(super) accepted: Vec<Option<i64>>,
    /// Bumped before and after every write of this holder: a poll that straddled one
    /// cannot tell which value it read and proves nothing.
    pub(super) writes: u64,
}

impl Written {
    pub(super) fn new(seen: Option<i64>) -> Arc<Mutex<Written>> {
        Arc::new(Mutex::new(Written {
            accepted: vec![seen],
            writes: 0,
        }))
    }
}

/// `ER_NO_SUCH_TABLE` (1146): a table of this registry was dropped (a restore from a
/// dump, a migration). For a holder that is its own record missing: rule 2, a lost
/// lease, never "unavailable" and never ignored.
pub(super) fn table_gone(e: &sqlx::Error) -> bool {
    crate::db::mysql::error_number(e) == Some(crate::db::mysql::ER_NO_SUCH_TABLE)
}

/// Locks `w`; a poisoned lock still holds valid values (plain data, no invariant spans
/// an await).
pub(super) fn lock(w: &Mutex<Written>) -> std::sync::MutexGuard<'_, Written> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// One reading of a held row: its `max_timestamp` when it is still this identity's row,
/// and whether the lease row still names this holder.
struct Reading {
    row: Option<Option<i64>>,
    ours: bool,
}

async fn read(pool: &MySqlPool, id: i64, ip_port: &str, token: &str) -> sqlx::Result<Reading> {
    let row = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM leaf_workerid_alloc WHERE id = ? AND ip_port = ?) AS present, \
         (SELECT max_timestamp FROM leaf_workerid_alloc WHERE id = ? AND ip_port = ?) AS ts, \
         (SELECT COUNT(*) FROM leafid_worker_lease WHERE worker_id = ? AND holder = ?) AS ours",
    )
    .bind(id)
    .bind(ip_port)
    .bind(id)
    .bind(ip_port)
    .bind(id)
    .bind(token)
    .fetch_one(pool)
    .await?;
    let present: i64 = row.try_get("present")?;
    let ts: Option<i64> = row.try_get("ts")?;
    let ours: i64 = row.try_get("ours")?;
    Ok(Reading {
        row: (present > 0).then_some(ts),
        ours: ours > 0,
    })
}

/// What a live holder's poll task needs, owned (the task outlives no registry call).
pub(super) struct Poll {
    pub(super) pool: MySqlPool,
    pub(super) worker_id: u32,
    pub(super) ip_port: String,
    pub(super) token: String,
    pub(super) shown_url: String,
    pub(super) written: Arc<Mutex<Written>>,
    pub(super) limit: Arc<IssueLimit>,
}

/// Polls a held row every [`POLL`] until it finds it lost, then lowers the limit (rule
/// 2: a record of its own changed or missing is a lost lease, at once). A failed read
/// (database down) proves nothing and changes nothing (rule 5). Aborted by `release`.
pub(super) async fn poll_held(p: Poll) {
    let id = p.worker_id as i64;
    loop {
        tokio::time::sleep(POLL).await;
        let before = lock(&p.written).writes;
        if before % 2 == 1 {
            continue; // a write of ours is in flight
        }
        let outcome =
            tokio::time::timeout(CALL_TIMEOUT, read(&p.pool, id, &p.ip_port, &p.token)).await;
        let reading = match outcome {
            Ok(Ok(r)) => r,
            Ok(Err(e)) if table_gone(&e) => {
                let cause = format!(
                    "a table of this registry is gone (MySQL {}: {e}): restored from a dump or \
                     dropped, so another process may take worker {id} with no floor",
                    p.shown_url
                );
                tracing::warn!(worker_id = p.worker_id, %cause, "worker-id lease lost; issuing stops");
                p.limit.lose();
                return;
            }
            // A failed or slow poll: nothing is known about the row; issuing goes on up
            // to the bound it holds (rule 5). The reason is kept in the log.
            Ok(Err(e)) => {
                tracing::debug!(worker_id = p.worker_id, error = %e, "worker-id lease poll failed");
                continue;
            }
            Err(_) => continue,
        };
        let cause = {
            let w = lock(&p.written);
            if w.writes != before {
                continue; // a write of ours straddled the read
            }
            match reading.row {
                None => format!(
                    "row id={id} ip_port={} of leaf_workerid_alloc (MySQL {}) was deleted or handed \
                     to another identity",
                    p.ip_port, p.shown_url
                ),
                Some(_) if !reading.ours => format!(
                    "the lease of worker {id} in leafid_worker_lease (MySQL {}) was deleted or \
                     rewritten by another process",
                    p.shown_url
                ),
                Some(ts) if !w.accepted.contains(&ts) => format!(
                    "max_timestamp of leaf_workerid_alloc row id={id} (MySQL {}) is now {}, not the \
                     value this holder wrote: a process that keeps writing max_timestamp, most \
                     likely the fork's Java server, uses this worker id",
                    p.shown_url,
                    show(ts)
                ),
                Some(_) => continue,
            }
        };
        tracing::warn!(worker_id = p.worker_id, %cause, "worker-id lease lost; issuing stops");
        p.limit.lose();
        return;
    }
}

fn show(ts: Option<i64>) -> String {
    ts.map_or_else(|| "NULL".to_string(), |t| t.to_string())
}

impl MysqlRegistry {
    /// Fence rule 3: before the first id on row `id`, watches `max_timestamp` for `watch`;
    /// a change means a server that kept writing it while the lease said it was free.
    pub(super) async fn watch_takeover(
        &self,
        id: i64,
        seen: Option<i64>,
        watch: Duration,
    ) -> Result<()> {
        tracing::info!(
            worker_id = id,
            ip_port = %self.ip_port(),
            watch_ms = watch.as_millis() as u64,
            "row not released by a leafid holder; checking that no fork server still writes its max_timestamp"
        );
        let deadline = tokio::time::Instant::now() + watch;
        loop {
            tokio::time::sleep(
                POLL.min(deadline.saturating_duration_since(tokio::time::Instant::now())),
            )
            .await;
            let reading = tokio::time::timeout(
                CALL_TIMEOUT,
                read(self.pool(), id, &self.ip_port(), &self.token),
            )
            .await
            .map_err(|_| {
                Error::registry(format!(
                    "MySQL {}: takeover watch: no answer within {CALL_TIMEOUT:?}",
                    self.shown_url
                ))
            })?
            .map_err(|e| {
                if table_gone(&e) {
                    fence::lost(id as u32, format!("a table of this registry is gone: {e}"))
                } else {
                    self.db_err("takeover watch", e)
                }
            })?;
            match reading.row {
                None => {
                    return Err(fence::lost(
                        id as u32,
                        format!(
                            "the leaf_workerid_alloc row of {} was deleted or handed to another \
                             identity while it was being taken",
                            self.ip_port()
                        ),
                    ))
                }
                Some(ts) if ts != seen => {
                    return Err(Error::WorkerIdInUse {
                        identity: format!(
                            "MySQL {} leaf_workerid_alloc row {id} ({})",
                            self.shown_url,
                            self.ip_port()
                        ),
                        worker_id: u32::try_from(id).ok(),
                        holder: format!(
                            "a process that keeps writing max_timestamp ({} then {} within {watch:?}), \
                             most likely the fork's Java server (leaf.snowflake.mode=mysql) with this \
                             ip:port",
                            show(seen),
                            show(ts)
                        ),
                        advice: "give this process an ip:port no fork server uses (?ip= / ?port=), \
                                 or stop the fork's server first"
                            .into(),
                    })
                }
                Some(_) if !reading.ours => {
                    return Err(fence::lost(
                        id as u32,
                        "the lease row in leafid_worker_lease was deleted or rewritten while it was being taken",
                    ))
                }
                Some(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
        }
    }
}
