//! `leafid::Error` → the Python exception of the same name (defined in
//! `leafid/_errors.py`, under `leafid.LeafError`), with the core's message and `code`.
//! This is the only place the binding turns a core error into a Python one.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Converts a core error into the matching Python exception.
pub fn to_py(e: leafid::Error) -> PyErr {
    Python::attach(|py| {
        let module = match ERRORS.get_or_try_init(py, || {
            PyModule::import(py, "leafid._errors").map(Bound::unbind)
        }) {
            Ok(m) => m.bind(py),
            Err(import_error) => return import_error,
        };
        // A variant newer than `_errors.py` still raises a LeafError with its message
        // (test_errors.py fails until the class is added).
        let class = module
            .getattr(e.name())
            .or_else(|_| module.getattr("LeafError"));
        match class.and_then(|class| class.call1((e.to_string(),))) {
            Ok(exc) => {
                let _ = exc.setattr("code", e.code());
                PyErr::from_value(exc)
            }
            Err(other) => other,
        }
    })
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
