//! The backend layer under both modes: how leafid reaches a database.
//!
//! The segment stores (`segment::store`) and the database worker registries
//! (`snowflake::registry::mysql`, and the PostgreSQL registry to come) talk to the same servers and fail in the same ways; what
//! they share lives here, once, and knows nothing of either mode (no file here names
//! `segment` or `snowflake`; the modes import this layer, never each other):
//!
//! | file | job |
//! |---|---|
//! | [`mysql`] | MySQL / MariaDB: URL to connect options, the lazy pool, the server's error numbers, the database clock |
//! | [`postgres`] | PostgreSQL: URL to connect options (`sslmode`), the lazy pool, SQLSTATEs and their classification, the server's clock, literals for the simple query protocol (PgBouncer) |
//! | [`sqlite`] | SQLite: the one connection a process keeps, its busy retries, the network-filesystem refusal |
//! | [`sqlite_fork`] | keeping `fork()` out of SQLite's process-global state |
//! | [`probe`] | one direct connection attempt that says why a pool timed out |
//! | [`diagnosis`] | a pool acquire that runs that probe early and shares its verdict |
//! | [`network_fs`] | which network filesystem (if any) a path lives on |
//!
//! What a table means (`leaf_alloc`, the worker-id tables), the statements and the
//! messages naming them stay with the store or registry that owns the table.

#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) mod diagnosis;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "sqlite")]
pub(crate) mod network_fs;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) mod probe;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite_fork;
