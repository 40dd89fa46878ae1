//! Batches of ids handed to Python: a `list` of `int` filled in place ([`IntList`]) and
//! an `array.array('q')`.
//!
//! A snowflake batch is taken in chunks (the GIL released for each, Ctrl-C checked
//! between them); [`IntList`] lets each chunk's ids go straight into the list's slots,
//! so a batch needs one chunk of buffer (64 KB) instead of two `Vec`s the size of the
//! batch (16 MB for a million ids). Per id it does what pyo3's conversion of a `Vec` does
//! under the stable ABI (`PyLong_FromLongLong`, `PyList_SetItem`): the int objects are
//! the cost, and `list(range(…))` pays the same (see `benches/README.md`, "Python").

use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::{ffi, BoundObject};

/// A `list` of `len` ints being filled in order; handed to Python (and to its garbage
/// collector) only once full, so nothing ever sees an empty slot.
pub struct IntList<'py> {
    list: Bound<'py, PyList>,
    len: usize,
    filled: usize,
}

impl<'py> IntList<'py> {
    /// An empty list of `len` slots (`len` is a batch size, at most
    /// `leafid::limits::MAX_BATCH`).
    pub fn new(py: Python<'py>, len: usize) -> PyResult<IntList<'py>> {
        let size = ffi::Py_ssize_t::try_from(len)?;
        // SAFETY: PyList_New returns a new reference or null with an exception set; its
        // slots are null until set, which list_dealloc accepts if we fail half-way.
        let list = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_New(size))? };
        // SAFETY: a live list of ours. Untracked until full: the GIL is released between
        // chunks, and a tracked list is reachable from other threads through the
        // collector (`gc.get_objects()`), where reading an empty slot would crash.
        // Untracking an untracked object is allowed, so list_dealloc stays correct.
        unsafe { ffi::PyObject_GC_UnTrack(list.as_ptr().cast()) };
        Ok(IntList {
            // SAFETY: PyList_New made a list.
            list: unsafe { list.cast_into_unchecked::<PyList>() },
            len,
            filled: 0,
        })
    }

    /// Appends `ids` (at most the slots left).
    pub fn extend(&mut self, ids: &[i64]) -> PyResult<()> {
        if ids.len() > self.len - self.filled {
            return Err(pyo3::exceptions::PySystemError::new_err(
                "more ids than the list has slots",
            ));
        }
        let list = self.list.as_ptr();
        for &id in ids {
            // SAFETY: the GIL is held (`self.list` is bound); PyLong_FromLongLong returns
            // a new reference or null with an exception set.
            let item = unsafe { ffi::PyLong_FromLongLong(id) };
            if item.is_null() {
                return Err(PyErr::fetch(self.list.py()));
            }
            // SAFETY: `filled` < len (checked above) is an empty slot of our own list;
            // PyList_SetItem steals `item`. Under the stable ABI (abi3) the inline
            // PyList_SET_ITEM is not available: this is its checked form.
            if unsafe { ffi::PyList_SetItem(list, self.filled as ffi::Py_ssize_t, item) } < 0 {
                return Err(PyErr::fetch(self.list.py()));
            }
            self.filled += 1;
        }
        Ok(())
    }

    /// The list, once every slot is set.
    pub fn finish(self) -> PyResult<Bound<'py, PyList>> {
        if self.filled != self.len {
            return Err(pyo3::exceptions::PySystemError::new_err(
                "the id list was not filled",
            ));
        }
        // SAFETY: every slot is set; the collector may see the list from now on.
        unsafe { ffi::PyObject_GC_Track(self.list.as_ptr().cast()) };
        Ok(self.list)
    }
}

/// An `array.array('q')` holding `ids` (one copy of the bytes, no int objects).
pub fn int64_array<'py>(py: Python<'py>, ids: &[i64]) -> PyResult<Bound<'py, PyAny>> {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_ne_bytes()).collect();
    let array = PyModule::import(py, "array")?
        .getattr("array")?
        .call1(("q",))?;
    array.call_method1("frombytes", (pyo3::types::PyBytes::new(py, &bytes),))?;
    Ok(array.into_bound())
}
