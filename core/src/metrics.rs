//! Prometheus metrics of every live generator in the process, through the
//! `prometheus-client` crate (no exposition format written by hand).
//!
//! Nothing here is on the issuing path. Each scrape reads the state the generators keep
//! anyway ([`SegmentGenerator::stats`](crate::SegmentGenerator::stats),
//! [`SnowflakeGenerator::stats`](crate::SnowflakeGenerator::stats)) and the process's
//! error counts ([`error::counts`](crate::error::counts)). Generators register
//! themselves weakly when built: a dropped or closed generator disappears from the text.
//!
//! Mount it in your own `/metrics`: [`text`] gives the whole OpenMetrics text (ends with
//! `# EOF`; serve it as `application/openmetrics-text; version=1.0.0; charset=utf-8`),
//! and [`register`] adds the same families to a `prometheus-client` registry you already
//! serve.
//!
//! ```
//! # fn main() -> leafid::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let sf = leafid::SnowflakeGenerator::builder()
//!     .registry_url("fixed:901")?
//!     .cache_dir(dir.path())
//!     .build_blocking()?;
//! sf.next_id()?;
//! let text = leafid::metrics::text();
//! assert!(text.contains("leafid_snowflake_ids_issued_total{worker_id=\"901\"} 1"));
//!
//! // The same families in a prometheus-client registry a service already serves:
//! let mut registry = leafid::metrics::prometheus_client::registry::Registry::default();
//! leafid::metrics::register(&mut registry);
//! let mut served = String::new();
//! leafid::metrics::prometheus_client::encoding::text::encode(&mut served, &registry).unwrap();
//! assert!(served.contains("leafid_snowflake_lease_state{worker_id=\"901\",state=\"held\"} 1"));
//! # Ok(()) }
//! ```
//!
//! The families (all prefixed `leafid_`) are listed in the README's "Metrics" section.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The crate the families are encoded with, for [`register`]'s registry type.
pub use prometheus_client;

use crate::stats::segment::{RefillLatency, TagStats, REFILL_LATENCY_BOUNDS};
use crate::stats::snowflake::{LeaseStatus, SnowflakeStats};

/// What one live generator shows at a scrape.
pub(crate) enum Snapshot {
    /// A segment generator's tags.
    Segment(Vec<TagStats>),
    /// A snowflake generator's state.
    Snowflake(SnowflakeStats),
}

/// A generator the metrics can read: its snapshot, `None` once closed.
pub(crate) trait Observed: Send + Sync {
    fn snapshot(&self) -> Option<Snapshot>;
}

/// A tracked generator: its number in this process (1, 2, … in the order they were
/// built) and a weak reference.
type Tracked = (u64, Weak<dyn Observed>);

/// The generators built in this process, held weakly. Copy-on-write behind an
/// `ArcSwap` rather than a mutex: a fork() landing while another thread registers
/// leaves no lock held in the child.
fn generators() -> &'static ArcSwap<Vec<Tracked>> {
    static GENERATORS: OnceLock<ArcSwap<Vec<Tracked>>> = OnceLock::new();
    GENERATORS.get_or_init(Default::default)
}

/// Adds a generator (at construction), dropping entries whose generator is gone.
pub(crate) fn track(generator: Weak<dyn Observed>) {
    // Relaxed: only unique numbers are needed.
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    generators().rcu(|old| {
        let mut live: Vec<Tracked> = old
            .iter()
            .filter(|(_, w)| w.strong_count() > 0)
            .cloned()
            .collect();
        live.push((number, generator.clone()));
        live
    });
}

/// One generator's row of a family: its stats, and its number when another live
/// generator has a row with the same labels (the same tag in two databases, one worker
/// id from two registries). Those rows get a `generator` label, so each stays a series
/// of its own instead of two samples of one (of which Prometheus keeps one).
struct Row<S> {
    stats: S,
    generator: Option<u64>,
}

impl<S> std::ops::Deref for Row<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.stats
    }
}

/// Rows from `(generator number, stats)`, numbered where `key` repeats.
fn rows<S, K: Hash + Eq>(all: Vec<(u64, S)>, key: impl Fn(&S) -> K) -> Vec<Row<S>> {
    let mut seen: HashMap<K, usize> = HashMap::new();
    for (_, s) in &all {
        *seen.entry(key(s)).or_default() += 1;
    }
    all.into_iter()
        .map(|(number, stats)| {
            let shared = seen.get(&key(&stats)).is_some_and(|&n| n > 1);
            Row {
                generator: shared.then_some(number),
                stats,
            }
        })
        .collect()
}

