//! [`RegistryConfig`]: which worker-id registry to use, from a URL or by hand.
//!
//! This file dispatches on the scheme and builds the registry; each scheme's grammar
//! sits beside its registry (`fixed.rs`, `local.rs`, `mysql/url.rs`, `zookeeper/url.rs`,
//! `zookeeper_recycle/url.rs`), and what they share is in `config/grammar.rs`.
//!
//! ```
//! use leafid::snowflake::RegistryConfig;
//! assert_eq!(RegistryConfig::parse("fixed:7").unwrap(), RegistryConfig::Fixed(7));
//! assert!(RegistryConfig::parse("zookeeper://127.0.0.1:2181/order").is_err()); // ?port= missing
//! ```

use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "zookeeper")]
use std::time::Duration;

use super::zk_client as zk;
#[cfg(feature = "mysql")]
use super::MysqlRegistry;
use super::{fixed, local, mysql_url, zookeeper_recycle_url, zookeeper_url};
use super::{FixedRegistry, LocalRegistry, WorkerRegistry};
#[cfg(feature = "zookeeper")]
use super::{ZookeeperRecycleRegistry, ZookeeperRegistry};
use crate::error::{Error, Result};
use grammar::bad;

pub(super) mod grammar;
pub(super) mod host_ip;

/// A worker-id registry, as configured. Parsing and validation do no I/O; the
/// registry connects when the generator is built. `Debug` hides passwords.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryConfig {
    /// `fixed:7` — the id itself.
    Fixed(u32),
    /// `local:///dir` — file locks in a directory on this host.
    Local {
        /// The lock directory.
        dir: PathBuf,
    },
    /// `zookeeper://[user:pass@]host:port[,host:port…][/chroot…]/name?port=P[&ip=A]` —
    /// Leaf's forever nodes under `/snowflake/{name}/forever` (below the chroot), one per
    /// `ip:port`. With `user:pass` (percent-encoded) the client authenticates with
    /// ZooKeeper's `digest` scheme.
    Zookeeper {
        /// The ZooKeeper connect string in Java's form plus credentials,
        /// `[user:pass@]host:port,host:port[/chroot]`, user and password percent-encoded
        /// (see [`zk::connect_string`]); show it only through [`zk::shown_connect`].
        connect: String,
        /// Leaf's `leaf.name`.
        name: String,
        /// This process's ip, part of its identity (default: the host's first
        /// non-loopback IPv4 address, as Leaf).
        ip: String,
        /// This process's port, part of its identity (Leaf's `leaf.snowflake.port`).
        port: String,
        /// `?session_timeout_ms=` (default 6000, Leaf's Curator setting).
        session_timeout_ms: u32,
        /// `?connect_timeout_ms=`: how long start-up waits for a session (default 3000).
        connect_timeout_ms: u32,
    },
    /// `zookeeper-recycle://[user:pass@]host:port[,host:port…][/chroot…]/name[?port=P&ip=A]`
    /// — a pool of ids leased with the ZooKeeper session; ip and port are only recorded
    /// as the last user. With `user:pass`, floors are written so that only those
    /// credentials can change them.
    ZookeeperRecycle {
        /// The ZooKeeper connect string, as for [`RegistryConfig::Zookeeper`].
        connect: String,
        /// The pool's name.
        name: String,
        /// This process's ip (recorded only).
        ip: String,
        /// This process's port (recorded only; default "0").
        port: String,
        /// `?session_timeout_ms=` (default 6000): how long after a holder's last contact
        /// ZooKeeper frees its id.
        session_timeout_ms: u32,
        /// `?connect_timeout_ms=`: how long an acquire waits for a session (default 3000).
        connect_timeout_ms: u32,
    },
    /// `mysql://user:pass@host:port/db?port=P[&ip=A]` — the Leaf fork's
    /// `leaf_workerid_alloc` table, one row per `ip:port`.
    Mysql {
        /// The database URL, without leafid's `ip` / `port` parameters.
        url: String,
        /// This process's ip, part of its identity.
        ip: String,
        /// This process's port, part of its identity.
        port: String,
    },
    /// `statefulset:[///floor-dir][?name=S&offset=N&hostname=H]` — a Kubernetes
    /// StatefulSet pod's ordinal plus an offset (`docs/kubernetes.md`).
    Statefulset(super::StatefulsetConfig),
    /// `mysql://…/db?pool=NAME[&pool_size=N]` or `postgres://…/db?pool=NAME[&pool_size=N]`
    /// — any free worker id of a named pool, leased by the database's clock.
    #[cfg(any(feature = "mysql", feature = "postgres"))]
    Pool(super::pool::PoolConfig),
    /// `postgres://user:pass@host:port/db?port=P[&ip=A]` — the identity lease of `mysql`
    /// on PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(super::postgres::PostgresConfig),
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // By hand: connect strings and database URLs may carry a password.
        match self {
            RegistryConfig::Fixed(id) => f.debug_tuple("Fixed").field(id).finish(),
            RegistryConfig::Statefulset(c) => f.debug_tuple("Statefulset").field(c).finish(),
            #[cfg(any(feature = "mysql", feature = "postgres"))]
            RegistryConfig::Pool(c) => f.debug_tuple("Pool").field(c).finish(),
            #[cfg(feature = "postgres")]
            RegistryConfig::Postgres(c) => f.debug_tuple("Postgres").field(c).finish(),
            RegistryConfig::Local { dir } => f.debug_struct("Local").field("dir", dir).finish(),
            RegistryConfig::Zookeeper {
                connect,
                name,
                ip,
                port,
                session_timeout_ms,
                connect_timeout_ms,
            } => f
                .debug_struct("Zookeeper")
                .field("connect", &zk::shown_connect(connect))
                .field("name", name)
                .field("ip", ip)
                .field("port", port)
                .field("session_timeout_ms", session_timeout_ms)
                .field("connect_timeout_ms", connect_timeout_ms)
                .finish(),
            RegistryConfig::ZookeeperRecycle {
                connect,
                name,
                ip,
                port,
                session_timeout_ms,
                connect_timeout_ms,
            } => f
                .debug_struct("ZookeeperRecycle")
                .field("connect", &zk::shown_connect(connect))
                .field("name", name)
                .field("ip", ip)
                .field("port", port)
                .field("session_timeout_ms", session_timeout_ms)
                .field("connect_timeout_ms", connect_timeout_ms)
                .finish(),
            RegistryConfig::Mysql { url, ip, port } => f
                .debug_struct("Mysql")
                .field("url", &redact(url))
                .field("ip", ip)
                .field("port", port)
                .finish(),
        }
    }
}

