//! Each tag's high-water mark: the end (exclusive) of the highest segment any buffer of
//! that tag loaded in this generator, kept for the generator's life.
//!
//! A tag's buffer also goes away: a refresh that finds the row missing drops it (no
//! handle holding it), and a tag deleted and created again gets a new one. The marks
//! outlive buffers, so a row restored from a backup, lowered, or re-created with a
//! lower start is refused as long as this generator lives, whatever happened to the
//! tag's buffer in between (issue 20, row 7: a refresh between the delete and the
//! restore used to forget the tag and reissue 150 ids).
//!
//! Every segment is admitted here and nowhere else: the refill (`tag_buffer/refill.rs`) is the
//! only place a segment enters a buffer (first load, preload, switch, handles, the
//! async paths, lookups and `create_tag` all start it), and it checks and raises the
//! mark under one lock, so two buffers of one tag (which the tag map avoids, but a race
//! with a refresh could make) still never load a segment below one the other loaded.
//!
//! Bounded memory: one entry (the tag's name and an `i64`) per distinct tag that loaded
//! a segment in this generator, at most [`MAX_MARKS`] of them. A mark is never
//! forgotten, since forgetting is exactly the hole this closes; past the cap, a tag
//! that has no mark yet is refused its first segment (an error that says why) rather
//! than issued without a guard. The table's own size bounds the marks of tags that
//! stay; only a table whose tags are deleted and replaced by new names, more than
//! [`MAX_MARKS`] of them over one generator's life, reaches the cap.

use std::sync::{Mutex, MutexGuard, PoisonError};

use rustc_hash::FxHashMap as HashMap;

use crate::error::{Error, Result};

/// The most tags whose marks one generator keeps: ten times
/// [`MAX_TAGS`](crate::limits::MAX_TAGS). A tag name is at most 128 characters, so the
/// marks take at most about 60 MB, and typically a few hundred bytes per tag.
pub const MAX_MARKS: usize = 100_000;

/// The marks of one generator, by tag.
#[derive(Debug)]
pub(super) struct HighWater {
    marks: Mutex<HashMap<Box<str>, i64>>,
    /// Whether tags are keyed as MySQL compares them ([`SegmentStore::folds_tag_case`]).
    ///
    /// [`SegmentStore::folds_tag_case`]: super::SegmentStore::folds_tag_case
    fold: bool,
}

impl HighWater {
    /// Marks keyed by the exact tag, or folded as the store folds (`fold`).
    pub(super) fn new(fold: bool) -> HighWater {
        HighWater {
            marks: Mutex::default(),
            fold,
        }
    }

    fn key(&self, tag: &str) -> String {
        if self.fold {
            row_key(tag)
        } else {
            tag.to_string()
        }
    }

    /// Admits the segment `start..max_id` of `tag`, or refuses it: one that starts
    /// below the tag's mark (its ids would repeat), or a new tag past [`MAX_MARKS`].
    /// An admitted segment raises the mark to `max_id`. Called with the tag buffer's
    /// lock held; takes only this lock, briefly, with no I/O.
    pub(super) fn admit(&self, tag: &str, start: i64, max_id: i64, step: i64) -> Result<()> {
        let key = self.key(tag);
        let mut marks = self.lock();
        let high = marks.get(key.as_str()).copied().unwrap_or(0);
        if start < high.max(0) {
            return Err(below(tag, start, high.max(0), step));
        }
        let room = marks.len() < MAX_MARKS;
        match marks.get_mut(key.as_str()) {
            Some(mark) => *mark = (*mark).max(max_id),
            None if !room => {
                return Err(Error::InvalidConfig(format!(
                    "tag {tag:?}: this generator keeps the high-water marks of {MAX_MARKS} tags \
                     (so a deleted and restored row never reissues ids) and has no room for \
                     another; create a new generator (restart the process)"
                )))
            }
            None => {
                marks.insert(key.into(), max_id);
            }
        }
        Ok(())
    }

    /// The mark of `tag`, 0 before its first segment (for tests and stats).
    #[cfg(test)]
    pub(super) fn mark(&self, tag: &str) -> i64 {
        self.lock()
            .get(self.key(tag).as_str())
            .copied()
            .unwrap_or(0)
    }

    /// The lock, for the generator's fork guard (a fork while a refill holds it would
    /// leave it locked in the child) and for `admit`.
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, i64>> {
        // Nothing panics while holding it; recover the map if something did.
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The key of the row a tag names in a store that folds. MySQL's default collations
/// compare `biz_tag` case-insensitively and ignore trailing spaces, so `order`, `ORDER`
/// and `order ` are one row: one mark.
fn row_key(tag: &str) -> String {
    tag.trim_end_matches(' ').to_lowercase()
}

/// The refusal of a segment below the mark (the message the in-buffer guard gave).
fn below(tag: &str, start: i64, high: i64, step: i64) -> Error {
    Error::Malformed {
        what: "leaf_alloc row",
        path: format!("biz_tag {tag:?}"),
        reason: format!(
            "the new segment starts at {start}, below {high} (the end of a segment this \
             generator already loaded, or 0): the row was lowered, deleted and \
             recreated, or restored from a backup, and its ids would repeat; raise it \
             (UPDATE leaf_alloc SET max_id = {} WHERE biz_tag = '{}'): this generator \
             resumes by itself once the row is above its mark, and keeps the mark for its life",
            high.saturating_add(step),
            // Quoted as an SQL string literal, so the statement can be pasted.
            tag.replace('\'', "''")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mark_for_every_spelling_mysql_takes_for_one_row() {
        // Review: `Order` after `order` was a new key, so a lowered row was admitted.
        let hw = HighWater::new(true);
        hw.admit("order", 1, 1001, 1000).unwrap();
        for spelling in ["Order", "ORDER", "order  "] {
            let e = hw.admit(spelling, 1, 1001, 1000).unwrap_err();
            assert!(matches!(e, Error::Malformed { .. }), "{spelling}: {e}");
        }
    }

    #[test]
    fn a_segment_below_the_mark_is_refused_and_the_mark_only_rises() {
        let hw = HighWater::new(true);
        hw.admit("t", 1, 101, 100).unwrap();
        hw.admit("t", 101, 201, 100).unwrap();
        assert_eq!(hw.mark("t"), 201);
        let e = hw.admit("t", 101, 201, 100).unwrap_err();
        assert!(matches!(e, Error::Malformed { .. }), "{e}");
        assert!(e.to_string().contains("below 201"), "{e}");
        assert_eq!(hw.mark("t"), 201, "a refused segment leaves the mark");
        hw.admit("t", 201, 301, 100).unwrap();
        assert_eq!(hw.mark("t"), 301);
        // Other tags are their own.
        hw.admit("u", 0, 10, 10).unwrap();
        assert!(hw.admit("t", -5, 5, 10).is_err());
    }

    #[test]
    fn past_the_cap_a_new_tag_is_refused_and_known_ones_go_on() {
        let hw = HighWater::new(true);
        for k in 0..MAX_MARKS {
            hw.admit(&format!("t{k}"), 0, 10, 10).unwrap();
        }
        let e = hw.admit("one-more", 0, 10, 10).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
        hw.admit("t7", 10, 20, 10).unwrap();
        assert_eq!(hw.mark("t7"), 20);
    }
}
