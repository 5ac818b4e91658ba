//! When and how long to wait before trying a storage request again.
//!
//! The delay follows the exponential backoff of the Azure Storage partitioning guidance: before
//! retry `x` (1, 2, ...) wait `min(min_backoff + r * (2^x - 1), max_backoff)`, where `r` is the
//! base delay scaled by a random factor between 0.8 and 1.2. The jitter keeps many workers that
//! were throttled together from coming back together. A `Retry-After` from the service is a
//! floor for the delay. The random source is injected so that tests are deterministic.

use std::time::Duration;

/// How a request may be retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 turns retrying off.
    pub max_retries: u32,
    /// The base delay (`z` in the guidance).
    pub base_delay: Duration,
    /// Added to every delay (`z_min`).
    pub min_backoff: Duration,
    /// No delay is longer than this, `Retry-After` included (`z_max`).
    pub max_backoff: Duration,
    /// No retry starts whose wait would end this long after the first attempt began; the
    /// caller's deadline ([`super::deadline`]) may end retrying sooner.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    /// Five retries spread over about half a minute: long enough to ride out a throttling
    /// episode, short enough to stay far inside a scan step's budget.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(20),
            max_elapsed: Duration::from_secs(60),
        }
    }
}

/// A source of uniformly distributed numbers in `[0, 1)`.
pub trait RandomSource: Send + Sync {
    fn next_unit(&self) -> f64;
}

/// Randomness from the operating system, through ring.
pub struct SystemRandomSource(ring::rand::SystemRandom);

impl Default for SystemRandomSource {
    fn default() -> Self {
        SystemRandomSource(ring::rand::SystemRandom::new())
    }
}

impl RandomSource for SystemRandomSource {
    fn next_unit(&self) -> f64 {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 8];
        // The OS random source does not fail on Linux; the midpoint is a harmless fallback.
        if self.0.fill(&mut bytes).is_err() {
            return 0.5;
        }
        // 53 random bits make every representable f64 in [0, 1) equally likely.
        (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The delay before retry number `retry` (1-based), given a random unit value and the
    /// service's `Retry-After`, if any.
    pub fn delay(&self, retry: u32, unit: f64, retry_after: Option<Duration>) -> Duration {
        let jitter = 0.8 + 0.4 * unit.clamp(0.0, 1.0);
        let growth = 2f64.powi(retry.min(30) as i32) - 1.0;
        let backoff = self.base_delay.as_secs_f64() * jitter * growth;
        let computed = self.min_backoff.as_secs_f64() + backoff;
        let floor = retry_after.map_or(0.0, |d| d.as_secs_f64());
        Duration::from_secs_f64(computed.max(floor).min(self.max_backoff.as_secs_f64()))
    }
}

/// Reads a `Retry-After` header given in seconds (the storage services never send a date).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Whether a failed attempt may be repeated.
///
/// Idempotent requests are retried on every transient status and every transport failure. A
/// request that is not idempotent (inserting an entity, putting a message) is retried only
/// where the service certainly did not apply it, or where the storage SDKs retry it too: a
/// connection that was never established, and 500, 503 and 504.
pub fn should_retry(outcome: AttemptOutcome, idempotent: bool) -> bool {
    match outcome {
        AttemptOutcome::Status(status) => {
            if idempotent {
                super::error::is_transient_status(status)
            } else {
                matches!(status, 500 | 503 | 504)
            }
        }
        AttemptOutcome::NotConnected => true,
        AttemptOutcome::MaybeSent => idempotent,
    }
}

/// What went wrong with one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The service answered with this non-success status.
    Status(u16),
    /// No connection was made, so nothing was sent.
    NotConnected,
    /// The connection failed after the request may have been sent.
    MaybeSent,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_secs(30),
            min_backoff: Duration::from_secs(3),
            max_backoff: Duration::from_secs(90),
            max_elapsed: Duration::from_secs(3600),
        }
    }

    #[test]
    fn delays_follow_the_guidance_formula() {
        // The guidance's example: z = 30 s, z_min = 3 s, z_max = 90 s.
        let p = policy();
        // Lowest jitter (0.8): 3 + 24 * (2^1 - 1) = 27 s.
        assert_eq!(p.delay(1, 0.0, None), Duration::from_secs(27));
        // Midpoint jitter (1.0): 3 + 30 * 1 = 33 s.
        assert_eq!(p.delay(1, 0.5, None), Duration::from_secs(33));
        // Highest jitter (1.2) on retry 2: 3 + 36 * 3 = 111 s, capped at 90 s.
        assert_eq!(p.delay(2, 1.0, None), Duration::from_secs(90));
        // Retry 2 at the lowest jitter: 3 + 24 * 3 = 75 s.
        assert_eq!(p.delay(2, 0.0, None), Duration::from_secs(75));
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let p = RetryPolicy {
            min_backoff: Duration::ZERO,
            max_backoff: Duration::from_secs(3600),
            ..policy()
        };
        for step in 0..=100 {
            let unit = step as f64 / 100.0;
            let d = p.delay(3, unit, None).as_secs_f64();
            let nominal = 30.0 * 7.0;
            assert!(
                (0.8 * nominal - 1e-9..=1.2 * nominal + 1e-9).contains(&d),
                "{d}"
            );
        }
    }

    #[test]
    fn retry_after_is_a_floor_but_never_beyond_the_maximum() {
        let p = policy();
        assert_eq!(
            p.delay(1, 0.0, Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
        assert_eq!(
            p.delay(1, 0.0, Some(Duration::from_secs(10))),
            Duration::from_secs(27)
        );
        assert_eq!(
            p.delay(1, 0.0, Some(Duration::from_secs(500))),
            Duration::from_secs(90)
        );
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn huge_retry_numbers_do_not_overflow() {
        assert_eq!(policy().delay(u32::MAX, 1.0, None), Duration::from_secs(90));
    }

    #[test]
    fn non_idempotent_requests_retry_only_where_safe() {
        use AttemptOutcome::*;
        for status in [408, 429, 500, 502, 503, 504] {
            assert!(should_retry(Status(status), true), "{status}");
        }
        assert!(should_retry(Status(503), false));
        assert!(should_retry(Status(500), false));
        assert!(!should_retry(Status(408), false));
        assert!(!should_retry(Status(429), false));
        assert!(!should_retry(Status(409), true));
        assert!(!should_retry(Status(404), true));
        assert!(should_retry(NotConnected, false));
        assert!(should_retry(MaybeSent, true));
        assert!(!should_retry(MaybeSent, false));
    }

    #[test]
    fn system_random_is_in_the_unit_interval() {
        let source = SystemRandomSource::default();
        for _ in 0..1000 {
            let x = source.next_unit();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
