//! Core futures → Python: awaitables on the caller's asyncio loop, and interruptible
//! blocking waits for the synchronous API.
//!
//! Hand-written rather than `pyo3-async-runtimes`: no release of it for pyo3 0.30 is
//! available here, and the job is small. The core future runs on the core's runtime
//! (never on the loop thread); when it completes, a blocking-pool thread briefly takes
//! the GIL and hands the outcome to the loop with `call_soon_threadsafe` (see
//! `leafid/_aio.py`). The runtime's worker threads never wait for the GIL. An id the
//! core has in memory skips all that ([`at_hand_or`]): the future is done on return
//! (or, every 64th in a row, set by the loop's next turn so the loop is not starved).

use std::future::Future;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::BoundObject;

use crate::error::IntoPy;

static GLUE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn glue(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    GLUE.get_or_try_init(py, || {
        PyModule::import(py, "leafid._aio").map(Bound::unbind)
    })
    .map(|m| m.bind(py))
}

/// An `asyncio.Future` on the running loop that `fut`'s outcome settles. Raises
/// `RuntimeError` when no loop is running. Cancelling the Python future drops the core
/// future: snowflake issuing stops there (the core aborts its task on the runtime,
/// `runtime::run_cancellable`); a segment wait runs out on the runtime, bounded by
/// `wait_timeout`, its ids dropped (the core does not stop it halfway, see `runtime::run`).
pub fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leafid::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    settled_by(py, "new_future", fut)
}

/// [`awaitable`] for `connect`: the future is a `leafid._aio.Connecting`, also an async
/// context manager, so `async with X.connect(…) as gen:` needs no second `await`.
pub fn connecting<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leafid::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    settled_by(py, "new_connecting", fut)
}

/// [`awaitable`], already done when `at_hand` gives the value without waiting (an id
/// the core has in memory): no task, no thread and no trip through the loop's queue,
/// so an `await` of it costs what an `await` of any done future does; every
/// `AT_HAND_STREAK`-th per thread is instead set by the loop's next turn, so that a
/// loop of such `await`s still lets the event loop run. Otherwise the value comes from
/// `later()`, as from [`awaitable`]. `at_hand` runs once the future
/// is made, so a call refused (no running loop, the interpreter exiting) takes no id.
pub fn at_hand_or<'py, F, T>(
    py: Python<'py>,
    at_hand: impl FnOnce() -> Option<T>,
    later: impl FnOnce() -> F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leafid::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    // Counted as in `settled_by`: making the future and setting its result run Python
    // code (on the caller's thread, which holds the GIL, but the rules are the same).
    let Some(_in_python) = crate::exit::enter() else {
        return Err(exiting_error());
    };
    let (event_loop, future) = made(py, "new_future")?;
    match at_hand() {
        Some(value) if !yield_this_time() => {
            future.call_method1(pyo3::intern!(py, "set_result"), (value,))?;
            Ok(future)
        }
        // An `await` of a done future never gives the loop a turn, so a loop of them
        // would starve its timers, other tasks and cancellation: every
        // `AT_HAND_STREAK`-th is settled by the loop's next turn instead (no thread).
        Some(value) => {
            glue(py)?.call_method1(
                pyo3::intern!(py, "settle_soon"),
                (event_loop, &future, value),
            )?;
            Ok(future)
        }
        None => settle_later(event_loop, future, later()),
    }
}

/// How many at-hand results in a row a thread's async calls return already done before
/// one is settled through the event loop's queue (letting the loop run): 1 in 64 costs
/// about a loop turn (~20 µs) amortized to well under a microsecond per id.
const AT_HAND_STREAK: u32 = 64;

thread_local! {
    /// At-hand results this thread returned done since its last one through the loop.
    /// Per thread, as a running loop is; a count shared by several loops only makes
    /// one of them yield a little early.
    static AT_HAND_RUN: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this at-hand result goes through the loop (every `AT_HAND_STREAK`-th).
fn yield_this_time() -> bool {
    AT_HAND_RUN.with(|run| {
        let n = run.get() + 1;
        run.set(if n >= AT_HAND_STREAK { 0 } else { n });
        n >= AT_HAND_STREAK
    })
}

/// A future made by `leafid._aio.<factory>()` that `fut`'s outcome settles.
fn settled_by<'py, F, T>(py: Python<'py>, factory: &str, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leafid::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    // Making the future runs Python code (the loop's `create_future`): counted, so that
    // a daemon thread is never inside this frame when the interpreter finalizes.
    let Some(_in_python) = crate::exit::enter() else {
        return Err(exiting_error());
    };
    let (event_loop, future) = made(py, factory)?;
    settle_later(event_loop, future, fut)
}

