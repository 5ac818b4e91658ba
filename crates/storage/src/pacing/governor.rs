//! Back-off that the whole process shares per storage target ([`Governors`]): additive
//! increase, multiplicative decrease (AIMD), as TCP does with a congested link, with a ceiling
//! that stays under where the target refused.
//!
//! A storage account over its entity target answers 503 Server Busy or 500 Operation Timed Out
//! to some requests and serves the rest. If every step retried on its own at full speed, the
//! load would stay over the target and the refusals would go on, and every refusal is one the
//! application that owns the account may meet too. Instead every refusal the pipeline sees
//! lowers one rate for its target, the account's table service or one queue, shared by all the
//! steps of the process. Processes do this each on their own, and together settle just under
//! what the target takes, the way TCP flows share a link.
//!
//! A target not heard from yet is not limited: nothing says it is busy, and a scan should reach
//! an account's limit within seconds. After the first refusal the rate is cut and climbs back
//! quickly to a ceiling below the rate refused, and stays there while the refusal is recent.
//! After eight quiet seconds it creeps up (this process's part may have grown: others left), and
//! after twelve it is lifted, unless it is held ([`Governor::hold_until`]: a scan learning its
//! cap holds it until the cap comes): a scan keeps its own ceiling for all its processes together (its
//! cap learned from the same refusals, `job::learning` in the handler), so what one process
//! does alone does not take the scan over what the account takes. Latency is the third
//! signal: while the target answers more than twice as slowly as it did at its quickest lately
//! (compared among requests of about the same size: the power of two of the entities they
//! touch, sizes answered in the last 5 seconds), the rate does not climb.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::bucket::{Place, Rate, TokenBucket};

/// The rate after a refusal, as a share of the rate before it.
const CUT: f64 = 0.7;
/// The same for the first refusal: the rate was not limited, and what was sent in the last
/// second may be far above what the target takes (a burst of fresh steps).
const FIRST_CUT: f64 = 0.5;
/// After the first refusal the target is taken to be at this share of the rate refused.
const FIRST_ESTIMATE: f64 = 0.75;
/// A refusal below the last estimate takes the target to be at this share of it.
const LOWER_ESTIMATE: f64 = 0.85;
/// After a cut the rate climbs back to this share of the estimate, and stops there: the
/// ceiling.
const RECOVER_TO: f64 = 0.9;
/// ...at this share of the estimate per second (from 70% to 90% in two seconds).
const RECOVER_PER_SECOND: f64 = 0.1;
/// How long after a cut the rate stays at its ceiling before it creeps up.
const QUIET_BEFORE_PROBE: Duration = Duration::from_secs(8);
/// How fast it creeps, as a share of the estimate per second: two seconds from the ceiling to
/// the rate last refused. A scan's own learned cap (shared by all its processes, in the
/// handler) is the ceiling that stays; this one follows the process's part of it, which
/// grows when other processes leave.
const PROBE_PER_SECOND: f64 = 0.05;
/// After this long without a refusal the limit is lifted: a scan keeps its own ceiling for
/// all its processes (its learned cap, set within about 12 seconds of a refusal: a report 4 s
/// after the cut, a round of 8; the handler lifts the limit then), and a queue's refusals come back, if they do, as a cut again.
/// A process cut while it had little to do would otherwise read at a few hundred entities a
/// second long after the account had room.
const QUIET_BEFORE_LIFT: Duration = Duration::from_secs(12);
/// Refusals this soon after a cut answer requests sent before it took effect; they do not cut
/// again.
const HOLD_AFTER_CUT: Duration = Duration::from_secs(1);
/// A limit creeps up only while at least this share of it is in use.
const USED_TO_CLIMB: f64 = 0.5;
/// The least span the use a refusal cuts from is measured over: long enough that the pages a
/// step reserves ahead, all at once, do not count as a rate many times what it moves.
const USE_MEASURED_OVER: Duration = Duration::from_millis(500);
/// The least a first refusal cuts from (entities per second): a process that used little did
/// not cause it.
const FIRST_CUT_FROM: f64 = 1_000.0;
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
/// Latency: the target is slow while the recent answers take more than this many times the
/// quickest lately, and at least [`SLOW_BY`] longer.
const SLOW_FACTOR: f64 = 2.0;
const SLOW_BY: Duration = Duration::from_millis(50);
/// The quickest lately is forgotten by this share every second, so a target that became
/// slower for good is not taken as busy for ever.
const QUICKEST_DRIFT_PER_SECOND: f64 = 0.02;

