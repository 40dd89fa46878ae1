//! The pool registry's URL: a database URL (`mysql://`, `mariadb://`, `postgres://`,
//! `postgresql://`) with `?pool=NAME` and an optional `&pool_size=N`. Apart from the
//! registry because it does no I/O and knows nothing of leases: the configuration
//! parser calls [`parse`] and nothing else.

use crate::error::{Error, Result};

/// The forms a pool URL takes, for messages.
pub(crate) const FORMS: &str = "mysql://user:pass@host:3306/db?pool=NAME[&pool_size=N] | \
postgres://user:pass@host:5432/db?pool=NAME[&pool_size=N]";

/// The longest pool name (the column is `varchar(64)`).
const MAX_NAME: usize = 64;

/// Which database holds the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// MySQL or MariaDB (`mysql://`, `mariadb://`).
    Mysql,
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
}

/// A pool registry as configured: where, which pool, how many ids. `Debug` hides the
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// The database.
    pub dialect: Dialect,
    /// The database URL without `pool` / `pool_size`.
    pub url: String,
    /// The pool's name (letters, digits, `_`, `.`, `-`; at most 64).
    pub pool: String,
    /// `?pool_size=`: ids `0..size`; default every id the layout has.
    pub size: Option<u32>,
}

impl std::fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolConfig")
            .field("dialect", &self.dialect)
            .field("url", &crate::redact::url(&self.url))
            .field("pool", &self.pool)
            .field("size", &self.size)
            .finish()
    }
}

/// True when `url` names a pool (a database URL with a `pool` parameter), so the
/// configuration parser sends it here rather than to the identity registries.
pub(crate) fn is_pool_url(url: &str) -> bool {
    dialect_of(url).is_some()
        && url::Url::parse(url.trim())
            .map(|u| u.query_pairs().any(|(k, _)| k == "pool"))
            .unwrap_or(false)
}

fn dialect_of(url: &str) -> Option<Dialect> {
    let url = url.trim_start();
    if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        Some(Dialect::Mysql)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Some(Dialect::Postgres)
    } else {
        None
    }
}

fn bad(url: &str, reason: impl std::fmt::Display) -> Error {
    Error::invalid_url(url, format!("{reason}; expected {FORMS}"))
}

/// Reads a pool URL (no I/O). The database part is checked by the driver's own parser
/// when the registry is built.
pub(crate) fn parse(url: &str) -> Result<PoolConfig> {
    let url = url.trim();
    let dialect = dialect_of(url).ok_or_else(|| bad(url, "not a database URL"))?;
    let mut parsed = url::Url::parse(url).map_err(|e| bad(url, e))?;
    if parsed.host_str().unwrap_or("").is_empty() {
        return Err(bad(url, "missing database host"));
    }
    if parsed.path().trim_matches('/').is_empty() {
        return Err(bad(url, "missing database name (…/db?pool=NAME)"));
    }
    let (mut pool, mut size, mut rest) = (None, None, Vec::new());
    for (k, v) in parsed.query_pairs() {
        match k.as_ref() {
            "pool" => pool = Some(v.into_owned()),
            "pool_size" => size = Some(v.into_owned()),
            _ => rest.push((k.into_owned(), v.into_owned())),
        }
    }
    let pool = pool.ok_or_else(|| bad(url, "missing ?pool=NAME"))?;
    check_name(url, &pool)?;
    let size = match size {
        None => None,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(bad(
                    url,
                    format!("pool_size {s:?} is not a positive integer"),
                ))
            }
        },
    };
    if rest.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(rest);
    }
    Ok(PoolConfig {
        dialect,
        url: parsed.to_string(),
        pool,
        size,
    })
}

/// A pool name is a key in the database and a part of cache file names: plain text only.
pub(crate) fn check_name(url: &str, pool: &str) -> Result<()> {
    let plain = pool
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if pool.is_empty() || pool.len() > MAX_NAME || !plain {
        return Err(bad(
            url,
            format!("pool name {pool:?} must be 1 to {MAX_NAME} letters, digits, '_', '.' or '-'"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_databases_and_keeps_other_parameters() {
        let c = parse("mysql://u:p@127.0.0.1:3307/leafid?pool=orders&ssl-mode=disabled").unwrap();
        assert_eq!(c.dialect, Dialect::Mysql);
        assert_eq!(c.url, "mysql://u:p@127.0.0.1:3307/leafid?ssl-mode=disabled");
        assert_eq!((c.pool.as_str(), c.size), ("orders", None));
        let c =
            parse("postgresql://u@127.0.0.1/app?sslmode=require&pool=a.b-c_1&pool_size=3").unwrap();
        assert_eq!(c.dialect, Dialect::Postgres);
        assert_eq!(c.url, "postgresql://u@127.0.0.1/app?sslmode=require");
        assert_eq!(c.size, Some(3));
        assert!(is_pool_url("mariadb://u@h/db?pool=x"));
        assert!(!is_pool_url("mysql://u@h/db?port=8080"));
        assert!(!is_pool_url("postgres://u@h/db"));
    }

    #[test]
    fn refuses_bad_names_sizes_and_missing_parts_without_the_password() {
        for url in [
            "mysql://u:s3cr3t@h/db",
            "mysql://u:s3cr3t@h/db?pool=",
            "mysql://u:s3cr3t@h/db?pool=a%20b",
            "mysql://u:s3cr3t@h/db?pool=a&pool_size=0",
            "mysql://u:s3cr3t@h/db?pool=a&pool_size=-1",
            "postgres://u:s3cr3t@h/?pool=a",
            "zookeeper://h/x?pool=a",
        ] {
            let e = parse(url).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e}");
            assert!(!e.to_string().contains("s3cr3t"), "{e}");
        }
        let long = format!("mysql://h/db?pool={}", "x".repeat(65));
        assert!(parse(&long).is_err());
        let c = parse("mysql://u:s3cr3t@h/db?pool=a").unwrap();
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }
}
