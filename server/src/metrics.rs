//! The server's Prometheus metrics, through the `prometheus-client` crate.
//!
//! Counters the handlers bump (ids issued per tag and per worker, errors by Leaf code)
//! live in families; the segment buffers' state (refills, step, next-segment readiness)
//! is read from [`SegmentGenerator::stats`] at each scrape by a collector, so nothing
//! on the issuing path has to keep it.

use std::sync::atomic::{AtomicU64, Ordering};

use leafid::{SnowflakeGenerator, TagStats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::store::SegmentSlot;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TagLabel {
    tag: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabel {
    worker_id: u32,
}

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
    segment_ids: Family<TagLabel, Counter>,
    snowflake_ids: Family<WorkerLabel, Counter>,
    errors: Family<ErrorLabels, Counter>,
}

impl Metrics {
    /// Metrics for a server running these generators.
    pub fn new(segment: Option<SegmentSlot>, snowflake: Option<SnowflakeGenerator>) -> Self {
        let mut registry = Registry::with_prefix("leafid");
        let segment_ids = Family::<TagLabel, Counter>::default();
        let snowflake_ids = Family::<WorkerLabel, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "segment_ids_issued",
            "Segment ids handed out over HTTP, per tag",
            segment_ids.clone(),
        );
        registry.register(
            "snowflake_ids_issued",
            "Snowflake ids handed out over HTTP, per worker id",
            snowflake_ids.clone(),
        );
        registry.register(
            "errors",
            "Failed id requests, by mode and Leaf's result code (-1 not initialised, -2 unknown key, -3 exhausted or clock, -4 registry)",
            errors.clone(),
        );
        registry.register_collector(Box::new(GeneratorState { segment, snowflake }));
        Metrics {
            registry,
            segment_ids,
            snowflake_ids,
            errors,
        }
    }

    /// Counts `n` segment ids issued for `tag`.
    pub fn segment_issued(&self, tag: &str, n: u64) {
        let label = TagLabel {
            tag: tag.to_string(),
        };
        self.segment_ids.get_or_create(&label).inc_by(n);
    }

    /// Counts `n` snowflake ids issued by `worker_id`.
    pub fn snowflake_issued(&self, worker_id: u32, n: u64) {
        self.snowflake_ids
            .get_or_create(&WorkerLabel { worker_id })
            .inc_by(n);
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

/// Reads the generators' state at scrape time.
#[derive(Debug)]
struct GeneratorState {
    segment: Option<SegmentSlot>,
    snowflake: Option<SnowflakeGenerator>,
}

impl Collector for GeneratorState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(gen) = self.segment.as_ref().and_then(|slot| slot.get()) {
            let stats = gen.stats();
            let mut per_tag = |name: &str, help: &str, value: fn(&TagStats) -> Sample| {
                per_tag(&mut encoder, &stats, name, help, value)
            };
            per_tag(
                "segment_refills",
                "Segments loaded from the table, per tag",
                |s| Sample::Counter(s.refills),
            )?;
            per_tag(
                "segment_step",
                "Step of the latest segment load (Leaf's dynamic step), per tag",
                |s| Sample::Gauge(s.step),
            )?;
            per_tag(
                "segment_next_ready",
                "1 when the next segment is loaded and waiting, per tag",
                |s| Sample::Gauge(s.next_ready as i64),
            )?;
            per_tag(
                "segment_initialized",
                "1 once the tag's first segment is loaded, per tag",
                |s| Sample::Gauge(s.initialized as i64),
            )?;
            per_tag(
                "segment_remaining_ids",
                "Ids left in the current segment, per tag",
                |s| {
                    let cur = s.segments[s.current & 1];
                    Sample::Gauge((cur.max - cur.value).max(0))
                },
            )?;
            per_tag(
                "segment_last_refill_seconds",
                "How long the latest segment load took, per tag",
                |s| Sample::Float(s.last_refill.map_or(0.0, |d| d.as_secs_f64())),
            )?;
        }
        if let Some(gen) = &self.snowflake {
            let gauge = ConstGauge::new(gen.worker_id() as i64);
            let metric = encoder.encode_descriptor(
                "snowflake_worker_id",
                "The worker id this server issues snowflake ids under",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric)?;
        }
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

fn blank() -> TagStats {
    TagStats {
        tag: String::new(),
        initialized: false,
        current: 0,
        next_ready: false,
        segments: Default::default(),
        step: 0,
        min_step: 0,
        refills: 0,
        last_refill: None,
        last_error: None,
    }
}

/// One tag's value of a metric; the variant gives the metric's type.
enum Sample {
    Counter(u64),
    Gauge(i64),
    Float(f64),
}

/// Writes one metric family with a sample per tag; its type follows the `Sample`
/// variant `value` gives (`Counter` only for the refills).
fn per_tag(
    encoder: &mut DescriptorEncoder,
    stats: &[TagStats],
    name: &str,
    help: &str,
    value: fn(&TagStats) -> Sample,
) -> Result<(), std::fmt::Error> {
    // The type must not depend on whether there are tags yet: ask a blank row.
    let kind = match value(&blank()) {
        Sample::Counter(_) => MetricType::Counter,
        _ => MetricType::Gauge,
    };
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for s in stats {
        let labels = [("tag", s.tag.as_str())];
        let metric = family.encode_family(&labels)?;
        match value(s) {
            Sample::Counter(v) => ConstCounter::new(v).encode(metric)?,
            Sample::Gauge(v) => ConstGauge::new(v).encode(metric)?,
            Sample::Float(v) => ConstGauge::new(v).encode(metric)?,
        }
    }
    Ok(())
}
