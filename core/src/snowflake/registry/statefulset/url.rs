//! The `statefulset:` URL grammar:
//! `statefulset:[///floor-dir][?name=S][&offset=N][&hostname=H]`.
//!
//! Apart from the registry so that each scheme's grammar sits next to its registry; the
//! registry configuration (`registry/config.rs`) dispatches `statefulset:` URLs here.
//!
//! - the path, when present, is the floor directory (absolute, three slashes as for
//!   `local:`): `statefulset:///var/lib/leafid/floor`;
//! - `name=` the StatefulSet's name (the host name must be `<name>-<ordinal>`);
//! - `offset=` a whole number added to the ordinal (default 0, may be negative);
//! - `hostname=` the pod's name instead of the system's host name (tests, or
//!   `hostNetwork` pods, whose host name is the node's: pass `$(POD_NAME)` from the
//!   downward API).
//!
//! The host name is read and its ordinal checked here, so a pod that is not a
//! StatefulSet's is refused when the URL is parsed, before any I/O.

use std::path::Path;

use super::config::StatefulsetConfig;
use crate::error::{Error, Result};

const FORM: &str = "statefulset:[///floor-dir][?name=orders][&offset=0][&hostname=orders-3]";

impl StatefulsetConfig {
    /// Parses a `statefulset:[///floor-dir][?name=S][&offset=N][&hostname=H]` URL (the
    /// grammar of [`RegistryConfig::parse`](crate::snowflake::RegistryConfig::parse) for this
    /// scheme): [`Error::InvalidUrl`] when it does not parse or the host name has no
    /// ordinal. Reads the system's host name when `hostname=` is absent; no other I/O.
    pub fn from_url(url: &str) -> Result<StatefulsetConfig> {
        parse(url)
    }
}

fn bad(url: &str, reason: impl std::fmt::Display) -> Error {
    Error::invalid_url(url, format!("{reason}; expected {FORM}"))
}

/// Parses a `statefulset:` URL (see the module doc). The system's host name is read when
/// `hostname=` is absent; no other I/O.
pub(crate) fn parse(url: &str) -> Result<StatefulsetConfig> {
    let url = url.trim();
    let rest = url
        .strip_prefix("statefulset:")
        .ok_or_else(|| bad(url, "not a statefulset: URL"))?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut config = StatefulsetConfig::new(String::new());
    if !path.is_empty() {
        let dir = crate::snowflake::registry::local::absolute_dir(Path::new(path))
            .map_err(|reason| bad(url, reason))?;
        config = config.floor_dir(dir);
    }
    let mut hostname = None;
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        match key {
            "name" if !value.is_empty() => config = config.statefulset(value),
            "hostname" if !value.is_empty() => hostname = Some(value.to_string()),
            "offset" => {
                let offset = value
                    .parse::<i64>()
                    .map_err(|_| bad(url, format!("offset={value:?} is not a whole number")))?;
                config = config.offset(offset);
            }
            "name" | "hostname" => return Err(bad(url, format!("{key}= is empty"))),
            other => {
                return Err(bad(
                    url,
                    format!("unknown parameter {other:?} (allowed: name, offset, hostname)"),
                ))
            }
        }
    }
    config.hostname = hostname.unwrap_or_else(crate::snowflake::registry::host_lock::host_name);
    config.worker_id().map_err(|reason| bad(url, reason))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_part() {
        let c =
            parse("statefulset:///var/lib/leafid/floor?name=orders&offset=100&hostname=orders-3")
                .unwrap();
        assert_eq!(c.hostname, "orders-3");
        assert_eq!(c.statefulset.as_deref(), Some("orders"));
        assert_eq!(c.offset, 100);
        assert_eq!(
            c.floor_dir.as_deref(),
            Some(Path::new("/var/lib/leafid/floor"))
        );
        assert_eq!(c.worker_id(), Ok(103));
        for same in [
            "statefulset:?hostname=web-2",
            "statefulset://?hostname=web-2",
            " statefulset:?offset=0&hostname=web-2 ",
        ] {
            let c = parse(same).unwrap();
            assert_eq!((c.worker_id(), c.floor_dir), (Ok(2), None), "{same}");
        }
        assert_eq!(
            parse("statefulset:?hostname=web-120&offset=-100")
                .unwrap()
                .worker_id(),
            Ok(20)
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for bad in [
            "statefulset:?hostname=web",
            "statefulset:?hostname=web-01",
            "statefulset:?hostname=web-2&name=api",
            "statefulset:?hostname=web-2&offset=x",
            "statefulset:?hostname=web-2&offset=",
            "statefulset:?hostname=",
            "statefulset:?hostname=web-2&port=80",
            "statefulset:relative/dir?hostname=web-2",
            "statefulset:?hostname=web-2&offset=9223372036854775807",
        ] {
            assert!(
                matches!(parse(bad), Err(Error::InvalidUrl { .. })),
                "{bad}: {:?}",
                parse(bad)
            );
        }
    }
}
