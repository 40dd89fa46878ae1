//! `metricsText()`: wraps `leafid::metrics`.

use napi_derive::napi;

/// The Prometheus (OpenMetrics) text of every live generator in the process. Reads
/// memory only (no I/O), so it is a synchronous call.
#[napi]
pub fn metrics_text() -> String {
    leafid::metrics::text()
}
