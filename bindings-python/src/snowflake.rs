//! `leafid.Layout`, `leafid.SnowflakeGenerator`, `leafid._leafid.decode`: wrap
//! `leafid::snowflake`.

use std::mem::ManuallyDrop;

use leafid::snowflake::{
    Layout, SnowflakeBuilder, SnowflakeGenerator, DEFAULT_CLOSE_WAIT, LEAF_EPOCH_MS,
};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::aio::{at_hand_or, awaitable, connecting, wait};
use crate::error::IntoPy;
use crate::ints::{int64_array, IntList};

/// How the 63 bits of a snowflake id are split, and the epoch (default: Leaf's,
/// ``LEAF_EPOCH_MS``). Bits must sum to 63, or to 53 for ids below 2^53; raises
/// ``InvalidConfig``.
#[pyclass(name = "Layout", module = "leafid", frozen)]
#[derive(Clone)]
pub struct PyLayout {
    inner: Layout,
}

#[pymethods]
impl PyLayout {
    #[new]
    // Written out: the generated one would show `epoch_ms=...` for the constant.
    #[pyo3(signature = (timestamp_bits=41, worker_bits=10, sequence_bits=12, epoch_ms=LEAF_EPOCH_MS),
           text_signature = "(timestamp_bits=41, worker_bits=10, sequence_bits=12, epoch_ms=1288834974657)")]
    fn new(
        timestamp_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        epoch_ms: i64,
    ) -> PyResult<Self> {
        Ok(PyLayout {
            inner: Layout::new(timestamp_bits, worker_bits, sequence_bits, epoch_ms).py()?,
        })
    }

    /// Ids below 2^53 (exact in a JavaScript number): 41 timestamp bits (until
    /// 2080-07-10), 3 worker bits (ids 0..7), 9 sequence bits (512 ids per ms per
    /// worker), Leaf's epoch.
    #[staticmethod]
    fn js_safe() -> Self {
        PyLayout {
            inner: Layout::js_safe(),
        }
    }

    /// The largest id the layout can produce (2^63 - 1, or 2^53 - 1 for ``js_safe``).
    #[getter]
    fn max_id(&self) -> i64 {
        self.inner.max_id()
    }

    /// Bits of the timestamp (ms since ``epoch_ms``).
    #[getter]
    fn timestamp_bits(&self) -> u8 {
        self.inner.timestamp_bits()
    }
    /// Bits of the worker id.
    #[getter]
    fn worker_bits(&self) -> u8 {
        self.inner.worker_bits()
    }
    /// Bits of the sequence within a millisecond.
    #[getter]
    fn sequence_bits(&self) -> u8 {
        self.inner.sequence_bits()
    }
    /// The epoch, in ms since the Unix epoch.
    #[getter]
    fn epoch_ms(&self) -> i64 {
        self.inner.epoch_ms()
    }
    /// The largest worker id the layout holds.
    #[getter]
    fn max_worker_id(&self) -> u32 {
        self.inner.max_worker_id()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        crate::py_repr(
            slf.as_any(),
            &["timestamp_bits", "worker_bits", "sequence_bits", "epoch_ms"],
        )
    }

    fn __eq__(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

/// Issues snowflake ids with a worker id from a registry: ``fixed:7``,
/// ``local:///dir``, ``zookeeper://host:port/name?port=P``,
/// ``zookeeper-recycle://host:port/name``, ``mysql://user:pass@host/db?port=P``.
///
/// Acquires a worker id from ``registry``. Durations are in seconds:
/// ``heartbeat`` (how often the time bound is persisted), ``lookahead`` (how far
/// ahead of the clock each persisted bound reaches: ids keep coming through a
/// registry outage this long, less at most one heartbeat; ``None``: the core's
/// default, 65 s), ``max_backward`` (largest backward clock step waited out),
/// ``startup_wait`` (how far the clock may be behind the worker's recorded floor
/// beyond ``lookahead`` and ``max_skew`` before start-up raises
/// ``ClockBehindRegistry``; start-up never waits for the clock: ids start above the
/// floor at once), ``max_skew`` (largest difference allowed between the local clock
/// and the registry's clock; ``None``: the core's default, 5 s; ``fixed:`` and
/// ``local:`` have no clock to compare with). Ranges are the core's
/// (``SnowflakeBuilder``); a value outside raises ``InvalidConfig``.
///
/// Raises ``WorkerIdInUse`` when the identity's worker id has another live holder
/// and the registry cannot give a distinct one, ``ClockSkew`` beyond ``max_skew``,
/// ``InvalidUrl`` before any I/O for an identity Java Leaf cannot read (a ``-`` in
/// ``ip``, ``port`` or a ``zookeeper://`` name).
#[pyclass(name = "SnowflakeGenerator", module = "leafid", frozen)]
pub struct PySnowflakeGenerator {
    // Taken out in `drop`, which releases the GIL while the core lets go.
    inner: ManuallyDrop<SnowflakeGenerator>,
}

impl PySnowflakeGenerator {
    fn new_from(inner: SnowflakeGenerator) -> Self {
        PySnowflakeGenerator {
            inner: ManuallyDrop::new(inner),
        }
    }
}

impl Drop for PySnowflakeGenerator {
    /// Garbage collection never waits with the GIL held: the core's drop lets go of the
    /// registry in the background, and even its bookkeeping runs with the GIL released.
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and never used again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        if !crate::exit::exiting() {
            // Python's dealloc runs attached (then this is free); the core's drop runs
            // detached.
            Python::attach(|py| crate::exit::detach(py, move || drop(inner)));
        } else {
            drop(inner); // the interpreter is exiting: no GIL to take
        }
    }
}

