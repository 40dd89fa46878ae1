//! Snowflake mode (Leaf-snowflake): ids made of time, worker id and sequence.
//!
//! - [`Layout`] — how the 63 bits are split, and the epoch; [`decode`] splits an id.
//! - [`SnowflakeGenerator`] — issues ids lock-free from one atomic word; built with
//!   [`SnowflakeGenerator::builder`].
//! - [`registry`] — who may use which worker id: `fixed`, `local` (file locks),
//!   `zookeeper`, `zookeeper-recycle`, `mysql`, chosen by [`RegistryConfig`].
//!
//! Safety against clock trouble, as in Leaf and beyond it: a small backward step is
//! waited out, a larger one is an error, a timestamp past the layout's range is an
//! error (never a negative id), and a worker never issues at a millisecond at or below
//! one its id may already have used (the floor persisted by every heartbeat, fixing
//! Leaf issue #216).
//!
//! ```
//! # fn main() -> leafid::Result<()> {
//! use leafid::snowflake::{Layout, SnowflakeGenerator};
//! let locks = tempfile::tempdir().unwrap();
//! let cache = tempfile::tempdir().unwrap();
//! let generator = SnowflakeGenerator::builder()
//!     .registry_url(&format!("local://{}", locks.path().display()))?
//!     .layout(Layout::new(41, 10, 12, 1_288_834_974_657)?)
//!     .cache_dir(cache.path())
//!     .build_blocking()?;
//! let ids = generator.next_ids(1000)?;
//! assert!(ids.windows(2).all(|w| w[0] < w[1]));
//! assert_eq!(generator.decode(ids[0]).worker_id, generator.worker_id());
//! # Ok(()) }
//! ```

mod generator;
mod layout;
pub mod registry;
// The loom model (`tests/loom_snowflake.rs`) reaches the lock-free state directly; no
// other build exposes it.
#[cfg(leafid_loom)]
#[doc(hidden)]
pub mod word;
#[cfg(not(leafid_loom))]
mod word;

pub use generator::{
    LeaseStatus, SnowflakeBuilder, SnowflakeGenerator, SnowflakeStats, DEFAULT_CLOSE_WAIT,
    DEFAULT_LOOKAHEAD, DEFAULT_MAX_SKEW, MAX_ASYNC_WAIT, MAX_BACKWARD, MAX_HEARTBEAT,
    MAX_LOOKAHEAD,
};
pub use layout::{decode, DecodedId, Layout, JS_SAFE_BITS, LEAF_EPOCH_MS};
pub use registry::RegistryConfig;
