//! Taking a row and its lease, renewing it, letting it go: the statements of the
//! `mysql` registry (the rules they follow are in the module doc of `mysql`).

use std::sync::Mutex;
use std::time::Duration;

use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Row};

use super::watch::{lock, table_gone, Written};
use super::{MysqlRegistry, FIRST_TERM};
use crate::error::{Error, Result};
use crate::snowflake::registry::host_lock::Holder;
use crate::snowflake::registry::{fence, system_now_ms, Lease};

/// How many values of `max_timestamp` a holder accepts as its own (see `Written`).
const ACCEPTED: usize = 4;

/// A row and its lease, taken; the takeover watch still to run.
pub(super) struct Taken {
    pub(super) lease: Lease,
    /// `max_timestamp` as found, after the lease was ours.
    pub(super) seen: Option<i64>,
    /// How long to watch `max_timestamp` before the first id (rule 3); `None` for a
    /// row this process has just inserted.
    pub(super) watch: Option<Duration>,
}

/// The lease row as the previous holder left it.
struct Prior {
    /// No lease row existed for the worker id: nothing says who used it last.
    missing: bool,
    bound_ms: Option<i64>,
    last_ts: Option<i64>,
    /// The database's clock when the lease was taken.
    now_ms: i64,
}

impl MysqlRegistry {
    async fn select(&self, conn: &mut MySqlConnection) -> Result<Option<(i64, Option<i64>)>> {
        let row =
            sqlx::query("SELECT id, max_timestamp FROM leaf_workerid_alloc WHERE ip_port = ?")
                .bind(self.ip_port())
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.db_err("select leaf_workerid_alloc", e))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let id: i64 = r.try_get("id").map_err(|e| self.db_err("read id", e))?;
                let ts: Option<i64> = r
                    .try_get("max_timestamp")
                    .map_err(|e| self.db_err("read max_timestamp", e))?;
                Ok(Some((id, ts)))
            }
        }
    }

    pub(super) async fn take(
        &self,
        conn: &mut MySqlConnection,
        max_worker_id: u32,
    ) -> Result<Taken> {
        self.ensure_schema(conn).await?;
        let (id, inserted) = match self.select(conn).await? {
            Some((id, _)) => (id, false),
            None => {
                // The database's clock, so a local clock far ahead (refused by the skew
                // check right after) does not become the floor; but never ahead of ours
                // either (fence rule 4: a fork server on this host must not read a future
                // time there).
                let inserted = sqlx::query(
                    "INSERT INTO leaf_workerid_alloc (ip_port, ip, port, max_timestamp, create_time, update_time) \
                     VALUES (?, ?, ?, LEAST(CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), ?), NOW(), NOW())",
                )
                .bind(self.ip_port())
                .bind(&self.ip)
                .bind(&self.port)
                .bind(system_now_ms())
                .execute(&mut *conn)
                .await;
                match inserted {
                    Ok(done) => (done.last_insert_id() as i64, true),
                    // A concurrent start (a leafid, or a fork server) inserted this
                    // ip_port first: its row is ours too, once watched.
                    Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                        let (id, _) = self.select(conn).await?.ok_or_else(|| {
                            Error::registry(format!(
                                "MySQL {}: row for {} vanished right after a duplicate-key insert",
                                self.shown_url,
                                self.ip_port()
                            ))
                        })?;
                        (id, false)
                    }
                    Err(e) => return Err(self.db_err("insert into leaf_workerid_alloc", e)),
                }
            }
        };
        if id < 0 || id > max_worker_id as i64 {
            return Err(Error::WorkerIdExhausted {
                pool: format!(
                    "MySQL {} table leaf_workerid_alloc (row id {id} for {ip_port}; AUTO_INCREMENT never reuses \
                     an id, so deleting rows frees nothing: hand a retired identity's row to this one with \
                     UPDATE leaf_workerid_alloc SET ip_port='{ip_port}', ip='{ip}', port='{port}' WHERE ip_port='<retired ip:port>' \
                     (its max_timestamp stays as the floor), or use zookeeper-recycle:// whose ids come back)",
                    self.shown_url,
                    ip_port = self.ip_port(),
                    ip = self.ip,
                    port = self.port,
                ),
                size: max_worker_id + 1,
            });
        }
        let prior = self.take_lease(conn, id).await?;
        // The floor is read after the lease is ours: any earlier holder's last renew
        // committed before, and no later one can commit.
        let seen = match self.select(conn).await? {
            Some((row_id, ts)) if row_id == id => ts,
            _ => {
                let _ = self.drop_lease(conn, id).await;
                return Err(fence::lost(
                    id as u32,
                    format!(
                        "the leaf_workerid_alloc row of {} changed while it was being taken",
                        self.ip_port()
                    ),
                ));
            }
        };
        // NULL (a row written by hand, or no bound of leafid's own) is no floor.
        let floor = seen
            .unwrap_or(i64::MIN)
            .max(prior.bound_ms.unwrap_or(i64::MIN));
        // Fence rule 5 needs no wait here: a floor that is not recorded (no lease row,
        // a foreign value above leafid's bound) makes the generator start above the
        // database's clock plus the reach, beyond any bound a cut-off holder can have.
        let watch = (!inserted).then(|| takeover_watch(&prior, seen));
        tracing::info!(worker_id = id, ip_port = %self.ip_port(), floor, "worker id from leaf_workerid_alloc");
        Ok(Taken {
            lease: Lease {
                worker_id: id as u32,
                floor_ms: floor,
                // A lease row with no history has no bound of leafid's; a row inserted
                // just now holds our own `max_timestamp`, not a foreign one.
                floor_recorded: fence::floor_recorded(
                    if prior.missing { None } else { prior.bound_ms },
                    if inserted { None } else { seen },
                ),
                location: format!(
                    "mysql {} leaf_workerid_alloc id={id} ({})",
                    self.shown_url,
                    self.ip_port()
                ),
            },
            seen,
            watch,
        })
    }

    /// Takes the lease on worker `id`, or fails with `WorkerIdInUse` naming its holder.
    /// Returns the lease row as the previous holder left it, read under the row lock
    /// that the take itself holds, so no holder can come and go in between.
    async fn take_lease(&self, conn: &mut MySqlConnection, id: i64) -> Result<Prior> {
        let me = serde_json::to_string(&Holder::this_process()).expect("a holder serializes");
        // Outside the transaction: an INSERT IGNORE on an existing key takes a shared
        // lock, and two starts upgrading theirs to the FOR UPDATE below would deadlock.
        // One row inserted: there was no lease row (rule 5).
        let created = sqlx::query(
            "INSERT IGNORE INTO leafid_worker_lease (worker_id, ip_port, holder, holder_info, expires_at) \
             VALUES (?, ?, '', '', '1970-01-02 00:00:00')",
        )
        .bind(id)
        .bind(self.ip_port())
        .execute(&mut *conn)
        .await
        .map_err(|e| self.db_err("insert into leafid_worker_lease", e))?
        .rows_affected()
            > 0;
        let mut tx = conn.begin().await.map_err(|e| self.db_err("begin", e))?;
        let row = sqlx::query(
            "SELECT holder, holder_info, bound_ms, last_ts, (expires_at < NOW(3)) AS expired, \
             CAST(TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) / 1000 AS SIGNED) AS left_ms \
             FROM leafid_worker_lease WHERE worker_id = ? FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.db_err("read leafid_worker_lease", e))?
        .ok_or_else(|| {
            fence::lost(
                id as u32,
                "the lease row was deleted while it was being taken",
            )
        })?;
        let get = |e| self.db_err("read leafid_worker_lease", e);
        let token: String = row.try_get("holder").map_err(get)?;
        let info: String = row.try_get("holder_info").map_err(get)?;
        let expired: bool = row.try_get::<i64, _>("expired").map_err(get)? != 0;
        let left_ms: i64 = row.try_get("left_ms").map_err(get)?;
        let mut prior = Prior {
            // Also a row another start inserted just before us and has not taken yet.
            missing: created
                || (token.is_empty()
                    && row
                        .try_get::<Option<i64>, _>("bound_ms")
                        .map_err(get)?
                        .is_none()),
            bound_ms: row.try_get("bound_ms").map_err(get)?,
            last_ts: row.try_get("last_ts").map_err(get)?,
            now_ms: 0,
        };
        let holder: Option<Holder> = serde_json::from_str(&info).ok();
        // A holder of this host that has died (SIGKILL, crash, not reaped yet): its
        // lease is stale now, and its bound is the floor. The generator holds this
        // host's identity lock, so no live generator of this host holds the row.
        let dead = holder
            .as_ref()
            .is_some_and(|h| !token.is_empty() && crate::snowflake::registry::pool::dead_here(h));
        if token.is_empty() || expired || dead {
            sqlx::query(
                "UPDATE leafid_worker_lease SET holder = ?, holder_info = ?, ip_port = ?, \
                 expires_at = NOW(3) + INTERVAL ? MICROSECOND WHERE worker_id = ?",
            )
            .bind(&self.token)
            .bind(&me)
            .bind(self.ip_port())
            .bind(FIRST_TERM.as_micros() as i64)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.db_err("take leafid_worker_lease", e))?;
            let reading = self.read_clock(&mut *tx).await?;
            tx.commit().await.map_err(|e| self.db_err("commit", e))?;
            prior.now_ms = reading.registry_ms;
            if dead && !expired {
                tracing::info!(
                    worker_id = id,
                    "took over the lease of a process of this host that has exited"
                );
            }
            self.keep_reading(reading);
            return Ok(prior);
        }
        drop(tx); // rolls back
        let who = match &holder {
            Some(h) => h.to_string(),
            None => "another process".into(),
        };
        Err(Error::WorkerIdInUse {
            identity: format!(
                "MySQL {} leaf_workerid_alloc row {id} ({})",
                self.shown_url,
                self.ip_port()
            ),
            worker_id: u32::try_from(id).ok(),
            holder: format!("{who}, whose lease runs {left_ms} ms more unless renewed"),
            advice: crate::snowflake::registry::IN_USE_ADVICE.into(),
        })
    }

    /// Ends this registry's lease on worker `id` (if it still holds it). `last_ts` stays:
    /// with `holder = ''` it tells the next holder that a leafid let go of this value.
    pub(super) async fn drop_lease(&self, conn: &mut MySqlConnection, id: i64) -> Result<()> {
        sqlx::query(
            "UPDATE leafid_worker_lease SET holder = '', expires_at = '1970-01-02 00:00:00' \
             WHERE worker_id = ? AND holder = ?",
        )
        .bind(id)
        .bind(&self.token)
        .execute(&mut *conn)
        .await
        .map_err(|e| self.db_err("release leafid_worker_lease", e))?;
        Ok(())
    }

    /// One renew: extends the lease and records `bound_ms` in leafid's table, and writes
    /// [`fence::foreign_timestamp`] of it into the fork's `max_timestamp`, on condition
    /// that it still holds a value this holder wrote (rule 1).
    ///
    /// Affected rows: sqlx connects with `CLIENT_FOUND_ROWS` (sqlx-mysql's
    /// `MySqlStream::with_socket`), so MySQL and MariaDB report the rows the WHERE
    /// *matched*, not the rows whose value changed: writing the value already there
    /// (a final renew equal to the last one, two renews in one millisecond) counts 1, and
    /// 0 means only that the condition failed. `registry_mysql.rs` checks both.
    pub(super) async fn write(
        &self,
        conn: &mut MySqlConnection,
        lease: &Lease,
        bound_ms: i64,
        written: &Mutex<Written>,
    ) -> Result<()> {
        let ts = fence::foreign_timestamp(bound_ms);
        let accepted = {
            let mut w = lock(written);
            w.writes += 1; // odd: a write in flight, the poll task holds off
            if !w.accepted.contains(&Some(ts)) {
                w.accepted.push(Some(ts));
            }
            // Unconfirmed writes pile up only while renews fail, which ends the lease
            // within the look-ahead anyway; the last few are enough.
            let excess = w.accepted.len().saturating_sub(ACCEPTED);
            w.accepted.drain(..excess);
            w.accepted.clone()
        };
        let result = self.write_tx(conn, lease, bound_ms, ts, &accepted).await;
        let mut w = lock(written);
        w.writes += 1;
        if result.is_ok() {
            w.accepted = vec![Some(ts)];
        }
        // On failure both values stay accepted: the commit's outcome may be unknown.
        result
    }

    /// A statement error of a holder's write: a dropped table is its records missing
    /// (rule 2), anything else the database unavailable.
    fn write_err(&self, worker_id: u32, what: &str, e: sqlx::Error) -> Error {
        if table_gone(&e) {
            fence::lost(
                worker_id,
                format!(
                    "a table of this registry is gone (MySQL {}: {e}): restored from a dump or                      dropped, so another process may take this worker id with no floor",
                    self.shown_url
                ),
            )
        } else {
            self.db_err(what, e)
        }
    }

    async fn write_tx(
        &self,
        conn: &mut MySqlConnection,
        lease: &Lease,
        bound_ms: i64,
        ts: i64,
        accepted: &[Option<i64>],
    ) -> Result<()> {
        // The lease runs LEASE_TERM past now, or to the bound when nearer (`mysql`'s
        // module doc says why it need not last to the bound).
        let term_us = crate::snowflake::registry::pool::lease_term_ms(bound_ms, system_now_ms())
            .saturating_mul(1000);
        let mut tx = conn.begin().await.map_err(|e| self.db_err("begin", e))?;
        let extended = sqlx::query(
            "UPDATE leafid_worker_lease SET expires_at = NOW(3) + INTERVAL ? MICROSECOND, \
             bound_ms = ?, last_ts = ? WHERE worker_id = ? AND holder = ?",
        )
        .bind(term_us)
        .bind(bound_ms)
        .bind(ts)
        .bind(lease.worker_id as i64)
        .bind(&self.token)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.write_err(lease.worker_id, "renew leafid_worker_lease", e))?;
        if extended.rows_affected() == 0 {
            return Err(fence::lost(
                lease.worker_id,
                format!(
                    "the lease in leafid_worker_lease (MySQL {}) was taken by another process or deleted",
                    self.shown_url
                ),
            ));
        }
        // `ip_port` in the WHERE: a worker id never overwrites another identity's row.
        // The value condition: no write of another writer is overwritten unseen. The
        // list holds the last confirmed value and any write whose commit was never
        // confirmed (a timeout), padded with the last one.
        let mut q = sqlx::query(
            "UPDATE leaf_workerid_alloc SET max_timestamp = ?, update_time = NOW() \
             WHERE id = ? AND ip_port = ? AND (max_timestamp <=> ? OR max_timestamp <=> ? \
             OR max_timestamp <=> ? OR max_timestamp <=> ?)",
        )
        .bind(ts)
        .bind(lease.worker_id as i64)
        .bind(self.ip_port());
        for i in 0..ACCEPTED {
            q = q.bind(accepted.get(i).or(accepted.last()).copied().flatten());
        }
        let written = q
            .execute(&mut *tx)
            .await
            .map_err(|e| self.write_err(lease.worker_id, "update max_timestamp", e))?;
        if written.rows_affected() == 0 {
            let now = self.select(&mut tx).await.ok().flatten();
            return Err(fence::lost(
                lease.worker_id,
                match now {
                    Some((row_id, ts)) if row_id == lease.worker_id as i64 => format!(
                        "max_timestamp of leaf_workerid_alloc row id={row_id} (MySQL {}) is {}, not \
                         a value this holder wrote: a process that keeps writing max_timestamp, most \
                         likely the fork's Java server, uses this worker id",
                        self.shown_url,
                        ts.map_or_else(|| "NULL".into(), |t| t.to_string())
                    ),
                    _ => format!(
                        "row id={} ip_port={} of leaf_workerid_alloc (MySQL {}) is gone or belongs \
                         to another identity",
                        lease.worker_id,
                        self.ip_port(),
                        self.shown_url
                    ),
                },
            ));
        }
        let reading = self.read_clock(&mut *tx).await?;
        tx.commit().await.map_err(|e| self.db_err("commit", e))?;
        self.keep_reading(reading);
        Ok(())
    }
}

