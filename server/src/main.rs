//! `leafid`: Leaf's id server (`leafid serve`) and operator tools, on the leafid core.

mod admin;
mod cli;
mod config;
mod http;
#[cfg(test)]
mod http_props;
mod metrics;
mod pages;
mod serve;
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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .init();
    if !matches!(cli.command, Command::Serve(_)) {
        // The operator tools print to pipes (`leafid tags | head`): die quietly on a
        // closed pipe, as Unix tools do, instead of reporting EPIPE. Not for `serve`,
        // whose sockets must never raise SIGPIPE.
        // SAFETY: signal(2) only sets the process-wide disposition; no Rust memory is touched.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Tags(s) => admin::tags(&s.url).await,
        Command::CreateTag {
            store,
            tag,
            start,
            step,
            description,
        } => admin::create_tag(&store.url, &tag, start, step, &description).await,
        Command::Next { store, tag, n } => admin::next(&store.url, &tag, n).await,
        Command::Decode { id } => admin::decode(&id),
        Command::Stats(s) => admin::stats(&s.url).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leafid: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
