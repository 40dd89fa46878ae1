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

/// Refuses `url`, which asks for TLS (`asks`: its parameter, `ssl-mode=REQUIRED`), in a
/// build without the `tls` feature: before any I/O and as configuration. sqlx would fail
/// every connection with a TLS error that leafid counts as an outage, so a store or
/// registry that requires TLS looked down forever ("retry once it is back").
#[cfg(all(any(feature = "mysql", feature = "postgres"), not(feature = "tls")))]
pub(crate) fn tls_left_out(url: &str, asks: &str) -> crate::error::Error {
    crate::error::Error::invalid_url(
        url,
        format_args!(
            "{asks} asks for TLS, which this build of leafid leaves out (the `tls` Cargo \
             feature; the prebuilt wheel, npm package and `leafid` binary are built without \
             it): build leafid with the `tls` feature, or connect without TLS"
        ),
    )
}

#[cfg(all(test, any(feature = "mysql", feature = "postgres")))]
mod tests {
    use super::*;

    /// Review of this session: a URL that requires TLS, in a build without TLS, is a
    /// configuration error before any I/O, not an outage retried forever.
    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_url_that_requires_tls_is_refused_as_configuration_in_a_build_without_it() {
        let mut urls = Vec::new();
        #[cfg(feature = "mysql")]
        urls.extend(
            ["REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"]
                .map(|m| format!("mysql://u:pw@127.0.0.1:3306/leaf?ssl-mode={m}")),
        );
        #[cfg(feature = "postgres")]
        urls.extend(
            ["require", "verify-ca", "verify-full"]
                .map(|m| format!("postgres://u:pw@127.0.0.1:5432/leaf?sslmode={m}")),
        );
        for url in urls {
            let e = if url.starts_with("mysql") {
                #[cfg(feature = "mysql")]
                {
                    mysql::connect_options(&url, "mysql://…")
                        .map(|_| ())
                        .unwrap_err()
                }
                #[cfg(not(feature = "mysql"))]
                unreachable!()
            } else {
                #[cfg(feature = "postgres")]
                {
                    postgres::connect_options(&url).map(|_| ()).unwrap_err()
                }
                #[cfg(not(feature = "postgres"))]
                unreachable!()
            };
            assert_eq!(e.kind(), crate::ErrorKind::Config, "{url}: {e}");
            assert!(e.to_string().contains("`tls` Cargo feature"), "{e}");
            assert!(!e.to_string().contains("pw"), "a password shown: {e}");
        }
        // Preferred TLS (the drivers' default) still connects in clear when it must.
        #[cfg(feature = "mysql")]
        assert!(mysql::connect_options("mysql://u:pw@h/leaf?ssl-mode=PREFERRED", "").is_ok());
        #[cfg(feature = "postgres")]
        assert!(postgres::connect_options("postgres://u:pw@h/leaf?sslmode=prefer").is_ok());
    }

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
