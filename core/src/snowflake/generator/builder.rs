//! [`SnowflakeBuilder`]: a generator's options with their defaults, checked without
//! I/O, then a session started on the background runtime. Apart from the generator's
//! API so that the options and their checks read as one list.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::super::layout::Layout;
use super::super::registry::{default_cache_dir, RegistryConfig, WorkerRegistry};
use super::session::start_session;
use super::settings::{
    Settings, Source, DEFAULT_LOOKAHEAD, DEFAULT_MAX_SKEW, MAX_BACKWARD, MAX_HEARTBEAT,
    MAX_LOOKAHEAD,
};
use super::state::Core;
use super::{Handle, SnowflakeGenerator};
use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::runtime;

/// Builds a [`SnowflakeGenerator`]. Defaults: Leaf's layout, the system clock, the
/// cache directory of `default_cache_dir()`, a 5 ms backward step waited out, a
/// heartbeat every 3 s persisting a bound [`DEFAULT_LOOKAHEAD`] (65 s) ahead, so issuing
/// rides through a registry outage of a minute, and a clock at most 10 s further behind a
/// worker's recorded floor than the lookahead and the allowed skew.
#[derive(Debug, Clone)]
pub struct SnowflakeBuilder {
    registry: Option<Source>,
    layout: Layout,
    clock: Arc<dyn Clock>,
    cache_dir: Option<PathBuf>,
    max_backward: Duration,
    heartbeat: Duration,
    lookahead: Option<Duration>,
    startup_wait: Duration,
    max_skew: Duration,
}

impl Default for SnowflakeBuilder {
    fn default() -> Self {
        SnowflakeBuilder {
            registry: None,
            layout: Layout::default(),
            clock: clock::system(),
            cache_dir: None,
            max_backward: Duration::from_millis(5),
            heartbeat: Duration::from_secs(3),
            lookahead: None,
            startup_wait: Duration::from_secs(10),
            max_skew: DEFAULT_MAX_SKEW,
        }
    }
}

impl SnowflakeBuilder {
    /// The worker-id registry (required).
    pub fn registry(mut self, registry: RegistryConfig) -> Self {
        self.registry = Some(Source::Config(registry));
        self
    }

    /// A registry of your own (any [`WorkerRegistry`]) instead of a configured one. A
    /// generator built on it refuses to issue in a forked child.
    pub fn custom_registry(mut self, registry: Arc<dyn WorkerRegistry>) -> Self {
        self.registry = Some(Source::Custom(registry));
        self
    }

    /// The worker-id registry as a URL (see [`RegistryConfig::parse`]).
    pub fn registry_url(self, url: &str) -> Result<Self> {
        Ok(self.registry(RegistryConfig::parse(url)?))
    }

    /// The bit layout and epoch (default: Leaf's 41 + 10 + 12, epoch 1288834974657).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Where time comes from (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The directory of the worker cache file (default: `$XDG_CACHE_HOME/leafid`,
    /// `~/.cache/leafid` or `/tmp/leafid-<uid>`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The largest backward clock step waited out (twice the step, then re-checked)
    /// instead of failing with `ClockMovedBackwards` (default 5 ms, as Leaf; at most
    /// [`MAX_BACKWARD`], since the caller waits twice the step).
    pub fn max_backward(mut self, max: Duration) -> Self {
        self.max_backward = max;
        self
    }

    /// How often the time bound is persisted (default 3 s, Leaf's upload interval).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// How far ahead of the clock each persisted bound reaches (default
    /// [`DEFAULT_LOOKAHEAD`], 65 s, or twice a longer heartbeat; twice the heartbeat for
    /// `fixed`, `local` and `statefulset`, whose records are this host's files). Issuing continues
    /// through a registry outage this long, less at most one heartbeat. The price: a
    /// holder that takes over an id after a crash starts above the last bound, so its
    /// ids' time part leads the clock by up to this much (plus `max_skew` and 1 s for an
    /// id with no record) for twice that long; nothing waits for it. Holders of one
    /// identity must share it, as they share `max_skew` (fence rule 5).
    pub fn lookahead(mut self, ahead: Duration) -> Self {
        self.lookahead = Some(ahead);
        self
    }

    /// How far the clock may be behind a worker's recorded floor beyond the lookahead
    /// and the allowed skew (a floor's usual lead) before start-up fails with
    /// `ClockBehindRegistry` (default 10 s). Start-up never waits for the clock: ids
    /// start above the floor at once (see [`lookahead`](Self::lookahead)).
    pub fn startup_wait(mut self, wait: Duration) -> Self {
        self.startup_wait = wait;
        self
    }

    /// The largest difference allowed between the local clock and the registry's clock
    /// (ZooKeeper's `mtime` of a node just written, the database's `NOW(3)`), checked at
    /// start-up (refused with `ClockSkew`) and on every heartbeat (issuing stops until the
    /// clocks agree again). Default 5 s; at most 1 hour. Registries without a clock of
    /// their own (`fixed`, `local`) are not checked.
    pub fn max_skew(mut self, max: Duration) -> Self {
        self.max_skew = max;
        self
    }