/// The shared rate of one storage target in this process.
#[derive(Debug)]
pub struct Governor {
    bucket: TokenBucket,
    state: Mutex<Aimd>,
}

#[derive(Debug)]
struct Aimd {
    /// Where the target is taken to start refusing, once it has refused.
    refused_at: Option<f64>,
    /// The rate in use when it last refused (what the last cut was made from).
    refused_from: Option<f64>,
    last_cut: Option<Instant>,
    /// How many cuts were made: a scan learns its cap when it sees this grow.
    cuts: u64,
    last_raise: Instant,
    /// Until when the limit neither creeps up nor is lifted ([`Governor::hold_until`]).
    held_until: Option<Instant>,
    meter: Meter,
    latency: Latency,
}

/// How long the target takes to answer, for requests of each size apart: recent (a moving
/// average) against the quickest lately. Sizes apart, because a page of 1,000 rows takes many
/// times as long as one of 20 at any load: compared with the quickest of all sizes, a scan
/// reading full pages looked slow for good (a devhost run beside an application: every raise of
/// the learned cap refused as "slow" for a minute while the account had room).
#[derive(Debug, Default)]
struct Latency {
    classes: [LatencyClass; SIZE_CLASSES],
}

/// Requests are told apart by the power of two of the entities they touch, up to this many
/// classes (the last holds 1,024 and more).
const SIZE_CLASSES: usize = 11;
/// A class answered within this long counts in [`Latency::slow`]: one not heard from lately
/// says nothing of the target now.
const LATELY: Duration = Duration::from_secs(5);

#[derive(Debug, Default, Clone, Copy)]
struct LatencyClass {
    recent: Option<f64>,
    quickest: Option<f64>,
    at: Option<Instant>,
}

impl Latency {
    fn observe(&mut self, now: Instant, seconds: f64, entities: u64) {
        let class = (u64::BITS - entities.max(1).leading_zeros() - 1) as usize;
        self.classes[class.min(SIZE_CLASSES - 1)].observe(now, seconds);
    }

    /// Whether answers of any size heard from lately come much slower than they did at their
    /// quickest lately.
    fn slow(&self, now: Instant) -> bool {
        self.classes.iter().any(|class| {
            class
                .at
                .is_some_and(|at| now.saturating_duration_since(at) < LATELY)
                && class.slow()
        })
    }
}

impl LatencyClass {
    fn observe(&mut self, now: Instant, seconds: f64) {
        if self
            .at
            .is_some_and(|at| now.saturating_duration_since(at) >= LATELY)
        {
            // Not heard from lately: what it measured then says nothing of the target now.
            *self = LatencyClass::default();
        }
        let recent = self.recent.map_or(seconds, |r| r * 0.7 + seconds * 0.3);
        self.recent = Some(recent);
        let drift = self
            .at
            .map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64())
            * QUICKEST_DRIFT_PER_SECOND;
        self.quickest = Some(
            self.quickest
                .map_or(recent, |q| (q * (1.0 + drift)).min(recent)),
        );
        self.at = Some(now);
    }

    fn slow(&self) -> bool {
        match (self.recent, self.quickest) {
            (Some(recent), Some(quickest)) => {
                recent > quickest * SLOW_FACTOR && recent > quickest + SLOW_BY.as_secs_f64()
            }
            _ => false,
        }
    }
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

    /// Entities per second lately, the current second counted at its pace so far (at least a
    /// tenth of a second of it): whether a limit is in use, from the moment it is.
    fn pace(&mut self, now: Instant) -> f64 {
        self.pace_over(now, Duration::from_millis(100))
    }

    /// The same, the current second counted over at least `least` of it.
    fn pace_over(&mut self, now: Instant, least: Duration) -> f64 {
        self.roll(now);
        let into = now.saturating_duration_since(self.window_start).max(least);
        self.previous.max(self.current / into.as_secs_f64())
    }
}

