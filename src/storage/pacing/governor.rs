//! Back-off that the whole process shares per storage target: additive increase,
//! multiplicative decrease (AIMD), as TCP does with a congested link.
//!
//! A storage account over its entity target answers 503 Server Busy or 500 Operation Timed Out
//! to some requests and serves the rest. If every step retried on its own at full speed, the
//! load would stay over the target and the refusals would go on (and hurt the application that
//! owns the table). Instead every refusal the pipeline sees lowers one rate for its target, the
//! account's table service or one queue, shared by all the steps of the process; the rate then
//! climbs back slowly while no refusal comes. Processes do this each on their own, and together
//! settle just under what the target takes, the way TCP flows share a link.
//!
//! The rate starts unlimited: a scan on a quiet account runs at full speed until the account
//! first says it is busy. After a long quiet spell the limit is lifted again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use super::bucket::{Rate, TokenBucket};

/// The rate after a refusal, as a share of the rate before it.
const CUT: f64 = 0.7;
/// After a cut the rate climbs back quickly to this share of the rate that was refused...
const RECOVER_TO: f64 = 0.9;
/// ...at this share of that rate per second (from 70% to 90% in two seconds)...
const RECOVER_PER_SECOND: f64 = 0.1;
/// ...and then probes above it slowly, at this share per second: ten seconds from 90% back to
/// the rate that was refused. Most of the time is spent just under the target, and each
/// process meets a refusal about once in twelve seconds, not once a cycle of a steep climb.
/// (TCP CUBIC's shape, in straight lines.)
const PROBE_PER_SECOND: f64 = 0.01;
/// Past the rate that was last refused, and this long without a refusal, the target has room
/// again (others using it left): the probe's pace then doubles every [`MAX_PROBE_DOUBLING`], as
/// BIC TCP's "max probing" does, so a process left alone on a target it shared is not held to
/// a slow climb for the minute before its limit is lifted. Not at once: processes sharing a
/// target each pass their own refused rate while another recovers from a cut, and would all
/// speed up into the next refusal.
const MAX_PROBE_AFTER: Duration = Duration::from_secs(5);
const MAX_PROBE_DOUBLING: Duration = Duration::from_secs(1);
/// Refusals this soon after a cut answer requests sent before it took effect; they do not cut
/// again.
const HOLD_AFTER_CUT: Duration = Duration::from_secs(1);
/// After this long without a refusal, the limit is lifted.
const QUIET_BEFORE_UNLIMITED: Duration = Duration::from_secs(60);
/// A target not heard from yet is approached from this rate, doubled every second without a
/// refusal (TCP's slow start), rather than all at once: a new process's steps would otherwise
/// all start at full speed, and on a busy account learn of it only from refusals.
const SLOW_START_RATE: f64 = 1_000.0;
/// Slow start ends here: the limit is lifted.
const SLOW_START_END: f64 = 64_000.0;
/// The least a rate climbs per second while recovering, and while probing (entities per
/// second, per second), so that a rate cut very low still comes back. Small, because every
/// process pressing on the target climbs at once: a hundred climbing 20 a second each would add
/// a queue's whole 2,000 a second every second.
const LEAST_RECOVERY: f64 = 5.0;
const LEAST_PROBE: f64 = 1.0;
/// The rate never falls below this (entities per second). Low, because the target's rate is
/// shared by every process pressing on it: a hundred instances enqueueing into one queue of
/// 2,000 messages a second get 20 each, and a floor above that would keep them over it.
pub const MIN_RATE: f64 = 5.0;

/// The shared rate of one storage target in this process.
///
/// Its climb after a cut: to 90% of where the target last refused quickly, then slowly above
/// it, then (past it, and five quiet seconds on) faster and faster: TCP BIC and CUBIC's shape
/// in straight lines, with CUBIC's fast convergence when refused below the last estimate.
#[derive(Debug)]
pub struct Governor {
    bucket: TokenBucket,
    state: Mutex<Aimd>,
}

