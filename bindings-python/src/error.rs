//! `leafid::Error` → the Python exception of the same name (defined in
//! `leafid/_errors.py`, under `leafid.LeafError`). This is the only place the binding
//! turns a core error into a Python one, and [`exception`] the one function that does it:
//! the core's message as the argument, then `code`, the variant's fields a caller
//! branches on (`tag`, `table`), `cause` (the underlying error as text) and, where the
//! core keeps the underlying error itself (`std::error::Error::source`), that error as
//! `__cause__`: an `OSError` subclass for an OS error (`ConnectionRefusedError`,
//! `NotADirectoryError`, …), so a caller can tell one failure from another.

use pyo3::exceptions::{PyException, PyOSError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Converts a core error into the matching Python exception.
pub fn to_py(e: leafid::Error) -> PyErr {
    Python::attach(|py| match exception(py, &e) {
        Ok(exc) => PyErr::from_value(exc),
        Err(other) => other,
    })
}

/// The Python exception for `e`, with its attributes and cause chain.
fn exception<'py>(py: Python<'py>, e: &leafid::Error) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS
        .get_or_try_init(py, || {
            PyModule::import(py, "leafid._errors").map(Bound::unbind)
        })?
        .bind(py);
    // A variant newer than `_errors.py` still raises a LeafError with its message
    // (test_errors.py fails until the class is added).
    let class = module
        .getattr(e.name())
        .or_else(|_| module.getattr("LeafError"))?;
    let exc = class.call1((message(e),))?;
    exc.setattr("code", e.code())?;
    for (name, value) in fields(e) {
        exc.setattr(name, value)?;
    }
    exc.setattr("cause", cause_text(e))?;
    // What kind of failure lies under it ("refused", "timed_out", "login_refused",
    // "not_found", "other"), classified once in the core.
    exc.setattr("cause_kind", e.cause_kind().map(|k| k.as_str()))?;
    // The underlying error itself, whenever the core keeps it: a variant whose cause
    // becomes a `#[source]` gets its `__cause__` here with no change in this file.
    if let Some(source) = std::error::Error::source(e) {
        exc.setattr("__cause__", source_to_py(py, source)?)?;
    }
    Ok(exc)
}

/// The core's message, naming Python's way where the core names Rust's: a missing
/// table is created by the constructor's keyword `create_table=True`.
fn message(e: &leafid::Error) -> String {
    match e {
        leafid::Error::TableMissing { table } => leafid::error::table_missing_message(
            table,
            "create_table=True (a keyword of the constructor)",
        ),
        _ => e.to_string(),
    }
}

/// The fields of `e` a caller branches on, as attributes (the class declares each with
/// a `None` default).
fn fields(e: &leafid::Error) -> Vec<(&'static str, String)> {
    use leafid::Error as E;
    match e {
        E::TagNotFound { tag }
        | E::TagExists { tag }
        | E::InvalidTag { tag, .. }
        | E::SegmentsExhausted { tag, .. } => vec![("tag", tag.clone())],
        E::TableMissing { table } => vec![("table", table.clone())],
        _ => Vec::new(),
    }
}

/// The underlying error as text (`None` when there is none). `to_string()` on the
/// fields, so a field that turns from text into an error type still compiles here.
fn cause_text(e: &leafid::Error) -> Option<String> {
    use leafid::Error as E;
    match e {
        E::StoreUnavailable { cause, .. }
        | E::RegistryUnavailable { cause, .. }
        | E::AccessDenied { cause, .. }
        | E::LeaseLost { cause, .. } => Some(cause.to_string()),
        // "none": the refill was merely slow, no error behind it.
        E::SegmentsExhausted { cause, .. } => {
            Some(cause.to_string()).filter(|c| c.as_str() != "none")
        }
        _ => std::error::Error::source(e).map(|s| s.to_string()),
    }
}

/// A Rust error from a `source()` chain as a Python exception, its own source as its
/// `__cause__`: an OS error becomes `OSError(errno, strerror)` (Python picks the
/// subclass from the errno), a leafid error its class, anything else an `Exception`
/// with the text.
fn source_to_py<'py>(
    py: Python<'py>,
    source: &(dyn std::error::Error + 'static),
) -> PyResult<Bound<'py, PyAny>> {
    // Made by calling the class, not as a lazy `PyErr` forced with `into_value`: forcing
    // one lets go of the GIL and takes it back, which a daemon thread must not do while
    // the interpreter exits (see `exit.rs`).
    let exc = if let Some(leaf) = source.downcast_ref::<leafid::Error>() {
        return exception(py, leaf);
    } else if let Some(io) = source.downcast_ref::<std::io::Error>() {
        let os_error = py.get_type::<PyOSError>();
        match io.raw_os_error() {
            Some(errno) => {
                let strerror = PyModule::import(py, "os")?.call_method1("strerror", (errno,))?;
                os_error.call1((errno, strerror))?
            }
            None => os_error.call1((io.to_string(),))?,
        }
    } else {
        py.get_type::<PyException>().call1((source.to_string(),))?
    };
    if let Some(next) = source.source() {
        exc.setattr("__cause__", source_to_py(py, next)?)?;
    }
    Ok(exc)
}

/// `Result<T, leafid::Error>` → `PyResult<T>`.
pub trait IntoPy<T> {
    /// Maps the error side with [`to_py`].
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for leafid::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
