//! `leafid.IdCipher`: wraps `leafid::cipher`.

use leafid::IdCipher;
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;

use crate::error::{to_py, IntoPy};

/// A keyed, reversible permutation of the positive ids ``1..2**63-1`` (NIST SP
/// 800-38G FF1 with AES): public ids that reveal no count and no time.
///
/// ``key`` is 16, 24 or 32 secret bytes (AES-128/192/256); keep it forever. Encrypted
/// ids are positive 64-bit ints but not ordered: store the plain id, show the
/// encrypted one. Wrong key length, and ids that are 0, negative or past 2**63-1,
/// raise ``InvalidConfig`` (a ``ValueError``); a non-int raises ``TypeError``.
#[pyclass(name = "IdCipher", module = "leafid", frozen)]
pub struct PyIdCipher {
    inner: IdCipher,
}

/// An int argument as an `i64`; one past the range is the core's out-of-domain error
/// (a `ValueError`), as a negative one is, instead of Python's `OverflowError`.
fn id_arg(id: &Bound<'_, PyAny>) -> PyResult<i64> {
    id.extract::<i64>().map_err(|e| out_of_range(id.py(), e))
}

/// Several int arguments as `i64`s, with the same mapping as [`id_arg`].
fn ids_arg(ids: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    ids.extract::<Vec<i64>>()
        .map_err(|e| out_of_range(ids.py(), e))
}

fn out_of_range(py: Python<'_>, e: PyErr) -> PyErr {
    if e.is_instance_of::<PyOverflowError>(py) {
        to_py(leafid::Error::InvalidConfig(
            "id out of range: IdCipher works on ids 1..=9223372036854775807 (positive i64)"
                .to_string(),
        ))
    } else {
        e
    }
}

#[pymethods]
impl PyIdCipher {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        Ok(PyIdCipher {
            inner: IdCipher::new(key).py()?,
        })
    }

    /// The opaque form of ``id``.
    fn encrypt(&self, id: &Bound<'_, PyAny>) -> PyResult<i64> {
        self.inner.encrypt(id_arg(id)?).py()
    }

    /// The id whose opaque form is ``id``.
    fn decrypt(&self, id: &Bound<'_, PyAny>) -> PyResult<i64> {
        self.inner.decrypt(id_arg(id)?).py()
    }

    /// ``encrypt`` over a sequence of ids (the GIL released for the work); fails
    /// whole on the first invalid id.
    fn encrypt_many(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
        let mut ids = ids_arg(ids)?;
        crate::exit::detach(py, || self.inner.encrypt_in_place(&mut ids)).py()?;
        Ok(ids)
    }

    /// ``decrypt`` over a sequence of ids; fails whole on the first invalid id.
    fn decrypt_many(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
        let mut ids = ids_arg(ids)?;
        crate::exit::detach(py, || self.inner.decrypt_in_place(&mut ids)).py()?;
        Ok(ids)
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}