/// Drops the password from `scheme://user:pass@host…`. Whatever precedes the last `@`
/// is hidden when the credentials are not where they belong (an unencoded `/` or `?` in
/// the password), so a malformed URL does not show its password either.
fn redact(url: &str) -> String {
    crate::redact::url(url)
}

impl RegistryConfig {
    /// Parses one of: `fixed:7`, `local:///var/lib/leafid/workers`,
    /// `zookeeper://127.0.0.1:2181/order?port=8080`,
    /// `zookeeper-recycle://127.0.0.1:2181/pool`,
    /// `mysql://user:pass@127.0.0.1:3306/db?port=8080`. `zookeeper` and `mysql` also take
    /// `&ip=` (default: the host's first non-loopback IPv4 address, as Leaf).
    /// Both ZooKeeper forms take digest credentials and a chroot:
    /// `zookeeper://user:pass@h1:2181,h2:2181/apps/leaf/order?port=8080` authenticates as
    /// `user` (user and password percent-decoded) and puts `/snowflake/order/…` below
    /// `/apps/leaf` (the path's last segment is the name, the ones before it the chroot;
    /// the chroot node is created when missing, never its parents).
    /// Both ZooKeeper forms also take `session_timeout_ms=` (100..=7500, default 6000
    /// as Leaf's Curator; the server clamps it to its own min/max; a crashed holder's
    /// session, and with it a `zookeeper-recycle` id, is freed that long after its end) and
    /// `connect_timeout_ms=` (100..=600000, default 3000: how long start-up or a
    /// re-acquire waits for a session before failing with `RegistryUnavailable`).
    /// A bad URL is [`Error::InvalidUrl`] naming the forms that work.
    pub fn parse(url: &str) -> Result<RegistryConfig> {
        let url = url.trim();
        if let Some(rest) = url.strip_prefix("fixed:") {
            return Ok(RegistryConfig::Fixed(fixed::parse_url(url, rest)?));
        }
        if let Some(rest) = url.strip_prefix("local:") {
            let dir = local::parse_url(url, rest)?;
            return Ok(RegistryConfig::Local { dir });
        }
        if let Some(rest) = url.strip_prefix("zookeeper-recycle://") {
            let u = zookeeper_recycle_url::parse(url, rest)?;
            return Ok(RegistryConfig::ZookeeperRecycle {
                connect: u.connect,
                name: u.name,
                ip: u.ip,
                port: u.port,
                session_timeout_ms: u.session_timeout_ms,
                connect_timeout_ms: u.connect_timeout_ms,
            });
        }
        if let Some(rest) = url.strip_prefix("zookeeper://") {
            let u = zookeeper_url::parse(url, rest)?;
            return Ok(RegistryConfig::Zookeeper {
                connect: u.connect,
                name: u.name,
                ip: u.ip,
                port: u.port,
                session_timeout_ms: u.session_timeout_ms,
                connect_timeout_ms: u.connect_timeout_ms,
            });
        }
        // Before `mysql://`: a pool is any database URL with `?pool=`.
        #[cfg(any(feature = "mysql", feature = "postgres"))]
        if super::pool::is_pool_url(url) {
            return Ok(RegistryConfig::Pool(super::pool::parse(url)?));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return Ok(RegistryConfig::Postgres(super::postgres::parse(url)?));
            #[cfg(not(feature = "postgres"))]
            return Err(Error::feature_left_out(url, "postgres"));
        }
        if url.starts_with("mysql://") {
            let u = mysql_url::parse(url)?;
            return Ok(RegistryConfig::Mysql {
                url: u.url,
                ip: u.ip,
                port: u.port,
            });
        }
        if url.starts_with("statefulset:") {
            return super::statefulset::url::parse(url).map(RegistryConfig::Statefulset);
        }
        Err(bad(url, "unknown registry scheme"))
    }

