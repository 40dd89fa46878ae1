//! `leafid.SegmentGenerator`, `leafid.TagHandle`, `leafid.TagStats`: wrap
//! `leafid::segment`.

use leafid::{SegmentGenerator, SegmentOptions, TagHandle, TagStats};
use pyo3::prelude::*;

use crate::aio::{at_hand_or, awaitable, connecting, wait};
use crate::error::IntoPy;

/// Issues ids for the tags of one ``leaf_alloc`` table (``mysql://…``,
/// ``sqlite://path`` or ``memory:``).
///
/// The constructor connects and loads the tag list; ``tags``: tags whose first
/// segments are loaded before it returns. Waits with the GIL released; Ctrl-C
/// interrupts. ``connect`` does the same as a coroutine. ``thread_chunk``: up to that
/// many ids (at most 4096) reserved per thread at a time, so threads issuing from one
/// tag do not contend; ids then increase per thread, and across threads as a trend
/// only (0, the default: in call order across threads).
#[pyclass(name = "SegmentGenerator", module = "leafid", frozen)]
pub struct PySegmentGenerator {
    inner: SegmentGenerator,
}

/// The constructor's keyword arguments → the core's options (shared by `__new__` and
/// `connect`, whose signatures are the same).
#[allow(clippy::too_many_arguments)]
fn options(
    wait_timeout: f64,
    refresh_interval: f64,
    create_table: bool,
    double_buffer: bool,
    max_step: i64,
    js_safe: bool,
    thread_chunk: u64,
    tags: Vec<String>,
) -> PyResult<SegmentOptions> {
    Ok(SegmentOptions::default()
        .wait_timeout(crate::seconds("wait_timeout", wait_timeout)?)
        .refresh_interval(crate::seconds("refresh_interval", refresh_interval)?)
        .create_table(create_table)
        .double_buffer(double_buffer)
        .max_step(max_step)
        .js_safe(js_safe)
        .thread_chunk(thread_chunk)
        .tags(tags))
}

