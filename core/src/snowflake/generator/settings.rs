//! The options a generator runs with once the builder has checked them ([`Settings`]),
//! where its worker ids come from ([`Source`]), and the public limits the builder checks
//! against. Apart from the builder so that the core state can hold the settings without
//! reaching back into the builder that makes them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::super::registry::{RegistryConfig, WorkerRegistry};

/// Where worker ids come from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    Config(RegistryConfig),
    Custom(Arc<dyn WorkerRegistry>),
}

impl Source {
    pub(super) fn scheme(&self) -> &'static str {
        match self {
            Source::Config(c) => c.scheme(),
            Source::Custom(_) => "custom",
        }
    }

    pub(super) fn reacquires_after_fork(&self) -> bool {
        matches!(self, Source::Config(c) if c.reacquires_after_fork())
    }
}

/// A generator's options, checked and in the units the hot and slow paths use.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) registry: Source,
    pub(super) cache_dir: PathBuf,
    pub(super) max_backward_ms: i64,
    pub(super) heartbeat: Duration,
    pub(super) lookahead_ms: i64,
    pub(super) startup_wait_ms: i64,
    pub(super) max_skew_ms: i64,
}

/// The default largest local-vs-registry clock difference ([`SnowflakeBuilder::max_skew`](crate::SnowflakeBuilder::max_skew)).
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(5);
/// How long [`SnowflakeGenerator::close`](crate::SnowflakeGenerator::close) waits for the registry before letting go
/// (the lease then expires on the registry's side).
pub const DEFAULT_CLOSE_WAIT: Duration = Duration::from_secs(3);
/// How long [`SnowflakeGenerator::next_id_async`](crate::SnowflakeGenerator::next_id_async) keeps waiting for a transient cause
/// (a late or failing heartbeat, a lease being re-acquired, a forked child's own worker
/// id) before failing with it.
pub const MAX_ASYNC_WAIT: Duration = Duration::from_secs(10);
/// The longest heartbeat accepted.
pub const MAX_HEARTBEAT: Duration = Duration::from_secs(60);
/// The largest backward clock step waited out: the caller waits twice the step.
pub const MAX_BACKWARD: Duration = Duration::from_secs(1);
/// The default lookahead: a registry outage of a minute is ridden through (the bound
/// persisted before it reaches 65 s ahead, less at most one 3 s heartbeat).
pub const DEFAULT_LOOKAHEAD: Duration = Duration::from_secs(65);
/// The longest lookahead accepted (the next holder's ids lead the clock at most this
/// much, plus the skew, after a crash).
pub const MAX_LOOKAHEAD: Duration = Duration::from_secs(300);
