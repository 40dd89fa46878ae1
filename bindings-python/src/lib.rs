//! Python bindings of leafid: the extension module `leafid._leafid`.
//!
//! Conversions only. Each file mirrors a core module: `segment.rs` wraps
//! `leafid::segment`, `snowflake.rs` wraps `leafid::snowflake`, `error.rs` maps
//! `leafid::Error` to the exception classes of `leafid/_errors.py`, `logging.rs` forwards
//! the core's `tracing` events to Python's `logging`, `metrics.rs` wraps `leafid::metrics`.
//! Below them: `aio.rs` (core futures to Python awaitables) and `exit.rs` (whether the
//! interpreter is exiting, which both the logging and the async glue must respect).

use pyo3::prelude::*;

mod aio;
mod base62;
mod cipher;
mod error;
mod exit;
mod ints;
mod logging;
mod metrics;
mod segment;
mod snowflake;

/// Seconds (a Python float) to a duration, by the core's conversion; each option's
/// upper bound is the core's to check.
fn seconds(name: &str, s: f64) -> PyResult<std::time::Duration> {
    leafid::limits::seconds(name, s).map_err(error::to_py)
}

/// `Name(field=value, …)` with each value as Python's `repr` shows it (`False`, `None`,
/// `'order'`), read from the object's own attributes: what a Python user can type back.
fn py_repr(obj: &Bound<'_, PyAny>, fields: &[&str]) -> PyResult<String> {
    let mut parts = Vec::with_capacity(fields.len());
    for field in fields {
        parts.push(format!("{field}={}", obj.getattr(*field)?.repr()?));
    }
    Ok(format!("{}({})", obj.get_type().name()?, parts.join(", ")))
}

#[pymodule]
fn _leafid(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logging::install();
    m.add_class::<segment::PySegmentGenerator>()?;
    m.add_class::<segment::PyTagHandle>()?;
    m.add_class::<segment::PyTagStats>()?;
    m.add_class::<snowflake::PyLayout>()?;
    m.add_class::<snowflake::PySnowflakeGenerator>()?;
    m.add_function(wrap_pyfunction!(snowflake::decode, m)?)?;
    m.add_class::<cipher::PyIdCipher>()?;
    m.add_function(wrap_pyfunction!(base62::encode_base62, m)?)?;
    m.add_function(wrap_pyfunction!(base62::decode_base62, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(exit::_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(exit::_after_fork_in_child, m)?)?;
    m.add("LEAF_EPOCH_MS", leafid::snowflake::LEAF_EPOCH_MS)?;
    // The workspace version, which maturin also writes into the wheel's metadata
    // (`dynamic = ["version"]`), so the two cannot disagree.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Lets test_errors.py check that `_errors.py` has a class for every core variant.
    m.add("_ERROR_NAMES", leafid::Error::NAMES.to_vec())?;
    Ok(())
}
