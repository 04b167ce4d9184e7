//! A warning for a problem that lasts, not for each event of it.
//!
//! The logging rule: one line per refusal at debug level, one warning per *sustained* problem,
//! never one per message. A [`Sustained`] sits in a `static` next to a call site that would otherwise
//! warn per event; the first event logs at once, then at most one line per interval says how many
//! events the silence stood for. An event costs a `try_lock` and, when suppressed, one atomic add; it
//! never waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Rate-limits one warning. `const`-constructible, so it can be a `static`.
pub struct Sustained {
    interval: Duration,
    /// Events since the last line.
    suppressed: AtomicU64,
    /// When the last line was logged; `None` before the first.
    last: Mutex<Option<Instant>>,
}

impl Sustained {
    pub const fn new(interval: Duration) -> Sustained {
        Sustained {
            interval,
            suppressed: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }

    /// Counts one event; `Some(suppressed)` when a line is due now, with the number of events since the
    /// previous line that were not logged. The caller logs it (so the line keeps its own fields and
    /// call site).
    pub fn event(&self) -> Option<u64> {
        self.event_at(Instant::now())
    }

    fn event_at(&self, now: Instant) -> Option<u64> {
        let Some(mut last) = self.last.try_lock() else {
            // Another thread is deciding right now: this event is one it did not log.
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        match *last {
            Some(at) if now.saturating_duration_since(at) < self.interval => {
                drop(last);
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.suppressed.swap(0, Ordering::Relaxed))
            }
        }
    }
}

/// How often a sustained problem is logged again at most, by [`sustained_warn!`](crate::sustained_warn).
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Logs a warning at most once per [`WARN_INTERVAL`] from this call site, with the number of events
/// suppressed since the previous line: `sustained_warn!(error = %e, "writes refused")`. Log the single
/// event at debug level beside it.
#[macro_export]
macro_rules! sustained_warn {
    ($($arg:tt)+) => {{
        static LIMIT: $crate::metrics::sustained::Sustained =
            $crate::metrics::sustained::Sustained::new($crate::metrics::sustained::WARN_INTERVAL);
        if let Some(suppressed) = LIMIT.event() {
            tracing::warn!(suppressed, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_event_logs_then_one_line_per_interval_with_the_count() {
        let limit = Sustained::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.event_at(t0), Some(0));
        for s in 1..10 {
            assert_eq!(limit.event_at(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(limit.event_at(t0 + Duration::from_secs(10)), Some(9));
        assert_eq!(limit.event_at(t0 + Duration::from_secs(11)), None);
        assert_eq!(limit.event_at(t0 + Duration::from_secs(60)), Some(1));
    }
}
