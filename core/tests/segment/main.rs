//! Segment mode's integration tests, one test binary: ids from a `leaf_alloc` table on
//! the in-memory store, SQLite and the real MariaDB (`LEAFID_MYSQL_URL`: `source
//! .services/env`), a module per behaviour. One binary instead of one per file, because
//! each test binary links the whole core (CI's link time).
//!
//! Not here: the database stopped mid-run (`tests/outage/`, its own binary so no other
//! test sees the outage), the hot path's allocations (`tests/hot_path_alloc/`, a global
//! allocator) and the metrics text (`tests/metrics.rs`, which reads every live
//! generator of the process).
//!
//! Run one module: `cargo test -p leafid --test segment high_water::`.

/// Shared test support (`tests/support/`), the parts this binary uses.
#[path = "../support"]
mod support {
    pub mod delay_proxy;
    pub mod ipv6;
    pub mod mysql;
    pub mod own_database;
    pub mod postgres;
    pub mod self_exec;
    pub mod watch_proxy;
}

/// The double buffer, the dynamic step, outages and the tag list on the in-memory store.
mod memory_store;

/// Uniqueness across generators, threads and restarts on the real MariaDB.
mod mysql_store;

/// `postgres://`: the MySQL store's cases on PostgreSQL.
mod postgres_store;

/// `postgres://`: refused, silent and lost connections, logins, sslmode, PgBouncer.
mod postgres_connections;

/// Rows leafid refuses on SQLite, and tags whose ids would pass `i64::MAX`.
mod sqlite_refused_rows;

/// Processes sharing one SQLite file never issue one id twice.
mod sqlite_shared_by_processes;

/// A forked child drops its parent's segments.
mod fork;

/// The chunked form (`thread_chunk`): threads in processes on one tag, fork, close, batches.
mod thread_chunks;

/// A tag's ids never go backwards, whatever an operator does to its row.
mod high_water;

/// The calls that never wait and the async calls.
mod never_wait;

/// Tags usable at once: made elsewhere, created, or looked up on a cache miss.
mod tag_lookup;

/// What the never-waiting and tag-lookup tests share (a proxy, polling).
mod harness;

/// Errors keep their driver's cause; an outage reads as one.
mod error_causes;

/// Review 2's failing tests (PostgreSQL store).
mod rev2_findings;

/// Issue 28: the MySQL and PostgreSQL stores under a user with the DML grants alone.
mod least_privilege;

/// Issue 28: the PostgreSQL store at REPEATABLE READ and SERIALIZABLE.
mod postgres_isolation;

/// Issue 28: the stores on IPv6 literal hosts (`[::1]`).
mod ipv6_hosts;
