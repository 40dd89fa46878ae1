//! The pieces of URL grammar every registry scheme shares: the error that names the
//! forms that work, query parameters, and the checks on a process's identity (ip and
//! port) and on millisecond options. Each scheme's own grammar sits beside its registry
//! (`fixed.rs`, `local.rs`, `mysql/url.rs`, `zookeeper/url.rs`,
//! `zookeeper_recycle/url.rs`); this file is what they have in common, so none of them
//! reaches into another for it.

use super::host_ip::first_non_loopback_ipv4;
use crate::error::{Error, Result};

/// Every form a registry URL may take, shown in each `InvalidUrl`.
const FORMS: &str = "fixed:7 | local:///var/lib/leafid/workers | \
zookeeper://[user:pass@]127.0.0.1:2181[,host:port…][/chroot…]/leafname?port=8080 | \
zookeeper-recycle://[user:pass@]127.0.0.1:2181[/chroot…]/pool | \
mysql://user:pass@127.0.0.1:3306/db?port=8080 | \
statefulset:///var/lib/leafid/floor?name=orders | \
postgres://user:pass@127.0.0.1:5432/db?port=8080 | \
mysql://…/db?pool=NAME[&pool_size=N] | postgres://…/db?pool=NAME[&pool_size=N]";

/// `InvalidUrl` for `url`: `reason`, then the forms that work.
pub(in crate::snowflake::registry) fn bad(url: &str, reason: impl std::fmt::Display) -> Error {
    Error::invalid_url(url, format!("{reason}; expected one of: {FORMS}"))
}

/// Splits `a=1&b=2` into pairs, refusing keys other than `allowed`.
pub(in crate::snowflake::registry) fn query_pairs(
    url: &str,
    query: &str,
    allowed: &[&str],
) -> Result<Vec<(String, String)>> {
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

pub(in crate::snowflake::registry) fn get<'a>(
    pairs: &'a [(String, String)],
    key: &str,
) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub(in crate::snowflake::registry) fn check_port(url: &str, port: &str) -> Result<()> {
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
/// in the name is accepted, as Java Leaf accepts it (see `zookeeper/url.rs`).
pub(in crate::snowflake::registry) fn check_leaf_part(
    url: &str,
    what: &str,
    value: &str,
) -> Result<()> {
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

/// The identity ip: `?ip=` when given, else the host's first non-loopback IPv4
/// address (Leaf's `Utils.getIp`).
pub(in crate::snowflake::registry) fn identity_ip(
    url: &str,
    given: Option<&str>,
) -> Result<String> {
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

/// A millisecond option in `min..=max`, or `default` when absent.
pub(in crate::snowflake::registry) fn ms_param(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::registry::RegistryConfig;

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
}
