//! Issue 12, segment mode: tags usable at once. A tag made by another generator, by
//! SQL or by `create_tag` (`TagExists` included) works on the first call; a tag missing
//! from the cache is looked up in the store, at most once a second per name, never
//! blocking the core runtime nor a forked child, and a store that cannot answer reads
//! as unavailable, not as "no such tag". Real MariaDB; a loopback proxy plays the outage.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{eventually, proxy, try_create, via_proxy};
use crate::support::mysql::{self, create, fresh_tag, mysql_url};

use leafid::clock::ManualClock;
use leafid::runtime::{block_on, BoxFuture};
use leafid::segment::store::memory::MemoryStore;
use leafid::segment::{Allocation, SegmentStore, TagRow};
use leafid::{Error, SegmentGenerator, SegmentOptions};

/// `connect(tags=…)` naming a tag the table lacks fails, naming the tag.
#[test]
fn connect_with_a_missing_tag_in_tags_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let err = SegmentGenerator::connect_blocking(&url, SegmentOptions::default().tags(["nowhere"]))
        .unwrap_err();
    assert!(
        matches!(err, Error::TagNotFound { ref tag } if tag == "nowhere"),
        "{err:?}"
    );
}

/// A tag created by another generator (another process, in production) works on the
/// first call of each kind: blocking, async, and — once its lookup ran — never-waiting.
#[test]
fn tag_created_by_another_generator_works_on_first_call() {
    let a = mysql::connect(SegmentOptions::default());
    let b = mysql::connect(SegmentOptions::default());
    let (t1, t2, t3) = (
        fresh_tag("other1"),
        fresh_tag("other2"),
        fresh_tag("other3"),
    );
    for t in [&t1, &t2, &t3] {
        create(&a, t, 1000, 100);
    }
    // `a` holds each tag's first segment (create_tag loads it): b's starts at 1100.
    assert_eq!(b.next_id(&t1).unwrap(), 1100);
    let (g, t) = (b.clone(), t2.clone());
    assert_eq!(
        block_on(async move { g.next_id_async(&t).await }).unwrap(),
        1100
    );
    // Never waits: the first call starts the lookup and says the tag is not known yet,
    // unless the runtime's threads got further before this thread read the answer (a
    // loaded machine): the lookup answered and the first segment is still loading
    // (`SegmentsExhausted`, "the store has not answered"), or both are done and the id
    // comes at once.
    let id = match b.next_id_now(&t3) {
        Ok(id) => id,
        Err(err) => {
            match &err {
                Error::TagNotFound { .. } => {
                    assert!(err.to_string().contains("refresh()"), "{err}")
                }
                Error::SegmentsExhausted { .. } => {}
                other => panic!("{other:?}"),
            }
            eventually(10, || b.next_id_now(&t3).ok())
        }
    };
    assert_eq!(id, 1100);
    // The handle's never-waiting twin behaves the same.
    let t4 = fresh_tag("other4");
    create(&a, &t4, 1000, 100);
    if let Err(err) = b.tag_now(&t4) {
        assert!(matches!(err, Error::TagNotFound { .. }), "{err:?}");
    }
    let h = eventually(10, || b.tag_now(&t4).ok());
    assert_eq!(eventually(10, || h.next_id_now().ok()), 1100);
}

/// A row inserted by SQL the way Java Leaf's docs do it works on the first call.
#[test]
fn tag_inserted_by_sql_leaf_style_works_on_first_call() {
    let gen = mysql::connect(SegmentOptions::default());
    let tag = fresh_tag("leafsql");
    let t = tag.clone();
    block_on(async move {
        let pool = sqlx::MySqlPool::connect(&mysql_url()).await.unwrap();
        sqlx::query(
            "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES(?, 1, 2000, 'Test leaf Segment Mode Get Id')",
        )
        .bind(&t)
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    });
    assert_eq!(gen.next_id(&tag).unwrap(), 1);
    assert_eq!(gen.tag(&tag).unwrap().next_id().unwrap(), 2);
}

/// `TagExists` says the tag is usable as it is, and it is, at once.
#[test]
fn tag_exists_makes_the_tag_usable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let a = SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap();
    let b = SegmentGenerator::connect_blocking(
        &url,
        SegmentOptions::default().wait_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    try_create(&a, "dup", 7, 10).unwrap();
    let err = try_create(&b, "dup", 1, 10).unwrap_err();
    assert!(matches!(err, Error::TagExists { .. }), "{err:?}");
    assert!(err.to_string().contains("usable as it is"), "{err}");
    assert!(b.tags().contains(&"dup".to_string()));
    // `a` holds the first segment, 7..17.
    assert_eq!(b.next_id("dup").unwrap(), 17);
}

