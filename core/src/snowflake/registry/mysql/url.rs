//! The grammar of `mysql://` worker-registry URLs: a database URL plus this process's
//! identity (`?port=` required, `&ip=` defaulting to the host's address), the identity
//! parameters taken out before the URL reaches the driver.
//!
//! Beside the registry it configures, but declared from `registry/mod.rs` rather than
//! `mysql/mod.rs`: a build without the `mysql` feature still parses the URL (and then
//! refuses it by name), so this file is built whatever the features.

use crate::error::Result;
use crate::snowflake::registry::config::grammar::{bad, check_leaf_part, check_port, identity_ip};

/// What a `mysql://` registry URL says.
#[derive(Debug)]
pub(in crate::snowflake::registry) struct MysqlUrl {
    /// The database URL, without leafid's `ip` / `port` parameters.
    pub url: String,
    /// This process's ip, part of its identity.
    pub ip: String,
    /// This process's port, part of its identity.
    pub port: String,
}

/// Parses a `mysql://` URL.
pub(in crate::snowflake::registry) fn parse(url: &str) -> Result<MysqlUrl> {
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
    Ok(MysqlUrl {
        url: parsed.to_string(),
        ip,
        port,
    })
}

#[cfg(test)]
mod tests {
    use crate::snowflake::registry::RegistryConfig;

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
}