/// Fence rule 3 on a row this process did not insert: how long a fork server could be
/// live on it and still unseen. A fork server writes `max_timestamp` 1 s after its
/// start and every 3 s after, and a leafid's renew is conditional on the value it last
/// wrote. So when the value there is a leafid's last (`last_ts`), no fork server wrote
/// since, and only one started in the last moments can be live: it uploads within
/// [`fence::TAKEOVER_WATCH_AFTER_RELEASE`]. When a fork server (or a hand, or nothing
/// known) wrote it last, a live one writes again [`fence::FOREIGN_UPLOAD_INTERVAL`]
/// after its stamp: watch until [`fence::TAKEOVER_WATCH`] after that stamp (by the
/// database's clock), never less than the former nor more than the latter. A NULL
/// stamp has no time: the full watch.
fn takeover_watch(prior: &Prior, seen: Option<i64>) -> Duration {
    let short = fence::TAKEOVER_WATCH_AFTER_RELEASE;
    if !prior.missing && prior.last_ts.is_some() && prior.last_ts == seen {
        return short;
    }
    match seen {
        None => fence::TAKEOVER_WATCH,
        Some(stamp) => {
            let until = stamp
                .saturating_add(fence::TAKEOVER_WATCH.as_millis() as i64)
                .saturating_sub(prior.now_ms)
                .clamp(0, fence::TAKEOVER_WATCH.as_millis() as i64);
            Duration::from_millis(until as u64).max(short)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prior(missing: bool, last_ts: Option<i64>) -> Prior {
        Prior {
            missing,
            bound_ms: last_ts,
            last_ts,
            now_ms: 100_000,
        }
    }

    #[test]
    fn a_takeover_watches_only_while_a_fork_server_could_be_live_and_unseen() {
        let short = fence::TAKEOVER_WATCH_AFTER_RELEASE;
        // A leafid wrote last (released, expired or dead): a fork server started since.
        assert_eq!(
            takeover_watch(&prior(false, Some(90_000)), Some(90_000)),
            short
        );
        // A fork server's stamp 10 s old: a live one would have written again.
        assert_eq!(takeover_watch(&prior(true, None), Some(90_000)), short);
        // A fork server's stamp 1 s old: until 3.5 s after it.
        assert_eq!(
            takeover_watch(&prior(false, Some(80_000)), Some(99_000)),
            Duration::from_millis(2_500)
        );
        // A stamp in the future (its clock ahead) or NULL: the full watch.
        assert_eq!(
            takeover_watch(&prior(true, None), Some(200_000)),
            fence::TAKEOVER_WATCH
        );
        assert_eq!(
            takeover_watch(&prior(true, None), None),
            fence::TAKEOVER_WATCH
        );
    }
}