/// The constructor's keyword arguments → the core's builder (shared by `__new__` and
/// `connect`, whose signatures are the same).
// One argument per keyword argument, as the signatures it serves.
#[allow(clippy::too_many_arguments)]
fn builder(
    registry: &str,
    layout: Option<PyRef<'_, PyLayout>>,
    cache_dir: Option<std::path::PathBuf>,
    heartbeat: f64,
    lookahead: Option<f64>,
    max_backward: f64,
    startup_wait: f64,
    max_skew: Option<f64>,
) -> PyResult<SnowflakeBuilder> {
    let mut builder = SnowflakeGenerator::builder()
        .registry_url(registry)
        .py()?
        .heartbeat(crate::seconds("heartbeat", heartbeat)?)
        .max_backward(crate::seconds("max_backward", max_backward)?)
        .startup_wait(crate::seconds("startup_wait", startup_wait)?);
    // None keeps the core's defaults (`leafid::snowflake::DEFAULT_LOOKAHEAD`,
    // `DEFAULT_MAX_SKEW`).
    if let Some(s) = lookahead {
        builder = builder.lookahead(crate::seconds("lookahead", s)?);
    }
    if let Some(s) = max_skew {
        builder = builder.max_skew(crate::seconds("max_skew", s)?);
    }
    if let Some(layout) = layout {
        builder = builder.layout(layout.inner);
    }
    if let Some(dir) = cache_dir {
        builder = builder.cache_dir(dir);
    }
    Ok(builder)
}

/// Most ids taken per chunk of a batch: 64 KB of buffer, reused for the whole batch,
/// so a batch costs no buffer the size of the batch (see `ints.rs`).
const CHUNK_IDS: usize = 8192;