    /// Builds the registry (no I/O). `max_worker_id` sizes the pools that need it.
    pub(crate) fn build(&self, _max_worker_id: u32) -> Result<Arc<dyn WorkerRegistry>> {
        match self {
            RegistryConfig::Fixed(id) => Ok(Arc::new(FixedRegistry::new(*id))),
            RegistryConfig::Statefulset(c) => {
                Ok(Arc::new(super::StatefulsetRegistry::new(c.clone())?))
            }
            RegistryConfig::Local { dir } => {
                // A config built by hand skips the parser: the same refusal here.
                let dir = super::local::absolute_dir(dir).map_err(Error::InvalidConfig)?;
                Ok(Arc::new(LocalRegistry::new(dir)))
            }
            #[cfg(feature = "zookeeper")]
            RegistryConfig::Zookeeper {
                connect,
                name,
                ip,
                port,
                session_timeout_ms,
                connect_timeout_ms,
            } => Ok(Arc::new({
                super::zookeeper_url::warn_dash_in_name(name);
                ZookeeperRegistry::new(
                    connect.clone(),
                    name.clone(),
                    ip.clone(),
                    port.clone(),
                    Duration::from_millis(*session_timeout_ms as u64),
                    Duration::from_millis(*connect_timeout_ms as u64),
                )
            })),
            #[cfg(feature = "mysql")]
            RegistryConfig::Mysql { url, ip, port } => {
                Ok(Arc::new(MysqlRegistry::new(url, ip.clone(), port.clone())?))
            }
            #[cfg(not(feature = "mysql"))]
            RegistryConfig::Mysql { url, .. } => Err(Error::feature_left_out(url, "mysql")),
            #[cfg(any(feature = "mysql", feature = "postgres"))]
            RegistryConfig::Pool(c) => Ok(Arc::new(super::pool::PoolRegistry::new(c)?)),
            #[cfg(feature = "postgres")]
            RegistryConfig::Postgres(c) => Ok(Arc::new(super::postgres::PostgresRegistry::new(c)?)),
            #[cfg(not(feature = "zookeeper"))]
            RegistryConfig::Zookeeper { .. } | RegistryConfig::ZookeeperRecycle { .. } => Err(
                Error::feature_left_out(&format!("{}://", self.scheme()), "zookeeper"),
            ),
            #[cfg(feature = "zookeeper")]
            RegistryConfig::ZookeeperRecycle {
                connect,
                name,
                ip,
                port,
                session_timeout_ms,
                connect_timeout_ms,
            } => Ok(Arc::new(ZookeeperRecycleRegistry::new(
                connect.clone(),
                name.clone(),
                ip.clone(),
                port.clone(),
                Duration::from_millis(*session_timeout_ms as u64),
                Duration::from_millis(*connect_timeout_ms as u64),
            ))),
        }
    }

