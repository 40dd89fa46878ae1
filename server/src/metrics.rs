//! The server's Prometheus metrics, through the `prometheus-client` crate.
//!
//! The generators' families (ids issued per tag and per worker, refills and their
//! latency, step, next-segment readiness, lease state, bound lead, clock skew, errors by
//! code) are the core's own ([`leafid::metrics`]), read at each scrape; this file adds
//! only what the HTTP layer knows: failed requests by Leaf's result code, and scrapes.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    mode: &'static str,
    code: i64,
    error: &'static str,
}

/// Every metric `/metrics` shows.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    errors: Family<ErrorLabels, Counter>,
}

impl Metrics {
    /// The core's families for every generator of this process, plus the server's own.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        leafid::metrics::register(&mut registry);
        let errors = Family::<ErrorLabels, Counter>::default();
        let own = registry.sub_registry_with_prefix("leafid");
        own.register(
            "http_errors",
            "Failed id requests over HTTP, by mode and Leaf's result code (-1 not initialised, -2 unknown key, -3 exhausted or clock, -4 registry)",
            errors.clone(),
        );
        own.register_collector(Box::new(Scrapes));
        Metrics { registry, errors }
    }

    /// Counts a failed request of `mode` ("segment", "snowflake") answered with Leaf's
    /// `code`, caused by the core error named `error`.
    pub fn error(&self, mode: &'static str, code: i64, error: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { mode, code, error })
            .inc();
    }

    /// The text exposition format (OpenMetrics text, which Prometheus scrapes).
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Counts scrapes as they are served.
#[derive(Debug)]
struct Scrapes;

impl Collector for Scrapes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let scrapes = ConstCounter::new(SCRAPES.fetch_add(1, Ordering::Relaxed) + 1);
        let metric = encoder.encode_descriptor(
            "scrapes",
            "Scrapes of /metrics served",
            None,
            scrapes.metric_type(),
        )?;
        scrapes.encode(metric)
    }
}

// Relaxed: a statistic, ordered with nothing else.
static SCRAPES: AtomicU64 = AtomicU64::new(0);
