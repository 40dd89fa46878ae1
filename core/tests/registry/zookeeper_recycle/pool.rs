//! The `zookeeper-recycle` pool against a real ZooKeeper (`LEAFID_ZK`): a freed id
//! comes back with its last holder's bound as the floor, a lost session cuts the issue
//! limit at once and the id goes to the next holder above that bound, a deleted lease
//! node is noticed, and the pool runs out cleanly.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leafid::snowflake::registry::{IssueLimit, WorkerRegistry, ZookeeperRecycleRegistry};
use leafid::Error;
use zookeeper_client as zk;

use super::harness::*;

#[test]
fn pool_exhaustion_then_a_released_id_comes_back_with_its_floor() {
    let name = unique_name("exhaust");
    let cache = tempfile::tempdir().unwrap();
    let gens: Vec<_> = (0..4)
        .map(|_| gen(&name, small(), cache.path()).unwrap())
        .collect();
    let ids: HashSet<u32> = gens.iter().map(|g| g.worker_id()).collect();
    assert_eq!(ids, HashSet::from([0, 1, 2, 3]));
    let err = gen(&name, small(), cache.path()).unwrap_err();
    assert!(
        matches!(err, Error::WorkerIdExhausted { size: 4, .. }),
        "{err:?}"
    );
    // Close holder of id 2: its id is free at once (the lease node is deleted), and the
    // next holder starts above the last timestamp it issued.
    let g2 = gens.iter().find(|g| g.worker_id() == 2).unwrap();
    let last = g2.next_id().unwrap();
    g2.close();
    let next = gen(&name, small(), cache.path()).unwrap();
    assert_eq!(next.worker_id(), 2);
    assert!(next.decode(next.next_id().unwrap()).timestamp_ms > next.decode(last).timestamp_ms);
    next.close();
    for g in &gens {
        g.close();
    }
}

