//! Wall-clock time in epoch milliseconds: what lease ends are written in, so that processes on
//! different machines can compare them.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The machine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        epoch_ms()
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Wall-clock time that moves with tokio's clock, so that tests on a paused clock see leases
/// run out. Anchored once per process to the real time, then advanced by tokio's `Instant`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        static ANCHOR: OnceLock<(tokio::time::Instant, u64)> = OnceLock::new();
        let (at, wall) = *ANCHOR.get_or_init(|| (tokio::time::Instant::now(), epoch_ms()));
        // Tests run side by side, each on a paused clock of its own: one may be behind the
        // clock that set the anchor, and its time must move all the same.
        let now = tokio::time::Instant::now();
        if now >= at {
            wall + (now - at).as_millis() as u64
        } else {
            wall - (at - now).as_millis() as u64
        }
    }
}
