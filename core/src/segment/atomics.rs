//! The atomics of the segment ring, swapped for [loom]'s in the crate's unit tests
//! under `--cfg leafid_loom`, so the ring can be model-checked (the `loom_*` tests of
//! `buffer/loom_tests.rs`). Every other build, that cfg included, uses std's.
//!
//! The cfg is leafid's own, not the customary `loom`: `--cfg loom` reaches every crate
//! of the build, and some of sqlx's dependencies (event-listener) then expect a `loom`
//! dependency of their own and fail to compile.
//!
//! [loom]: https://docs.rs/loom

#[cfg(all(test, leafid_loom))]
pub(crate) use loom::sync::atomic::{fence, AtomicI64, AtomicU64, AtomicU8, Ordering};
#[cfg(not(all(test, leafid_loom)))]
pub(crate) use std::sync::atomic::{fence, AtomicI64, AtomicU64, AtomicU8, Ordering};
