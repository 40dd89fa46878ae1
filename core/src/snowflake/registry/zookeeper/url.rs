//! The grammar of `zookeeper://` URLs, and the ZooKeeper part both ZooKeeper schemes
//! share (`[user:pass@]host:port[,host:port…][/chroot…]/name`, the timeouts).
//!
//! Beside the registry it configures, but declared from `registry/mod.rs` rather than
//! `zookeeper/mod.rs`: a build without the `zookeeper` feature still parses the URL (and
//! then refuses it by name), so this file is built whatever the features.

use crate::error::Result;
use crate::snowflake::registry::config::grammar::{
    bad, check_leaf_part, check_port, get, identity_ip, ms_param, query_pairs,
};
use crate::snowflake::registry::zk_client as zk;

/// What a ZooKeeper registry URL says: where ZooKeeper is, the name, this process's
/// identity and the session's timeouts. `zookeeper-recycle://` reads the same parts
/// with its own rules for the identity (`zookeeper_recycle/url.rs`).
#[derive(Debug)]
pub(in crate::snowflake::registry) struct ZkUrl {
    /// The connect string, `[user:pass@]host:port,…[/chroot]` ([`zk::connect_string`]).
    pub connect: String,
    /// The path's last segment (Leaf's `leaf.name`, or the pool's name).
    pub name: String,
    /// This process's ip.
    pub ip: String,
    /// This process's port.
    pub port: String,
    /// `?session_timeout_ms=`.
    pub session_timeout_ms: u32,
    /// `?connect_timeout_ms=`.
    pub connect_timeout_ms: u32,
}

/// Parses a `zookeeper://` URL, `rest` being what follows the scheme: `?port=` is
/// required, and the ip, port and name must be readable back by Java Leaf.
pub(in crate::snowflake::registry) fn parse(url: &str, rest: &str) -> Result<ZkUrl> {
    let (connect, name, pairs, session_timeout_ms, connect_timeout_ms) = parse_zk(url, rest)?;
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
    Ok(ZkUrl {
        connect,
        name,
        ip,
        port,
        session_timeout_ms,
        connect_timeout_ms,
    })
}

/// Warns about a `leaf.name` with a `-`. Java Leaf runs with such a name: it splits only
/// the child names `{ip}:{port}-{seq}` on `-`, except on one path, a server whose
/// `ip:port` has no node yet in a `forever` tree that already exists, which splits the
/// whole new node's path (`/snowflake/{name}/forever/{ip}:{port}-{seq}`) and fails to
/// start. leafid itself is not affected; the warning names the case for a mixed fleet.
#[cfg(feature = "zookeeper")]
pub(in crate::snowflake::registry) fn warn_dash_in_name(name: &str) {
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

/// `(connect, name, query pairs, session timeout ms, connect timeout ms)` of a ZooKeeper URL.
pub(in crate::snowflake::registry) type ZkParts = (String, String, Vec<(String, String)>, u32, u32);

/// Splits `[user:pass@]host:port[,host:port…][/chroot…]/name[?query]`: the path's
/// last segment is the name, the segments before it the chroot; the user and password
/// are percent-decoded. The connect string handed on is
/// `[user:pass@]host:port,…[/chroot]` ([`zk::connect_string`]).
pub(in crate::snowflake::registry) fn parse_zk(url: &str, rest: &str) -> Result<ZkParts> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::snowflake::registry::RegistryConfig;

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
}
