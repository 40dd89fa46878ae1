//! An in-process `leaf_alloc`, for unit tests: one process only (a forked child shares
//! nothing with its parent's copy, so it must not be used across processes).
//!
//! It can be switched off or slowed down to play a database outage, and it counts
//! allocations.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{bad_row, validate_start, validate_step, Allocation, SegmentStore, TagRow};
use crate::error::{Error, Result};
use crate::runtime::BoxFuture;

#[derive(Debug, Clone)]
struct Row {
    max_id: i64,
    step: i64,
    description: String,
}

/// A `leaf_alloc` table in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    rows: Mutex<BTreeMap<String, Row>>,
    down: AtomicBool,
    allocations: AtomicU64,
    delay_ms: AtomicU64,
}

impl MemoryStore {
    /// An empty table.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Makes every call fail with [`Error::StoreUnavailable`] (`false`) or work again (`true`).
    pub fn set_available(&self, up: bool) {
        self.down.store(!up, Ordering::SeqCst);
    }

    /// Makes every allocation take `delay` first, to play a slow database.
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// How many allocations succeeded.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::SeqCst)
    }

    /// Deletes a tag's row, as `DELETE FROM leaf_alloc WHERE biz_tag = ?` would.
    pub fn remove_tag(&self, tag: &str) {
        self.rows.lock().unwrap().remove(tag);
    }

    /// Writes a row as it stands, unchecked, as an operator or Java Leaf's tooling might
    /// (`INSERT … ON DUPLICATE KEY UPDATE`): for tests of rows leafid would refuse.
    pub fn put_row(&self, tag: &str, max_id: i64, step: i64) {
        self.rows.lock().unwrap().insert(
            tag.to_string(),
            Row {
                max_id,
                step,
                description: String::new(),
            },
        );
    }

    fn check(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(Error::store("memory store switched off"))
        } else {
            Ok(())
        }
    }
}

impl SegmentStore for MemoryStore {
    /// No: a map keyed by the exact tag.
    fn folds_tag_case(&self) -> bool {
        false
    }

    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, Result<Allocation>> {
        Box::pin(async move {
            let delay = self.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            }
            self.check()?;
            let mut rows = self.rows.lock().unwrap();
            let row = rows
                .get_mut(tag)
                .ok_or_else(|| Error::TagNotFound { tag: tag.into() })?;
            // The same guard as the SQL stores: never past i64::MAX, never with a step
            // below 1 (a row written by hand may have either).
            let by = step.unwrap_or(row.step);
            if row.step <= 0 || by <= 0 || row.max_id > i64::MAX - by {
                return Err(bad_row(tag, row.max_id, row.step, step));
            }
            row.max_id += by;
            self.allocations.fetch_add(1, Ordering::SeqCst);
            Ok(Allocation {
                max_id: row.max_id,
                step: row.step,
            })
        })
    }

    fn tags(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            self.check()?;
            Ok(self.rows.lock().unwrap().keys().cloned().collect())
        })
    }

    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            self.check()?;
            Ok(self.rows.lock().unwrap().contains_key(tag))
        })
    }

    fn rows(&self) -> BoxFuture<'_, Result<Vec<TagRow>>> {
        Box::pin(async move {
            self.check()?;
            Ok(self
                .rows
                .lock()
                .unwrap()
                .iter()
                .map(|(tag, r)| TagRow {
                    tag: tag.clone(),
                    max_id: r.max_id,
                    step: r.step,
                    description: Some(r.description.clone()),
                    update_time: String::new(),
                })
                .collect())
        })
    }

    fn create_table(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.check() })
    }

    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_step(step)?;
            validate_start(tag, start, step)?;
            self.check()?;
            let mut rows = self.rows.lock().unwrap();
            if rows.contains_key(tag) {
                return Err(Error::TagExists { tag: tag.into() });
            }
            rows.insert(
                tag.to_string(),
                Row {
                    max_id: start,
                    step,
                    description: description.to_string(),
                },
            );
            Ok(())
        })
    }

    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        Err(Error::InvalidConfig(
            "the memory store cannot follow a fork; use sqlite:// or mysql:// across processes"
                .into(),
        ))
    }
}
