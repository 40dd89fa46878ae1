//! Unit tests of the generator that need a store built for them (one that hangs, one
//! that holds its listing) or the narrow offset field of test builds; the behaviour
//! tests on real stores are in `core/tests/`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::SegmentGenerator;
use crate::error::{Error, Result};
use crate::runtime;
use crate::segment::buffer::OFFSET_BITS;
use crate::segment::store::memory::MemoryStore;
use crate::segment::store::{Allocation, SegmentStore, TagRow};
use crate::segment::SegmentOptions;

fn generator(store: Arc<dyn SegmentStore>, opts: SegmentOptions) -> SegmentGenerator {
    runtime::block_on(SegmentGenerator::with_store(store, opts)).unwrap()
}

/// Issue 11, "a whole segment reissued": each `try_next_id` on a spent segment
/// used to add 1 to the cursor, and after `2^OFFSET_BITS` of them (2^32 in
/// production, 2^16 in tests) the offset carried into the next generation; once
/// that generation loaded, its first ids were handed out twice.
#[test]
fn polling_during_an_outage_never_carries_into_the_next_generation() {
    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    runtime::block_on(async move { s.create_tag("t", 1, 100, "").await }).unwrap();
    let opts = SegmentOptions {
        double_buffer: false,
        wait_timeout: Duration::from_secs(10),
        ..SegmentOptions::default()
    };
    let gen = generator(store.clone(), opts);
    let h = gen.tag("t").unwrap();
    let mut seen: HashSet<i64> = (0..100).map(|_| h.next_id().unwrap()).collect();
    assert_eq!(seen.len(), 100);
    store.set_available(false);
    // Land 50 past the carry point: on the old code, offset 50 of the next
    // generation, which the refill below then published.
    let polls = (1u64 << OFFSET_BITS) - 100 + 50;
    for k in 0..polls {
        let id = if k % 2 == 0 {
            h.try_next_id()
        } else {
            gen.try_next_id("t")
        };
        assert_eq!(
            id, None,
            "an id while the segment is spent and the store down"
        );
    }
    store.set_available(true);
    for _ in 0..300 {
        let id = h.next_id().unwrap();
        assert!(seen.insert(id), "id {id} issued twice");
    }
}

/// A store whose allocations never finish while `hang` is set (a statement stuck
/// on a lock, a connection that went silent).
#[derive(Debug)]
struct Hanging {
    inner: Arc<MemoryStore>,
    hang: AtomicBool,
}

impl SegmentStore for Hanging {
    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> runtime::BoxFuture<'a, Result<Allocation>> {
        if self.hang.load(Ordering::SeqCst) {
            Box::pin(std::future::pending())
        } else {
            self.inner.allocate(tag, step)
        }
    }
    fn tags(&self) -> runtime::BoxFuture<'_, Result<Vec<String>>> {
        self.inner.tags()
    }
    fn rows(&self) -> runtime::BoxFuture<'_, Result<Vec<TagRow>>> {
        self.inner.rows()
    }
    fn create_table(&self) -> runtime::BoxFuture<'_, Result<()>> {
        self.inner.create_table()
    }
    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> runtime::BoxFuture<'a, Result<()>> {
        self.inner.create_tag(tag, start, step, description)
    }
    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        self.inner.reopen()
    }
}

/// Issue 11: a refill that never finished left the tag "loading" forever: every
/// caller waited out its timeout with no cause, and no new refill could start.
#[test]
fn a_refill_that_never_finishes_is_abandoned_reported_and_retried() {
    let store = Arc::new(Hanging {
        inner: Arc::new(MemoryStore::new()),
        hang: AtomicBool::new(true),
    });
    let s = store.inner.clone();
    runtime::block_on(async move { s.create_tag("t", 1, 10, "").await }).unwrap();
    let opts = SegmentOptions {
        // Far longer than the refill timeout: the caller must hear of the abandoned
        // refill, not wait this out.
        wait_timeout: Duration::from_secs(600),
        ..SegmentOptions::default()
    };
    let gen = generator(store.clone(), opts);
    let err = gen.next_id("t").unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("abandoned"), "{err}");
    let stats = &gen.stats()[0];
    assert!(stats.last_error.is_some(), "{stats:?}");
    store.hang.store(false, Ordering::SeqCst);
    let ids: Vec<i64> = loop {
        // The back-off after the failure (at most a second) may refuse a few calls.
        match gen.next_ids("t", 3) {
            Ok(ids) => break ids,
            Err(Error::StoreUnavailable { .. }) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e:?}"),
        }
    };
    assert_eq!(ids, vec![1, 2, 3]);
}

/// Issue 12: `next_id_now` never waits, on any branch of the slow path: a first
/// load that never finishes, an unknown tag, a closed generator. (With a 600 s
/// timeout, a call that waited would hang the test.) The async call waits and then
/// hears of the abandoned refill.
#[test]
fn next_id_now_never_waits_and_next_id_async_reports_the_abandoned_refill() {
    let store = Arc::new(Hanging {
        inner: Arc::new(MemoryStore::new()),
        hang: AtomicBool::new(true),
    });
    let s = store.inner.clone();
    runtime::block_on(async move { s.create_tag("t", 1, 10, "").await }).unwrap();
    let opts = SegmentOptions {
        wait_timeout: Duration::from_secs(600),
        ..SegmentOptions::default()
    };
    let gen = generator(store.clone(), opts);
    let h = gen.tag("t").unwrap(); // starts the first load, which hangs
    for _ in 0..3 {
        let err = h.next_id_now().unwrap_err();
        assert!(
            matches!(
                err,
                Error::SegmentsExhausted { .. } | Error::StoreUnavailable { .. }
            ),
            "{err:?}"
        );
        assert!(gen.next_id_now("t").is_err());
        assert!(gen.next_ids_now("t", 3).is_err());
    }
    let err = gen.next_id_now("nope").unwrap_err();
    assert!(matches!(err, Error::TagNotFound { .. }), "{err:?}");
    let err = runtime::block_on(h.next_id_async()).unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    gen.close();
    assert!(matches!(h.next_id_now(), Err(Error::Closed)));
    assert!(matches!(gen.next_id_now("nope"), Err(Error::Closed)));
}

