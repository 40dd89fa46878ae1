//! Snowflake mode's integration tests, one test binary: the generator's rules under a
//! manual clock, its side of the registry contract, and the guarantees that hold in
//! every registry (one live holder per worker id, never blocking a caller that chose
//! not to wait, fork). One binary instead of one per file, because each test binary
//! links the whole core (CI's link time). Each registry's own tests are in
//! `tests/registry/`.
//!
//! Tests that start child processes re-run this binary on an `#[ignore]`d entry point,
//! named with its module path ([`support::self_exec`]).
//!
//! Run one module: `cargo test -p leafid --test snowflake one_holder::`.

/// Shared test support (`tests/support/`), the parts this binary uses.
#[path = "../support"]
mod support {
    pub mod delay_proxy;
    pub mod mysql;
    pub mod self_exec;
}

/// Sequence overflow, clock steps, layouts, floors, the cache file, the issue limit and
/// close, under a manual clock.
mod generator;

/// The generator's side of the registry contract, through an in-memory registry.
mod lease_contract;

/// Maximal batches of both modes beside single ids: no single waits behind them, no
/// segment refill starves (real MariaDB).
mod fairness;

/// Several generators and threads at full speed: no id twice, each thread increasing.
mod uniqueness_under_load;

/// A caller that chose not to wait is never blocked by a silent registry.
mod never_wait;

/// Processes started from one configuration never share a worker id.
mod one_holder;

/// One live holder per worker id while the registry is cut off or the clock skewed.
mod one_holder_faults;

/// A process forked while its parent re-acquires a worker id gets one of its own.
mod nested_fork;

/// `local:` with its lock directory emptied after a holder exits.
mod local_directory;
