//! How much one step may do before it hands the rest of its range on.

use std::time::{Duration, Instant};

/// The limits of one step. A step always issues at least one query; after that it stops as soon
/// as either limit is reached. Time spent applying the scan's action counts too, and the action
/// starts no new write after [`Budget::action_deadline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub max_queries: u32,
    pub max_duration: Duration,
}

impl Default for Budget {
    /// 20 queries or 15 seconds: at 100 ms a query, a step reads up to 20,000 rows in about two
    /// seconds, and even a slow storage account or a slow action keeps the step below 30 s
    /// (15 s of budget, the action's deadline at 22.5 s, then the writes it had started), far
    /// inside Functions' 10 minutes. Steps near the root of a prefix scan make fewer queries
    /// (`ScanOptions::first_step_queries`).
    fn default() -> Self {
        Budget {
            max_queries: 20,
            max_duration: Duration::from_secs(15),
        }
    }
}

impl Budget {
    /// When, after the step's start, the action stops starting new writes: half as long again
    /// as `max_duration`, so that the page read last normally finishes whole, while an action
    /// slowed down by a saturated target cuts its page short and the step still ends in time
    /// (the rest of the page is handed on).
    pub fn action_deadline(&self) -> Duration {
        self.max_duration + self.max_duration / 2
    }
}

/// How a step's own reads retry: briefly, so that one throttled read (a partition over its
/// target answers 503 ServerBusy) waits about six seconds at most and the step stays within its
/// budget. A read that still fails makes the step hand the rest of its range on
/// (`StopReason::Transient`); the queue is the longer back-off.
pub fn read_retry_policy() -> tablescan_storage::retry::RetryPolicy {
    tablescan_storage::retry::RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(500),
        min_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(4),
        max_elapsed: Duration::from_secs(10),
    }
}

/// A monotonic clock; injected so that tests and the simulator can run on virtual time.
pub trait Clock: Sync {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// The real clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}
