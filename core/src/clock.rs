//! Where time comes from.
//!
//! Generators read milliseconds since the Unix epoch through [`Clock`], so tests move a
//! [`ManualClock`] instead of sleeping, and faults such as a clock stepping back can be
//! played exactly.
//!
//! ```
//! use leafid::{Clock, ManualClock};
//! let clock = ManualClock::new(1_000);
//! clock.advance(5);
//! assert_eq!(clock.now_millis(), 1_005);
//! ```

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time in milliseconds since 1970-01-01T00:00:00Z.
    fn now_millis(&self) -> i64;

    /// Waits until about `ms` milliseconds have passed on this clock. The system clock
    /// sleeps; the manual clock advances itself so tests never block.
    fn sleep_millis(&self, ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The operating system's real-time clock (`clock_gettime` through the vDSO: no syscall).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now_millis(&self) -> i64 {
        // A clock before 1970 is a broken host; report 0 and let the epoch checks refuse it.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to, for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
    /// Whether `sleep_millis` moves this clock (true) or really sleeps (false).
    auto_advance: bool,
}

impl ManualClock {
    /// A clock standing at `now_ms`. `sleep_millis` advances it by the time slept.
    pub fn new(now_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: AtomicI64::new(now_ms),
            auto_advance: true,
        })
    }

    /// A clock standing at `now_ms` whose `sleep_millis` really sleeps and leaves the
    /// clock where it is (to test code that must give up when time does not move).
    pub fn frozen(now_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: AtomicI64::new(now_ms),
            auto_advance: false,
        })
    }

    /// Sets the time (backwards too).
    pub fn set(&self, now_ms: i64) {
        // Relaxed: the clock is a single value; readers need no other memory from the writer.
        self.now.store(now_ms, Ordering::Relaxed);
    }

    /// Moves the time by `delta_ms` (negative steps back).
    pub fn advance(&self, delta_ms: i64) {
        self.now.fetch_add(delta_ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.now.load(Ordering::Relaxed)
    }

    fn sleep_millis(&self, ms: u64) {
        if self.auto_advance {
            self.advance(ms as i64);
        } else {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
}

/// The clock used when none is given.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}
