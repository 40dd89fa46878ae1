//! `leafid`: Leaf's id server (`leafid serve`) and operator tools, on the leafid core.

mod admin;
mod cli;
mod config;
mod connections;
#[cfg(test)]
#[path = "../../core/tests/support/delay_proxy.rs"]
mod delay_proxy;
mod http;
#[cfg(test)]
mod http_props;
mod logging;
mod metrics;
mod pages;
mod pending;
mod serve;
mod snowflake;
mod store;

use clap::Parser;
use cli::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The server logs its life at info; the operator tools only warnings (RUST_LOG wins).
    let level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    logging::init(cli.log_format, level);
    if !matches!(cli.command, Command::Serve(_)) {
        // The operator tools print to pipes (`leafid tags | head`): die quietly on a
        // closed pipe, as Unix tools do, instead of reporting EPIPE. Not for `serve`,
        // whose sockets must never raise SIGPIPE.
        // SAFETY: signal(2) only sets the process-wide disposition; no Rust memory is touched.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = run(cli.command).await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leafid: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs one subcommand.
async fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Init(s) => admin::init(&s.resolve()?).await,
        Command::Tags(l) => admin::tags(&l.store.resolve()?, l.json).await,
        Command::CreateTag {
            store,
            tag,
            start,
            step,
            description,
            exist_ok,
        } => admin::create_tag(&store.resolve()?, &tag, start, step, &description, exist_ok).await,
        Command::Next { store, tag, n } => admin::next(&store.resolve()?, &tag, n).await,
        Command::Decode { id } => admin::decode(&id),
        Command::Stats(l) => admin::stats(&l.store.resolve()?, l.json).await,
    }
}
