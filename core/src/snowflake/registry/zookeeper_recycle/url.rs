//! The grammar of `zookeeper-recycle://` URLs: the ZooKeeper part of
//! `zookeeper/url.rs`, with an identity that is only recorded (`?port=` optional, default
//! "0"; the pool is leafid's own tree, so Java Leaf's limits on names do not apply).
//!
//! Beside the registry it configures, but declared from `registry/mod.rs` rather than
//! `zookeeper_recycle/mod.rs`: a build without the `zookeeper` feature still parses the
//! URL (and then refuses it by name), so this file is built whatever the features.

use crate::error::Result;
use crate::snowflake::registry::config::grammar::{check_port, get, identity_ip};
use crate::snowflake::registry::zookeeper_url::{parse_zk, ZkUrl};

/// Parses a `zookeeper-recycle://` URL, `rest` being what follows the scheme.
pub(in crate::snowflake::registry) fn parse(url: &str, rest: &str) -> Result<ZkUrl> {
    let (connect, name, pairs, session_timeout_ms, connect_timeout_ms) = parse_zk(url, rest)?;
    let port = get(&pairs, "port").unwrap_or("0").to_string();
    check_port(url, &port)?;
    let ip = identity_ip(url, get(&pairs, "ip"))?;
    Ok(ZkUrl {
        connect,
        name,
        ip,
        port,
        session_timeout_ms,
        connect_timeout_ms,
    })
}

#[cfg(test)]
mod tests {
    use crate::snowflake::registry::RegistryConfig;

    #[test]
    fn recycle_port_is_optional() {
        let c =
            RegistryConfig::parse("zookeeper-recycle://127.0.0.1:2181/pool?ip=10.1.1.1").unwrap();
        assert!(matches!(c, RegistryConfig::ZookeeperRecycle { ref port, .. } if port == "0"));
    }
}
