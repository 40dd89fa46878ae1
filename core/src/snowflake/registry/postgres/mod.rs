//! `postgres` — the identity registry of `mysql://` on PostgreSQL: an identity (`ip:port`)
//! keeps one worker id, leased by the database's clock, for shops on PostgreSQL without
//! ZooKeeper: `postgres://user:pass@host:5432/db?port=8080[&ip=10.0.0.1]`.
//!
//! Built on the pool machinery ([`super::pool`]): the rows live in
//! `leafid_worker_pool` under the empty pool name, each with its `identity`, unique per
//! database (`UNIQUE (pool, identity)`), so two identities never share an id and two
//! processes of one identity race on the database, not on configuration. An identity
//! seen for the first time gets the lowest id no identity has; ids are not handed to
//! another identity while their row exists (delete a retired identity's row to free
//! its id; its bound goes with it, so the next holder floors at the database's clock
//! plus the reach).
//!
//! The lease and the fencing are the pool's (see [`super::pool`]): a take conditional
//! on the holder read and the row being free by the database's clock (released, or its
//! lease passed: the taker floors at the row's bound); renews conditional on this
//! holder's token (rule 1); the row deleted or rewritten under a live holder is
//! `LeaseLost` at the next poll (rule 2); no watch before the first id, since no Java
//! Leaf or fork server writes PostgreSQL (rule 3); a holder cut off from the database
//! issues up to the bound its row holds and stops there (rule 5). One thing differs
//! from a pool: a row whose holder is a dead process of this host (SIGKILL, a crash,
//! not yet reaped) is taken at once, its last bound the floor, so a restart issues at
//! once instead of waiting out the lease (the generator holds this host's identity
//! lock first, so no other generator of this host holds the identity); a live holder
//! elsewhere is `WorkerIdInUse` naming it.
//!
//! ```no_run
//! # async fn run() -> leafid::Result<()> {
//! use std::sync::Arc;
//! use leafid::snowflake::registry::postgres::PostgresRegistry;
//! let registry = PostgresRegistry::from_url("postgres://leaf:pw@127.0.0.1:5432/app?port=8080")?;
//! let gen = leafid::SnowflakeGenerator::builder()
//!     .custom_registry(Arc::new(registry))
//!     .build()
//!     .await?;
//! println!("worker {}", gen.worker_id());
//! # Ok(()) }
//! ```

use std::sync::Arc;

use super::pool::{Claim, Dialect, PoolRegistry};
use super::{ClockReading, IssueLimit, Lease, WorkerRegistry};
use crate::error::Result;
use crate::runtime::BoxFuture;

mod url;

pub(crate) use url::parse;
pub use url::PostgresConfig;

/// The PostgreSQL identity registry. Building it parses the URL; it connects at `acquire`.
#[derive(Debug)]
pub struct PostgresRegistry(PoolRegistry);

impl PostgresRegistry {
    /// A registry for a parsed configuration (no I/O).
    pub fn new(config: &PostgresConfig) -> Result<PostgresRegistry> {
        let claim = Claim::Identity {
            ip_port: format!("{}:{}", config.ip, config.port),
        };
        Ok(PostgresRegistry(PoolRegistry::build(
            Dialect::Postgres,
            &config.url,
            claim,
        )?))
    }

    /// A registry from `postgres://…/db?port=P[&ip=A]` (no I/O).
    pub fn from_url(url: &str) -> Result<PostgresRegistry> {
        Self::new(&parse(url)?)
    }
}

impl WorkerRegistry for PostgresRegistry {
    fn acquire(&self, max_worker_id: u32, limit: Arc<IssueLimit>) -> BoxFuture<'_, Result<Lease>> {
        self.0.acquire(max_worker_id, limit)
    }

    fn renew<'a>(&'a self, lease: &'a Lease, bound_ms: i64) -> BoxFuture<'a, Result<()>> {
        self.0.renew(lease, bound_ms)
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        self.0.release(lease)
    }

    fn survives_outage(&self) -> bool {
        self.0.survives_outage()
    }

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn take_clock_reading(&self) -> Option<ClockReading> {
        self.0.take_clock_reading()
    }

    fn host_identity(&self) -> Option<String> {
        self.0.host_identity()
    }

    fn identity_is_configured(&self) -> bool {
        self.0.identity_is_configured()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_describe_and_identity_never_show_the_password() {
        let r = PostgresRegistry::from_url(
            "postgres://leaf:s3cr3t@127.0.0.1:5433/leaf?port=80&ip=10.0.0.1",
        )
        .unwrap();
        let shown = format!("{r:?} {} {:?}", r.describe(), r.host_identity());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert_eq!(
            r.host_identity().unwrap(),
            "postgresql/127.0.0.1:5433/leaf/10.0.0.1:80"
        );
    }
}