/// A memory store that counts `has_tag` lookups, each answered after `delay`.
#[derive(Debug)]
struct Counting {
    inner: MemoryStore,
    lookups: AtomicU64,
    delay: Duration,
}

impl SegmentStore for Counting {
    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, leafid::Result<Allocation>> {
        self.inner.allocate(tag, step)
    }
    fn tags(&self) -> BoxFuture<'_, leafid::Result<Vec<String>>> {
        self.inner.tags()
    }
    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, leafid::Result<bool>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.has_tag(tag).await
        })
    }
    fn rows(&self) -> BoxFuture<'_, leafid::Result<Vec<TagRow>>> {
        self.inner.rows()
    }
    fn create_table(&self) -> BoxFuture<'_, leafid::Result<()>> {
        self.inner.create_table()
    }
    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        description: &'a str,
    ) -> BoxFuture<'a, leafid::Result<()>> {
        self.inner.create_tag(tag, start, step, description)
    }
    fn reopen(&self) -> leafid::Result<Arc<dyn SegmentStore>> {
        self.inner.reopen()
    }
}

/// A caller hammering an unknown tag costs the store one lookup per name per
/// second; invalid names are never looked up; a tag made meanwhile is found once the
/// window passed.
#[test]
fn lookup_on_miss_is_rate_limited() {
    let store = Arc::new(Counting {
        inner: MemoryStore::new(),
        lookups: AtomicU64::new(0),
        delay: Duration::ZERO,
    });
    let clock = ManualClock::new(1_000_000);
    let dynstore: Arc<dyn SegmentStore> = store.clone();
    let gen = block_on(SegmentGenerator::with_store(
        dynstore,
        SegmentOptions::default().clock(clock.clone()),
    ))
    .unwrap();
    let count = || store.lookups.load(Ordering::SeqCst);
    for _ in 0..50 {
        assert!(matches!(
            gen.next_id("ghost"),
            Err(Error::TagNotFound { .. })
        ));
        assert!(matches!(gen.tag("ghost"), Err(Error::TagNotFound { .. })));
        assert!(matches!(
            gen.next_id_now("ghost"),
            Err(Error::TagNotFound { .. })
        ));
        assert!(matches!(
            gen.next_id("").unwrap_err(),
            Error::InvalidTag { .. }
        ));
    }
    assert_eq!(count(), 1);
    assert!(matches!(
        gen.next_id("phantom"),
        Err(Error::TagNotFound { .. })
    ));
    assert_eq!(count(), 2, "another name has its own lookup");
    let s = store.clone();
    block_on(async move { s.inner.create_tag("ghost", 5, 10, "").await }).unwrap();
    assert!(matches!(
        gen.next_id("ghost"),
        Err(Error::TagNotFound { .. })
    ));
    assert_eq!(count(), 2, "still within the window");
    clock.advance(1_000);
    assert_eq!(gen.next_id("ghost").unwrap(), 5);
    assert_eq!(count(), 3);
    // Found tags are cached: no more lookups.
    for _ in 0..10 {
        gen.next_id("ghost").unwrap();
    }
    assert_eq!(count(), 3);
}