impl PySnowflakeGenerator {
    /// Takes `n` ids (`n` checked against the batch limit) in order, handing each chunk
    /// to `sink`. A big batch waits out many milliseconds (the sequence runs out each
    /// one): taken with the core's `fill_paced` (spent milliseconds slept out, never a
    /// spin, never I/O) with the GIL released, in chunks of at most the core's
    /// never-waiting batch (`max_sync_batch`, a few ms of sequence) and 8192 ids,
    /// checking for Ctrl-C between them. Not through the runtime: its two workers serve
    /// refills and heartbeats. A registry stall (a late heartbeat, a forked child's new
    /// worker id) is waited for through the interruptible path, as in `next_id`.
    fn take(
        &self,
        py: Python<'_>,
        n: usize,
        mut sink: impl FnMut(&[i64]) -> PyResult<()>,
    ) -> PyResult<()> {
        let chunk = self.inner.max_sync_batch().clamp(1, CHUNK_IDS);
        let mut buf = vec![0i64; chunk.min(n)];
        let mut taken = 0;
        while taken < n {
            let k = chunk.min(n - taken);
            // On an error the ids already written are dropped (skipped, never reissued),
            // as `next_ids_now` drops them, and the waiting call takes `k` afresh.
            match crate::exit::detach(py, || self.inner.fill_paced(&mut buf[..k])) {
                Ok(()) => sink(&buf[..k])?,
                Err(_) => sink(&wait(py, self.inner.next_ids_async(k))?)?,
            }
            taken += k;
            py.check_signals()?;
        }
        Ok(())
    }
}