#[pymethods]
impl PySegmentGenerator {
    // Python keyword arguments, one per option: the signature is the API.
    #[allow(clippy::too_many_arguments)]
    #[new]
    #[pyo3(signature = (url, *, wait_timeout=1.0, refresh_interval=60.0, create_table=false, double_buffer=true, max_step=1_000_000, js_safe=false, thread_chunk=0, tags=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        wait_timeout: f64,
        refresh_interval: f64,
        create_table: bool,
        double_buffer: bool,
        max_step: i64,
        js_safe: bool,
        thread_chunk: u64,
        tags: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let opts = options(
            wait_timeout,
            refresh_interval,
            create_table,
            double_buffer,
            max_step,
            js_safe,
            thread_chunk,
            tag_list(tags)?,
        )?;
        let url = url.to_string();
        let inner = wait(
            py,
            async move { SegmentGenerator::connect(&url, opts).await },
        )?;
        Ok(PySegmentGenerator { inner })
    }

    /// The constructor as a coroutine: the I/O runs on the core's runtime and the event
    /// loop goes on meanwhile. ``gen = await SegmentGenerator.connect(url)``, or
    /// ``async with SegmentGenerator.connect(url) as gen:`` (closed at the block's end).
    #[allow(clippy::too_many_arguments)]
    #[staticmethod]
    #[pyo3(signature = (url, *, wait_timeout=1.0, refresh_interval=60.0, create_table=false, double_buffer=true, max_step=1_000_000, js_safe=false, thread_chunk=0, tags=None))]
    fn connect<'py>(
        py: Python<'py>,
        url: &str,
        wait_timeout: f64,
        refresh_interval: f64,
        create_table: bool,
        double_buffer: bool,
        max_step: i64,
        js_safe: bool,
        thread_chunk: u64,
        tags: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = options(
            wait_timeout,
            refresh_interval,
            create_table,
            double_buffer,
            max_step,
            js_safe,
            thread_chunk,
            tag_list(tags)?,
        )?;
        let url = url.to_string();
        connecting(py, async move {
            SegmentGenerator::connect(&url, opts)
                .await
                .map(|inner| PySegmentGenerator { inner })
        })
    }

    /// The next id of ``tag``; when none is at hand, waits up to ``wait_timeout``
    /// with the GIL released (Ctrl-C interrupts).
    fn next_id(&self, py: Python<'_>, tag: &str) -> PyResult<i64> {
        if let Some(id) = self.inner.try_next_id(tag) {
            return Ok(id);
        }
        // The core takes at call time when it can, and waits only when that may help.
        wait(py, self.inner.next_id_async(tag))
    }

    /// ``n`` ids of ``tag``, ascending; waits as ``next_id`` does.
    fn next_ids(&self, py: Python<'_>, tag: &str, n: usize) -> PyResult<Vec<i64>> {
        // The interruptible wait (Ctrl-C works) as `next_id`; the core takes the ids at
        // hand at call time, so a batch whose ids are there costs no runtime trip.
        wait(py, self.inner.next_ids_async(tag, n))
    }

    /// ``next_id`` that waits on the core's runtime, never on the loop's thread.
    fn next_id_async<'py>(&self, py: Python<'py>, tag: &str) -> PyResult<Bound<'py, PyAny>> {
        at_hand_or(
            py,
            || self.inner.next_id_at_hand(tag),
            || self.inner.next_id_async(tag),
        )
    }

    /// ``next_ids`` that waits on the core's runtime, never on the loop's thread.
    fn next_ids_async<'py>(
        &self,
        py: Python<'py>,
        tag: &str,
        n: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        at_hand_or(
            py,
            || self.inner.next_ids_at_hand(tag, n),
            || self.inner.next_ids_async(tag, n),
        )
    }

    /// A handle on ``tag``: the fast way to issue its ids. Raises ``TagNotFound``
    /// when the store does not have it.
    fn tag(&self, py: Python<'_>, tag: &str) -> PyResult<PyTagHandle> {
        // A tag not in the cache is looked up in the store (bounded by `wait_timeout`):
        // never with the GIL held.
        Ok(PyTagHandle {
            inner: crate::exit::detach(py, || self.inner.tag(tag)).py()?,
        })
    }

    /// The tags known at the last refresh.
    fn tags(&self) -> Vec<String> {
        self.inner.tags()
    }

    /// Adds ``tag`` to the table, its first id ``start``; raises ``TagExists`` if it
    /// is there already, unless ``exist_ok`` (then the existing row is kept as it is).
    #[pyo3(signature = (tag, start=1, step=1000, description="", *, exist_ok=false))]
    fn create_tag(
        &self,
        py: Python<'_>,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
        exist_ok: bool,
    ) -> PyResult<()> {
        wait(
            py,
            self.create_tag_future(tag, start, step, description, exist_ok),
        )
    }

    /// ``create_tag`` as an awaitable.
    #[pyo3(signature = (tag, start=1, step=1000, description="", *, exist_ok=false))]
    fn create_tag_async<'py>(
        &self,
        py: Python<'py>,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
        exist_ok: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaitable(
            py,
            self.create_tag_future(tag, start, step, description, exist_ok),
        )
    }

    /// Creates the ``leaf_alloc`` table (Leaf's schema) if it does not exist.
    fn create_table(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.inner.clone();
        wait(py, async move { g.create_table().await })
    }

    /// ``create_table`` as an awaitable.
    fn create_table_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.inner.clone();
        awaitable(py, async move { g.create_table().await })
    }

    /// Reloads the tag list from the store now (it is also reloaded every
    /// ``refresh_interval`` seconds).
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.inner.clone();
        wait(py, async move { g.refresh().await })
    }

    /// ``refresh`` as an awaitable.
    fn refresh_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.inner.clone();
        awaitable(py, async move { g.refresh().await })
    }

    /// The state of every tag this generator has loaded, as Leaf's ``/cache`` page
    /// shows it. Never waits on I/O.
    fn stats(&self) -> Vec<PyTagStats> {
        self.inner
            .stats()
            .into_iter()
            .map(PyTagStats::from)
            .collect()
    }

    /// Stops issuing: later calls raise ``Closed``. Does no I/O.
    fn close(&self, py: Python<'_>) {
        crate::exit::detach(py, || self.inner.close());
    }

    /// ``close()`` as an awaitable (closing a segment generator does no I/O).
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.inner.clone();
        awaitable(py, async move {
            g.close();
            Ok(())
        })
    }

    /// ``with gen:`` gives the generator itself.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the generator at the end of a ``with`` block.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// ``async with gen:`` gives the generator itself.
    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::ready(slf.py(), slf.clone().into_any().unbind())
    }

    /// Closes the generator at the end of an ``async with`` block (``aclose()``).
    #[pyo3(signature = (*_exc))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.aclose(py)
    }
}