/// Issue 31: what the bindings ask before making an awaitable. `next_id_at_hand` (and
/// `next_ids_at_hand`) is `None` at once while the first load hangs, for an unknown tag,
/// for a refused count and once closed; and a `None` takes nothing: mixed with the
/// waiting calls across segment switches, the ids stay consecutive.
#[test]
fn next_id_at_hand_gives_an_id_or_takes_nothing() {
    let store = Arc::new(Hanging {
        inner: Arc::new(MemoryStore::new()),
        hang: AtomicBool::new(true),
    });
    let s = store.inner.clone();
    runtime::block_on(async move { s.create_tag("t", 1, 10, "").await }).unwrap();
    let opts = SegmentOptions {
        wait_timeout: Duration::from_secs(600),
        ..SegmentOptions::default()
    };
    let gen = generator(store, opts.clone());
    let h = gen.tag("t").unwrap(); // starts the first load, which hangs
    for _ in 0..3 {
        assert_eq!(h.next_id_at_hand(), None);
        assert_eq!(h.next_ids_at_hand(2), None);
        assert_eq!(gen.next_id_at_hand("t"), None);
        assert_eq!(gen.next_ids_at_hand("t", 2), None);
    }
    assert_eq!(gen.next_id_at_hand("nope"), None);

    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    runtime::block_on(async move { s.create_tag("t", 1, 10, "").await }).unwrap();
    let gen = generator(store, opts);
    let h = gen.tag("t").unwrap();
    let mut ids = Vec::new();
    for k in 0..40 {
        let at_hand = match k % 3 {
            0 => h.next_id_at_hand().map(|id| vec![id]),
            1 => gen.next_id_at_hand("t").map(|id| vec![id]),
            _ => h.next_ids_at_hand(3),
        };
        assert_eq!(h.next_ids_at_hand(usize::MAX), None);
        ids.extend(at_hand.unwrap_or_else(|| vec![h.next_id().unwrap()]));
    }
    let expected: Vec<i64> = (1..=ids.len() as i64).collect();
    assert_eq!(ids, expected);
    gen.close();
    assert_eq!(h.next_id_at_hand(), None);
    assert_eq!(gen.next_id_at_hand("t"), None);
}

/// A store whose `tags()` waits for a signal after reading the listing, so a test
/// can run `create_tag` while a refresh holds a listing that misses the new tag.
#[derive(Debug)]
struct HeldListing {
    inner: Arc<MemoryStore>,
    hold: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

impl SegmentStore for HeldListing {
    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> runtime::BoxFuture<'a, Result<Allocation>> {
        self.inner.allocate(tag, step)
    }
    fn tags(&self) -> runtime::BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let listed = self.inner.tags().await?;
            let hold = self.hold.lock().unwrap().take();
            if let Some((read, go_on)) = hold {
                read.send(()).unwrap();
                tokio::task::spawn_blocking(move || go_on.recv().unwrap())
                    .await
                    .unwrap();
            }
            Ok(listed)
        })
    }
    fn rows(&self) -> runtime::BoxFuture<'_, Result<Vec<TagRow>>> {
        self.inner.rows()
    }
    fn create_table(&self) -> runtime::BoxFuture<'_, Result<()>> {
        self.inner.create_table()
    }
    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> runtime::BoxFuture<'a, Result<()>> {
        self.inner.create_tag(tag, start, step, description)
    }
    fn reopen(&self) -> Result<Arc<dyn SegmentStore>> {
        self.inner.reopen()
    }
}

/// Issue 11, "tag map races": a refresh replaced the whole map with the one it
/// computed from its listing, losing a tag `create_tag` added meanwhile.
#[test]
fn refresh_keeps_a_tag_created_while_it_read_the_listing() {
    let (read_tx, read_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let store = Arc::new(HeldListing {
        inner: Arc::new(MemoryStore::new()),
        hold: Mutex::new(None),
    });
    let gen = generator(store.clone(), SegmentOptions::default());
    *store.hold.lock().unwrap() = Some((read_tx, go_rx));
    let g = gen.clone();
    let refresh = std::thread::spawn(move || runtime::block_on(async move { g.refresh().await }));
    read_rx.recv().unwrap(); // the refresh holds a listing without "new"
    let g = gen.clone();
    runtime::block_on(async move { g.create_tag("new", 1, 10, "").await }).unwrap();
    assert_eq!(gen.next_id("new").unwrap(), 1);
    go_tx.send(()).unwrap();
    refresh.join().unwrap().unwrap();
    assert_eq!(gen.tags(), vec!["new".to_string()]);
    assert_eq!(gen.next_id("new").unwrap(), 2);
}