#[test]
fn killing_the_session_cuts_the_issue_limit_and_the_id_goes_to_the_next_holder_above_its_bound() {
    let name = unique_name("expire");
    let reg = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name.clone(),
        "10.0.0.1",
        "1",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let limit = IssueLimit::closed();
    limit.set(0);
    let r = reg.clone();
    let l = limit.clone();
    let lease = leafid::runtime::block_on(async move { r.acquire(0, l).await }).unwrap();
    let bound = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 5_000;
    let r = reg.clone();
    let l2 = lease.clone();
    leafid::runtime::block_on(async move { r.renew(&l2, bound).await }).unwrap();
    assert!(limit.raise(bound));

    end_held_session(&reg, &name);
    let until = Instant::now() + Duration::from_secs(30);
    while limit.get() != i64::MIN {
        assert!(
            Instant::now() < until,
            "issue limit never cut after the session ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Renewing on the dead session is refused.
    let r = reg.clone();
    let l2 = lease.clone();
    let err = leafid::runtime::block_on(async move { r.renew(&l2, bound + 1).await }).unwrap_err();
    assert!(
        matches!(
            err,
            Error::LeaseLost { .. } | Error::RegistryUnavailable { .. }
        ),
        "{err:?}"
    );
    // The next holder gets the id with our bound as its floor.
    let other = Arc::new(ZookeeperRecycleRegistry::new(
        zk_addr(),
        name,
        "10.0.0.2",
        "2",
        Duration::from_millis(6000),
        Duration::from_millis(3000),
    ));
    let o = other.clone();
    let next =
        leafid::runtime::block_on(async move { o.acquire(0, IssueLimit::closed()).await }).unwrap();
    assert_eq!(next.worker_id, lease.worker_id);
    assert_eq!(next.floor_ms, bound);
    let o = other.clone();
    leafid::runtime::block_on(async move { o.release(&next).await }).unwrap();
}

/// Free ids are taken lowest floor first, so the ids' time part leads the clock the
/// least: a recorded bound a minute ahead is still below the floor of an id with no
/// record (ZooKeeper's clock plus the reach, fence rule 5), and a bound in the past is
/// below both.
#[test]
fn a_free_id_with_the_lowest_floor_is_taken_first_and_an_unrecorded_one_last() {
    let name = unique_name("rank");
    let registry = |ip: &str| {
        Arc::new(ZookeeperRecycleRegistry::new(
            zk_addr(),
            name.clone(),
            ip,
            "1",
            Duration::from_millis(6000),
            Duration::from_millis(3000),
        ))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Id 0 released with a bound a minute ahead; id 1 never used.
    let first = registry("10.0.0.1");
    let r = first.clone();
    let held = leafid::runtime::block_on(async move {
        let lease = r.acquire(2, IssueLimit::closed()).await?;
        r.renew(&lease, now + 60_000).await?;
        r.release(&lease).await?;
        Ok::<_, Error>(lease)
    })
    .unwrap();
    assert_eq!(held.worker_id, 0);
    // Id 0 (a minute ahead) is taken before ids 1 and 2 (no record).
    let (zero, one) = (registry("10.0.0.2"), registry("10.0.0.3"));
    let (z, o) = (zero.clone(), one.clone());
    let (a, b) = leafid::runtime::block_on(async move {
        let a = z.acquire(2, IssueLimit::closed()).await?;
        // With id 0 held, the next holder gets id 1 and leaves a bound in the past.
        let b = o.acquire(2, IssueLimit::closed()).await?;
        o.renew(&b, now - 1_000).await?;
        o.release(&b).await?;
        z.release(&a).await?;
        Ok::<_, Error>((a, b))
    })
    .unwrap();
    assert_eq!(
        (a.worker_id, a.floor_ms, a.floor_recorded),
        (0, now + 60_000, true)
    );
    assert_eq!((b.worker_id, b.floor_recorded), (1, false));
    // Id 1 (a bound in the past) is taken before id 0 (ahead) and id 2 (no record).
    let last = registry("10.0.0.4");
    let r = last.clone();
    let next = leafid::runtime::block_on(async move {
        let lease = r.acquire(2, IssueLimit::closed()).await?;
        r.release(&lease).await?;
        Ok::<_, Error>(lease)
    })
    .unwrap();
    assert_eq!((next.worker_id, next.floor_ms), (1, now - 1_000));
}

#[test]
fn a_lease_node_deleted_by_hand_is_noticed_by_the_renew_and_the_generator_moves_on() {
    let name = unique_name("deleted");
    let cache = tempfile::tempdir().unwrap();
    let (reg, g) = watched_generator(&name, cache.path());
    let mut seen: HashSet<i64> = g.next_ids(1_000).unwrap().into_iter().collect();
    let r = reg.clone();
    let (id, before) = leafid::runtime::block_on(async move { r.held_session().await }).unwrap();
    // An operator deletes the lease node; the session itself stays healthy.
    let (addr, path) = (zk_addr(), format!("/snowflake/{name}/recycle/lease/{id}"));
    leafid::runtime::block_on(async move {
        let admin = zk::Client::connect(&addr).await.unwrap();
        admin.delete(&path, None).await.unwrap();
    });
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < until,
            "the generator never took a new lease"
        );
        match g.next_id() {
            Ok(id) => assert!(seen.insert(id), "duplicate id {id}"),
            Err(Error::LeaseLost { .. } | Error::RegistryUnavailable { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        let r = reg.clone();
        let now = leafid::runtime::block_on(async move { r.held_session().await });
        if now.is_some_and(|(_, info)| info.id != before.id) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..1_000 {
        let id = loop {
            match g.next_id() {
                Ok(id) => break id,
                Err(Error::LeaseLost { .. }) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("unexpected error {e}"),
            }
        };
        assert!(seen.insert(id), "duplicate id {id}");
    }
    g.close();
}

#[test]
fn generator_stops_on_a_lost_session_and_resumes_on_a_new_lease_without_duplicates() {
    let name = unique_name("resume");
    let cache = tempfile::tempdir().unwrap();
    let (reg, g) = watched_generator(&name, cache.path());
    let mut seen = HashSet::new();
    for id in g.next_ids(5_000).unwrap() {
        assert!(seen.insert(id));
    }
    let ended = end_held_session(&reg, &name);
    // The holder learns of the end when its client next reaches the server (it may have
    // been between connections, kicked off by the attach): until then it issues up to
    // its bound, below the floor it leaves (fence rule 5); then it stops (LeaseLost)
    // until the heartbeat leased an id again, and resumes on the new session.
    let until = Instant::now() + Duration::from_secs(30);
    let held = || {
        let r = reg.clone();
        leafid::runtime::block_on(async move { r.held_session().await }).map(|(_, s)| s.id)
    };
    let mut resumed = 0;
    while resumed < 1_000 {
        if held() == Some(ended) {
            resumed = 0;
        }
        assert!(Instant::now() < until, "generator never resumed");
        match g.next_id() {
            Ok(id) => {
                assert!(seen.insert(id), "duplicate id {id}");
                resumed += 1;
            }
            Err(Error::LeaseLost { .. }) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    let r = reg.clone();
    let (_, now_held) = leafid::runtime::block_on(async move { r.held_session().await }).unwrap();
    assert_ne!(
        now_held.id, ended,
        "still issuing on the session that ended"
    );
    g.close();
}
