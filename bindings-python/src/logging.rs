//! The core's `tracing` events → Python's `logging`, logger `leafid`.
//!
//! Events are queued and logged by one forwarding thread: a core thread never waits for
//! the GIL (it may hold a lock a Python thread is waiting on). The queue is bounded;
//! when full, events are dropped rather than slowing the core.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Mutex;

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

type Record = (u8, String, String);

/// Set by `shutdown` (an `atexit` hook): from then on nothing is forwarded, because
/// taking the GIL while the interpreter finalizes aborts the process.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// Held by the forwarding thread while it is inside Python.
static FORWARDING: Mutex<()> = Mutex::new(());

/// The sender of this process; rebuilt in a forked child, whose forwarding thread did
/// not come along.
static QUEUE: Mutex<Option<(u64, SyncSender<Record>)>> = Mutex::new(None);

fn sender() -> SyncSender<Record> {
    let epoch = leafid::runtime::fork_epoch();
    let mut guard = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((e, tx)) = guard.as_ref() {
        if *e == epoch {
            return tx.clone();
        }
    }
    let (tx, rx) = sync_channel::<Record>(4096);
    std::thread::Builder::new()
        .name("leafid-log".into())
        .spawn(move || {
            for (level, target, message) in rx {
                let _inside = FORWARDING.lock().unwrap_or_else(|p| p.into_inner());
                if SHUTDOWN.load(Ordering::Acquire) {
                    return;
                }
                Python::attach(|py| {
                    let logged = PyModule::import(py, "logging")
                        .and_then(|logging| logging.call_method1("getLogger", ("leafid",)))
                        .and_then(|logger| {
                            logger.call_method1("log", (level, format!("{message} [{target}]")))
                        });
                    if let Err(e) = logged {
                        e.print(py);
                    }
                });
            }
        })
        .expect("leafid: cannot start the logging thread");
    *guard = Some((epoch, tx.clone()));
    tx
}

struct Forward;

#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for Forward {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        // leafid's own events only: the database drivers log every statement.
        metadata.target().starts_with("leafid")
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = match *event.metadata().level() {
            Level::ERROR => 40,
            Level::WARN => 30,
            Level::INFO => 20,
            Level::DEBUG => 10,
            Level::TRACE => 5,
        };
        let mut message = Message::default();
        event.record(&mut message);
        let record = (level, event.metadata().target().to_string(), message.0);
        if let Err(TrySendError::Disconnected(_)) = sender().try_send(record) {
            // The forwarding thread is gone (interpreter shutting down): drop the event.
        }
    }
}

/// Makes the forwarder the process's tracing subscriber, unless one is set already
/// (a host application's own).
pub fn install() {
    let subscriber = tracing_subscriber::registry().with(Forward);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Stops forwarding before the interpreter finalizes; registered with `atexit` by
/// `leafid/__init__.py`.
#[pyfunction]
pub fn _shutdown_logging(py: Python<'_>) {
    SHUTDOWN.store(true, Ordering::Release);
    // Wait (without the GIL, which the forwarder may need to finish) for a record in
    // flight.
    py.detach(|| drop(FORWARDING.lock().unwrap_or_else(|p| p.into_inner())));
}