impl Default for Governor {
    fn default() -> Self {
        let now = Instant::now();
        Governor {
            bucket: TokenBucket::new(None),
            state: Mutex::new(Aimd {
                refused_at: None,
                refused_from: None,
                last_cut: None,
                cuts: 0,
                last_raise: now,
                held_until: None,
                meter: Meter {
                    window_start: now,
                    current: 0.0,
                    previous: 0.0,
                },
                latency: Latency::default(),
            }),
        }
    }
}

impl Governor {
    /// Waits until `entities` may be sent to the target.
    /// A wait given up (its future dropped) gives its place back.
    pub async fn take(&self, entities: u64) {
        let place = self.reserve(entities);
        self.bucket.hold(place, entities).earned().await;
    }

    /// A place of `entities` reserved earlier, given back unless waited for until earned (see
    /// `TokenBucket::hold`).
    pub fn hold(&self, place: f64, entities: u64) -> Place<'_> {
        self.bucket.hold(place, entities)
    }

    /// Reserves `entities` without waiting; the place to [`hold`](Self::hold) and wait for,
    /// ahead of the moment they are sent. Unused, they are given back.
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

    /// Returns entities taken and not used (a short page).
    pub fn give_back(&self, entities: u64) {
        self.bucket.give_back(entities);
    }

    /// The target answered a request that touched `entities` in `took`: a rise in latency
    /// (against requests of about its size) holds the rate's climb.
    pub fn answered_in(&self, took: Duration, entities: u64) {
        let mut state = self.lock();
        state
            .latency
            .observe(Instant::now(), took.as_secs_f64(), entities);
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
        // use would not slow anything down. But a process that used little lately did not
        // cause the refusal: it is cut to no less than half its limit.
        // At its pace: a refusal 0.6 s into a scan's first second, after 3,000 entities, met
        // 5,000 a second, not 3,000 (counted as 3,000, the first estimate fell to 2,250 where
        // the account took 3,000, and the scan learned a cap two thirds of what it could use).
        let used = state.meter.pace_over(now, USE_MEASURED_OVER);
        let from = match self.bucket.rate() {
            Some(rate) => rate.min(used.max(rate / 2.0)),
            None => used.max(FIRST_CUT_FROM),
        };
        let (rate, refused_at) = match state.refused_at {
            // The first refusal: what was sent may have been a burst far over the target.
            None => (from * FIRST_CUT, from * FIRST_ESTIMATE),
            // Refused below the estimate: the target has less room than it said (or others
            // came), so the estimate falls below this refusal too (CUBIC's fast convergence;
            // it also makes room for processes that came later).
            Some(estimate) if from < estimate => (from * CUT, from * LOWER_ESTIMATE),
            Some(_) => (from * CUT, from),
        };
        let rate = rate.max(MIN_RATE);
        state.refused_at = Some(refused_at.max(MIN_RATE));
        state.refused_from = Some(from);
        state.last_cut = Some(now);
        state.cuts += 1;
        state.last_raise = now;
        self.bucket.set_rate(Some(rate));
        tracing::debug!(rate, from, refused_at, "storage target busy: rate lowered");
    }

    /// Lifts the limit at once; the next refusal cuts from the rate then in use, as after the
    /// lift that follows a quiet while (the handler lifts when a scan that learned its own cap
    /// from the refusals is paced by it): a scan that learned its own cap from them is
    /// paced by that cap from then on, and a back-off of this process that lingered after it
    /// would hold the scan under its cap for the rest of [`QUIET_BEFORE_LIFT`].
    pub fn lift(&self) {
        let mut state = self.lock();
        state.last_raise = Instant::now();
        state.held_until = None;
        self.bucket.set_rate(None);
    }

    /// Keeps the limit at its ceiling until `until`: it recovers to the ceiling after a cut as
    /// always, but neither creeps over it nor is lifted meanwhile, unless [`lift`](Self::lift)
    /// lifts it. For a scan learning its cap from these refusals (the handler's learning
    /// round): until the cap is set, the back-off is all that holds the scan under what the
    /// account takes, and a creep 8 s after a cut, or the lift at 12, sent bursts the account
    /// refused (devhost, beside an application: 8.6% of the application's requests refused in
    /// the 5 seconds before the scan's cap came).
    pub fn hold_until(&self, until: Instant) {
        let mut state = self.lock();
        if state.held_until.is_none_or(|held| held < until) {
            state.held_until = Some(until);
        }
    }

    /// Where the target is taken to start refusing this process (entities per second), once it
    /// has refused it.
    pub fn estimate(&self) -> Option<f64> {
        self.lock().refused_at
    }

    /// The rate this process used when the target last refused it (entities per second, what
    /// the cut was made from), once it has refused it.
    pub fn refused_rate(&self) -> Option<f64> {
        self.lock().refused_from
    }

    /// Whether the target answers this process much slower than at its quickest lately (more
    /// than twice as slowly, and at least 50 ms slower): it queues what it is sent, as an
    /// account does before it refuses. The limit does not climb meanwhile, and a scan asks no
    /// raise of its learned cap (the handler's refresher): more sent would lengthen the queue.
    pub fn answers_slowly(&self) -> bool {
        self.lock().latency.slow(Instant::now())
    }

    /// How many times the target's refusals cut the rate so far.
    pub fn cuts(&self) -> u64 {
        self.lock().cuts
    }

    /// The current limit in entities per second; `None` while there is none.
    pub fn rate(&self) -> Rate {
        let mut state = self.lock();
        self.raise(&mut state, Instant::now());
        self.bucket.rate()
    }

    fn raise(&self, state: &mut Aimd, now: Instant) {
        let (Some(rate), Some(estimate)) = (self.bucket.rate(), state.refused_at) else {
            return;
        };
        let elapsed = now.saturating_duration_since(state.last_raise);
        if elapsed < Duration::from_millis(100) {
            return;
        }
        state.last_raise = now;
        let held = state.held_until.is_some_and(|until| now < until);
        if !held
            && state
                .last_cut
                .is_some_and(|at| now.saturating_duration_since(at) >= QUIET_BEFORE_LIFT)
        {
            self.bucket.set_rate(None);
            return;
        }
        if state.latency.slow(now) {
            return;
        }
        let seconds = elapsed.as_secs_f64();
        let ceiling = estimate * RECOVER_TO;
        if rate < ceiling {
            // Recovering, whether or not the limit is in use: a limit cut while the process
            // was busy elsewhere (a copy's reads while it writes) comes back all the same.
            let recovery = (estimate * RECOVER_PER_SECOND).max(LEAST_RECOVERY);
            self.bucket
                .set_rate(Some((rate + recovery * seconds).min(ceiling)));
            return;
        }
        // At the ceiling: it creeps up only after a quiet while, and only while in use (an
        // idle process would come back with a limit far above what the target takes).
        let quiet = state
            .last_cut
            .is_none_or(|at| now.saturating_duration_since(at) >= QUIET_BEFORE_PROBE);
        let held_back = self
            .bucket
            .held_since(now.checked_sub(Duration::from_secs(1)).unwrap_or(now));
        let in_use = held_back || state.meter.pace(now) >= rate * USED_TO_CLIMB;
        if quiet && in_use && !held {
            let probe = (estimate * PROBE_PER_SECOND).max(LEAST_PROBE);
            self.bucket.set_rate(Some(rate + probe * seconds));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Aimd> {
        // Plain numbers: a panic elsewhere cannot leave them half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The governors of the storage targets one process talks to (an account's table service,
/// one queue): one per target, shared by every client built with the same registry.
///
/// The process that owns the clients owns this and hands it to each client it builds
/// ([`crate::ClientOptions::governors`]), as object_store takes credentials it is given: the
/// handler's state keeps one for the process, so every step's reads of an account meet one
/// back-off, and a test or a tool that builds its own clients paces them apart from any other.
#[derive(Clone, Default)]
pub struct Governors(Arc<Mutex<HashMap<String, Arc<Governor>>>>);

impl Governors {
    /// The governor of `target` (see `Pipeline::pacing_target`), made on first use.
    pub fn of(&self, target: &str) -> Arc<Governor> {
        let mut governors = self.0.lock().unwrap_or_else(|e| e.into_inner());
        governors.entry(target.to_string()).or_default().clone()
    }
}

impl std::fmt::Debug for Governors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let targets = self.0.lock().map_or(0, |g| g.len());
        f.debug_struct("Governors")
            .field("targets", &targets)
            .finish()
    }
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

    /// Uses `entities` in a second, then is refused: the use it cuts from is `entities` a
    /// second.
    async fn refused_after_using(governor: &Governor, entities: u64) {
        governor.note_use(entities);
        tokio::time::advance(Duration::from_secs(1)).await;
        governor.throttled();
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

    /// A governor refused twice: first at 20,000 a second (cut to 10,000, estimate 15,000), then
    /// at 10,000 (cut to 7,000, the estimate 8,500).
    async fn cut_to_seven_thousand() -> Governor {
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(3)).await;
        refused_after_using(&governor, 20_000).await;
        assert_eq!(governor.rate(), Some(10_000.0));
        tokio::time::advance(Duration::from_secs(3)).await;
        refused_after_using(&governor, 10_000).await;
        near(&governor, 7_000.0, 1.0);
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
    async fn a_target_not_heard_from_is_not_limited() {
        let governor = Governor::default();
        assert_eq!(governor.rate(), None);
        busy_for(&governor, Duration::from_secs(5)).await;
        assert_eq!(governor.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_refusal_halves_the_use_and_the_rate_stays_under_a_ceiling() {
        let governor = Governor::default();
        refused_after_using(&governor, 4_000).await;
        near(&governor, 2_000.0, 1.0);
        // Back to 90% of the estimate (three quarters of what was refused) within seconds...
        busy_for(&governor, Duration::from_secs(5)).await;
        near(&governor, 2_700.0, 1.0);
        // ...and no higher while the refusal is recent, busy as the process is.
        busy_for(&governor, Duration::from_secs(2)).await;
        near(&governor, 2_700.0, 1.0);
        assert_eq!(governor.cuts(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_early_in_a_second_cuts_from_the_pace_of_the_use_so_far() {
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(3)).await;
        // 3,000 in the first 0.6 s of a scan: 5,000 a second.
        governor.note_use(3_000);
        tokio::time::advance(Duration::from_millis(600)).await;
        governor.throttled();
        near(&governor, 2_500.0, 1.0);
        assert_eq!(governor.estimate(), Some(3_750.0));
        // Pages reserved all at once a moment before count over half a second at least.
        let governor = Governor::default();
        tokio::time::advance(Duration::from_secs(3)).await;
        governor.note_use(4_000);
        tokio::time::advance(Duration::from_millis(100)).await;
        governor.throttled();
        near(&governor, 4_000.0, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lift_ends_the_back_off_at_once_and_the_next_refusal_cuts_again() {
        let governor = cut_to_seven_thousand().await;
        governor.lift();
        assert_eq!(governor.rate(), None);
        busy_for(&governor, Duration::from_secs(2)).await;
        assert_eq!(
            governor.rate(),
            None,
            "nothing limits it until refused again"
        );
        governor.throttled();
        // Cut from what it used (100,000 a second while unlimited).
        assert!(governor.rate().is_some_and(|rate| rate < 100_000.0));
        assert_eq!(governor.cuts(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_quiet_while_the_ceiling_creeps_up_while_used() {
        let governor = Governor::default();
        refused_after_using(&governor, 4_000).await;
        // Unused, it recovers to its ceiling and stays there.
        tokio::time::advance(QUIET_BEFORE_PROBE + Duration::from_secs(1)).await;
        near(&governor, 2_700.0, 1.0);
        // Used, 5% of the estimate (3,000) a second.
        busy_for(&governor, Duration::from_secs(2)).await;
        near(&governor, 3_000.0, 2.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_cuts_from_what_is_used_but_not_below_half_the_limit() {
        let governor = cut_to_seven_thousand().await;
        // Unused for two seconds, the limit recovers all the same, to its ceiling (90% of
        // 8,500), and a refusal then cuts from half of it: the process used too little to
        // have caused it.
        tokio::time::advance(Duration::from_secs(2)).await;
        near(&governor, 7_650.0, 1.0);
        governor.throttled();
        near(&governor, 3_825.0 * CUT, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_longer_quiet_while_the_limit_is_lifted() {
        let governor = Governor::default();
        refused_after_using(&governor, 4_000).await;
        tokio::time::advance(QUIET_BEFORE_LIFT - Duration::from_secs(1)).await;
        assert!(governor.rate().is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(governor.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_limit_recovers_to_its_ceiling_and_stays_there_until_lifted() {
        let governor = Governor::default();
        refused_after_using(&governor, 4_000).await;
        let estimate = governor.estimate().unwrap();
        governor.hold_until(Instant::now() + Duration::from_secs(30));
        // Past the quiet while of a creep and of the lift, kept busy: at its ceiling still.
        for _ in 0..25 {
            busy_for(&governor, Duration::from_secs(1)).await;
        }
        near(&governor, estimate * RECOVER_TO, 1.0);
        // The hold ends: lifted, as the quiet while since the cut is long over.
        busy_for(&governor, Duration::from_secs(6)).await;
        assert_eq!(governor.rate(), None);
        // A lift ends a hold at once.
        refused_after_using(&governor, 4_000).await;
        governor.hold_until(Instant::now() + Duration::from_secs(30));
        governor.lift();
        assert_eq!(governor.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_cut_low_creeps_back_at_a_least_pace() {
        let governor = Governor::default();
        for _ in 0..12 {
            governor.throttled();
            tokio::time::advance(HOLD_AFTER_CUT).await;
        }
        let low = governor.rate().unwrap();
        tokio::time::advance(QUIET_BEFORE_PROBE).await;
        busy_for(&governor, Duration::from_secs(2)).await;
        let later = governor.rate().unwrap();
        assert!(
            later - low >= 2.0 * LEAST_PROBE - 1e-6,
            "{low} to {later} in 2 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_storm_of_refusals_cuts_once() {
        let governor = cut_to_seven_thousand().await;
        governor.throttled();
        governor.throttled();
        near(&governor, 7_000.0, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_again_below_the_last_estimate_levels_off_lower() {
        let governor = cut_to_seven_thousand().await;
        // The estimate fell to 8,500 (refused at 10,000, below the first estimate of 15,000):
        // the ceiling is 7,650.
        busy_for(&governor, Duration::from_secs(6)).await;
        near(&governor, 7_650.0, 1.0);
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

    #[tokio::test(start_paused = true)]
    async fn slower_answers_hold_the_climb() {
        let governor = Governor::default();
        for _ in 0..20 {
            governor.answered_in(Duration::from_millis(40), 1_000);
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        refused_after_using(&governor, 4_000).await;
        // Answers four times slower: no climb from the cut.
        for _ in 0..10 {
            governor.answered_in(Duration::from_millis(160), 1_000);
        }
        busy_for(&governor, Duration::from_secs(3)).await;
        near(&governor, 2_000.0, 1.0);
        // Quick again: it recovers.
        for _ in 0..10 {
            governor.answered_in(Duration::from_millis(40), 1_000);
        }
        busy_for(&governor, Duration::from_secs(3)).await;
        near(&governor, 2_700.0, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn full_pages_are_not_slow_beside_small_requests() {
        let governor = Governor::default();
        // Small requests answer in 20 ms, pages of 1,000 rows in 300 ms, at the same load.
        for _ in 0..20 {
            governor.answered_in(Duration::from_millis(20), 10);
            governor.answered_in(Duration::from_millis(300), 1_000);
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert!(!governor.answers_slowly());
        // Pages slowing to three times their own quickest are slow.
        for _ in 0..10 {
            governor.answered_in(Duration::from_millis(900), 1_000);
        }
        assert!(governor.answers_slowly());
        // Not heard from for a while, that class says nothing of the target now.
        tokio::time::advance(LATELY).await;
        governor.answered_in(Duration::from_millis(20), 10);
        assert!(!governor.answers_slowly());
    }

    #[test]
    fn targets_are_shared_by_name_within_one_registry() {
        let governors = Governors::default();
        let a = governors.of("http://a/one");
        assert!(Arc::ptr_eq(&a, &governors.clone().of("http://a/one")));
        assert!(!Arc::ptr_eq(&a, &governors.of("http://a/two")));
        assert!(!Arc::ptr_eq(&a, &Governors::default().of("http://a/one")));
    }
}