/// `labels` plus the row's `generator` label when it has one.
fn with_generator<S>(
    mut labels: Vec<(&'static str, String)>,
    row: &Row<S>,
) -> Vec<(&'static str, String)> {
    if let Some(n) = row.generator {
        labels.push(("generator", n.to_string()));
    }
    labels
}

/// The metrics of every live generator in the process (and the error counts), as
/// OpenMetrics text with every family named `leafid_…`.
pub fn text() -> String {
    let mut registry = Registry::default();
    register(&mut registry);
    let mut out = String::new();
    // Writing into a String cannot fail, and the collector fails only when its writer does.
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding into a String cannot fail");
    out
}

/// Adds leafid's families (named `leafid_…`) to `registry`, so a service that already
/// serves a `prometheus-client` registry shows them on the same scrape.
pub fn register(registry: &mut Registry) {
    registry
        .sub_registry_with_prefix("leafid")
        .register_collector(Box::new(Generators));
}

/// Reads every live generator at each scrape.
#[derive(Debug)]
struct Generators;

impl Collector for Generators {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut tags = Vec::new();
        let mut workers = Vec::new();
        for (number, snapshot) in generators()
            .load()
            .iter()
            .filter_map(|(n, w)| Some((*n, w.upgrade()?.snapshot()?)))
        {
            match snapshot {
                Snapshot::Segment(stats) => tags.extend(stats.into_iter().map(|s| (number, s))),
                Snapshot::Snowflake(stats) => workers.push((number, stats)),
            }
        }
        let tags = rows(tags, |s: &TagStats| s.tag.clone());
        let workers = rows(workers, |s: &SnowflakeStats| s.worker_id);
        encode_segment(&mut encoder, &tags)?;
        encode_snowflake(&mut encoder, &workers)?;
        encode_errors(&mut encoder)
    }
}

/// One sample's value; the variant decides the family's type.
enum Value {
    Counter(u64),
    Gauge(i64),
    Seconds(f64),
}

/// Writes one family of `kind` with a sample per row that `value` gives one for.
fn family<T>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: &[T],
    labels: impl Fn(&T) -> Vec<(&'static str, String)>,
    value: impl Fn(&T) -> Option<Value>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for row in rows {
        if let Some(v) = value(row) {
            let labels = labels(row);
            encode_value(family.encode_family(&labels)?, v)?;
        }
    }
    Ok(())
}

fn encode_value(metric: MetricEncoder, v: Value) -> Result<(), std::fmt::Error> {
    match v {
        Value::Counter(n) => ConstCounter::new(n).encode(metric),
        Value::Gauge(n) => ConstGauge::new(n).encode(metric),
        Value::Seconds(s) => ConstGauge::new(s).encode(metric),
    }
}

fn tag_label(s: &Row<TagStats>) -> Vec<(&'static str, String)> {
    with_generator(vec![("tag", escape_label_value(&s.tag))], s)
}

/// A label value as the exposition format writes it: `\`, `"` and a newline escaped.
/// By hand because prometheus-client 0.24 writes label values as they are
/// (prometheus/client_rust#151), and a tag is any text up to 128 characters: one with a
/// quote or a newline would break the whole scrape, or add series of its own.
fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn worker_label(s: &Row<SnowflakeStats>) -> Vec<(&'static str, String)> {
    with_generator(vec![("worker_id", s.worker_id.to_string())], s)
}