/// MariaDB compares `biz_tag` case-insensitively and ignores trailing spaces, so
/// `ORDER` finds the row `order`. Caching the variant would give one row two buffers
/// and issue its ids out of order (found by review): a variant is not a tag.
#[test]
fn case_variants_of_a_mysql_tag_are_not_a_second_tag() {
    let gen = mysql::connect(SegmentOptions::default());
    let tag = fresh_tag("nwcase");
    create(&gen, &tag, 1, 1000);
    let mut ids = vec![gen.next_id(&tag).unwrap()];
    for variant in [tag.to_uppercase(), format!("{tag}   ")] {
        assert!(
            matches!(gen.next_id(&variant), Err(Error::TagNotFound { .. })),
            "{variant:?} was taken for {tag:?}"
        );
        let (g, v) = (gen.clone(), variant.clone());
        let e = block_on(async move { g.create_tag(&v, 1, 10, "").await }).unwrap_err();
        assert!(matches!(e, Error::InvalidTag { .. }), "{variant:?}: {e}");
        ids.push(gen.next_id(&tag).unwrap());
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(
        gen.tags()
            .iter()
            .filter(|t| t.eq_ignore_ascii_case(tag.trim()))
            .count(),
        1
    );
}

/// A blocking `next_id` on a missing tag called from one of the core runtime's own
/// threads answers as a zero wait instead of blocking the runtime its lookup needs
/// (found by review: two such calls wedged the runtime for good).
#[test]
fn blocking_next_id_on_a_miss_from_runtime_threads_returns() {
    let store = Arc::new(MemoryStore::new());
    let opts = SegmentOptions::default().wait_timeout(Duration::from_millis(200));
    let gen = block_on(SegmentGenerator::with_store(store, opts)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for k in 0..2 {
        let (g, tx) = (gen.clone(), tx.clone());
        drop(leafid::runtime::spawn(async move {
            let _ = tx.send(g.next_id(&format!("missing-{k}")));
        }));
    }
    for _ in 0..2 {
        let r = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a blocking next_id on a runtime thread never returned");
        assert!(matches!(r, Err(Error::TagNotFound { .. })), "{r:?}");
    }
}

/// A store whose `has_tag` is slow in the process that made it (the parent).
#[derive(Debug, Clone)]
struct SlowInParent {
    inner: Arc<MemoryStore>,
    parent: u32,
}

impl SegmentStore for SlowInParent {
    fn allocate<'a>(
        &'a self,
        tag: &'a str,
        step: Option<i64>,
    ) -> BoxFuture<'a, leafid::Result<Allocation>> {
        self.inner.allocate(tag, step)
    }
    fn tags(&self) -> BoxFuture<'_, leafid::Result<Vec<String>>> {
        self.inner.tags()
    }
    fn has_tag<'a>(&'a self, tag: &'a str) -> BoxFuture<'a, leafid::Result<bool>> {
        Box::pin(async move {
            if std::process::id() == self.parent {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            self.inner.has_tag(tag).await
        })
    }
    fn rows(&self) -> BoxFuture<'_, leafid::Result<Vec<TagRow>>> {
        self.inner.rows()
    }
    fn create_table(&self) -> BoxFuture<'_, leafid::Result<()>> {
        self.inner.create_table()
    }
    fn create_tag<'a>(
        &'a self,
        tag: &'a str,
        start: i64,
        step: i64,
        d: &'a str,
    ) -> BoxFuture<'a, leafid::Result<()>> {
        self.inner.create_tag(tag, start, step, d)
    }
    fn reopen(&self) -> leafid::Result<Arc<dyn SegmentStore>> {
        // The memory store's ranges must not be shared with a child: this test's child
        // only looks tags up, so a fresh copy of the rows is enough.
        Ok(Arc::new(self.clone()))
    }
}

/// A child forked while its parent's lookup of a tag runs does its own lookup instead
/// of waiting (its whole wait timeout) on the parent's, which never answers there
/// (found by review).
#[test]
fn a_forked_child_does_not_wait_on_the_parents_lookup() {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    let inner = Arc::new(MemoryStore::new());
    let store = Arc::new(SlowInParent {
        inner: inner.clone(),
        parent: std::process::id(),
    });
    let opts = SegmentOptions::default().wait_timeout(Duration::from_secs(30));
    let gen = block_on(SegmentGenerator::with_store(store, opts)).unwrap();
    let i = inner.clone();
    block_on(async move { i.create_tag("elsewhere", 1, 10, "").await }).unwrap();
    // The parent's lookup starts and takes 3 s.
    assert!(gen.next_id_now("elsewhere").is_err());
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut out = unsafe { std::fs::File::from_raw_fd(fds[1]) };
        let found = gen.tag_now("elsewhere").is_ok() || {
            // The child's own lookup, not the parent's: it answers at once here.
            std::thread::sleep(Duration::from_millis(500));
            gen.tag_now("elsewhere").is_ok()
        };
        let _ = writeln!(out, "{found}");
        unsafe { libc::_exit(0) };
    }
    unsafe { libc::close(fds[1]) };
    let mut said = String::new();
    unsafe { std::fs::File::from_raw_fd(fds[0]) }
        .read_to_string(&mut said)
        .unwrap();
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(
        said.trim(),
        "true",
        "the child did not find the tag on its own"
    );
}

