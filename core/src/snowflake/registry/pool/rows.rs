//! The rows of `leafid_worker_pool` as the lease logic sees them, apart from the
//! dialects that read and write them (`mysql.rs`, `postgres.rs`) and the enum over
//! those (`backend.rs`), so that each of them imports these and none imports another.
//!
//! Every time in the table is the database's clock in ms since the Unix epoch
//! (`expires_ms`), except `bound_ms`, which is the holder's issuing bound by its own
//! clock (the generator refuses a clock more than its skew limit away from the
//! database's, checked on every acquire and renew).

/// One worker id of a pool as the table holds it.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) worker_id: i64,
    /// The identity that owns the id (identity registries); `None` in a pool.
    pub(super) identity: Option<String>,
    /// The holder's lease token; empty when released.
    pub(super) holder: String,
    /// JSON of [`Holder`](crate::snowflake::registry::host_lock::Holder): host, pid.
    pub(super) holder_info: String,
    /// When the lease ends, by the database's clock (its bound, the next holder's
    /// floor, is read once the row is taken).
    pub(super) expires_ms: i64,
}

impl Slot {
    /// Free to take at database time `now`: released, or its lease has passed. Its
    /// bound may still be ahead: the taker floors at it (see `pool`'s module doc).
    pub(super) fn free(&self, now: i64) -> bool {
        self.holder.is_empty() || self.expires_ms < now
    }

    /// One of the pool's ids `0..size`: a row an operator inserted or edited outside
    /// that range (`-1`, past the pool) is never chosen, counted or cast.
    pub(super) fn in_pool(&self, size: u32) -> bool {
        (0..i64::from(size)).contains(&self.worker_id)
    }
}

/// A held row as its holder's poll reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Own {
    pub(super) holder: String,
    pub(super) bound_ms: Option<i64>,
}

/// A new lease to write: the holder's token and who it is.
pub(super) struct Taker<'a> {
    pub(super) token: &'a str,
    pub(super) info: &'a str,
    /// How long the lease lasts from the database's now.
    pub(super) term_ms: i64,
}
