//! The core's `tracing` events → Python's `logging`, logger `leafid`.
//!
//! Events are queued and logged by one forwarding thread: a core thread never waits for
//! the GIL (it may hold a lock a Python thread is waiting on). The queue is bounded;
//! when full, events are dropped rather than slowing the core.

use std::fmt::Write as _;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

type Record = (u8, String, String);

// No mutex below: a fork() can land while any other thread holds one, and the child's
// copy would stay locked forever (the child's first log event, or its exit, would hang).

/// This process's queue, tagged with the fork epoch it was made in; replaced in a
/// forked child, whose forwarding thread did not come along.
static QUEUE: ArcSwapOption<(u64, SyncSender<Record>)> = ArcSwapOption::const_empty();

fn sender() -> SyncSender<Record> {
    let epoch = leafid::runtime::fork_epoch();
    loop {
        let current = QUEUE.load_full();
        if let Some(q) = current.as_deref().filter(|q| q.0 == epoch) {
            return q.1.clone();
        }
        let (tx, rx) = sync_channel::<Record>(4096);
        let fresh = Arc::new((epoch, tx.clone()));
        let previous = QUEUE.compare_and_swap(&current, Some(fresh));
        if !same(&previous, &current) {
            continue; // another thread made this epoch's queue first
        }
        std::thread::Builder::new()
            .name("leafid-log".into())
            // One Python thread state for the thread's whole life. Attaching per record
            // would create and delete one each time, which takes CPython's runtime lock
            // without the GIL; a fork() landing in that moment leaves the child's copy
            // of the lock held forever (CPython 3.11 then hangs in PyOS_AfterFork_Child).
            .spawn(move || {
                // Counted while it attaches, so the exit hook waits for it.
                let Some(attaching) = crate::exit::enter() else {
                    return rx.into_iter().for_each(drop); // too late to enter Python
                };
                Python::attach(|py| {
                    py.detach(|| {
                        drop(attaching);
                        forward(rx)
                    })
                })
            })
            .expect("leafid: cannot start the logging thread");
        return tx;
    }
}

fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Logs each queued record. Never returns while the process lives (the sender stays in
/// `QUEUE`): leaving would release the thread state, which needs the GIL, possibly
/// after the interpreter finalized.
fn forward(rx: Receiver<Record>) {
    for (level, target, message) in rx {
        // Counted while in Python, so the exit hook waits for the record in flight; once
        // the interpreter is exiting, nothing enters Python again.
        if let Some(_in_python) = crate::exit::enter() {
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
    }
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
