//! The PostgreSQL store on a database whose transactions default to REPEATABLE READ or
//! SERIALIZABLE (`default_transaction_isolation`, issue 28 item 5), in a database of
//! the test's own: several generators refilling one tag at a small step never see a
//! serialization failure (every statement runs at READ COMMITTED, see
//! `db::postgres::DefaultIsolation`), and no id is issued twice.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use leafid::{SegmentGenerator, SegmentOptions};

use crate::support::own_database::{OwnDatabase, Server};
use crate::support::watch_proxy::WatchProxy;

/// Generators, ids each, and the step: about 1 000 refills of one row, most of them
/// concurrent with another.
const GENERATORS: usize = 4;
const IDS_EACH: usize = 5_000;
const STEP: i64 = 20;

fn concurrent_refills_at(level: &str, label: &str) {
    let db = OwnDatabase::new(Server::Postgres, label);
    let admin = SegmentGenerator::connect_blocking(
        &db.admin_url,
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    let a = admin.clone();
    leafid::runtime::block_on(async move { a.create_tag("order", 1, STEP, "test").await }).unwrap();
    admin.close();
    db.admin(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = '{level}'",
        db.name()
    ));

    let barrier = Arc::new(Barrier::new(GENERATORS));
    let runs: Vec<_> = (0..GENERATORS)
        .map(|_| {
            let (url, barrier) = (db.admin_url.clone(), barrier.clone());
            std::thread::spawn(move || {
                // A generator each: its own pool, as another process would be.
                let gen =
                    SegmentGenerator::connect_blocking(&url, SegmentOptions::default()).unwrap();
                barrier.wait();
                let mut ids = Vec::with_capacity(IDS_EACH);
                let mut errors = Vec::new();
                while ids.len() < IDS_EACH && errors.len() < 20 {
                    match gen.next_id("order") {
                        Ok(id) => ids.push(id),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                gen.close();
                (ids, errors)
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for run in runs {
        let (ids, errors) = run.join().unwrap();
        assert!(errors.is_empty(), "{level}: {errors:#?}");
        for id in ids {
            assert!(seen.insert(id), "{level}: id {id} issued twice");
        }
    }
    assert_eq!(seen.len(), GENERATORS * IDS_EACH);
}

#[test]
fn concurrent_refills_of_one_tag_succeed_at_serializable() {
    concurrent_refills_at("serializable", "iso_store_ser");
}

#[test]
fn concurrent_refills_of_one_tag_succeed_at_repeatable_read() {
    concurrent_refills_at("repeatable read", "iso_store_rr");
}

/// Refills through a proxy that counts what the store sends, on a database whose
/// default is `level`: (the `UPDATE`s of refills, the `SET TRANSACTION`s), counted
/// after the first id, once the pool has read its connection's default.
fn refills_and_set_transactions_at(level: &str, label: &str) -> (usize, usize) {
    let db = OwnDatabase::new(Server::Postgres, label);
    let admin = SegmentGenerator::connect_blocking(
        &db.admin_url,
        SegmentOptions::default().create_table(true),
    )
    .unwrap();
    let a = admin.clone();
    leafid::runtime::block_on(async move { a.create_tag("order", 1, 10, "test").await }).unwrap();
    admin.close();
    db.admin(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = '{level}'",
        db.name()
    ));
    let proxy = WatchProxy::start(&db.admin_url, None);
    let gen =
        SegmentGenerator::connect_blocking(&proxy.url(&db.admin_url), SegmentOptions::default())
            .unwrap();
    gen.next_id("order").unwrap();
    proxy.clear();
    for _ in 0..200 {
        gen.next_id("order").unwrap();
    }
    gen.close();
    (
        proxy.count("UPDATE leaf_alloc"),
        proxy.count("SET TRANSACTION"),
    )
}

/// At READ COMMITTED (PostgreSQL's default) a statement needs no `SET TRANSACTION`,
/// which poolers such as pgcat take for session state and reset after every query.
#[test]
fn at_read_committed_a_refill_sends_no_set_transaction() {
    let (refills, sets) = refills_and_set_transactions_at("read committed", "iso_rc_noset");
    assert!(refills >= 3, "only {refills} refills seen");
    assert_eq!(sets, 0, "{sets} SET TRANSACTION over {refills} refills");
}

/// At SERIALIZABLE every refill still runs at READ COMMITTED.
#[test]
fn at_serializable_every_refill_sets_read_committed() {
    let (refills, sets) = refills_and_set_transactions_at("serializable", "iso_ser_set");
    assert!(refills >= 3, "only {refills} refills seen");
    assert_eq!(sets, refills);
}