#[derive(Debug)]
struct Aimd {
    /// The rate the last cut was made from: where the target last refused.
    refused_at: f64,
    /// Whether the rate is still doubling from [`SLOW_START_RATE`] (no refusal yet).
    slow_start: bool,
    last_cut: Option<Instant>,
    last_raise: Instant,
    /// When the rate passed `refused_at` without a refusal since the last cut.
    passed_at: Option<Instant>,
    meter: Meter,
}

/// Entities taken in the current second and the one before: the rate to cut from when no
/// limit was set yet.
#[derive(Debug)]
struct Meter {
    window_start: Instant,
    current: f64,
    previous: f64,
}

impl Meter {
    fn add(&mut self, now: Instant, entities: f64) {
        self.roll(now);
        self.current += entities;
    }

    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= Duration::from_secs(2) {
            self.previous = 0.0;
            self.current = 0.0;
            self.window_start = now;
        } else if elapsed >= Duration::from_secs(1) {
            self.previous = self.current;
            self.current = 0.0;
            self.window_start += Duration::from_secs(1);
        }
    }

    /// Entities per second lately.
    fn rate(&mut self, now: Instant) -> f64 {
        self.roll(now);
        self.previous.max(self.current)
    }
}

impl Default for Governor {
    fn default() -> Self {
        let now = Instant::now();
        Governor {
            bucket: TokenBucket::new(Some(SLOW_START_RATE)),
            state: Mutex::new(Aimd {
                refused_at: 0.0,
                slow_start: true,
                last_cut: None,
                last_raise: now,
                passed_at: None,
                meter: Meter {
                    window_start: now,
                    current: 0.0,
                    previous: 0.0,
                },
            }),
        }
    }
}

impl Governor {
    /// Waits until `entities` may be sent to the target.
    pub async fn take(&self, entities: u64) {
        let place = self.reserve(entities);
        self.bucket.wait(place).await;
    }

    /// Reserves `entities` without waiting; the place to [`wait`](Self::wait) for, ahead of
    /// the moment they are sent (see `TokenBucket::wait`). Unused, they are given back.
    pub fn reserve(&self, entities: u64) -> f64 {
        {
            let mut state = self.lock();
            let now = Instant::now();
            self.raise(&mut state, now);
            state.meter.add(now, entities as f64);
        }
        self.bucket.reserve(entities as f64)
    }

    /// Waits until a place reserved earlier may go.
    pub async fn wait(&self, place: f64) {
        self.bucket.wait(place).await;
    }

    /// Returns entities taken and not used (a short page).
    pub fn give_back(&self, entities: u64) {
        self.bucket.give_back(entities);
    }

    /// The target refused a request as too busy: lower the rate, unless it was lowered a moment
    /// ago.
    pub fn throttled(&self) {
        let mut state = self.lock();
        let now = Instant::now();
        if state
            .last_cut
            .is_some_and(|at| now.saturating_duration_since(at) < HOLD_AFTER_CUT)
        {
            return;
        }
        self.raise(&mut state, now);
        // Cut from what is in use, when that is less than the limit: a limit far above the
        // use would not slow anything down.
        // But a process that used little lately did not cause the refusal: it is cut to no
        // less than half its limit, or from the slow-start rate when it had none.
        let used = state.meter.rate(now);
        let from = match self.bucket.rate() {
            Some(rate) => rate.min(used.max(rate / 2.0)),
            None => used.max(SLOW_START_RATE),
        };
        let rate = (from * CUT).max(MIN_RATE);
        // Refused below where it was refused last: the target has less room than that estimate
        // said (or others came), so the estimate falls below this refusal too, halfway to the
        // cut, and the climb levels off lower (CUBIC's fast convergence; it also makes room
        // for processes that came later).
        let refused_at = if !state.slow_start && from < state.refused_at {
            from * (1.0 + CUT) / 2.0
        } else {
            from
        };
        state.slow_start = false;
        state.refused_at = refused_at.max(MIN_RATE);
        state.last_cut = Some(now);
        state.last_raise = now;
        state.passed_at = None;
        self.bucket.set_rate(Some(rate));
        tracing::debug!(
            rate,
            from,
            refused_at = state.refused_at,
            "storage target busy: rate lowered"
        );
    }

