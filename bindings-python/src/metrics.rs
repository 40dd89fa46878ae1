//! `leafid.metrics_text`: wraps `leafid::metrics`.

use pyo3::prelude::*;

/// The Prometheus metrics of every live generator in this process, as OpenMetrics
/// text (families ``leafid_…``; ends with ``# EOF``). Serve it from your own
/// ``/metrics`` with the content type
/// ``application/openmetrics-text; version=1.0.0; charset=utf-8``. Never waits on I/O.
#[pyfunction]
pub fn metrics_text(py: Python<'_>) -> String {
    // Without the GIL: the scrape takes each tag's lock briefly, and a refill holding
    // one may be logging, which reaches Python's `logging` through the GIL.
    crate::exit::detach(py, leafid::metrics::text)
}
