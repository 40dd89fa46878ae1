//! `leafid.metrics_text`: wraps `leafid::metrics`.

use pyo3::prelude::*;

/// The Prometheus (OpenMetrics) text of every live generator in the process.
#[pyfunction]
pub fn metrics_text(py: Python<'_>) -> String {
    // Without the GIL: the scrape takes each tag's lock briefly, and a refill holding
    // one may be logging, which reaches Python's `logging` through the GIL.
    py.detach(leafid::metrics::text)
}
