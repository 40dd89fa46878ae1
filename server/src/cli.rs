//! The command line: `leafid serve` and the operator subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// leafid: Leaf's id server as one binary, and tools for its `leaf_alloc` table.
#[derive(Debug, Parser)]
#[command(name = "leafid", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Leaf's HTTP API (`/api/segment/get/{key}`, `/api/snowflake/get/{key}`,
    /// `/cache`, `/db`, `/decodeSnowflakeId`) plus `/health` and `/metrics`.
    Serve(ServeArgs),
    /// List the tags of the table.
    Tags(StoreArg),
    /// Create a tag (a row of `leaf_alloc`) whose first id is --start.
    CreateTag {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// The tag (`biz_tag`).
        tag: String,
        /// The first id.
        #[arg(long, default_value_t = 1)]
        start: i64,
        /// Ids per segment (the table's step).
        #[arg(long, default_value_t = 1000)]
        step: i64,
        /// The row's description.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Print ids of a tag, one per line.
    Next {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// The tag.
        tag: String,
        /// How many ids.
        #[arg(short = 'n', default_value_t = 1)]
        n: u64,
    },
    /// Split a snowflake id (Leaf's layout) into time, worker id and sequence, as Leaf's
    /// `/decodeSnowflakeId` does.
    Decode {
        /// The id.
        id: String,
    },
    /// Show every row of the table: tag, max_id, step, update time, description.
    Stats(StoreArg),
}

/// The segment store an operator subcommand works on.
#[derive(Debug, Args)]
pub struct StoreArg {
    /// The store URL: `mysql://user:pass@host:3306/db` or `sqlite://path`.
    #[arg(long, env = "LEAFID_URL", hide_env_values = true)]
    pub url: String,
}

/// `leafid serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Leaf's `leaf.properties` (leaf.name, leaf.segment.enable, leaf.jdbc.*,
    /// leaf.snowflake.*).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The segment store as leafid's URL (`mysql://…`, `sqlite://…`); overrides the
    /// properties' JDBC settings and enables segment mode.
    #[arg(long)]
    pub url: Option<String>,
    /// The snowflake worker-id registry as leafid's URL (`zookeeper://host:2181/name?port=P`,
    /// `fixed:7`, `local:///dir`, …); overrides the properties and enables snowflake mode.
    #[arg(long)]
    pub snowflake: Option<String>,
}
