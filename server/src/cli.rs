//! The command line: `leafid serve` and the operator subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::RangedU64ValueParser;
use clap::{value_parser, Args, Parser, Subcommand, ValueEnum};

/// The longest `serve` timeout in seconds: an hour, far past any sane setting, and
/// small enough that adding it to an instant never overflows.
const MAX_TIMEOUT_S: u64 = 3600;

/// The most `serve --max-connections`: past the fds any process may open.
const MAX_CONNECTIONS: u64 = 1 << 20;

/// Examples shown at the end of `leafid --help`.
const EXAMPLES: &str = "\
Examples:
  export LEAFID_URL=mysql://root:pw@127.0.0.1:3306/leaf   # or postgres://…, sqlite:///var/lib/leafid/ids.db
  leafid init                                   # create leaf_alloc (safe to run again)
  leafid init --config leaf.properties          # the store of Java Leaf's own file
  leafid create-tag order --step 1000 --exist-ok
  leafid next order -n 5                         # reserves exactly 5 ids
  leafid tags --json
  leafid serve --listen 0.0.0.0:8080             # or LEAFID_LISTEN=0.0.0.0:8080
  leafid serve --config leaf.properties          # Java Leaf's own file";

/// leafid: Leaf's id server as one binary, and tools for its `leaf_alloc` table.
#[derive(Debug, Parser)]
#[command(name = "leafid", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// How to write the log (on stderr): `text`, or `json` (one object per line).
    #[arg(
        long,
        global = true,
        env = "LEAFID_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The log's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the fields.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Leaf's HTTP API (`/api/segment/get/{key}`, `/api/snowflake/get/{key}`,
    /// `/cache`, `/db`, `/decodeSnowflakeId`) plus `/health` and `/metrics`.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Create the `leaf_alloc` table (MySQL, or the SQLite file and its table) when
    /// missing. Safe to run again: it says what it found and what it did.
    #[command(
        after_help = "Example:\n  leafid init --url mysql://root:pw@127.0.0.1:3306/leaf\n  leafid init --url postgres://leaf:pw@127.0.0.1:5432/leaf"
    )]
    Init(StoreArg),
    /// List the tags of the table, one per line. Never creates anything.
    #[command(after_help = "Example:\n  leafid tags --json")]
    Tags(ListArgs),
    /// Create a tag (a row of `leaf_alloc`) whose first id is --start. Reserves no id.
    #[command(after_help = "Example:\n  leafid create-tag order --start 1 --step 1000 --exist-ok")]
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
        /// A tag that already exists is not an error (it is left as it is).
        #[arg(long)]
        exist_ok: bool,
    },
    /// Print ids of a tag, one per line. Reserves exactly the ids it prints (`max_id`
    /// rises by N, not by the tag's step), so no id is lost between runs.
    #[command(after_help = "Example:\n  leafid next order -n 5")]
    Next {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// The tag.
        tag: String,
        /// How many ids (1 to 2147483647).
        #[arg(short = 'n', default_value_t = 1)]
        n: u64,
    },
    /// Split a snowflake id (Leaf's layout) into time, worker id and sequence, as Leaf's
    /// `/decodeSnowflakeId` does; prints its JSON map.
    #[command(after_help = "Example:\n  leafid decode 2125721999861874692")]
    Decode {
        /// The id (a non-negative decimal 64-bit integer).
        id: String,
    },
    /// Show every row of the table: tag, max_id, step, update time, description.
    /// Never creates anything.
    #[command(after_help = "Example:\n  leafid stats --json")]
    Stats(ListArgs),
}

const SERVE_EXAMPLES: &str = "\
Examples:
  leafid serve --config leaf.properties --listen 0.0.0.0:8080
  leafid serve --url sqlite:///var/lib/leafid/ids.db --create-table --snowflake fixed:1
  LEAFID_URL=mysql://leaf:pw@db:3306/leaf LEAFID_LISTEN=0.0.0.0:8080 leafid serve";

/// The segment store an operator subcommand works on: `--url`, or the store of the
/// `leaf.properties` given with `--config` (the URL wins when both are given, as in
/// `leafid serve`).
#[derive(Debug, Args)]
pub struct StoreArg {
    /// The store URL: `mysql://user:pass@host:3306/db`, `postgres://user:pass@host:5432/db` or `sqlite://path`.
    #[arg(long, env = "LEAFID_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// Leaf's `leaf.properties`: the store of its `leaf.jdbc.*` keys, read as
    /// `leafid serve --config` reads them.
    #[arg(long, env = "LEAFID_CONFIG")]
    pub config: Option<PathBuf>,
}

