//! The backend layer under both modes: how leafid reaches a database.
//!
//! The segment stores (`segment::store`) and the database worker registries
//! (`snowflake::registry::mysql`, and the PostgreSQL one to come) talk to the same
//! servers and fail in the same ways; what they share lives here, once, and knows
//! nothing of either mode (no file here names `segment` or `snowflake`; the modes
//! import this layer, never each other):
//!
//! | file | job |
//! |---|---|
//! | [`mysql`] | MySQL / MariaDB: URL to connect options, the lazy pool, the server's error numbers, the database clock |
//! | [`postgres`] | PostgreSQL: URL to connect options (`sslmode`), the lazy pool, SQLSTATEs and their classification, the server's clock, literals for the simple query protocol (PgBouncer) |
//! | [`sqlite`] | SQLite: the one connection a process keeps, its busy retries, the network-filesystem refusal |
//! | [`sqlite_fork`] | keeping `fork()` out of SQLite's process-global state |
//! | [`probe`] | one direct connection attempt that says why a pool timed out |
//! | [`refusal`] | a server's refusal (login, grants, unknown database) as `AccessDenied` |
//! | [`diagnosis`] | a pool acquire that runs that probe early and shares its verdict |
//! | [`network_fs`] | which network filesystem (if any) a path lives on |
//!
//! What a table means (`leaf_alloc`, the worker-id tables), the statements and the
//! messages naming them stay with the store or registry that owns the table.

#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) mod diagnosis;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
pub(crate) mod network_fs;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) mod probe;
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) mod refusal;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite_fork;

/// The host of a URL as a resolver takes it: an IPv6 literal without the brackets a URL
/// writes around it (`[::1]` is `::1`). The `url` crate's `host_str` keeps them, and
/// sqlx hands that text to the resolver, which finds no host `[::1]`: a server on an
/// IPv6 address was never reached.
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `host:port` as a URL writes it, an IPv6 address in brackets (`[::1]:3306`), for
/// messages and names.
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(all(test, any(feature = "mysql", feature = "postgres")))]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_literal_loses_its_brackets_for_the_resolver_and_keeps_them_in_names() {
        assert_eq!(unbracketed("[::1]"), "::1");
        assert_eq!(unbracketed("[fd00::2]"), "fd00::2");
        assert_eq!(unbracketed("db.example"), "db.example");
        assert_eq!(unbracketed("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_port("::1", 3306), "[::1]:3306");
        assert_eq!(host_port("127.0.0.1", 3306), "127.0.0.1:3306");
    }
}
