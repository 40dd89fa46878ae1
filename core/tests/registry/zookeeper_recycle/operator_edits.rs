//! `zookeeper-recycle` records deleted or rewritten by an operator (`zkCli delete`,
//! `set`, `deleteall`) under a live holder and while nobody holds the id, against a
//! real ZooKeeper (`LEAFID_ZK`). Fence rules 1 and 2: the holder stops at once (its
//! watch, not its next renew), its renew says `LeaseLost`, and the next holder of the
//! id never starts below a bound the old holder wrote.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::snowflake::registry::zk_client::Client;
use leafid::snowflake::registry::{IssueLimit, Lease, WorkerRegistry, ZookeeperRecycleRegistry};
use leafid::Error;

fn zk_addr() -> String {
    std::env::var("LEAFID_ZK").expect(
        "LEAFID_ZK is not set: start the services (scripts/services.sh start) and \
         `source .services/env` before running these tests",
    )
}

fn unique_name(tag: &str) -> String {
    format!(
        "leafid-test-recycle-op-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn registry(name: &str) -> Arc<ZookeeperRecycleRegistry> {
    Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name,
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ))
}

fn run<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    leafid::runtime::block_on(f)
}

/// A holder of the pool's only id (worker id 0) that wrote `bound` and issues up to it.
fn holder(name: &str, bound: i64) -> (Arc<ZookeeperRecycleRegistry>, Arc<IssueLimit>, Lease) {
    let reg = registry(name);
    let limit = IssueLimit::closed();
    let (r, l) = (reg.clone(), limit.clone());
    let lease = run(async move { r.acquire(0, l).await }).unwrap();
    let (r, le) = (reg.clone(), lease.clone());
    run(async move { r.renew(&le, bound).await }).unwrap();
    // As the generator does after a persisted bound.
    limit.set(bound);
    (reg, limit, lease)
}

/// An operator's zkCli.
fn operator<F, Fut>(f: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let addr = zk_addr();
    run(async move {
        let c = Client::connect(&addr, Duration::from_secs(6), Duration::from_secs(3))
            .await
            .unwrap();
        f(c).await
    })
}

/// `deleteall path`.
async fn deleteall(c: &Client, path: String) {
    let mut stack = vec![path.clone()];
    let mut order = Vec::new();
    while let Some(p) = stack.pop() {
        for child in c.list_children(&p).await.unwrap_or_default() {
            stack.push(format!("{p}/{child}"));
        }
        order.push(p);
    }
    for p in order.into_iter().rev() {
        let _ = c.delete(&p, None).await;
    }
}

/// Waits for the holder to stop on its own (no renew called): the event must happen.
fn stops_on_its_own(limit: &IssueLimit) {
    let until = Instant::now() + Duration::from_secs(10);
    while limit.get() != i64::MIN {
        assert!(Instant::now() < until, "the holder never stopped issuing");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn renew_is_lost(reg: &Arc<ZookeeperRecycleRegistry>, lease: &Lease) {
    let (r, le) = (reg.clone(), lease.clone());
    match run(async move { r.renew(&le, now_ms() + 1000).await }) {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("a renew on a changed record must be LeaseLost: {other:?}"),
    }
}

fn release(reg: &Arc<ZookeeperRecycleRegistry>, lease: &Lease) {
    let (r, le) = (reg.clone(), lease.clone());
    run(async move { r.release(&le).await }).unwrap();
}

/// The next holder's floor for worker id 0.
fn next_floor(name: &str) -> (Arc<ZookeeperRecycleRegistry>, Lease) {
    let reg = registry(name);
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let r = reg.clone();
        match run(async move { r.acquire(0, IssueLimit::closed()).await }) {
            Ok(lease) => return (reg, lease),
            Err(Error::WorkerIdExhausted { .. }) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("the next holder cannot start: {e}"),
        }
    }
}

#[test]
fn a_floor_deleted_under_a_live_holder_stops_it_at_once_and_is_restored_before_the_id_goes_back() {
    let name = unique_name("del-last");
    let bound = now_ms() + 5_000;
    let (reg, limit, lease) = holder(&name, bound);
    let last = format!("/snowflake/{name}/recycle/last/0");
    operator(move |c| async move { c.delete(&last, None).await.unwrap() });
    stops_on_its_own(&limit);
    renew_is_lost(&reg, &lease);
    release(&reg, &lease);
    let (next, lease2) = next_floor(&name);
    assert!(
        lease2.floor_ms >= bound,
        "the next holder starts at {} below the bound {bound} the old one wrote",
        lease2.floor_ms
    );
    release(&next, &lease2);
}

#[test]
fn a_floor_rewritten_lower_under_a_live_holder_stops_it_and_is_never_lowered() {
    let name = unique_name("set-last");
    let bound = now_ms() + 5_000;
    let (reg, limit, lease) = holder(&name, bound);
    let last = format!("/snowflake/{name}/recycle/last/0");
    operator(move |c| async move {
        c.set_data(&last, br#"{"bound_ms":1}"#, None).await.unwrap();
    });
    stops_on_its_own(&limit);
    renew_is_lost(&reg, &lease);
    release(&reg, &lease);
    let (next, lease2) = next_floor(&name);
    assert!(
        lease2.floor_ms >= bound,
        "floor {} < {bound}",
        lease2.floor_ms
    );
    release(&next, &lease2);
}

#[test]
fn a_lease_node_deleted_under_a_live_holder_stops_it_at_once_and_the_newcomer_starts_above_its_bound(
) {
    let name = unique_name("del-lease");
    let bound = now_ms() + 5_000;
    let (reg, limit, lease) = holder(&name, bound);
    let path = format!("/snowflake/{name}/recycle/lease/0");
    operator(move |c| async move { c.delete(&path, None).await.unwrap() });
    // The newcomer may take the id at once: its floor is the old holder's bound.
    let (next, lease2) = next_floor(&name);
    assert!(
        lease2.floor_ms >= bound,
        "floor {} < {bound}",
        lease2.floor_ms
    );
    stops_on_its_own(&limit);
    renew_is_lost(&reg, &lease);
    release(&next, &lease2);
    release(&reg, &lease);
}

#[test]
fn the_whole_recycle_tree_deleted_under_a_live_holder_stops_it_at_once() {
    let name = unique_name("del-tree");
    let (reg, limit, lease) = holder(&name, now_ms() + 5_000);
    let tree = format!("/snowflake/{name}");
    operator(move |c| async move { deleteall(&c, tree).await });
    stops_on_its_own(&limit);
    renew_is_lost(&reg, &lease);
    release(&reg, &lease);
}

#[test]
fn a_floor_deleted_while_nobody_holds_the_id_gives_the_next_holder_a_floor_above_the_old_bound() {
    let name = unique_name("del-idle");
    let bound = now_ms() + 5_000;
    let (reg, _limit, lease) = holder(&name, bound);
    release(&reg, &lease);
    let last = format!("/snowflake/{name}/recycle/last/0");
    operator(move |c| async move { c.delete(&last, None).await.unwrap() });
    let (next, lease2) = next_floor(&name);
    assert!(
        lease2.floor_ms >= bound,
        "a missing floor after a deletion must not be 'no floor': {} < {bound}",
        lease2.floor_ms
    );
    release(&next, &lease2);
}

#[test]
fn an_id_never_used_in_a_pool_without_deletions_has_no_floor() {
    let name = unique_name("fresh");
    let reg = registry(&name);
    let r = reg.clone();
    let lease = run(async move { r.acquire(0, IssueLimit::closed()).await }).unwrap();
    assert_eq!(lease.floor_ms, i64::MIN);
    release(&reg, &lease);
}