    /// Checks the configuration (no I/O) and splits it into parts.
    fn validate(self) -> Result<(Layout, Arc<dyn Clock>, Settings)> {
        let registry = self.registry.ok_or_else(|| {
            Error::InvalidConfig(
                "no worker registry given; call .registry(…) or .registry_url(\"local:///var/lib/leafid/workers\")"
                    .into(),
            )
        })?;
        if let Source::Config(RegistryConfig::Fixed(id)) = registry {
            self.layout.check_worker_id(id as i64)?;
        }
        if self.heartbeat < Duration::from_millis(10) {
            return Err(Error::InvalidConfig(format!(
                "heartbeat {:?} is below 10 ms; Leaf uses 3 s",
                self.heartbeat
            )));
        }
        // Upper limits keep a crashed holder's bound from leading the clock by much:
        // the next holder's ids start above it.
        if self.heartbeat > MAX_HEARTBEAT {
            return Err(Error::InvalidConfig(format!(
                "heartbeat {:?} is above {MAX_HEARTBEAT:?}; Leaf uses 3 s",
                self.heartbeat
            )));
        }
        if self.max_backward > MAX_BACKWARD {
            return Err(Error::InvalidConfig(format!(
                "max_backward {:?} is above {MAX_BACKWARD:?}: a caller would wait twice that for a clock \
                 stepped back; Leaf uses 5 ms",
                self.max_backward
            )));
        }
        // Ride-through is for a registry on another host; a record in this host's files
        // (`fixed`, `local`, `statefulset`) has no outage to ride through, and a short
        // lookahead keeps the next holder's floor close to the clock.
        let networked = !matches!(&registry, Source::Config(c) if !c.is_networked());
        let lookahead = self.lookahead.unwrap_or(if networked {
            DEFAULT_LOOKAHEAD.max(self.heartbeat * 2)
        } else {
            self.heartbeat * 2
        });
        if lookahead > MAX_LOOKAHEAD {
            return Err(Error::InvalidConfig(format!(
                "lookahead {lookahead:?} is above {MAX_LOOKAHEAD:?}: the next holder of the worker id starts \
                 above the last bound, so its ids would lead the clock that far (default 65 s)"
            )));
        }
        if self.max_skew < Duration::from_millis(10) || self.max_skew > Duration::from_secs(3600) {
            return Err(Error::InvalidConfig(format!(
                "max_skew {:?} must be between 10 ms and 1 hour (default 5 s)",
                self.max_skew
            )));
        }
        if lookahead <= self.heartbeat {
            return Err(Error::InvalidConfig(format!(
                "lookahead {lookahead:?} must exceed the heartbeat {:?}, or issuing would pause between heartbeats",
                self.heartbeat
            )));
        }
        let now = self.clock.now_millis();
        if now <= self.layout.epoch_ms() {
            return Err(Error::InvalidConfig(format!(
                "the clock ({now}) is not after the layout's epoch ({}); pick an earlier epoch or fix the clock",
                self.layout.epoch_ms()
            )));
        }
        if now > self.layout.max_timestamp_ms() {
            return Err(Error::TimestampOverflow {
                max_ms: self.layout.max_timestamp_ms(),
            });
        }
        let ms = |d: Duration| d.as_millis().min(i64::MAX as u128 / 4) as i64;
        Ok((
            self.layout,
            self.clock,
            Settings {
                registry,
                cache_dir: self.cache_dir.unwrap_or_else(default_cache_dir),
                max_backward_ms: ms(self.max_backward),
                heartbeat: self.heartbeat,
                lookahead_ms: ms(lookahead),
                startup_wait_ms: ms(self.startup_wait),
                max_skew_ms: ms(self.max_skew),
            },
        ))
    }

    /// Validates, acquires a worker id, checks the clock against its floor and starts
    /// the heartbeat. The registry's I/O runs on the background runtime.
    pub async fn build(self) -> Result<SnowflakeGenerator> {
        let (layout, clock, settings) = self.validate()?;
        runtime::watch_forks();
        let core = Arc::new(Core::new(layout, clock, settings));
        let c = core.clone();
        runtime::run(async move { start_session(&c).await }).await?;
        #[cfg(feature = "metrics")]
        crate::metrics::track_arc(&core);
        Ok(SnowflakeGenerator {
            inner: Arc::new(Handle { core }),
        })
    }

    /// [`build`](Self::build) for callers without an async runtime (bindings).
    pub fn build_blocking(self) -> Result<SnowflakeGenerator> {
        let (layout, clock, settings) = self.validate()?;
        runtime::watch_forks();
        let core = Arc::new(Core::new(layout, clock, settings));
        let c = core.clone();
        runtime::block_on(async move { start_session(&c).await })?;
        #[cfg(feature = "metrics")]
        crate::metrics::track_arc(&core);
        Ok(SnowflakeGenerator {
            inner: Arc::new(Handle { core }),
        })
    }
}