/// A tag missing from the cache while the store cannot answer is "store unavailable",
/// not "no such tag", which a caller may take for final (review: `TagNotFound` while
/// the log said "Connection refused").
#[test]
fn a_lookup_the_store_cannot_answer_is_store_unavailable() {
    let proxy = proxy();
    let gen = via_proxy(&proxy, SegmentOptions::default());
    let other =
        SegmentGenerator::connect_blocking(&mysql_url(), SegmentOptions::default()).unwrap();
    let tag = fresh_tag("lookup_down");
    create(&other, &tag, 1, 10);
    proxy.set_down(true);
    let err = gen.next_id(&tag).unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    let err = block_on(gen.next_id_async(&tag)).unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    // A tag the store says is missing is still TagNotFound.
    proxy.set_down(false);
    let missing = fresh_tag("lookup_missing");
    let err = eventually(10, || match gen.next_id(&missing) {
        Err(e @ Error::TagNotFound { .. }) => Some(e),
        _ => None,
    });
    assert!(matches!(err, Error::TagNotFound { .. }));
    // Once the store is back (after the failed answer's one-second window).
    assert_eq!(eventually(10, || gen.next_id(&tag).ok()), 11);
    gen.close();
    other.close();
}

/// Issue 29 item 5: with the store silent (a blackhole, not a refusal), a lookup that
/// has not answered when the caller's wait ends is "store unavailable", never "no such
/// tag" (before: `TagNotFound` after `wait_timeout`, while the lookup still ran), for a
/// tag created after start and for an unknown name alike.
#[test]
fn a_lookup_the_silent_store_has_not_answered_is_store_unavailable() {
    // First, directly: it creates the table the generator behind the proxy needs.
    let other = mysql::connect(SegmentOptions::default());
    let proxy = proxy();
    // Shorter than the pool's acquire timeout (1.5 s), which would end the lookup with
    // the store's own error: the wait must end while the lookup is still unanswered.
    let gen = via_proxy(
        &proxy,
        SegmentOptions::default().wait_timeout(Duration::from_millis(300)),
    );
    let tag = fresh_tag("lookup_silent");
    create(&other, &tag, 1, 10);
    proxy.set_blackhole(true);
    for name in [tag.clone(), fresh_tag("lookup_silent_unknown")] {
        let err = gen.next_id(&name).unwrap_err();
        assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
        let err = block_on(gen.next_ids_async(&name, 3)).unwrap_err();
        assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    }
    proxy.set_blackhole(false);
    assert_eq!(eventually(10, || gen.next_id(&tag).ok()), 11);
    gen.close();
    other.close();
}

/// Issue 29 review: with a store slower than the caller's wait, a client retrying a
/// misspelt tag every second or so hears "no such tag" after the first answer came:
/// a running lookup is shared however long it runs, its answer stands a second from
/// when it came, and the name's previous "no" stands in while a new lookup is still
/// unanswered. Before: each retry started a new lookup (the window counted from the
/// start of the last one) and got `StoreUnavailable`, every time. A lookup queued
/// behind others for a permit says so.
#[test]
fn a_slow_store_still_says_no_such_tag_to_a_client_retrying_a_misspelt_name() {
    let store = Arc::new(Counting {
        inner: MemoryStore::new(),
        lookups: AtomicU64::new(0),
        delay: Duration::from_millis(400),
    });
    let dynstore: Arc<dyn SegmentStore> = store.clone();
    let gen = block_on(SegmentGenerator::with_store(
        dynstore,
        SegmentOptions::default().wait_timeout(Duration::from_millis(250)),
    ))
    .unwrap();
    // The first ask: nothing known yet, and the store has not answered.
    let err = gen.next_id("misspelt").unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("has not answered"), "{err}");
    for _ in 0..2 {
        // Past the window from the answer: each retry starts a new lookup.
        std::thread::sleep(Duration::from_millis(1_200));
        let err = gen.next_id("misspelt").unwrap_err();
        assert!(matches!(err, Error::TagNotFound { .. }), "{err:?}");
    }
    assert_eq!(store.lookups.load(Ordering::SeqCst), 3);

    // Three new names at once: two lookups at the store, the third queued for a permit.
    let errors: Vec<String> = (0..3)
        .map(|k| {
            let gen = gen.clone();
            std::thread::spawn(move || gen.next_id(&format!("unknown-{k}")).unwrap_err())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap().to_string())
        .collect();
    let queued = errors.iter().filter(|e| e.contains("queued")).count();
    assert_eq!(queued, 1, "{errors:?}");
    gen.close();
}