#[pymethods]
impl PySnowflakeGenerator {
    #[new]
    #[pyo3(signature = (registry, *, layout=None, cache_dir=None, heartbeat=3.0, lookahead=None, max_backward=0.005, startup_wait=10.0, max_skew=None))]
    // Python keyword arguments, one per option: the signature is the API.
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        registry: &str,
        layout: Option<PyRef<'_, PyLayout>>,
        cache_dir: Option<std::path::PathBuf>,
        heartbeat: f64,
        lookahead: Option<f64>,
        max_backward: f64,
        startup_wait: f64,
        max_skew: Option<f64>,
    ) -> PyResult<Self> {
        let b = builder(
            registry,
            layout,
            cache_dir,
            heartbeat,
            lookahead,
            max_backward,
            startup_wait,
            max_skew,
        )?;
        let inner = wait(py, b.build())?;
        Ok(Self::new_from(inner))
    }

    /// The constructor as a coroutine: the registry's I/O runs on the core's runtime
    /// and the event loop goes on meanwhile. ``sf = await SnowflakeGenerator.connect(r)``,
    /// or ``async with SnowflakeGenerator.connect(r) as sf:`` (closed at the block's end).
    #[staticmethod]
    #[pyo3(signature = (registry, *, layout=None, cache_dir=None, heartbeat=3.0, lookahead=None, max_backward=0.005, startup_wait=10.0, max_skew=None))]
    #[allow(clippy::too_many_arguments)]
    fn connect<'py>(
        py: Python<'py>,
        registry: &str,
        layout: Option<PyRef<'_, PyLayout>>,
        cache_dir: Option<std::path::PathBuf>,
        heartbeat: f64,
        lookahead: Option<f64>,
        max_backward: f64,
        startup_wait: f64,
        max_skew: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let b = builder(
            registry,
            layout,
            cache_dir,
            heartbeat,
            lookahead,
            max_backward,
            startup_wait,
            max_skew,
        )?;
        connecting(py, async move { b.build().await.map(Self::new_from) })
    }

    /// The next id, greater than every id this generator issued before. Raises
    /// ``ClockMovedBackwards``, ``LeaseLost`` when the registry took the worker id away,
    /// ``ClockSkew`` when a heartbeat found the clocks more than ``max_skew`` apart
    /// (issuing resumes once they agree), ``Closed`` after ``close()``. A registry out of
    /// reach for less than ``lookahead`` is not needed: ids keep coming from memory; past
    /// it the call waits up to 10 s (the core's ``MAX_ASYNC_WAIT``) for a bound to be
    /// persisted, then raises ``RegistryUnavailable``.
    // The GIL is released only on the slow path (`try_next_id` gave `None`): a call
    // may wait for the next millisecond, wait out a small clock step, or (first call in
    // a forked child, after a lost lease) acquire a worker id from the registry; that
    // wait is interruptible (Ctrl-C).
    fn next_id(&self, py: Python<'_>) -> PyResult<i64> {
        match self.inner.try_next_id() {
            Some(id) => Ok(id),
            None => wait(py, self.inner.next_id_async()),
        }
    }

    /// ``n`` ids (at most 2**20), ascending; Ctrl-C interrupts a big batch within a
    /// few milliseconds. A batch takes at most three quarters of each millisecond's
    /// sequence (the rest is kept for single ids), so 2**20 ids take about 370 ms in
    /// Leaf's layout. The GIL is released while the sequence paces the batch (taken in
    /// chunks of at most 8192 ids and 8 ms of sequence, each spent millisecond slept
    /// out, not spun: the thread waits without using a CPU), so other threads run
    /// meanwhile: unlike Node's synchronous ``nextIds``, this call has no lower limit.
    fn next_ids<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        let n = leafid::limits::batch(n as u64).py()?;
        let mut list = IntList::new(py, n)?;
        self.take(py, n, |ids| list.extend(ids))?;
        list.finish()
    }

    /// ``n`` ids as an ``array.array('q')``: no Python int per id, for bulk work.
    fn next_ids_array<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyAny>> {
        let n = leafid::limits::batch(n as u64).py()?;
        let mut ids = Vec::with_capacity(n);
        self.take(py, n, |chunk| {
            ids.extend_from_slice(chunk);
            Ok(())
        })?;
        int64_array(py, &ids)
    }

    /// ``next_id`` that waits on the core's runtime, never on the loop's thread.
    fn next_id_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        at_hand_or(
            py,
            || self.inner.try_next_id(),
            || self.inner.next_id_async(),
        )
    }

    /// ``next_ids`` that waits on the core's runtime, never on the loop's thread.
    fn next_ids_async<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.inner.next_ids_async(n))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<i64> {
        self.next_id(py)
    }

    /// The worker id this generator holds.
    #[getter]
    fn worker_id(&self) -> u32 {
        self.inner.worker_id()
    }

    /// The layout of its ids.
    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout {
            inner: *self.inner.layout(),
        }
    }

    /// Stops issuing and releases the worker id, waiting at most ``timeout``
    /// seconds (``None``: 3 s, the core's ``DEFAULT_CLOSE_WAIT``) for the registry.
    /// ``True`` when it was released in time; after the timeout the release goes on in
    /// the background and, if the registry stays unreachable, the lease expires on its
    /// side. Later calls raise ``Closed``. Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let within = match timeout {
            Some(t) => crate::seconds("timeout", t)?,
            None => DEFAULT_CLOSE_WAIT,
        };
        // Not through `wait`: the core's close waits in place only off its runtime's
        // threads. The wait is bounded by `within` and does not hold the GIL.
        Ok(crate::exit::detach(py, || self.inner.close_within(within)))
    }

    /// ``close()`` as an awaitable, with the default wait; resolves to ``True`` when
    /// the worker id was released in time.
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let closing = self.inner.close_async();
        awaitable(py, async move { Ok(closing.await) })
    }

    /// ``with sf:`` gives the generator itself.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the generator (``close()``) at the end of a ``with`` block.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py, None)?;
        Ok(false)
    }

    /// ``async with sf:`` gives the generator itself.
    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::ready(slf.py(), slf.clone().into_any().unbind())
    }

    /// Closes the generator (``aclose()``) at the end of an ``async with`` block.
    #[pyo3(signature = (*_exc))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let closing = self.inner.close_async();
        // Resolves to None: a truthy value would swallow the block's exception.
        awaitable(py, async move {
            closing.await;
            Ok(())
        })
    }
}

/// `(timestamp_ms, worker_id, sequence)` of an id; `leafid.decode` names the fields.
#[pyfunction]
#[pyo3(signature = (id, layout=None))]
pub fn decode(id: i64, layout: Option<PyRef<'_, PyLayout>>) -> PyResult<(i64, u32, u32)> {
    let layout = layout.map(|l| l.inner).unwrap_or_default();
    let d = layout.checked_decode(id).py()?;
    Ok((d.timestamp_ms, d.worker_id, d.sequence))
}
