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
//! A target not heard from yet is approached by slow start (1,000 entities per second, doubled
//! every second the limit is in use, lifted past 64,000) until it first says it is busy; after a
//! quiet minute the limit is lifted again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use super::bucket::{Rate, TokenBucket};

/// The rate after a refusal, as a share of the rate before it.
const CUT: f64 = 0.7;
/// The same for the first refusal, which ends slow start.
const SLOW_START_CUT: f64 = 0.5;
/// After a cut the rate climbs back quickly to this share of the rate that was refused...
const RECOVER_TO: f64 = 0.9;
/// ...at this share of that rate per second (from 70% to 90% in two seconds)...
const RECOVER_PER_SECOND: f64 = 0.1;
/// ...and then probes above it slowly, at this share per second: ten seconds from 90% back to
/// the rate that was refused. Most of the time is spent just under the target, and each
/// process meets a refusal about once in twelve seconds, not once a cycle of a steep climb.
/// (TCP CUBIC's shape, in straight lines.)
const PROBE_PER_SECOND: f64 = 0.01;
/// Refusals this soon after a cut answer requests sent before it took effect; they do not cut
/// again.
const HOLD_AFTER_CUT: Duration = Duration::from_secs(1);
/// A limit climbs only while at least this share of it is in use.
const USED_TO_CLIMB: f64 = 0.5;
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
/// it: TCP CUBIC's shape in straight lines, with CUBIC's fast convergence when refused below
/// the last estimate.
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

    /// Entities per second lately, the current second counted at its pace so far (at least a
    /// tenth of a second of it): whether a limit is in use, from the moment it is.
    fn pace(&mut self, now: Instant) -> f64 {
        self.roll(now);
        let into = now
            .saturating_duration_since(self.window_start)
            .max(Duration::from_millis(100));
        self.previous.max(self.current / into.as_secs_f64())
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
        self.count_use(entities);
        self.bucket.reserve(entities as f64)
    }

    /// Counts `entities` as used now (what a refusal cuts from, and whether the limit is in
    /// use), after bringing the limit up to date.
    fn count_use(&self, entities: u64) {
        let mut state = self.lock();
        let now = Instant::now();
        self.raise(&mut state, now);
        state.meter.add(now, entities as f64);
    }

    /// Gives up a place reserved earlier and not used (see `TokenBucket::release`).
    pub fn release(&self, place: f64, entities: u64) {
        self.bucket.release(place, entities);
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
        // Slow start doubles the rate every second, so its first refusal may come at up to
        // twice what the target takes: that cut halves the rate, as TCP's does, and takes the
        // target to be at three quarters of the rate refused.
        // Refused below where it was refused last: the target has less room than that estimate
        // said (or others came), so the estimate falls below this refusal too, halfway to the
        // cut, and the climb levels off lower (CUBIC's fast convergence; it also makes room
        // for processes that came later).
        let (rate, refused_at) = if state.slow_start {
            (from * SLOW_START_CUT, from * (1.0 + SLOW_START_CUT) / 2.0)
        } else if from < state.refused_at {
            (from * CUT, from * (1.0 + CUT) / 2.0)
        } else {
            (from * CUT, from)
        };
        let rate = rate.max(MIN_RATE);
        state.slow_start = false;
        state.refused_at = refused_at.max(MIN_RATE);
        state.last_cut = Some(now);
        state.last_raise = now;
        self.bucket.set_rate(Some(rate));
        tracing::debug!(
            rate,
            from,
            refused_at = state.refused_at,
            "storage target busy: rate lowered"
        );
    }

    /// A scan capped at `rate` says the target may take that much from it: a target still in
    /// slow start (never refused) below that rate starts at it instead of climbing to it from
    /// [`SLOW_START_RATE`]. (A capped scan's first step spent about half its first seconds
    /// waiting on the climb.) A target that has refused keeps the rate its back-off found.
    pub fn start_at(&self, rate: f64) {
        let state = self.lock();
        if !state.slow_start {
            return;
        }
        match self.bucket.rate() {
            Some(limit) if limit < rate && rate < SLOW_START_END => {
                self.bucket.set_rate(Some(rate))
            }
            Some(limit) if limit < rate => self.bucket.set_rate(None),
            _ => {}
        }
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
        // A limit doubles in slow start only while it is used, as TCP's congestion window
        // validation has it: a process idle for a while, or sending a trickle, has learnt
        // nothing about the target, and would come back with a limit far above what the
        // target takes, all at once. In use: it held a taker back in the last second, or half
        // of it was taken. The straight climbs, and the lift after a quiet minute, go on
        // regardless: they are what lets a limit cut while the process was busy elsewhere (a
        // copy's reads while it writes) come back, and the slots of a step follow the source's
        // limit (in the pacing model, gating them too made a copy's last steps wait 300 s for
        // slots under a stale limit).
        let held = self
            .bucket
            .held_since(now.checked_sub(Duration::from_secs(1)).unwrap_or(now));
        let in_use = held || state.meter.pace(now) >= rate * USED_TO_CLIMB;
        if state.slow_start && !in_use {
            state.last_raise = now;
            return;
        }
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
            } else {
                rate + probe * seconds
            };
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

    impl Governor {
        /// Counts `entities` as used now, as a take does, without waiting for the bucket.
        fn note_use(&self, entities: u64) {
            self.count_use(entities);
        }
    }

    /// Uses the governor at its limit (100,000 a second while it has none) for `span`, a tenth
    /// of a second at a time.
    async fn busy_for(governor: &Governor, span: Duration) {
        let end = Instant::now() + span;
        while Instant::now() < end {
            let limit = governor.rate().unwrap_or(100_000.0);
            governor.note_use((limit / 10.0).ceil() as u64);
            tokio::time::advance(Duration::from_millis(100)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_capped_scan_starts_the_slow_start_at_its_cap_until_a_refusal() {
        let governor = Governor::default();
        assert_eq!(governor.rate(), Some(SLOW_START_RATE));
        governor.start_at(2_000.0);
        assert_eq!(governor.rate(), Some(2_000.0));
        // Never lowered by a smaller cap.
        governor.start_at(1_500.0);
        assert_eq!(governor.rate(), Some(2_000.0));
        // Refused: the back-off's rate stands.
        governor.note_use(2_000);
        governor.throttled();
        let cut = governor.rate();
        assert_eq!(cut, Some(1_000.0));
        governor.start_at(4_000.0);
        assert_eq!(governor.rate(), cut);
    }

    /// A governor past slow start, just cut from 10,000 to 7,000.
    async fn cut_from_ten_thousand() -> Governor {
        let governor = Governor::default();
        busy_for(&governor, Duration::from_secs(7)).await;
        assert_eq!(governor.rate(), None);
        // Idle long enough for the meter to forget, then 10,000 in a second, refused.
        tokio::time::advance(Duration::from_secs(3)).await;
        governor.note_use(10_000);
        governor.throttled();
        assert_eq!(governor.rate(), Some(7_000.0));
        governor
    }

    fn near(governor: &Governor, expected: f64, within: f64) {
        let rate = governor.rate().unwrap();
        assert!(
            (rate - expected).abs() < within,
            "{rate}, not {expected} (within {within})"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_target_is_approached_from_a_thousand_doubling_each_second_it_is_used() {
        let governor = Governor::default();
        assert_eq!(governor.rate(), Some(SLOW_START_RATE));
        busy_for(&governor, Duration::from_secs(1)).await;
        near(&governor, 2_000.0, 1.0);
        // Unused, it does not climb.
        tokio::time::advance(Duration::from_secs(5)).await;
        near(&governor, 2_000.0, 1.0);
        busy_for(&governor, Duration::from_secs(6)).await;
        assert_eq!(governor.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_refusal_that_ends_slow_start_halves_the_rate() {
        let governor = Governor::default();
        busy_for(&governor, Duration::from_secs(2)).await;
        near(&governor, 4_000.0, 1.0);
        governor.note_use(4_000);
        governor.throttled();
        near(&governor, 2_000.0, 1.0);
        // Recovering towards 90% of 3,000 (three quarters of the rate refused).
        busy_for(&governor, Duration::from_secs(10)).await;
        let rate = governor.rate().unwrap();
        assert!((2_700.0..3_000.0).contains(&rate), "{rate}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_cuts_from_what_is_used_but_not_below_half_the_limit() {
        let governor = cut_from_ten_thousand().await;
        // Unused for two seconds, the limit recovers all the same (a straight climb), and a
        // refusal then cuts from half of it: the process used too little to have caused it.
        tokio::time::advance(Duration::from_secs(2)).await;
        near(&governor, 9_000.0, 1.0);
        governor.throttled();
        near(&governor, 4_500.0 * CUT, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_cut_low_climbs_back_at_a_least_pace() {
        let governor = Governor::default();
        for _ in 0..12 {
            governor.throttled();
            tokio::time::advance(HOLD_AFTER_CUT).await;
        }
        let low = governor.rate().unwrap();
        busy_for(&governor, Duration::from_secs(10)).await;
        let later = governor.rate().unwrap();
        assert!(
            later - low >= 10.0 * LEAST_PROBE - 1e-6,
            "{low} to {later} in 10 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_storm_of_refusals_cuts_once_then_the_rate_recovers_fast_and_probes_slowly() {
        let governor = cut_from_ten_thousand().await;
        governor.throttled();
        governor.throttled();
        assert_eq!(governor.rate(), Some(7_000.0));
        // 70% to 90% of the refused rate in two seconds...
        busy_for(&governor, Duration::from_secs(1)).await;
        near(&governor, 8_000.0, 1.0);
        busy_for(&governor, Duration::from_secs(2)).await;
        near(&governor, 9_000.0 + 100.0, 1.0);
        // ...then 1% of it per second.
        busy_for(&governor, Duration::from_secs(9)).await;
        near(&governor, 10_000.0, 1.0);
        governor.note_use(10_000);
        governor.throttled();
        near(&governor, 7_000.0, 1.0);
        busy_for(&governor, QUIET_BEFORE_UNLIMITED).await;
        assert_eq!(governor.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_again_below_the_last_refusal_levels_off_lower() {
        let governor = cut_from_ten_thousand().await;
        busy_for(&governor, Duration::from_secs(1)).await;
        near(&governor, 8_000.0, 1.0);
        // Refused again at 8,000, on the way back to 9,000: the estimate falls to 6,800.
        governor.note_use(8_000);
        governor.throttled();
        near(&governor, 5_600.0, 1.0);
        busy_for(&governor, Duration::from_secs(3)).await;
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
