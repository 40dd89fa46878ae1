//! `leafid serve`: starts the generators, serves the routes, shuts down gracefully.

use std::sync::Arc;
use std::time::Duration;

use crate::cli::ServeArgs;
use crate::config::{self, ServeConfig};
use crate::connections;
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::{snowflake, store};

/// The configuration from `--config` and the URL flags (flags win).
pub fn resolve(args: &ServeArgs) -> Result<ServeConfig, String> {
    let mut config = match &args.config {
        Some(path) => config::read(path)?,
        None => ServeConfig::default(),
    };
    if let Some(url) = &args.url {
        config.segment_url = Some(url.clone());
    }
    if let Some(url) = &args.snowflake {
        config.snowflake_url = Some(url.clone());
    }
    if args.config.is_none() && args.url.is_none() && args.snowflake.is_none() {
        return Err(
            "nothing to serve: give --config leaf.properties, or --url and/or --snowflake".into(),
        );
    }
    Ok(config)
}

/// Runs the server until SIGTERM or SIGINT, then stops accepting, lets requests in
/// flight finish (until `--shutdown-timeout`, then closes the rest) and releases the
/// snowflake worker id.
pub async fn run(args: ServeArgs) -> Result<(), String> {
    let config = resolve(&args)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "leafid {} starting",
        env!("CARGO_PKG_VERSION")
    );
    let (segment, retrying) = match &config.segment_url {
        Some(url) => {
            let options = leafid::SegmentOptions::default()
                .create_table(args.create_table)
                .thread_chunk(args.thread_chunk);
            let (slot, retrying) = store::connect(url, options).await.map_err(|e| {
                let url = leafid::redact::url(url);
                format!("segment store {url}: {}", crate::admin::advice(&e))
            })?;
            (Some(slot), retrying)
        }
        None => (None, None),
    };
    // After the store: a store that ends the start leaves no worker id held.
    let (snowflake, building) = match &config.snowflake_url {
        Some(url) => {
            let lookahead = args.lookahead.map(Duration::from_secs);
            let (slot, building) = snowflake::build(url, lookahead)
                .await
                .map_err(|e| format!("snowflake registry {}: {e}", leafid::redact::url(url)))?;
            (Some(slot), building)
        }
        None => (None, None),
    };
    let metrics = Arc::new(Metrics::new());
    let state = AppState {
        segment: segment.clone(),
        snowflake: snowflake.clone(),
        metrics,
    };
    let nofile = connections::raise_fd_limit();
    let limits = connections::Limits {
        max_connections: args.max_connections,
        header_timeout: Duration::from_secs(args.header_timeout),
        write_timeout: Duration::from_secs(args.write_timeout),
        response_timeout: Duration::from_secs(args.response_timeout),
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
    };
    let cap = connections::connection_cap(limits.max_connections, nofile);
    if cap < limits.max_connections {
        tracing::warn!(
            nofile,
            "--max-connections {} lowered to {cap}: the fd limit ({nofile}) keeps {} for the \
             store, the registry and /health probes; raise LimitNOFILE (ulimit -n) to allow more",
            limits.max_connections,
            connections::FD_RESERVE + connections::HEALTH_RESERVE as u64
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        segment = segment.is_some(),
        snowflake_worker = snowflake
            .as_ref()
            .and_then(|s| s.get())
            .map(|g| g.worker_id()),
        max_connections = cap,
        "listening on {addr}"
    );
    connections::serve(
        listener,
        http::router(state),
        limits,
        cap,
        shutdown_signal(),
    )
    .await;
    // The retries are stopped first and awaited: a generator already in its slot is
    // closed below. (A build in flight on the core's runtime is not cancelled by the
    // abort; the process exits right after, and that lease ends as after a crash.)
    for task in [building, retrying].into_iter().flatten() {
        task.abort();
        let _ = task.await;
    }
    if let Some(gen) = snowflake.as_ref().and_then(|slot| slot.get()) {
        let released = gen.close_async().await;
        tracing::info!(released, "snowflake generator closed");
        // On the layouts a Java Leaf or fork server shares (`zookeeper://`,
        // `mysql://?port=`), wait until the clock has passed the last id, so such a server
        // started on this identity once this process has exited never issues those ids
        // again (a new worker id's ids lead the clock for a while: up to lookahead +
        // max_skew + 1 s). A second SIGTERM or SIGINT cuts the wait short.
        let lead = gen.lead_left();
        if !lead.is_zero() {
            tracing::info!(
                lead_ms = lead.as_millis() as u64,
                "the last ids lead the clock: waiting until the clock passes them, so that a \
                 Java Leaf or fork server started on this identity next never issues them \
                 again (a second signal stops waiting)"
            );
            tokio::select! {
                _ = tokio::time::sleep(lead) => {}
                _ = shutdown_signal() => tracing::warn!(
                    left_ms = gen.lead_left().as_millis() as u64,
                    "second signal: exiting before the clock has passed the last id; start a \
                     Java Leaf or fork server on this identity only once it has \
                     (`leafid decode` the last id)"
                ),
            }
        }
    }
    if let Some(gen) = segment.as_ref().and_then(|slot| slot.get()) {
        gen.close();
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: no new connections, finishing requests");
}
