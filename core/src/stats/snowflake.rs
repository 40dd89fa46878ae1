//! What a snowflake generator shows of itself: its worker id, its lease, its clock.
//! Plain data, apart from the generator that fills it (`snowflake/generator/stats.rs`,
//! which also says how `issued` is counted), so that `metrics` and the snowflake mode
//! both depend on this file and not on each other.

/// Where a snowflake generator's lease on its worker id stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseStatus {
    /// Held, and the persisted time bound is ahead of the clock: issuing.
    Held,
    /// Held, but the clock passed the last persisted bound (the heartbeat is late or the
    /// registry is failing): callers persist one themselves or fail until it is renewed.
    Late,
    /// A worker id is being acquired (start-up, or after a lost lease).
    Acquiring,
    /// The registry reported the lease lost; the heartbeat is acquiring a new one.
    Lost,
    /// This process is a fork()ed child: the lease is its parent's until the child
    /// acquires its own on first use.
    Forked,
    /// The generator was closed.
    Closed,
}

impl LeaseStatus {
    /// Every state, in a fixed order (for metrics that show one series per state).
    pub const ALL: [LeaseStatus; 6] = [
        LeaseStatus::Held,
        LeaseStatus::Late,
        LeaseStatus::Acquiring,
        LeaseStatus::Lost,
        LeaseStatus::Forked,
        LeaseStatus::Closed,
    ];

    /// The state's name in lower case (`"held"`), as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Held => "held",
            LeaseStatus::Late => "late",
            LeaseStatus::Acquiring => "acquiring",
            LeaseStatus::Lost => "lost",
            LeaseStatus::Forked => "forked",
            LeaseStatus::Closed => "closed",
        }
    }
}

/// A snowflake generator's state, read without blocking issuing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnowflakeStats {
    /// The worker id ids are issued under.
    pub worker_id: u32,
    /// Ids issued by this generator (a forked child's count includes its parent's up to
    /// the fork). Derived from the state word; see the module docs for why it may fall
    /// short by a millisecond's ids, never exceed.
    pub issued: u64,
    /// Where the lease stands.
    pub lease: LeaseStatus,
    /// How far (ms) the persisted time bound is ahead of the clock; negative when the
    /// clock passed it, `None` while no bound is held (acquiring, lost, closed).
    pub bound_lead_ms: Option<i64>,
    /// The local clock minus the registry's clock (ms) at the latest reading; `None`
    /// for registries without a clock (`fixed:`, `local:`) or before the first reading.
    pub clock_skew_ms: Option<i64>,
    /// The largest backward clock step (ms) a caller met, waited out or refused; 0 if none.
    pub max_backward_ms: i64,
    /// Heartbeats and catch-ups that failed to persist a time bound.
    pub persist_failures: u64,
}
