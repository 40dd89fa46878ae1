//! `leafid.SegmentGenerator`, `leafid.TagHandle`, `leafid.TagStats`: wrap
//! `leafid::segment`.

use leafid::{SegmentGenerator, SegmentOptions, TagHandle, TagStats};
use pyo3::prelude::*;

use crate::error::IntoPy;

/// Issues ids for the tags of one `leaf_alloc` table.
#[pyclass(name = "SegmentGenerator", module = "leafid", frozen)]
pub struct PySegmentGenerator {
    inner: SegmentGenerator,
}

#[pymethods]
impl PySegmentGenerator {
    // Python keyword arguments, one per option: the signature is the API.
    #[allow(clippy::too_many_arguments)]
    #[new]
    #[pyo3(signature = (url, *, wait_timeout=1.0, refresh_interval=60.0, create_table=false, double_buffer=true, max_step=1_000_000, js_safe=false))]
    fn new(
        py: Python<'_>,
        url: &str,
        wait_timeout: f64,
        refresh_interval: f64,
        create_table: bool,
        double_buffer: bool,
        max_step: i64,
        js_safe: bool,
    ) -> PyResult<Self> {
        let opts = SegmentOptions {
            wait_timeout: crate::seconds("wait_timeout", wait_timeout)?,
            refresh_interval: crate::seconds("refresh_interval", refresh_interval)?,
            create_table,
            double_buffer,
            max_step,
            js_safe,
            ..SegmentOptions::default()
        };
        let inner = py
            .detach(|| SegmentGenerator::connect_blocking(url, opts))
            .py()?;
        Ok(PySegmentGenerator { inner })
    }

    fn next_id(&self, py: Python<'_>, tag: &str) -> PyResult<i64> {
        match self.inner.try_next_id(tag) {
            Some(id) => Ok(id),
            None => py.detach(|| self.inner.next_id(tag)).py(),
        }
    }

    fn next_ids(&self, py: Python<'_>, tag: &str, n: usize) -> PyResult<Vec<i64>> {
        py.detach(|| self.inner.next_ids(tag, n)).py()
    }

    fn tag(&self, tag: &str) -> PyResult<PyTagHandle> {
        Ok(PyTagHandle {
            inner: self.inner.tag(tag).py()?,
        })
    }

    fn tags(&self) -> Vec<String> {
        self.inner.tags()
    }

    #[pyo3(signature = (tag, start=1, step=1000, description=""))]
    fn create_tag(
        &self,
        py: Python<'_>,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
    ) -> PyResult<()> {
        let (g, tag, description) = (self.inner.clone(), tag.to_string(), description.to_string());
        py.detach(|| {
            leafid::runtime::block_on(
                async move { g.create_tag(&tag, start, step, &description).await },
            )
        })
        .py()
    }

    fn create_table(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.inner.clone();
        py.detach(|| leafid::runtime::block_on(async move { g.create_table().await }))
            .py()
    }

    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.inner.clone();
        py.detach(|| leafid::runtime::block_on(async move { g.refresh().await }))
            .py()
    }

    fn stats(&self) -> Vec<PyTagStats> {
        self.inner
            .stats()
            .into_iter()
            .map(PyTagStats::from)
            .collect()
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// The fast way to issue ids for one tag; also an endless iterator.
#[pyclass(name = "TagHandle", module = "leafid", frozen)]
pub struct PyTagHandle {
    inner: TagHandle,
}

#[pymethods]
impl PyTagHandle {
    #[getter]
    fn tag(&self) -> &str {
        self.inner.tag()
    }

    fn next_id(&self, py: Python<'_>) -> PyResult<i64> {
        match self.inner.try_next_id() {
            Some(id) => Ok(id),
            None => py.detach(|| self.inner.next_id()).py(),
        }
    }

    fn next_ids(&self, py: Python<'_>, n: usize) -> PyResult<Vec<i64>> {
        py.detach(|| self.inner.next_ids(n)).py()
    }

    /// `n` ids as an `array.array('q')`: no Python int per id, for bulk work.
    fn next_ids_array<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyAny>> {
        let ids = py.detach(|| self.inner.next_ids(n)).py()?;
        crate::int64_array(py, &ids)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<i64> {
        self.next_id(py)
    }

    fn __repr__(&self) -> String {
        format!("TagHandle({:?})", self.inner.tag())
    }
}

/// One tag's state, as Leaf's `/cache` page shows it, plus refill figures.
#[pyclass(name = "TagStats", module = "leafid", frozen, get_all)]
pub struct PyTagStats {
    tag: String,
    initialized: bool,
    current: usize,
    next_ready: bool,
    /// `(value, max, step)` of both segments.
    segments: Vec<(i64, i64, i64)>,
    step: i64,
    min_step: i64,
    refills: u64,
    last_refill: Option<f64>,
    last_error: Option<String>,
}

impl From<TagStats> for PyTagStats {
    fn from(s: TagStats) -> Self {
        PyTagStats {
            tag: s.tag,
            initialized: s.initialized,
            current: s.current,
            next_ready: s.next_ready,
            segments: s
                .segments
                .iter()
                .map(|g| (g.value, g.max, g.step))
                .collect(),
            step: s.step,
            min_step: s.min_step,
            refills: s.refills,
            last_refill: s.last_refill.map(|d| d.as_secs_f64()),
            last_error: s.last_error,
        }
    }
}

#[pymethods]
impl PyTagStats {
    fn __repr__(&self) -> String {
        format!(
            "TagStats(tag={:?}, step={}, refills={}, next_ready={})",
            self.tag, self.step, self.refills, self.next_ready
        )
    }
}