fn encode_segment(
    enc: &mut DescriptorEncoder,
    tags: &[Row<TagStats>],
) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    family(
        enc,
        "segment_ids_issued",
        "Segment ids issued by this process, per tag",
        Counter,
        tags,
        tag_label,
        |s| Some(Value::Counter(s.issued)),
    )?;
    family(
        enc,
        "segment_refills",
        "Segments loaded from the table, per tag",
        Counter,
        tags,
        tag_label,
        |s| Some(Value::Counter(s.refills)),
    )?;
    family(
        enc,
        "segment_step",
        "Step of the latest segment load (Leaf's dynamic step), per tag",
        Gauge,
        tags,
        tag_label,
        |s| Some(Value::Gauge(s.step)),
    )?;
    family(
        enc,
        "segment_next_ready",
        "1 when the next segment is loaded and waiting, per tag",
        Gauge,
        tags,
        tag_label,
        |s| Some(Value::Gauge(s.next_ready.into())),
    )?;
    family(
        enc,
        "segment_initialized",
        "1 once the tag's first segment is loaded, per tag",
        Gauge,
        tags,
        tag_label,
        |s| Some(Value::Gauge(s.initialized.into())),
    )?;
    family(
        enc,
        "segment_remaining_ids",
        "Ids left in the current segment, per tag",
        Gauge,
        tags,
        tag_label,
        |s| {
            let cur = s.segments[s.current & 1];
            Some(Value::Gauge((cur.max - cur.value).max(0)))
        },
    )?;
    family(
        enc,
        "segment_last_refill_seconds",
        "How long the latest segment load took, per tag",
        Gauge,
        tags,
        tag_label,
        |s| s.last_refill.map(|d| Value::Seconds(d.as_secs_f64())),
    )?;
    let mut latency = enc.encode_descriptor(
        "segment_refill_duration_seconds",
        "How long segment loads took (successful ones), per tag",
        None,
        MetricType::Histogram,
    )?;
    for s in tags {
        encode_latency(latency.encode_family(&tag_label(s))?, &s.refill_latency)?;
    }
    Ok(())
}

fn encode_latency(mut metric: MetricEncoder, h: &RefillLatency) -> Result<(), std::fmt::Error> {
    // `prometheus-client` spells the +Inf bucket as f64::MAX.
    let buckets: Vec<(f64, u64)> = REFILL_LATENCY_BOUNDS
        .iter()
        .map(|&b| if b.is_finite() { b } else { f64::MAX })
        .zip(h.buckets)
        .collect();
    metric.encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &buckets, None)
}

fn encode_snowflake(
    enc: &mut DescriptorEncoder,
    workers: &[Row<SnowflakeStats>],
) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    let ms = |v: i64| Value::Seconds(v as f64 / 1000.0);
    family(
        enc,
        "snowflake_ids_issued",
        "Snowflake ids issued by this process, per worker id",
        Counter,
        workers,
        worker_label,
        |s| Some(Value::Counter(s.issued)),
    )?;
    // One series per state, 1 on the current one (the usual shape of an enum gauge).
    let rows: Vec<(&Row<SnowflakeStats>, LeaseStatus)> = workers
        .iter()
        .flat_map(|s| LeaseStatus::ALL.map(|state| (s, state)))
        .collect();
    family(
        enc,
        "snowflake_lease_state",
        "1 for the state the worker id's lease is in (held, late, acquiring, lost, forked, closed)",
        Gauge,
        &rows,
        |(s, state)| {
            let mut labels = worker_label(s);
            labels.insert(1, ("state", state.as_str().to_string()));
            labels
        },
        |(s, state)| Some(Value::Gauge((s.lease == *state).into())),
    )?;
    family(enc, "snowflake_bound_lead_seconds",
        "How far the persisted time bound is ahead of the clock (negative: passed), while a lease is held",
        Gauge, workers, worker_label, |s| s.bound_lead_ms.map(ms))?;
    family(
        enc,
        "snowflake_clock_skew_seconds",
        "Local clock minus the registry's clock at the latest reading (registries with a clock)",
        Gauge,
        workers,
        worker_label,
        |s| s.clock_skew_ms.map(ms),
    )?;
    family(
        enc,
        "snowflake_clock_backward_max_seconds",
        "The largest backward clock step a caller met (waited out or refused)",
        Gauge,
        workers,
        worker_label,
        |s| Some(ms(s.max_backward_ms)),
    )?;
    family(
        enc,
        "snowflake_persist_failures",
        "Time bounds the heartbeat or a caller failed to persist",
        Counter,
        workers,
        worker_label,
        |s| Some(Value::Counter(s.persist_failures)),
    )
}

fn encode_errors(enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let counts = crate::error::counts();
    family(
        enc,
        "errors",
        "Errors returned by issuing calls (next_id and its kin, tag lookups), by mode and error code",
        MetricType::Counter,
        &counts,
        |(mode, code, _)| vec![("mode", mode.as_str().to_string()), ("code", code.to_string())],
        |&(_, _, n)| Some(Value::Counter(n)),
    )
}

/// Lets generators reach [`track`] as `Arc<dyn Observed>` without naming the trait
/// object type at each call.
pub(crate) fn track_arc<T: Observed + 'static>(generator: &Arc<T>) {
    let weak: Weak<dyn Observed> = Arc::downgrade(generator) as Weak<T>;
    track(weak);
}
