//! How many seconds of its share a paced step's page holds, from how long pages take to come
//! back.
//!
//! A step reserves its next page while the current one is on its way: the next page's share is
//! earned `page / part` seconds after the current one's (part: the step's part of the rate). A
//! page that takes longer than that to come back leaves the step waiting on the account, not on
//! its share, and a scan whose steps all wait so moves under its cap however long it is allowed
//! to run. Seen through devhost on Azurite (the default count of 180,000 rows on an account
//! taking 3,000 entities/s): half-second pages of about 150 rows took 620 ms each, so every step
//! moved about 240 entities/s of a part near 300, and the scan held 2,005 entities/s under a
//! learned cap of 2,694. A page therefore holds at least [`LATENCY_MARGIN`] times the time a
//! page lately took to come back: steps stay paced by their share, and the cap is what binds.
//! On a healthy account (pages back in tenths of a second) the half second still decides.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many seconds of its share a page holds at least.
pub const PAGE_SECONDS: f64 = 0.5;
/// A page holds at least this many times what pages lately took to come back: enough that the
/// next page's share is earned after the current page is back, though its time varies.
pub const LATENCY_MARGIN: f64 = 1.5;
/// The most seconds of its share a page holds: an account that slow is the back-off's to pace.
pub const MOST_PAGE_SECONDS: f64 = 3.0;
/// How much of the average a new page's time makes (an exponentially weighted average).
const WEIGHT: f64 = 0.25;

/// The time pages of one scan take to come back in this process, averaged over the last few.
#[derive(Debug, Default)]
pub struct PageTime {
    /// The average in seconds, as `f64` bits; 0 before the first page.
    average_bits: AtomicU64,
}

impl PageTime {
    /// Counts a page that came back `took` after it was sent.
    pub fn answered_in(&self, took: Duration) {
        let took = took.as_secs_f64();
        if !took.is_finite() {
            return;
        }
        // Lost updates under contention only drop a sample; the average stays an average.
        let before = self.average();
        let next = if before > 0.0 {
            before + WEIGHT * (took - before)
        } else {
            took
        };
        self.average_bits.store(next.to_bits(), Ordering::Relaxed);
    }

    /// What pages lately took, seconds (0 before the first).
    pub fn average(&self) -> f64 {
        f64::from_bits(self.average_bits.load(Ordering::Relaxed))
    }

    /// How many seconds of its share the next page holds.
    pub fn page_seconds(&self) -> f64 {
        (LATENCY_MARGIN * self.average()).clamp(PAGE_SECONDS, MOST_PAGE_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_pages_hold_half_a_second() {
        let time = PageTime::default();
        assert_eq!(time.page_seconds(), PAGE_SECONDS);
        for _ in 0..20 {
            time.answered_in(Duration::from_millis(120));
        }
        assert_eq!(time.page_seconds(), PAGE_SECONDS);
    }

    #[test]
    fn slow_pages_hold_more_than_they_take() {
        let time = PageTime::default();
        for _ in 0..20 {
            time.answered_in(Duration::from_millis(620));
        }
        let seconds = time.page_seconds();
        assert!((seconds - 0.93).abs() < 0.01, "{seconds}");
        for _ in 0..20 {
            time.answered_in(Duration::from_secs(30));
        }
        assert_eq!(time.page_seconds(), MOST_PAGE_SECONDS);
    }

    #[test]
    fn the_average_follows_the_last_few_pages() {
        let time = PageTime::default();
        for _ in 0..20 {
            time.answered_in(Duration::from_secs(1));
        }
        for _ in 0..10 {
            time.answered_in(Duration::from_millis(100));
        }
        // 0.75^10 of the way back: about 5%.
        let average = time.average();
        assert!((average - 0.151).abs() < 0.01, "{average}");
    }
}
