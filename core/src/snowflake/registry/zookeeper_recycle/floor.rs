//! Floors: `last/{id}` records, the pool record in `last/`, and the floor a newcomer
//! takes when `last/{id}` is missing.
//!
//! Every holder writes `last/{id}` before its first id (the generator raises its limit
//! only after a bound was written). So `last/{id}` is missing either because no holder
//! ever used `id`, or because an operator deleted it (`delete`, `deleteall`, a
//! migration). The two must not be confused: the holder of a deleted floor may still
//! issue up to its bound, which is up to its lookahead ahead of its clock.
//!
//! The pool record (the data of `last/`, `{"floors":N,"ahead_ms":A}`) tells them apart:
//! `floors` counts the `last/{id}` nodes ever created (each creation bumps it in the
//! same transaction), and `ahead_ms` is the largest lookahead (bound minus clock) any
//! holder wrote (raised in the same transaction as the bound that exceeds it). When
//! `last/` has fewer children than `floors`, a floor was deleted, and a missing
//! `last/{id}` may be that one: the newcomer takes
//! `now + ahead_ms + `[`TAKEOVER_MARGIN`] as its floor, above anything its last holder
//! may have issued (give or take the clock difference between the two hosts, which the
//! generator's skew check bounds). Otherwise a missing `last/{id}` is an id never used,
//! with no floor at all. Ids with a floor in the past are preferred by `acquire`, so a
//! fleet pays that wait only when it needs an id whose floor was lost.
//!
//! A record `last/` without data (a pool made by a leafid before this record existed)
//! counts as `floors` = its current children: no deletion evident.
//!
//! The whole `/snowflake/{name}` tree deleted (`deleteall`) takes the record with it.
//! Connected holders stop at once then (they watch their lease node); a holder cut off
//! from ZooKeeper cannot see the deletion and keeps issuing up to the bound it wrote. A
//! newcomer that finds no `last/{id}` needs no evidence about such a holder: its lease
//! is unrecorded, and the generator floors it at ZooKeeper's clock plus the reach, above
//! every bound written before (fence rule 5), so it starts at once. The same closes a
//! holder frozen (SIGSTOP) across the deletion: on waking it issues at most up to its
//! last bound, below that floor.

use serde::{Deserialize, Serialize};

use crate::snowflake::registry::fence::TAKEOVER_MARGIN;

/// The data of `last/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LastBound {
    pub bound_ms: i64,
    #[serde(default)]
    pub ip: String,
    #[serde(default)]
    pub port: String,
    #[serde(default)]
    pub pid: u32,
}

/// The data of `last/`: see the module doc.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PoolRecord {
    /// How many `last/{id}` nodes were ever created.
    pub floors: u64,
    /// The largest bound minus clock any holder wrote, in ms.
    pub ahead_ms: i64,
}

/// The pool record as read, with the version of `last/` for conditional writes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pool {
    pub record: PoolRecord,
    pub version: i32,
    /// The number of children of `last/` when read.
    pub children: u64,
}

impl Pool {
    /// From `last/`'s data, version and child count. Empty or foreign data is a pool
    /// made before the record: no deletion evident, no lookahead known.
    pub fn parse(data: &[u8], version: i32, children: u64) -> Pool {
        let record = serde_json::from_slice::<PoolRecord>(data).unwrap_or(PoolRecord {
            floors: children,
            ahead_ms: 0,
        });
        Pool {
            record,
            version,
            children,
        }
    }

    /// True when some `last/{id}` was deleted since the pool was made.
    pub fn floor_deleted(&self) -> bool {
        self.children < self.record.floors
    }

    /// The floor of an id whose `last/{id}` is missing, at local time `now_ms`.
    pub fn missing_floor(&self, now_ms: i64) -> i64 {
        if self.floor_deleted() {
            now_ms
                .saturating_add(self.record.ahead_ms.max(0))
                .saturating_add(TAKEOVER_MARGIN.as_millis() as i64)
        } else {
            i64::MIN
        }
    }

    /// The record after creating one more floor and writing a bound `ahead_ms` ahead,
    /// or `None` when nothing changes.
    pub fn next(&self, creating: bool, ahead_ms: i64) -> Option<PoolRecord> {
        let next = PoolRecord {
            floors: self.record.floors + u64::from(creating),
            ahead_ms: self.record.ahead_ms.max(ahead_ms),
        };
        (next != self.record).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_floor_is_no_floor_until_a_floor_was_deleted() {
        let p = Pool::parse(br#"{"floors":3,"ahead_ms":600}"#, 3, 3);
        assert_eq!(p.missing_floor(1_000), i64::MIN);
        let p = Pool::parse(br#"{"floors":3,"ahead_ms":600}"#, 3, 2);
        assert!(p.floor_deleted());
        assert_eq!(
            p.missing_floor(1_000),
            1_600 + TAKEOVER_MARGIN.as_millis() as i64
        );
    }

    #[test]
    fn a_pool_without_a_record_shows_no_deletion() {
        let p = Pool::parse(b"", 0, 5);
        assert_eq!(p.record.floors, 5);
        assert!(!p.floor_deleted());
        assert_eq!(p.next(true, 300).unwrap().floors, 6);
        assert_eq!(p.next(false, 0), None);
    }
}
