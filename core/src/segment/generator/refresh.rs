//! Keeping a generator's tag map in step with the table: the periodic (or asked-for)
//! refresh, adding one tag (`create_tag`, a lookup that found it), and the first loads
//! of the tags listed in the options at connect.
//!
//! The map is replaced whole (`ArcSwap::rcu`) and every update is ticketed, so a
//! refresh never loses a tag added while it read the listing; see [`Inner::refresh`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::inner::{Entry, Inner, TagMap};
use crate::error::{Error, Result};
use crate::runtime;
use crate::segment::tag_buffer::TagBuffer;

impl Inner {
    /// Loads the first segments of [`SegmentOptions::tags`] (at connect), failing with
    /// an error that names the first tag that is missing or whose load failed.
    pub(super) async fn load_listed_tags(self: &Arc<Self>) -> Result<()> {
        let mut bufs = Vec::with_capacity(self.loader.opts.tags.len());
        for tag in &self.loader.opts.tags {
            let buf = self.tags.load().get(tag).cloned();
            let buf = buf.ok_or_else(|| Error::TagNotFound { tag: tag.clone() })?;
            // All loads first, so they run together.
            buf.load_first(&self.loader);
            bufs.push(buf);
        }
        for buf in bufs {
            buf.first_loaded(&self.loader).await.map_err(|e| match e {
                Error::StoreUnavailable { cause, source } => Error::StoreUnavailable {
                    cause: format!("loading the first segment of tag {:?}: {cause}", buf.tag),
                    source,
                },
                other => other,
            })?;
        }
        Ok(())
    }

    /// Reloads the tag list. The map is updated atomically (`rcu`): buffers of tags
    /// that stay are kept, a tag added by `create_tag` after the listing was read is
    /// kept even though the listing misses it, and a dropped tag's buffer is found
    /// again if the tag comes back while a handle holds it.
    pub(super) async fn refresh(&self) -> Result<()> {
        // Tickets are taken with one RMW each, so they are totally ordered: a tag that
        // `add_tag` ticketed below this one was inserted before this listing is read.
        // (SeqCst is more than that needs, and this runs once a minute.)
        let ticket = self.ticket.fetch_add(1, Ordering::SeqCst);
        let listed = self.loader.store()?.tags().await?;
        let epoch = runtime::fork_epoch();
        let chunk = self.loader.opts.thread_chunk;
        let listed: std::collections::HashSet<String> = listed.into_iter().collect();
        let (mut added, mut removed) = (0, 0);
        self.tags.rcu(|old| {
            let mut map = TagMap::default();
            (added, removed) = (0, 0);
            for (tag, e) in &old.live {
                if listed.contains(tag) || e.born >= ticket {
                    map.live.insert(tag.clone(), e.clone());
                } else {
                    // Handles on removed tags keep their buffer, as in Leaf.
                    map.dropped.insert(tag.clone(), Arc::downgrade(&e.buf));
                    removed += 1;
                }
            }
            for (tag, weak) in &old.dropped {
                if !map.live.contains_key(tag) && !listed.contains(tag) && weak.strong_count() > 0 {
                    map.dropped.insert(tag.clone(), weak.clone());
                }
            }
            for tag in &listed {
                if !map.live.contains_key(tag) {
                    let buf = old.buffer_for(tag, epoch, chunk);
                    map.live.insert(tag.clone(), Entry { buf, born: ticket });
                    added += 1;
                }
            }
            map
        });
        if added + removed > 0 {
            tracing::info!(added, removed, "tag list refreshed");
        }
        self.close_if_closed();
        Ok(())
    }

    /// Adds `tag` to the cache (keeping its buffer if it has one) and returns its buffer.
    pub(super) fn add_tag(&self, tag: String) -> Arc<TagBuffer> {
        let epoch = runtime::fork_epoch();
        let chunk = self.loader.opts.thread_chunk;
        // SeqCst: see `refresh`.
        let born = self.ticket.fetch_add(1, Ordering::SeqCst);
        self.tags.rcu(|old| {
            let mut map = TagMap::clone(old);
            match map.live.get_mut(&tag) {
                // Already cached (the row was deleted and made again elsewhere): keep the
                // buffer, but a refresh that read its listing before now must keep it.
                Some(e) => e.born = e.born.max(born),
                None => {
                    let buf = old.buffer_for(&tag, epoch, chunk);
                    map.dropped.remove(&tag);
                    map.live.insert(tag.clone(), Entry { buf, born });
                }
            }
            map
        });
        self.close_if_closed();
        self.tags
            .load()
            .get(&tag)
            .cloned()
            // A refresh can have dropped it since; its buffer is the dropped one then.
            .unwrap_or_else(|| self.tags.load().buffer_for(&tag, epoch, chunk))
    }

    /// After a map update: if `close()` ran meanwhile, it may have missed a buffer the
    /// update added, so end them all (closing twice is harmless).
    pub(super) fn close_if_closed(&self) {
        // SeqCst, with the swap in `close`: one of the two sees the other's write.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            for buf in self.tags.load().all() {
                buf.close();
            }
        }
    }
}