    /// The URL scheme, for messages.
    pub fn scheme(&self) -> &'static str {
        match self {
            RegistryConfig::Fixed(_) => "fixed",
            RegistryConfig::Local { .. } => "local",
            RegistryConfig::Zookeeper { .. } => "zookeeper",
            RegistryConfig::ZookeeperRecycle { .. } => "zookeeper-recycle",
            RegistryConfig::Mysql { .. } => "mysql",
            RegistryConfig::Statefulset(_) => "statefulset",
            #[cfg(any(feature = "mysql", feature = "postgres"))]
            RegistryConfig::Pool(c) => match c.dialect {
                super::pool::Dialect::Mysql => "mysql-pool",
                super::pool::Dialect::Postgres => "postgres-pool",
            },
            #[cfg(feature = "postgres")]
            RegistryConfig::Postgres(_) => "postgres",
        }
    }

    /// Whether a forked child can be given an id of its own by building the registry
    /// afresh (true for pools: `local`, `zookeeper-recycle`). The other registries
    /// would hand the child its parent's id.
    pub fn reacquires_after_fork(&self) -> bool {
        matches!(
            self,
            RegistryConfig::Local { .. } | RegistryConfig::ZookeeperRecycle { .. }
        ) || self.is_pool()
    }

    /// Whether the worker id's record lives on another host (ZooKeeper, a database), so
    /// that a registry outage can be ridden through on the persisted bound; false for
    /// `fixed`, `local` and `statefulset`, whose records are this host's files.
    pub fn is_networked(&self) -> bool {
        !matches!(
            self,
            RegistryConfig::Fixed(_)
                | RegistryConfig::Local { .. }
                | RegistryConfig::Statefulset(_)
        )
    }

    /// True for a pool on a database (`?pool=`), whose every process gets its own id.
    fn is_pool(&self) -> bool {
        #[cfg(any(feature = "mysql", feature = "postgres"))]
        if let RegistryConfig::Pool(_) = self {
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fixed_and_local() {
        assert_eq!(
            RegistryConfig::parse("fixed:7").unwrap(),
            RegistryConfig::Fixed(7)
        );
        assert_eq!(
            RegistryConfig::parse("local:///var/lib/leafid/workers").unwrap(),
            RegistryConfig::Local {
                dir: "/var/lib/leafid/workers".into()
            }
        );
        assert!(matches!(
            RegistryConfig::parse("fixed:-1"),
            Err(Error::InvalidUrl { .. })
        ));
        assert!(RegistryConfig::parse("local://").is_err());
    }

    #[test]
    fn zookeeper_and_mysql_require_port() {
        let e = RegistryConfig::parse("zookeeper://127.0.0.1:2181/leaf").unwrap_err();
        assert!(e.to_string().contains("?port="), "{e}");
        let e = RegistryConfig::parse("mysql://u:secret@127.0.0.1:3306/db").unwrap_err();
        assert!(e.to_string().contains("?port="), "{e}");
        assert!(!e.to_string().contains("secret"), "password leaked: {e}");
    }

    #[test]
    fn bad_urls_show_the_correct_forms() {
        for u in [
            "",
            "redis://x",
            "zookeeper://127.0.0.1/leaf?port=1",
            "zookeeper://127.0.0.1:2181/?port=1",
            "zookeeper://127.0.0.1:2181/a//b?port=1",
            "zookeeper://127.0.0.1:2181/a/../b?port=1",
            "zookeeper://u@127.0.0.1:2181/a?port=1",
            "zookeeper://:p@127.0.0.1:2181/a?port=1",
            "zookeeper://u:p@/a?port=1",
            "zookeeper://127.0.0.1:2181/a?port=1&bogus=2",
            "mysql://127.0.0.1:3306/?port=1",
        ] {
            let e = RegistryConfig::parse(u).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{u}: {e}");
            assert!(e.to_string().contains("fixed:7"), "{u}: {e}");
        }
    }

    #[test]
    fn errors_and_debug_never_show_the_password() {
        let secret = "s3cr3tpw";
        for url in [
            // Bad in every part after the credentials.
            format!("zookeeper://leaf:{secret}@127.0.0.1:2181/a/b"),
            format!("zookeeper://leaf:{secret}@127.0.0.1/order?port=1"),
            format!("zookeeper://leaf:{secret}@127.0.0.1:2181/order?port=1&bogus=1"),
            format!("zookeeper-recycle://leaf:{secret}@127.0.0.1:2181//pool"),
            format!("zookeeper-recycle://leaf:{secret}@127.0.0.1:2181/pool?session_timeout_ms=1"),
            // A password with an unencoded '/', '?' or '@', and bad escapes.
            format!("zookeeper-recycle://leaf:{secret}/x@127.0.0.1:2181/pool"),
            format!("zookeeper-recycle://leaf:{secret}?x@127.0.0.1:2181/pool"),
            format!("zookeeper-recycle://leaf:{secret}@x@127.0.0.1:2181/a@b/pool"),
            format!("zookeeper-recycle://leaf:{secret}%zz@127.0.0.1:2181/pool"),
            format!("zookeeper-recycle://{secret}@127.0.0.1:2181/pool"),
        ] {
            let e = RegistryConfig::parse(&url).unwrap_err();
            for shown in [e.to_string(), format!("{e:?}")] {
                assert!(!shown.contains(secret), "{url} shows its password: {shown}");
            }
        }
        let c = RegistryConfig::parse(&format!(
            "zookeeper-recycle://leaf:{secret}@127.0.0.1:2181/pool?ip=10.1.1.1"
        ))
        .unwrap();
        assert!(!format!("{c:?}").contains(secret), "{c:?}");
        assert!(
            format!("{c:?}").contains("leaf:***@127.0.0.1:2181"),
            "{c:?}"
        );
        let m = RegistryConfig::parse(&format!(
            "mysql://root:{secret}@127.0.0.1:3307/leafid?port=1&ip=10.0.0.9"
        ))
        .unwrap();
        assert!(!format!("{m:?}").contains(secret), "{m:?}");
    }

    #[cfg(all(feature = "mysql", feature = "postgres"))]
    #[test]
    fn database_pools_and_postgres_identities_are_dispatched() {
        let c = RegistryConfig::parse("mysql://u:p@127.0.0.1/db?pool=orders&pool_size=8").unwrap();
        assert_eq!(c.scheme(), "mysql-pool");
        assert!(c.reacquires_after_fork());
        let c = RegistryConfig::parse("postgresql://u:p@127.0.0.1/db?pool=orders").unwrap();
        assert_eq!(c.scheme(), "postgres-pool");
        let c =
            RegistryConfig::parse("postgres://u:secret@127.0.0.1/db?port=80&ip=10.0.0.1").unwrap();
        assert_eq!(c.scheme(), "postgres");
        assert!(!c.reacquires_after_fork());
        assert!(!format!("{c:?}").contains("secret"));
        let e = RegistryConfig::parse("postgres://u:p@127.0.0.1/db").unwrap_err();
        assert!(e.to_string().contains("?pool=NAME"), "{e}");
        // The identity form of mysql:// is unchanged.
        let c = RegistryConfig::parse("mysql://u:p@127.0.0.1/db?port=80&ip=10.0.0.1").unwrap();
        assert_eq!(c.scheme(), "mysql");
    }
}
