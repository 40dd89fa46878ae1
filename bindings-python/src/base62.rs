//! `leafid.encode_base62`, `leafid.decode_base62`: wrap `leafid::base62`.

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;

use crate::error::{to_py, IntoPy};

/// ``id`` (0..2**63-1) as 11 characters of ``0-9A-Za-z`` whose string order is the
/// ids' order; raises ``InvalidConfig`` for a negative id. An encoding, not encryption.
#[pyfunction]
pub fn encode_base62(id: &Bound<'_, PyAny>) -> PyResult<String> {
    let id = id.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(id.py()) {
            to_py(leafid::Error::InvalidConfig(
                "cannot encode an id past 9223372036854775807 in base 62".to_string(),
            ))
        } else {
            e
        }
    })?;
    leafid::encode_base62(id).py()
}

/// The id an 11-character base-62 string encodes; raises ``InvalidConfig`` for a
/// wrong length, a character outside ``0-9A-Za-z`` or a value past 2**63-1.
#[pyfunction]
pub fn decode_base62(s: &str) -> PyResult<i64> {
    leafid::decode_base62(s).py()
}