    /// The current limit in entities per second; `None` while there is none.
    pub fn rate(&self) -> Rate {
        let mut state = self.lock();
        self.raise(&mut state, Instant::now());
        self.bucket.rate()
    }

    fn raise(&self, state: &mut Aimd, now: Instant) {
        let Some(rate) = self.bucket.rate() else {
            return;
        };
        if state.slow_start {
            let elapsed = now.saturating_duration_since(state.last_raise);
            if elapsed >= Duration::from_millis(100) {
                let doubled = rate * 2f64.powf(elapsed.as_secs_f64());
                state.last_raise = now;
                if doubled >= SLOW_START_END {
                    state.slow_start = false;
                    self.bucket.set_rate(None);
                } else {
                    self.bucket.set_rate(Some(doubled));
                }
            }
            return;
        }
        if state
            .last_cut
            .is_none_or(|at| now.saturating_duration_since(at) >= QUIET_BEFORE_UNLIMITED)
        {
            self.bucket.set_rate(None);
            return;
        }
        let elapsed = now.saturating_duration_since(state.last_raise);
        if elapsed >= Duration::from_millis(100) {
            let seconds = elapsed.as_secs_f64();
            let knee = state.refused_at * RECOVER_TO;
            let recovery = (state.refused_at * RECOVER_PER_SECOND).max(LEAST_RECOVERY);
            let probe = (state.refused_at * PROBE_PER_SECOND).max(LEAST_PROBE);
            let raised = if rate < knee {
                // Recovering; what is left of the interval past the knee is spent probing.
                let recovered = rate + recovery * seconds;
                if recovered <= knee {
                    recovered
                } else {
                    knee + probe * (recovered - knee) / recovery
                }
            } else if let Some(passed) = state
                .passed_at
                .map(|at| at + MAX_PROBE_AFTER)
                .filter(|at| *at < now)
            {
                // Max probing: the probe's pace doubles every MAX_PROBE_DOUBLING, so the
                // climb over this interval is the integral of probe × 2^(t / doubling).
                let doubling = MAX_PROBE_DOUBLING.as_secs_f64();
                let from = state
                    .last_raise
                    .saturating_duration_since(passed)
                    .as_secs_f64();
                let to = now.saturating_duration_since(passed).as_secs_f64();
                // The part of the interval before max probing began is a straight probe.
                let straight = passed
                    .saturating_duration_since(state.last_raise)
                    .as_secs_f64();
                let pace_at = |t: f64| 2f64.powf((t / doubling).min(30.0));
                rate + probe * straight
                    + probe * doubling * (pace_at(to) - pace_at(from)) / std::f64::consts::LN_2
            } else {
                rate + probe * seconds
            };
            if raised >= state.refused_at && state.passed_at.is_none() {
                state.passed_at = Some(now);
            }
            self.bucket.set_rate(Some(raised));
            state.last_raise = now;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Aimd> {
        // Plain numbers: a panic elsewhere cannot leave them half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The governor of one storage target (an account's table service, or one queue), shared by
/// the whole process.
pub fn governor(target: &str) -> Arc<Governor> {
    static GOVERNORS: OnceLock<Mutex<HashMap<String, Arc<Governor>>>> = OnceLock::new();
    let mut governors = GOVERNORS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    governors.entry(target.to_string()).or_default().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_new_target_is_approached_from_a_thousand_doubling_each_second() {
        let governor = Governor::default();
        assert_eq!(governor.rate(), Some(SLOW_START_RATE));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(governor.rate(), Some(2_000.0));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(governor.rate(), None);
        // Unlimited until refused, then cut from the rate in use.
        for _ in 0..10 {
            governor.take(1_000).await;
        }
        governor.throttled();
        assert_eq!(governor.rate(), Some(7_000.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_cuts_from_what_is_used_but_not_below_half_the_limit() {
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(7)).await;
        governor.take(10_000).await;
        governor.throttled();
        assert_eq!(governor.rate(), Some(7_000.0));
        tokio::time::advance(Duration::from_secs(2)).await;
        // Little used lately: cut from half the limit.
        let limit = governor.rate().unwrap();
        governor.throttled();
        let cut = governor.rate().unwrap();
        assert!((cut - limit / 2.0 * CUT).abs() < 1.0, "{cut} from {limit}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_cut_low_climbs_back_at_a_least_pace() {
        let governor = Governor::default();
        for _ in 0..12 {
            governor.throttled();
            tokio::time::advance(HOLD_AFTER_CUT).await;
        }
        let low = governor.rate().unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        let later = governor.rate().unwrap();
        assert!(
            later - low >= 10.0 * LEAST_PROBE,
            "{low} to {later} in 10 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_storm_of_refusals_cuts_once_then_the_rate_recovers_fast_and_probes_slowly() {
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(governor.rate(), None);
        governor.take(10_000).await;
        governor.throttled();
        governor.throttled();
        governor.throttled();
        assert_eq!(governor.rate(), Some(7_000.0));
        let near = |expected: f64| {
            let rate = governor.rate().unwrap();
            assert!((rate - expected).abs() < 1.0, "{rate}, not {expected}");
        };
        // 70% to 90% of the refused rate in two seconds...
        tokio::time::advance(Duration::from_secs(1)).await;
        near(8_000.0);
        tokio::time::advance(Duration::from_secs(2)).await;
        near(9_000.0 + 100.0);
        // ...then 1% of it per second.
        tokio::time::advance(Duration::from_secs(9)).await;
        near(10_000.0);
        governor.take(10_000).await;
        governor.throttled();
        near(7_000.0);
        tokio::time::advance(QUIET_BEFORE_UNLIMITED).await;
        assert_eq!(governor.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_refused_rate_the_probe_speeds_up() {
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(7)).await;
        governor.take(10_000).await;
        governor.throttled();
        // Recovered to 9,000 in 2 s, probed to 10,000 in 10 s more (100/s).
        tokio::time::advance(Duration::from_secs(12)).await;
        let at_refused = governor.rate().unwrap();
        assert!((at_refused - 10_000.0).abs() < 1.0, "{at_refused}");
        // Five seconds more of the straight probe (+500); then the probe's pace doubles every
        // second: 100 × (2^5 - 1) / ln 2 in 5 s, where a straight probe would add 500.
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(100)).await;
            governor.rate();
        }
        let later = governor.rate().unwrap();
        assert!(
            (later - 14_972.0).abs() < 100.0,
            "{later} ten seconds past the refused rate"
        );
        // A refusal ends it: a cut from what was in use (20,000 in the last second), and the
        // straight climb again.
        governor.take(20_000).await;
        governor.throttled();
        let cut = governor.rate().unwrap();
        assert!((cut - 14_000.0).abs() < 1.0, "{cut}");
        tokio::time::advance(Duration::from_secs(1)).await;
        let recovering = governor.rate().unwrap();
        assert!((recovering - 16_000.0).abs() < 1.0, "{recovering}");
    }

    #[tokio::test(start_paused = true)]
    async fn refused_again_below_the_last_refusal_levels_off_lower() {
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(7)).await;
        governor.take(10_000).await;
        governor.throttled();
        tokio::time::advance(Duration::from_secs(1)).await;
        // Refused again at 8,000, on the way back to 9,000: the estimate falls to 6,800.
        governor.take(8_000).await;
        governor.throttled();
        assert!((governor.rate().unwrap() - 5_600.0).abs() < 1.0);
        tokio::time::advance(Duration::from_secs(3)).await;
        let rate = governor.rate().unwrap();
        assert!((6_120.0..6_800.0).contains(&rate), "{rate}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_never_falls_below_the_floor() {
        let governor = Governor::default();
        for _ in 0..20 {
            governor.throttled();
            tokio::time::advance(HOLD_AFTER_CUT).await;
        }
        assert!(governor.rate().unwrap() >= MIN_RATE);
    }

    #[test]
    fn targets_are_shared_by_name() {
        let a = governor("http://a/one");
        assert!(Arc::ptr_eq(&a, &governor("http://a/one")));
        assert!(!Arc::ptr_eq(&a, &governor("http://a/two")));
    }
}
