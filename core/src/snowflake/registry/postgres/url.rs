//! The PostgreSQL identity registry's URL: `postgres://user:pass@host:5432/db?port=P`
//! (and `postgresql://`), with an optional `&ip=A` (default: the host's first
//! non-loopback IPv4 address, as Leaf). Apart from the registry because it does no I/O:
//! the configuration parser calls [`parse`] and nothing else.

use crate::error::{Error, Result};

/// The form this URL takes, for messages.
const FORM: &str = "postgres://user:pass@host:5432/db?port=8080[&ip=10.0.0.1]";

/// The PostgreSQL identity registry as configured. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// The database URL without `ip` / `port`.
    pub url: String,
    /// This process's ip, part of its identity.
    pub ip: String,
    /// This process's port, part of its identity.
    pub port: String,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &crate::redact::url(&self.url))
            .field("ip", &self.ip)
            .field("port", &self.port)
            .finish()
    }
}

fn bad(url: &str, reason: impl std::fmt::Display) -> Error {
    Error::invalid_url(url, format!("{reason}; expected {FORM}"))
}

/// Reads a `postgres://…?port=P[&ip=A]` URL (no I/O).
pub(crate) fn parse(url: &str) -> Result<PostgresConfig> {
    let url = url.trim();
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(bad(url, "not a postgres:// URL"));
    }
    let mut parsed = url::Url::parse(url).map_err(|e| bad(url, e))?;
    if parsed.host_str().unwrap_or("").is_empty() {
        return Err(bad(url, "missing database host"));
    }
    if parsed.path().trim_matches('/').is_empty() {
        return Err(bad(url, "missing database name (postgres://…/db)"));
    }
    let (mut port, mut ip, mut rest) = (None, None, Vec::new());
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
            "missing ?port= (this process's identity; or ?pool=NAME for a pool of ids)",
        )
    })?;
    // Written as a number, so `08080` and `8080` are one identity (no Java server shares
    // this table to keep a spelling for).
    let port = match port.parse::<u32>() {
        Ok(n @ 1..=65535) => n.to_string(),
        _ => return Err(bad(url, format!("port {port:?} is not in 1..=65535"))),
    };
    let ip = match ip {
        Some(ip) if !ip.is_empty() && ip.len() <= 100 && !ip.contains(char::is_whitespace) => ip,
        Some(ip) => return Err(bad(url, format!("ip {ip:?} is not an address"))),
        None => super::super::first_non_loopback_ipv4()
            .ok_or_else(|| bad(url, "no non-loopback IPv4 address on this host: give ?ip="))?,
    };
    if rest.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(rest);
    }
    Ok(PostgresConfig {
        url: parsed.to_string(),
        ip,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_identity_and_keeps_other_parameters() {
        let c = parse("postgres://u:p@127.0.0.1:5433/leafid?sslmode=disable&port=8080&ip=10.0.0.9")
            .unwrap();
        assert_eq!(
            c.url,
            "postgres://u:p@127.0.0.1:5433/leafid?sslmode=disable"
        );
        assert_eq!((c.ip.as_str(), c.port.as_str()), ("10.0.0.9", "8080"));
    }

    #[test]
    fn refuses_missing_or_bad_parts_without_the_password() {
        for url in [
            "postgres://u:s3cr3t@127.0.0.1/leafid",
            "postgres://u:s3cr3t@127.0.0.1/leafid?port=0",
            "postgres://u:s3cr3t@127.0.0.1/leafid?port=x",
            "postgres://u:s3cr3t@127.0.0.1/?port=1",
            "mysql://u:s3cr3t@127.0.0.1/db?port=1",
        ] {
            let e = parse(url).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e}");
            assert!(!e.to_string().contains("s3cr3t"), "{e}");
        }
        let same = parse("postgres://u:p@h/db?port=08080&ip=1.2.3.4").unwrap();
        assert_eq!(
            same.port, "8080",
            "one port, one identity, however it is spelt"
        );
        let c = parse("postgres://u:s3cr3t@h/db?port=1&ip=1.2.3.4").unwrap();
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }
}
