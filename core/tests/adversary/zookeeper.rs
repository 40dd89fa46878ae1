//! `zookeeper://`: Leaf's `/snowflake/{name}/forever` nodes, shared with Java Leaf. Its
//! adversaries: Java Leaf's holder (started before, after and racing leafid), the
//! holder's forever node deleted or rewritten, the whole tree deleted (issue 20 #3, #4,
//! #8).

use std::time::Duration;

use crate::foreign::{foreign_rows, When};
use crate::harness::{open_dir, unique, Registry, Spawn, Target};
use crate::rows::{matrix_rows, outage_rows, restart_newcomer_row, tampered};

/// The `zookeeper` row set.
pub struct Zookeeper;

/// `LEAFID_ZK`.
pub fn zk() -> String {
    std::env::var("LEAFID_ZK").expect("LEAFID_ZK is not set: source .services/env first")
}

/// The identity every row's first process uses.
pub const IP_PORT: (&str, &str) = ("127.0.0.1", "8080");

impl Registry for Zookeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn target(&self, row: &str) -> Target {
        let name = unique(row);
        Target {
            url: url_of(&zk(), &name, IP_PORT.1),
            name,
            upstream: Some(zk()),
            keep: Vec::new(),
        }
    }

    /// The session (6 s) has expired and its `holders/` live node is gone.
    fn lease_life(&self) -> Option<Duration> {
        Some(Duration::from_secs(8))
    }

    fn lease_after_cut(&self) -> Duration {
        Duration::from_millis(6_500)
    }

    /// `deleteall /snowflake/{name}`.
    fn wipe(&self, t: &Target) {
        admin::delete_all(&format!("/snowflake/{}", t.name));
    }

    /// Identity 127.0.0.1:808{1+i}: after a wipe its forever node is the first again.
    fn other(&self, t: &mut Target, i: usize) -> String {
        url_of(&zk(), &t.name, &(8081 + i).to_string())
    }
}

/// The URL of leaf name `name` with identity 127.0.0.1:`port`.
pub fn url_of(connect: &str, name: &str, port: &str) -> String {
    format!("zookeeper://{connect}/{name}?port={port}&ip={}", IP_PORT.0)
}

matrix_rows!(Zookeeper);
outage_rows!(Zookeeper);
restart_newcomer_row!(Zookeeper, false);
foreign_rows!(java_row);

/// Java Leaf's `SnowflakeZookeeperHolder` on the identity a leafid uses (issue 20 #3,
/// #8): a rolling replacement where the Java server and leafid start within a second.
fn java_row(when: When) {
    let t = Zookeeper.target(&format!("java{when:?}").to_lowercase());
    let (name, tmp) = (t.name.clone(), open_dir());
    crate::foreign::row(
        &Zookeeper,
        "java leaf server",
        when,
        &t,
        (1, true),
        move || {
            let (ip, port) = IP_PORT;
            let j = crate::java_leaf::JavaLeaf::start(&zk(), &name, ip, port, tmp.path())?;
            Ok(Box::new(move || {
                let what = format!("worker {}, silent {}", j.worker_id(), j.silent());
                let ids = j.stop();
                drop(tmp);
                (what, ids)
            }))
        },
    );
}

/// Issue 28 #1: a Java Leaf server on a host 4.5 s ahead, after an older leafid holder.
#[test]
fn foreign_server_skewed_ahead_after_an_older_leafid_holder() {
    let t = Zookeeper.target("javaahead");
    let name = t.name.clone();
    crate::foreign::skewed_after_older_leafid(&Zookeeper, "java leaf server", &t, move |ahead| {
        let tmp = open_dir();
        let (ip, port) = IP_PORT;
        let j = crate::java_leaf::JavaLeaf::start_ahead(&zk(), &name, ip, port, tmp.path(), ahead)?;
        Ok(Box::new(move || {
            let what = format!("worker {}, silent {}", j.worker_id(), j.silent());
            let ids = j.stop();
            drop(tmp);
            (what, ids)
        }))
    });
}

