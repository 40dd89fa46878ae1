//! # leafid
//!
//! Meituan's Leaf rebuilt as a library: globally unique 64-bit ids issued in-process,
//! in nanoseconds, with no id server to run.
//!
//! - [`segment`] — Leaf-segment: ranges of ids reserved from a database table
//!   (`leaf_alloc`, shared with Java Leaf), handed out from a double buffer.
//! - [`snowflake`] — Leaf-snowflake: time + worker id + sequence, with worker ids
//!   coordinated by ZooKeeper, MySQL, file locks or configuration.
//! - [`cipher`] — opaque ids: [`IdCipher`], a keyed permutation of the positive ids
//!   (NIST FF1), for ids that must not reveal a count or a time.
//! - [`base62`] — ids as 11-character strings whose byte order is numeric order.
//! - `metrics` (feature `metrics`, on by default) — every live generator's state as
//!   Prometheus text, one call to mount in a service's own `/metrics`.
//!
//! The database and ZooKeeper are touched only by background tasks on one runtime the
//! crate owns ([`runtime`]); `next_id` is an atomic operation on memory.
//!
//! ```
//! # fn main() -> leafid::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let url = format!("sqlite://{}/ids.db", dir.path().display());
//! let generator = leafid::SegmentGenerator::connect_blocking(&url, leafid::SegmentOptions::default())?;
//! let g = generator.clone();
//! leafid::runtime::block_on(async move { g.create_tag("order", 1, 1000, "orders").await })?;
//! let order = generator.tag("order")?;
//! let a = order.next_id()?;
//! let b = order.next_id()?;
//! assert!(b > a);
//! # Ok(()) }
//! ```

// docs.rs builds with `--cfg docsrs`: feature-gated items carry a badge naming the
// Cargo feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod base62;
pub mod cipher;
pub mod clock;
// The backend layer both modes use (connections, probes, error numbers, clocks); internal.
pub(crate) mod db;
pub mod error;
// Shared with leafid's server and bindings (argument bounds, password redaction), not
// part of the library's API: hidden from the docs.
#[doc(hidden)]
pub mod limits;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[doc(hidden)]
pub mod redact;
pub mod runtime;
pub mod segment;
pub mod snowflake;
mod stats;

pub use base62::{decode_base62, encode_base62};
pub use cipher::IdCipher;
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Cause, CauseKind, Error, ErrorKind, Result};
pub use segment::{
    RefillLatency, SegmentGenerator, SegmentOptions, SegmentStats, TagHandle, TagStats,
};
pub use snowflake::{
    decode, DecodedId, Layout, LeaseStatus, RegistryConfig, SnowflakeBuilder, SnowflakeGenerator,
    SnowflakeStats,
};