/// The running loop and a future on it, from `leafid._aio.<factory>()`. Call it counted
/// ([`crate::exit::enter`]).
fn made<'py>(py: Python<'py>, factory: &str) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    glue(py)?.call_method0(factory)?.extract()
}

/// Runs `fut` on the core's runtime and settles `future` (on `event_loop`) with its
/// outcome; cancelling `future` aborts the task. Call it counted ([`crate::exit::enter`]):
/// it runs Python code (`add_done_callback`).
fn settle_later<'py, F, T>(
    event_loop: Bound<'py, PyAny>,
    future: Bound<'py, PyAny>,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leafid::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let (event_loop, target) = (event_loop.unbind(), future.clone().unbind());
    let task = leafid::runtime::spawn(async move {
        let outcome = fut.await;
        // Taking the GIL may wait: on a blocking-pool thread, never a runtime worker.
        leafid::runtime::handle().spawn_blocking(move || settle(event_loop, target, outcome));
    });
    let cancel = Cancel(Box::new(move || task.abort()));
    future.call_method1("add_done_callback", (cancel,))?;
    Ok(future)
}

/// Hands `outcome` to the loop that owns `future` (nothing once the interpreter exits).
fn settle<T>(event_loop: Py<PyAny>, future: Py<PyAny>, outcome: leafid::Result<T>)
where
    T: for<'a> IntoPyObject<'a>,
{
    // Counted, with the flag checked after: either the exit hook waits for this
    // settle, or this sees the flag and never takes the GIL (taking it while the
    // interpreter finalizes aborts the process).
    let Some(_in_python) = crate::exit::enter() else {
        // Dropping them without the GIL would queue their release for whichever thread
        // takes it next; the process is ending, so they are left as they are.
        std::mem::forget((event_loop, future));
        return;
    };
    Python::attach(|py| {
        let (value, error) = match outcome {
            Ok(v) => match v.into_pyobject(py) {
                Ok(v) => (v.into_any().unbind(), py.None()),
                Err(e) => (py.None(), Into::<PyErr>::into(e).into_value(py).into_any()),
            },
            Err(e) => (py.None(), crate::error::to_py(e).into_value(py).into_any()),
        };
        let settled =
            glue(py).and_then(|g| g.call_method1("settle", (event_loop, future, value, error)));
        if let Err(e) = settled {
            e.print(py);
        }
    });
}

/// The done-callback of an awaitable: aborts its core task (a no-op once it finished),
/// which drops the core future (see [`awaitable`] for what that stops).
#[pyclass(frozen)]
struct Cancel(Box<dyn Fn() + Send + Sync>);

#[pymethods]
impl Cancel {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        (self.0)()
    }
}

/// An awaitable that is already done with `value` (`__aenter__`).
pub fn ready<'py>(py: Python<'py>, value: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let Some(_in_python) = crate::exit::enter() else {
        return Err(exiting_error());
    };
    glue(py)?.call_method1("ready", (value,))
}

/// What an async call started after `atexit` began raises: nothing would await it.
fn exiting_error() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(
        "leafid: the interpreter is exiting; no new async call starts",
    )
}

/// Waits for `fut` on the core's runtime with the GIL released, checking for signals
/// every few tens of milliseconds: Ctrl-C raises `KeyboardInterrupt` (and cancels the
/// core future) instead of waiting for the core to give up.
pub fn wait<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = leafid::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    crate::exit::detach(py, || {
        leafid::runtime::block_on_checked(fut, || {
            // Counted until detached again, or never attached once exiting.
            let _coming_back = crate::exit::enter_or_park();
            Python::attach(|py| py.check_signals())
        })
    })?
    .py()
}
