//! [`RegistryConfig`]: which worker-id registry to use, from a URL or by hand.
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
use super::{FixedRegistry, LocalRegistry, WorkerRegistry};
#[cfg(feature = "zookeeper")]
use super::{ZookeeperRecycleRegistry, ZookeeperRegistry};
use crate::error::{Error, Result};

const FORMS: &str = "fixed:7 | local:///var/lib/leafid/workers | \
zookeeper://[user:pass@]127.0.0.1:2181[,host:port…][/chroot…]/leafname?port=8080 | \
zookeeper-recycle://[user:pass@]127.0.0.1:2181[/chroot…]/pool | \
mysql://user:pass@127.0.0.1:3306/db?port=8080";

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
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // By hand: connect strings and database URLs may carry a password.
        match self {
            RegistryConfig::Fixed(id) => f.debug_tuple("Fixed").field(id).finish(),
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

fn bad(url: &str, reason: impl std::fmt::Display) -> Error {
    Error::invalid_url(url, format!("{reason}; expected one of: {FORMS}"))
}

/// Drops the password from `scheme://user:pass@host…`. Whatever precedes the last `@`
/// is hidden when the credentials are not where they belong (an unencoded `/` or `?` in
/// the password), so a malformed URL does not show its password either.
fn redact(url: &str) -> String {
    crate::redact::url(url)
}

/// Splits `a=1&b=2` into pairs, refusing keys other than `allowed`.
fn query_pairs(url: &str, query: &str, allowed: &[&str]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        if !allowed.contains(&k) {
            return Err(bad(
                url,
                format!("unknown parameter {k:?} (allowed: {})", allowed.join(", ")),
            ));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn check_port(url: &str, port: &str) -> Result<()> {
    if port.is_empty() || port.len() > 64 || port.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(bad(
            url,
            format!("port {port:?} is not usable as an identity"),
        ));
    }
    Ok(())
}

/// Refuses a part of a Leaf identity (`ip`, `port`, the `leaf.name`) that Java Leaf
/// cannot read back: Leaf splits forever-node names `{ip}:{port}-{seq}` on `-`, so a `-`
/// in the ip or port makes every Java Leaf server under that name fail to start. A `-`
/// in the name is accepted, as Java Leaf accepts it (see [`warn_dash_in_name`]).
fn check_leaf_part(url: &str, what: &str, value: &str) -> Result<()> {
    let refused = |c: char| {
        (c == '-' && what != "name")
            || c == '/'
            || c.is_whitespace()
            || (what == "port" && c == ':')
    };
    if let Some(c) = value.chars().find(|&c| refused(c)) {
        return Err(bad(
            url,
            format!(
                "{what} {value:?} contains {c:?}, which Java Leaf cannot read back in a node name \
                 (it splits ip:port-sequence on '-'); use a {what} without it"
            ),
        ));
    }
    Ok(())
}

/// Warns about a `leaf.name` with a `-`. Java Leaf runs with such a name: it splits only
/// the child names `{ip}:{port}-{seq}` on `-`, except on one path, a server whose
/// `ip:port` has no node yet in a `forever` tree that already exists, which splits the
/// whole new node's path (`/snowflake/{name}/forever/{ip}:{port}-{seq}`) and fails to
/// start. leafid itself is not affected; the warning names the case for a mixed fleet.
#[cfg(feature = "zookeeper")]
fn warn_dash_in_name(name: &str) {
    if name.contains('-') {
        tracing::warn!(
            leaf_name = name,
            "leaf.name contains '-': leafid and Java Leaf both run with it, but a Java Leaf \
             server whose ip:port has no node yet under an existing /snowflake/{{name}}/forever \
             fails to start (Leaf's new-node path splits the whole node path on '-'); Java \
             servers that already have a node, or that create the tree, are not affected. \
             Start new Java Leaf servers under a name without '-' in a mixed fleet"
        );
    }
}

/// The identity ip: `?ip=` when given, else the host's first non-loopback IPv4
/// address (Leaf's `Utils.getIp`).
fn identity_ip(url: &str, given: Option<&str>) -> Result<String> {
    match given {
        Some(ip) if !ip.is_empty() => Ok(ip.to_string()),
        Some(_) => Err(bad(url, "ip= is empty")),
        None => first_non_loopback_ipv4().ok_or_else(|| {
            bad(
                url,
                "this host has no non-loopback IPv4 address to identify it; add ?ip=<address>",
            )
        }),
    }
}

/// The first non-loopback IPv4 address over the host's interfaces.
pub fn first_non_loopback_ipv4() -> Option<String> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `addrs` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = addrs;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr; the family says which kind.
            let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                if !ip.is_loopback() && !ip.is_unspecified() {
                    found = Some(ip.to_string());
                    break;
                }
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(addrs) };
    found
}