/// ZooKeeper as an operator with `zkCli` uses it: an independent client.
pub mod admin {
    use zookeeper_client as zkc;

    /// Runs `f` with a fresh session, on a runtime of its own (the call blocks).
    fn with<T, F: std::future::Future<Output = T>>(f: impl FnOnce(zkc::Client) -> F) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = zkc::Client::connector()
                .with_session_timeout(std::time::Duration::from_secs(6))
                .connect(&super::zk())
                .await
                .expect("connect to LEAFID_ZK");
            f(c).await
        })
    }

    /// The children of `path` (none when it is absent).
    pub fn children(path: &str) -> Vec<String> {
        let path = path.to_string();
        with(|c| async move { c.list_children(&path).await.unwrap_or_default() })
    }

    /// `deleteall path`: the node and everything under it.
    pub fn delete_all(path: &str) {
        let path = path.to_string();
        with(|c| async move {
            let mut stack = vec![path];
            let mut order = Vec::new();
            while let Some(p) = stack.pop() {
                for child in c.list_children(&p).await.unwrap_or_default() {
                    stack.push(format!("{p}/{child}"));
                }
                order.push(p);
            }
            for p in order.iter().rev() {
                let _ = c.delete(p, None).await;
            }
        })
    }

    /// `set path data`.
    pub fn set(path: &str, data: &str) {
        let (path, data) = (path.to_string(), data.to_string());
        with(|c| async move {
            let _ = c.set_data(&path, data.as_bytes(), None).await;
        })
    }
}

/// The holder's forever node (`{ip}:{port}-{seq}`) under leaf name `name`.
fn holder_node(name: &str) -> Option<String> {
    let forever = format!("/snowflake/{name}/forever");
    let prefix = format!("{}:{}-", IP_PORT.0, IP_PORT.1);
    admin::children(&forever)
        .into_iter()
        .find(|c| c.starts_with(&prefix))
        .map(|c| format!("{forever}/{c}"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The holder's node deleted (an operator cleaning up): the holder must stop; a newcomer
/// of another identity and one of the same identity on another host (a proxy) start.
#[test]
fn forever_node_deleted_under_a_live_holder() {
    let t = Zookeeper.target("node");
    let alias = t.proxy().unwrap();
    tampered(&Zookeeper, "forever node deleted under holder", &t, |_| {
        if let Some(node) = holder_node(&t.name) {
            admin::delete_all(&node);
        }
        vec![
            Spawn::url(&t.via(&alias).unwrap()),
            Spawn::url(&url_of(&zk(), &t.name, "8081")),
        ]
    });
}

/// `deleteall /snowflake/{name}` under a live holder: the sequence restarts at 0 and a
/// new identity gets the holder's worker id (issue 20 #4).
#[test]
fn whole_tree_deleted_under_a_live_holder() {
    let t = Zookeeper.target("tree");
    tampered(&Zookeeper, "whole tree deleted under holder", &t, |_| {
        admin::delete_all(&format!("/snowflake/{}", t.name));
        vec![
            Spawn::url(&url_of(&zk(), &t.name, "8081")),
            Spawn::url(&url_of(&zk(), &t.name, "8082")),
        ]
    });
}

/// The holder's node rewritten as Java Leaf writes it (a Java server of that identity,
/// or an operator's `set`), then a newcomer of the same identity on another host.
#[test]
fn forever_node_rewritten_under_a_live_holder() {
    let t = Zookeeper.target("rewrite");
    let alias = t.proxy().unwrap();
    tampered(
        &Zookeeper,
        "forever node rewritten under holder",
        &t,
        |_| {
            if let Some(node) = holder_node(&t.name) {
                let (ip, port) = IP_PORT;
                let data = format!(
                    r#"{{"ip":"{ip}","port":"{port}","timestamp":{}}}"#,
                    now_ms() - 20_000
                );
                admin::set(&node, &data);
            }
            vec![Spawn::url(&t.via(&alias).unwrap())]
        },
    );
}