impl StoreArg {
    /// The store's URL: `--url`, else the one `--config` names.
    pub fn resolve(&self) -> Result<String, String> {
        match (&self.url, &self.config) {
            (Some(url), _) => Ok(url.clone()),
            (None, Some(path)) => crate::config::read_segment_url(path),
            (None, None) => {
                Err("no store: give --url (or LEAFID_URL), or --config leaf.properties".into())
            }
        }
    }
}

/// A listing subcommand's arguments.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Print JSON (an array) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `leafid serve`. Every flag may also come from the environment variable named in
/// `--help`; a flag on the command line wins.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Leaf's `leaf.properties` (leaf.name, leaf.segment.enable, leaf.jdbc.*,
    /// leaf.snowflake.*).
    #[arg(long, env = "LEAFID_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where to listen (`0.0.0.0:8080` for every interface, as in a container).
    #[arg(long, env = "LEAFID_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The segment store as leafid's URL (`mysql://…`, `postgres://…`, `sqlite://…`); overrides the
    /// properties' JDBC settings and enables segment mode.
    #[arg(long, env = "LEAFID_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// The snowflake worker-id registry as leafid's URL (`zookeeper://host:2181/name?port=P`,
    /// `fixed:7`, `local:///dir`, …); overrides the properties and enables snowflake mode.
    #[arg(long, env = "LEAFID_SNOWFLAKE", hide_env_values = true)]
    pub snowflake: Option<String>,
    /// Seconds each snowflake bound the registry holds reaches ahead of the clock: how
    /// long snowflake ids keep coming through a registry outage (default 65 on networked
    /// registries, 6 on `fixed:`, `local:` and `statefulset:`; at most 300, and more than
    /// the 3 s heartbeat). On networked registries a new worker id's first ids lead the
    /// clock by about this much, and on Leaf's layouts (`zookeeper://`,
    /// `mysql://?port=`) shutdown waits for the clock to pass them: give a stop
    /// --shutdown-timeout + 6 + this + 6 seconds. Elsewhere a restart after a crash waits
    /// up to this long. Every holder of one identity should use the same value.
    #[arg(long, env = "LEAFID_LOOKAHEAD",
          value_parser = value_parser!(u64).range(1..=leafid::snowflake::MAX_LOOKAHEAD.as_secs()))]
    pub lookahead: Option<u64>,
    /// Create `leaf_alloc` at start when it is missing (as `leafid init`).
    #[arg(long, env = "LEAFID_CREATE_TABLE")]
    pub create_table: bool,
    /// Segment ids each server thread takes from a tag's segment at a time, so request
    /// threads do not queue on one cursor (at most 4096). Ids stay unique and increase
    /// within each thread; across requests they increase in trend only, as Java Leaf
    /// promises. 0: every id in strict order across requests.
    #[arg(long, env = "LEAFID_THREAD_CHUNK", default_value_t = DEFAULT_THREAD_CHUNK)]
    pub thread_chunk: u64,
    /// Client connections open at once (lowered to the fd limit less 136). At the cap,
    /// a new connection displaces the oldest one waiting for a request; when all are
    /// in service, it takes one of 8 more slots that answer /health only, else a 503.
    #[arg(long, env = "LEAFID_MAX_CONNECTIONS", default_value_t = 10_000,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_CONNECTIONS))]
    pub max_connections: usize,
    /// Seconds a connection may take to send a request head, counted from when it is
    /// ready for one: bounds a slow head and an idle keep-alive connection alike
    /// (1 to 3600).
    #[arg(long, env = "LEAFID_HEADER_TIMEOUT", default_value_t = 30,
          value_parser = value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub header_timeout: u64,
    /// Seconds an answer's write may make no progress (a client that stops reading)
    /// before the connection is closed (1 to 3600).
    #[arg(long, env = "LEAFID_WRITE_TIMEOUT", default_value_t = 30,
          value_parser = value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub write_timeout: u64,
    /// Seconds from a request's head to its answer's last byte written; a slower answer
    /// (a large batch to a slow reader) is cut by closing the connection, which an
    /// HTTP/1.1 client sees as an incomplete answer (1 to 3600).
    #[arg(long, env = "LEAFID_RESPONSE_TIMEOUT", default_value_t = 60,
          value_parser = value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub response_timeout: u64,
    /// Seconds after SIGTERM for requests in service to finish; then the connections
    /// left are closed and the snowflake worker id released. Keep it below the
    /// service manager's stop timeout (0 to 3600).
    #[arg(long, env = "LEAFID_SHUTDOWN_TIMEOUT", default_value_t = 10,
          value_parser = value_parser!(u64).range(0..=MAX_TIMEOUT_S))]
    pub shutdown_timeout: u64,
}

/// `serve --thread-chunk`'s default: a run per thread large enough that the shared
/// cursor is touched once per 64 requests, small enough that a restart skips few ids.
pub const DEFAULT_THREAD_CHUNK: u64 = 64;