/// `(connect, name, query pairs, session timeout ms, connect timeout ms)` of a ZooKeeper URL.
type ZkParts = (String, String, Vec<(String, String)>, u32, u32);

/// A millisecond option in `min..=max`, or `default` when absent.
fn ms_param(
    url: &str,
    pairs: &[(String, String)],
    key: &str,
    default: u32,
    min: u32,
    max: u32,
) -> Result<u32> {
    match get(pairs, key) {
        None => Ok(default),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(bad(
                url,
                format!("{key}={v:?} must be a whole number of milliseconds in {min}..={max}"),
            )),
        },
    }
}

/// Splits `[user:pass@]host:port[,host:port…][/chroot…]/name[?query]`: the path's
/// last segment is the name, the segments before it the chroot; the user and password
/// are percent-decoded. The connect string handed on is
/// `[user:pass@]host:port,…[/chroot]` ([`zk::connect_string`]).
fn parse_zk(url: &str, rest: &str) -> Result<ZkParts> {
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = main
        .split_once('/')
        .ok_or_else(|| bad(url, "missing /name after the ZooKeeper address"))?;
    // An '@' anywhere but in the authority: most likely a password with a '/' or '?'
    // in it, which would otherwise be taken for the path and echoed in messages.
    if path.contains('@') || query.contains('@') {
        return Err(bad(
            url,
            "'@' outside user:pass@ (percent-encode '/', '?' and '@' in a password as              %2F, %3F and %40; a chroot or name cannot contain '@')",
        ));
    }
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((creds, hosts)) => {
            let (user, password) = creds
                .split_once(':')
                .ok_or_else(|| bad(url, "credentials must be user:pass"))?;
            let user = zk::percent_decode(user)
                .ok_or_else(|| bad(url, "the user is not valid percent-encoded UTF-8"))?;
            let password = zk::percent_decode(password)
                .ok_or_else(|| bad(url, "the password is not valid percent-encoded UTF-8"))?;
            if user.is_empty() || user.contains(':') {
                return Err(bad(url, "the user must be non-empty and free of ':'"));
            }
            (Some((user, password)), hosts)
        }
        None => (None, authority),
    };
    if hosts.is_empty() {
        return Err(bad(url, "missing ZooKeeper address (host:port)"));
    }
    for hp in hosts.split(',') {
        let ok = hp
            .rsplit_once(':')
            .map(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
            .unwrap_or(false);
        if !ok {
            return Err(bad(
                url,
                format!("ZooKeeper address {hp:?} is not host:port"),
            ));
        }
    }
    let mut segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let name = segments.pop().unwrap_or("");
    if name.is_empty() {
        return Err(bad(
            url,
            format!("name {name:?} must be a non-empty last path segment (Leaf's leaf.name)"),
        ));
    }
    if let Some(s) = segments
        .iter()
        .chain(std::iter::once(&name))
        .find(|s| s.is_empty() || **s == "." || **s == ".." || s.chars().any(char::is_control))
    {
        return Err(bad(
            url,
            format!("path segment {s:?} is not a ZooKeeper node name (empty, '.', '..' or a control character)"),
        ));
    }
    let chroot = (!segments.is_empty()).then(|| format!("/{}", segments.join("/")));
    let connect = zk::connect_string(
        hosts,
        chroot.as_deref(),
        credentials.as_ref().map(|(u, p)| (u.as_str(), p.as_str())),
    );
    // The client reads it back the same way; a mismatch here is a bug, not bad input.
    zk::check_connect(&connect).map_err(|e| bad(url, e))?;
    let pairs = query_pairs(
        url,
        query,
        &["port", "ip", "session_timeout_ms", "connect_timeout_ms"],
    )?;
    // ZooKeeper servers accept 2..20 ticks by default; beyond these bounds no server would.
    let session = ms_param(url, &pairs, "session_timeout_ms", 6000, 100, 7500)?;
    let connect_ms = ms_param(url, &pairs, "connect_timeout_ms", 3000, 100, 600_000)?;
    Ok((connect, name.to_string(), pairs, session, connect_ms))
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
    /// as Leaf's Curator; the server clamps it to its own min/max; at most 7500 so that a
    /// holder cut off from ZooKeeper stops before a newcomer's wait ends, fence rule 5) and
    /// `connect_timeout_ms=` (100..=600000, default 3000: how long start-up or a
    /// re-acquire waits for a session before failing with `RegistryUnavailable`).
    /// A bad URL is [`Error::InvalidUrl`] naming the forms that work.
    pub fn parse(url: &str) -> Result<RegistryConfig> {
        let url = url.trim();
        if let Some(rest) = url.strip_prefix("fixed:") {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let id: u32 = rest.parse().map_err(|_| {
                bad(
                    url,
                    format!("worker id {rest:?} is not a non-negative integer"),
                )
            })?;
            return Ok(RegistryConfig::Fixed(id));
        }
        if let Some(rest) = url.strip_prefix("local:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(bad(url, "missing lock directory"));
            }
            let dir = super::local::absolute_dir(std::path::Path::new(path))
                .map_err(|reason| bad(url, reason))?;
            return Ok(RegistryConfig::Local { dir });
        }
        if let Some(rest) = url.strip_prefix("zookeeper-recycle://") {
            let (connect, name, pairs, session_timeout_ms, connect_timeout_ms) =
                parse_zk(url, rest)?;
            let port = get(&pairs, "port").unwrap_or("0").to_string();
            check_port(url, &port)?;
            let ip = identity_ip(url, get(&pairs, "ip"))?;
            return Ok(RegistryConfig::ZookeeperRecycle {
                connect,
                name,
                ip,
                port,
                session_timeout_ms,
                connect_timeout_ms,
            });
        }
        if let Some(rest) = url.strip_prefix("zookeeper://") {
            let (connect, name, pairs, session_timeout_ms, connect_timeout_ms) =
                parse_zk(url, rest)?;
            let port = get(&pairs, "port")
                .ok_or_else(|| {
                    bad(
                        url,
                        "missing ?port= (this process's identity, Leaf's leaf.snowflake.port)",
                    )
                })?
                .to_string();
            check_port(url, &port)?;
            let ip = identity_ip(url, get(&pairs, "ip"))?;
            check_leaf_part(url, "ip", &ip)?;
            check_leaf_part(url, "port", &port)?;
            check_leaf_part(url, "name", &name)?;
            return Ok(RegistryConfig::Zookeeper {
                connect,
                name,
                ip,
                port,
                session_timeout_ms,
                connect_timeout_ms,
            });
        }
        if url.starts_with("mysql://") {
            let mut parsed = url::Url::parse(url).map_err(|e| bad(url, e))?;
            if parsed.host_str().unwrap_or("").is_empty() {
                return Err(bad(url, "missing database host"));
            }
            if parsed.path().trim_matches('/').is_empty() {
                return Err(bad(url, "missing database name (mysql://…/db)"));
            }
            let mut port = None;
            let mut ip = None;
            let mut rest = Vec::new();
            for (k, v) in parsed.query_pairs() {
                match k.as_ref() {
                    "port" => port = Some(v.into_owned()),
                    "ip" => ip = Some(v.into_owned()),
                    _ => rest.push((k.into_owned(), v.into_owned())),
                }
            }
            let port = port.ok_or_else(|| {
                bad(
                    url,
                    "missing ?port= (this process's identity in leaf_workerid_alloc)",
                )
            })?;
            check_port(url, &port)?;
            let ip = identity_ip(url, ip.as_deref())?;
            check_leaf_part(url, "ip", &ip)?;
            check_leaf_part(url, "port", &port)?;
            if rest.is_empty() {
                parsed.set_query(None);
            } else {
                parsed.query_pairs_mut().clear().extend_pairs(rest);
            }
            return Ok(RegistryConfig::Mysql {
                url: parsed.to_string(),
                ip,
                port,
            });
        }
        Err(bad(url, "unknown registry scheme"))
    }

    /// Builds the registry (no I/O). `max_worker_id` sizes the pools that need it.
    pub(crate) fn build(&self, _max_worker_id: u32) -> Result<Arc<dyn WorkerRegistry>> {
        match self {
            RegistryConfig::Fixed(id) => Ok(Arc::new(FixedRegistry::new(*id))),
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
                warn_dash_in_name(name);
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
        }
    }

    /// Whether a forked child can be given an id of its own by building the registry
    /// afresh (true for pools: `local`, `zookeeper-recycle`). The other registries
    /// would hand the child its parent's id.
    pub fn reacquires_after_fork(&self) -> bool {
        matches!(
            self,
            RegistryConfig::Local { .. } | RegistryConfig::ZookeeperRecycle { .. }
        )
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
    fn parses_zookeeper_with_identity() {
        let c = RegistryConfig::parse(
            "zookeeper://127.0.0.1:2181,127.0.0.1:2182/com.sankuai.leaf?port=8080&ip=10.0.0.5",
        )
        .unwrap();
        assert_eq!(
            c,
            RegistryConfig::Zookeeper {
                connect: "127.0.0.1:2181,127.0.0.1:2182".into(),
                name: "com.sankuai.leaf".into(),
                ip: "10.0.0.5".into(),
                port: "8080".into(),
                session_timeout_ms: 6000,
                connect_timeout_ms: 3000,
            }
        );
    }

    #[test]
    fn identity_ip_defaults_to_a_non_loopback_ipv4_address() {
        match first_non_loopback_ipv4() {
            Some(ip) => {
                let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
                assert!(!parsed.is_loopback());
                let c = RegistryConfig::parse("zookeeper://127.0.0.1:2181/leaf?port=8080").unwrap();
                assert!(matches!(c, RegistryConfig::Zookeeper { ip: ref got, .. } if *got == ip));
            }
            None => {
                // A host with loopback only: the URL must name its ip.
                let e =
                    RegistryConfig::parse("zookeeper://127.0.0.1:2181/leaf?port=8080").unwrap_err();
                assert!(e.to_string().contains("?ip="), "{e}");
            }
        }
    }

    #[test]
    fn identities_java_leaf_cannot_read_are_refused_before_any_io() {
        for url in [
            "zookeeper://127.0.0.1:2181/order?port=80-81",
            "zookeeper://127.0.0.1:2181/order?port=8080&ip=10.0.0-1",
            "mysql://u:p@127.0.0.1:3306/db?port=80-81&ip=10.0.0.1",
            "mysql://u:p@127.0.0.1:3306/db?port=8080&ip=host-a",
        ] {
            let err = RegistryConfig::parse(url).unwrap_err().to_string();
            assert!(err.contains("'-'"), "{url}: {err}");
        }
        // The recycle pool is leafid's own tree: its name may carry a '-'.
        assert!(RegistryConfig::parse("zookeeper-recycle://127.0.0.1:2181/my-pool").is_ok());
    }

    /// Issue 20: Java Leaf runs with a `leaf.name` holding a `-` (only its new-node path
    /// in an existing tree breaks); leafid refused the name, with the wrong reason.
    #[test]
    fn a_leaf_name_with_a_dash_is_accepted() {
        let c =
            RegistryConfig::parse("zookeeper://127.0.0.1:2181/leaf-order?port=8080&ip=10.0.0.1")
                .unwrap();
        assert!(matches!(c, RegistryConfig::Zookeeper { ref name, .. } if name == "leaf-order"));
        // The ip and port still may not: Java splits `{ip}:{port}-{seq}` on '-'.
        assert!(RegistryConfig::parse(
            "zookeeper://127.0.0.1:2181/leaf-order?port=80-81&ip=10.0.0.1"
        )
        .is_err());
    }

    /// Issue 20 row 1: a relative `local:` directory was resolved against each process's
    /// working directory, so one config started from two directories held two locks.
    #[test]
    fn relative_local_directories_are_refused_with_the_absolute_form() {
        for (url, suggested) in [
            ("local:workers", "local:///workers"),
            ("local://workers", "local:///workers"),
            (
                "local://var/lib/leafid/workers",
                "local:///var/lib/leafid/workers",
            ),
            ("local://./w", "local:///w"),
            ("local://~/w", "local:///~/w"),
        ] {
            let e = RegistryConfig::parse(url).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(suggested), "{url}: {msg}");
            assert!(msg.contains("working directory"), "{url}: {msg}");
        }
        // A hand-built config skips the parser; building refuses it the same way.
        let hand = RegistryConfig::Local {
            dir: "workers".into(),
        };
        assert!(matches!(hand.build(1023), Err(Error::InvalidConfig(_))));
        // The same directory spelled two ways is one (the symlinks at acquire).
        for url in [
            "local:/var/lib/leafid/workers",
            "local:///var/lib/leafid/workers/",
            "local:///var/lib/./leafid//workers",
            "local:////var/lib/leafid/workers",
        ] {
            assert_eq!(
                RegistryConfig::parse(url).unwrap(),
                RegistryConfig::Local {
                    dir: "/var/lib/leafid/workers".into()
                },
                "{url}"
            );
        }
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
    fn zookeeper_timeouts_are_parsed_and_checked() {
        let c = RegistryConfig::parse(
            "zookeeper-recycle://127.0.0.1:2181/pool?ip=10.1.1.1&session_timeout_ms=1000&connect_timeout_ms=500",
        )
        .unwrap();
        assert!(matches!(
            c,
            RegistryConfig::ZookeeperRecycle {
                session_timeout_ms: 1000,
                connect_timeout_ms: 500,
                ..
            }
        ));
        for bad in [
            "session_timeout_ms=0",
            "session_timeout_ms=x",
            "session_timeout_ms=8000",
            "connect_timeout_ms=9999999",
        ] {
            let u = format!("zookeeper://127.0.0.1:2181/leaf?port=1&ip=1.2.3.4&{bad}");
            let e = RegistryConfig::parse(&u).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{u}: {e}");
        }
    }

    #[test]
    fn recycle_port_is_optional() {
        let c =
            RegistryConfig::parse("zookeeper-recycle://127.0.0.1:2181/pool?ip=10.1.1.1").unwrap();
        assert!(matches!(c, RegistryConfig::ZookeeperRecycle { ref port, .. } if port == "0"));
    }

    #[test]
    fn mysql_url_loses_only_identity_params() {
        let c = RegistryConfig::parse(
            "mysql://root:pw@127.0.0.1:3307/leafid?port=8080&ip=10.0.0.9&ssl-mode=disabled",
        )
        .unwrap();
        assert_eq!(
            c,
            RegistryConfig::Mysql {
                url: "mysql://root:pw@127.0.0.1:3307/leafid?ssl-mode=disabled".into(),
                ip: "10.0.0.9".into(),
                port: "8080".into()
            }
        );
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

    fn recycle_connect(url: &str) -> String {
        match RegistryConfig::parse(url).unwrap() {
            RegistryConfig::ZookeeperRecycle { connect, .. } => connect,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zookeeper_urls_take_credentials_and_a_chroot() {
        let c = RegistryConfig::parse(
            "zookeeper://leaf:pw@127.0.0.1:2181,127.0.0.1:2182/apps/leaf/order?port=8080&ip=10.0.0.5",
        )
        .unwrap();
        assert_eq!(
            c,
            RegistryConfig::Zookeeper {
                connect: "leaf:pw@127.0.0.1:2181,127.0.0.1:2182/apps/leaf".into(),
                name: "order".into(),
                ip: "10.0.0.5".into(),
                port: "8080".into(),
                session_timeout_ms: 6000,
                connect_timeout_ms: 3000,
            }
        );
        // Credentials alone, a chroot alone, and the recycle form.
        assert_eq!(
            recycle_connect("zookeeper-recycle://u:p@127.0.0.1:2181/pool?ip=10.1.1.1"),
            "u:p@127.0.0.1:2181"
        );
        assert_eq!(
            recycle_connect("zookeeper-recycle://127.0.0.1:2181/a/b/c/pool/?ip=10.1.1.1"),
            "127.0.0.1:2181/a/b/c"
        );
        // The chroot may carry a '-' (only the Leaf name may not).
        let c = RegistryConfig::parse("zookeeper://127.0.0.1:2181/my-apps/order?port=1&ip=1.2.3.4");
        assert!(
            matches!(c, Ok(RegistryConfig::Zookeeper { ref connect, .. }) if connect.ends_with("/my-apps"))
        );
    }

    #[test]
    fn percent_encoded_passwords_reach_the_client_decoded() {
        // p@ss/w:rd?% written percent-encoded in the URL.
        let connect = recycle_connect(
            "zookeeper-recycle://u%2Ex:p%40ss%2Fw:rd%3F%25@127.0.0.1:2181/r/pool?ip=10.1.1.1",
        );
        assert_eq!(connect, "u.x:p%40ss%2Fw%3Ard%3F%25@127.0.0.1:2181/r");
        let user_pass = connect.rsplit_once('@').unwrap().0;
        let (user, pass) = user_pass.split_once(':').unwrap();
        assert_eq!(zk::percent_decode(user).unwrap(), "u.x");
        assert_eq!(zk::percent_decode(pass).unwrap(), "p@ss/w:rd?%");
        assert_eq!(zk::shown_connect(&connect), "u.x:***@127.0.0.1:2181/r");
        for bad in [
            "zookeeper-recycle://u:p%4@127.0.0.1:2181/pool",
            "zookeeper-recycle://u:p%ff@127.0.0.1:2181/pool",
            "zookeeper-recycle://u%3Av:p@127.0.0.1:2181/pool",
        ] {
            assert!(
                matches!(RegistryConfig::parse(bad), Err(Error::InvalidUrl { .. })),
                "{bad}"
            );
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
}