impl PySegmentGenerator {
    fn create_tag_future(
        &self,
        tag: &str,
        start: i64,
        step: i64,
        description: &str,
        exist_ok: bool,
    ) -> impl std::future::Future<Output = leafid::Result<()>> + Send + 'static {
        let (g, tag, description) = (self.inner.clone(), tag.to_string(), description.to_string());
        async move {
            if exist_ok {
                g.ensure_tag(&tag, start, step, &description)
                    .await
                    .map(drop)
            } else {
                g.create_tag(&tag, start, step, &description).await
            }
        }
    }
}

/// The fast way to issue ids for one tag (``SegmentGenerator.tag``); also an endless
/// iterator.
#[pyclass(name = "TagHandle", module = "leafid", frozen)]
pub struct PyTagHandle {
    inner: TagHandle,
}

#[pymethods]
impl PyTagHandle {
    /// The tag.
    #[getter]
    fn tag(&self) -> &str {
        self.inner.tag()
    }

    /// The next id; when none is at hand, waits up to ``wait_timeout`` with the GIL
    /// released (Ctrl-C interrupts).
    fn next_id(&self, py: Python<'_>) -> PyResult<i64> {
        if let Some(id) = self.inner.try_next_id() {
            return Ok(id);
        }
        // The core takes at call time when it can, and waits only when that may help.
        wait(py, self.inner.next_id_async())
    }

    /// ``n`` ids, ascending; waits as ``next_id`` does.
    fn next_ids(&self, py: Python<'_>, n: usize) -> PyResult<Vec<i64>> {
        // As `SegmentGenerator.next_ids`.
        wait(py, self.inner.next_ids_async(n))
    }

    /// ``n`` ids as an ``array.array('q')``: no Python int per id, for bulk work.
    fn next_ids_array<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyAny>> {
        let ids = self.next_ids(py, n)?;
        crate::ints::int64_array(py, &ids)
    }

    /// ``next_id`` that waits (up to ``wait_timeout``) on the core's runtime, never on
    /// the event loop's thread.
    fn next_id_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        at_hand_or(
            py,
            || self.inner.next_id_at_hand(),
            || self.inner.next_id_async(),
        )
    }

    /// ``next_ids`` that waits on the core's runtime, never on the loop's thread.
    fn next_ids_async<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyAny>> {
        at_hand_or(
            py,
            || self.inner.next_ids_at_hand(n),
            || self.inner.next_ids_async(n),
        )
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<i64> {
        self.next_id(py)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        crate::py_repr(slf.as_any(), &["tag"])
    }
}

/// One tag's state, as Leaf's /cache page shows it, plus refill figures.
#[pyclass(name = "TagStats", module = "leafid", frozen, get_all)]
pub struct PyTagStats {
    /// The tag.
    tag: String,
    /// Whether its first segment was loaded.
    initialized: bool,
    /// Index (0 or 1) of the current segment in ``segments``.
    current: usize,
    /// Whether the next segment is loaded and waiting.
    next_ready: bool,
    /// ``(value, max, step)`` of both segments.
    segments: Vec<(i64, i64, i64)>,
    /// The step of the latest load (dynamic).
    step: i64,
    /// The table's step (the floor of the dynamic step).
    min_step: i64,
    /// Successful loads so far.
    refills: u64,
    /// Seconds the latest refill took.
    last_refill: Option<f64>,
    /// The latest load's error, cleared by the next success.
    last_error: Option<String>,
}

/// Every field, in declaration order, for the repr.
const TAG_STATS_FIELDS: [&str; 10] = [
    "tag",
    "initialized",
    "current",
    "next_ready",
    "segments",
    "step",
    "min_step",
    "refills",
    "last_refill",
    "last_error",
];

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
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        crate::py_repr(slf.as_any(), &TAG_STATS_FIELDS)
    }
}

/// The `tags=` keyword: any iterable of strings, read item by item up to the core's
/// limit (a conversion to `Vec` would reserve whatever length the object claims:
/// `__len__` returning 2**40 aborted the process).
fn tag_list(tags: Option<Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(tags) = tags else {
        return Ok(Vec::new());
    };
    if tags.is_instance_of::<pyo3::types::PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "tags must be a list of tag names, not a string",
        ));
    }
    let mut out = Vec::new();
    for item in tags.try_iter()? {
        leafid::limits::tag_count(out.len() as u64 + 1).py()?;
        out.push(item?.extract::<String>()?);
    }
    Ok(out)
}
