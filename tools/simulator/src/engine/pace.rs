//! A scan's pace in each simulated instance, as `functions::pacing` keeps it in a process:
//! the account's back-off (the real `Governor`, one per account per instance), admission of
//! steps by the rate (`STEP_RATE` a step), pages sized to half a second of a step's part of
//! it, and for a capped scan the instance's share of the cap: the real slices protocol
//! (`tablescan_pace::ScanShare`, ticked every 100 ms) on an in-memory store whose requests are
//! charged to the ledger's partition. A scan without a cap learns one from the account's
//! refusals as `job::learning` describes it: a cut opens a round, every instance reports what
//! it moves, and the round's sum sets the cap (`learning::next_cap`), raised when it held
//! quietly and lowered when refused while used in full.
//!
//! Approximated (the handler's `Pacing` keeps its leases on the wall clock, which a paused
//! clock cannot move, so its code cannot run here as it is): the learning rounds are kept in
//! memory (their ledger requests are charged, their latency is not waited for), every
//! instance sees a round or a learned cap at once rather than at its next read of the scan
//! row, and pages are not reserved ahead.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablescan::functions::pacing::{
    cap_of, crowded, ADMIT_WAIT, GIVE_BACK_MAX, SHARE_WAIT, STEP_RATE,
};
use tablescan::job::learning::{next_cap, BETWEEN_ROUNDS, LOWER, LOWER_EVERY, QUIET, RAISE, ROUND};
use tablescan::storage::pacing::{Governor, TokenBucket};
use tablescan_pace::{Clock, Demand, InMemorySlices, ScanShare};

use super::{lock, Engine};
use crate::ledger_costs::Cost;
use crate::params::Params;

/// The refresher's tick (`functions::pacing::refresher::TICK`).
const TICK: Duration = Duration::from_millis(100);
/// How long an instance stays in a scan after its last step (`refresher::GRACE`).
const GRACE: f64 = 5.0;
/// How long after a cut an instance reports (`refresher::REPORT_DELAY`).
const REPORT_DELAY: f64 = 4.0;
/// What an instance moved over this long is its rate (`refresher::RATE_SPAN`).
const RATE_SPAN: f64 = 2.0;
/// A refused instance moving this share of its grant presses on the account
/// (`refresher::PRESSING`).
const PRESSING: f64 = 0.8;
/// Half a second of a step's part of the rate per page, at least 100 rows
/// (`functions::pacing::{PAGE_SECONDS, MIN_PAGE}`).
const PAGE_SECONDS: f64 = 0.5;
const MIN_PAGE: u16 = 100;
/// A learning report: a read and a conditional write of the learning row.
const REPORT: Cost = Cost {
    requests: 2,
    entities: 2,
};

#[derive(Default)]
struct Learning {
    learned: Option<f64>,
    peak: f64,
    round: Option<Round>,
    last_round_at: f64,
    changed_at: f64,
    last_lower_at: f64,
    refused_since_change: bool,
}

struct Round {
    opened: f64,
    sum: f64,
    reported: HashSet<usize>,
}

/// The scan's pace across instances.
pub struct ScanPacing {
    /// The cap the scan's request set.
    set: Option<f64>,
    learning: Mutex<Learning>,
    store: InMemorySlices,
    /// The slices' clock: this case's own, so that a case's leases do not depend on the cases
    /// run before it in the same process.
    clock: CaseClock,
    instances: Mutex<HashMap<usize, Arc<InstancePace>>>,
}

/// Milliseconds since the case's first reading of the clock, on tokio's (paused) clock, from a
/// fixed start. `tablescan_pace::TokioClock` anchors once per process to the wall clock: a
/// second case in the same process began at an offset that included real time, and its leases
/// ran out at other moments from one run to the next.
#[derive(Clone, Default)]
struct CaseClock(Arc<std::sync::OnceLock<tokio::time::Instant>>);

/// Where a case's clock starts: 2023-11-14, any fixed epoch time would do.
const CASE_EPOCH_MS: u64 = 1_700_000_000_000;

impl Clock for CaseClock {
    fn now_ms(&self) -> u64 {
        let start = *self.0.get_or_init(tokio::time::Instant::now);
        CASE_EPOCH_MS + start.elapsed().as_millis() as u64
    }
}

#[derive(Default)]
struct PaceState {
    running: usize,
    waiting: usize,
    last_step_end: f64,
    /// When a step was last given back here for want of room.
    given_back_at: Option<f64>,
    ticking: bool,
    cuts_seen: u64,
    report_at: Option<f64>,
    /// (time, moved so far), a tick apart.
    moved_log: VecDeque<(f64, u64)>,
}

/// One instance's pace of the scan.
pub struct InstancePace {
    instance: usize,
    pub source: Arc<Governor>,
    pub target: Arc<Governor>,
    share: TokenBucket,
    slices: Mutex<Option<Arc<ScanShare<InMemorySlices, CaseClock>>>>,
    cap_in_use: Mutex<Option<f64>>,
    state: Mutex<PaceState>,
    /// Entities this instance moved for the scan (rows read, rows written).
    pub moved: AtomicU64,
}

impl ScanPacing {
    pub fn new(params: &Params) -> Self {
        ScanPacing {
            set: (params.cap > 0.0).then_some(params.cap),
            learning: Mutex::default(),
            store: InMemorySlices::default(),
            clock: CaseClock::default(),
            instances: Mutex::default(),
        }
    }

    /// The cap the scan is paced at now, set or learned.
    pub fn cap(&self) -> Option<f64> {
        cap_of(self.set, lock(&self.learning).learned)
    }

    /// The learned cap, if any.
    pub fn learned(&self) -> Option<f64> {
        lock(&self.learning).learned
    }

    /// Requests and entities the slices protocol asked of its store so far.
    pub fn slice_counts(&self) -> (u64, u64) {
        let counts = &self.store.counts;
        (counts.requests.load(Ordering::Relaxed), counts.entities())
    }

    /// Instances that ran a step of the scan in the last few seconds.
    pub fn busy_instances(&self, now: f64) -> usize {
        lock(&self.instances)
            .values()
            .filter(|p| {
                let s = lock(&p.state);
                s.running + s.waiting > 0 || now - s.last_step_end < GRACE
            })
            .count()
    }

    /// `instance`'s pace, its ticker started if it was not running.
    pub fn instance(&self, engine: &Arc<Engine>, instance: usize) -> Arc<InstancePace> {
        let pace = lock(&self.instances)
            .entry(instance)
            .or_insert_with(|| {
                Arc::new(InstancePace {
                    instance,
                    source: Arc::new(Governor::default()),
                    target: Arc::new(Governor::default()),
                    share: TokenBucket::new(None),
                    slices: Mutex::default(),
                    cap_in_use: Mutex::default(),
                    state: Mutex::default(),
                    moved: AtomicU64::new(0),
                })
            })
            .clone();
        let start = {
            let mut state = lock(&pace.state);
            !std::mem::replace(&mut state.ticking, true)
        };
        if start {
            tokio::task::spawn_local(tick(engine.clone(), pace.clone()));
        }
        pace
    }

    /// Every instance gives its slices back (the scan is over).
    pub async fn leave_all(&self) {
        let paces: Vec<Arc<InstancePace>> = lock(&self.instances).values().cloned().collect();
        for pace in paces {
            let share = lock(&pace.slices).take();
            if let Some(share) = share {
                share.leave().await;
            }
        }
    }

    /// An instance's report into the scan's learning round (opening one if none is open and
    /// the last was long enough ago).
    fn report(&self, engine: &Engine, instance: usize, rate: f64, now: f64, opens: bool) {
        let mut learning = lock(&self.learning);
        let between = BETWEEN_ROUNDS.as_secs_f64();
        if learning.round.is_none() && opens && now - learning.last_round_at >= between {
            learning.round = Some(Round {
                opened: now,
                sum: 0.0,
                reported: HashSet::new(),
            });
            learning.last_round_at = now;
        }
        if let Some(round) = learning.round.as_mut() {
            if round.reported.insert(instance) {
                round.sum += rate;
                drop(learning);
                engine.charge_ledger(REPORT, now);
            }
        }
    }

    /// Closes the round if it is over; raises a cap that held quietly while used in full.
    fn settle(&self, engine: &Engine, now: f64) {
        let mut learning = lock(&self.learning);
        let closing = learning
            .round
            .as_ref()
            .is_some_and(|r| now >= r.opened + ROUND.as_secs_f64());
        if closing {
            let round = learning.round.take().expect("a round");
            let first = learning.learned.is_none();
            let cap = next_cap(learning.learned, learning.peak, round.sum);
            learning.learned = Some(cap);
            learning.peak = learning.peak.max(cap);
            learning.changed_at = now;
            learning.refused_since_change = false;
            drop(learning);
            engine.charge_ledger(REPORT, now);
            engine.world().stats.caps_learned += 1;
            if first {
                // The learned cap takes over from each instance's back-off (`Governor::lift`
                // in `ScanPace::learned`).
                for pace in lock(&self.instances).values() {
                    pace.source.lift();
                }
            }
            return;
        }
        let Some(cap) = learning.learned else {
            return;
        };
        if now - learning.changed_at >= QUIET.as_secs_f64() && !learning.refused_since_change {
            drop(learning);
            let used: f64 = lock(&self.instances)
                .values()
                .map(|p| p.rate_moved(now))
                .sum();
            if used >= cap * 0.9 {
                let mut learning = lock(&self.learning);
                learning.learned = Some(cap * RAISE);
                learning.peak = learning.peak.max(cap * RAISE);
                learning.changed_at = now;
                drop(learning);
                engine.charge_ledger(REPORT, now);
            }
        }
    }

    /// A refusal of an instance using its whole share of a learned cap lowers it.
    fn refused_pressing(&self, engine: &Engine, now: f64) {
        let mut learning = lock(&self.learning);
        learning.refused_since_change = true;
        let Some(cap) = learning.learned else {
            return;
        };
        if now - learning.changed_at.max(learning.last_lower_at) < LOWER_EVERY.as_secs_f64() {
            return;
        }
        learning.learned = Some((cap * LOWER).max(learning.peak * 0.25));
        learning.last_lower_at = now;
        learning.changed_at = now;
        drop(learning);
        engine.charge_ledger(REPORT, now);
    }
}

impl InstancePace {
    /// The rate this instance's steps may use now, if anything limits it.
    fn rate(&self) -> Option<f64> {
        let capped = lock(&self.cap_in_use).is_some();
        match (self.share.rate().filter(|_| capped), self.source.rate()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Steps that may run at once (`ScanPace::slots`).
    fn slots(&self) -> usize {
        match self.rate() {
            Some(rate) if rate < 1e-6 => 0,
            Some(rate) => ((rate / STEP_RATE).ceil() as usize + 1).clamp(2, 64),
            None => usize::MAX,
        }
    }

    /// Rows the next page asks for (`StepPace::page_size`).
    pub fn page_size(&self, top: u16) -> u16 {
        let Some(rate) = self.rate() else {
            return top;
        };
        let running = lock(&self.state).running.max(1) as f64;
        let top = top.max(1);
        ((rate / running * PAGE_SECONDS) as u16).clamp(MIN_PAGE.min(top), top)
    }

    /// Waits up to `ADMIT_WAIT` for room to run a step: whether it was admitted crowded
    /// (`tablescan::functions::pacing::crowded`), or `None`: the item is given back.
    pub async fn admit(&self, engine: &Engine) -> Option<bool> {
        lock(&self.state).waiting += 1;
        let give_up = engine.now() + ADMIT_WAIT.as_secs_f64();
        loop {
            {
                let mut state = lock(&self.state);
                let slots = self.slots();
                if state.running < slots {
                    state.running += 1;
                    state.waiting -= 1;
                    let gave_back_lately = state
                        .given_back_at
                        .is_some_and(|at| engine.now() - at < GIVE_BACK_MAX.as_secs_f64());
                    return Some(crowded(state.running, slots, gave_back_lately));
                }
                if engine.now() >= give_up {
                    state.given_back_at = Some(engine.now());
                    state.waiting -= 1;
                    state.last_step_end = engine.now();
                    return None;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The scan's steps here: how many may run at once, run and wait (`StepPace::occupancy`).
    pub fn occupancy(&self) -> (usize, usize, usize) {
        let state = lock(&self.state);
        (self.slots(), state.running, state.waiting)
    }

    /// A step admitted by [`admit`](Self::admit) ended.
    pub fn step_ended(&self, now: f64) {
        let mut state = lock(&self.state);
        state.running -= 1;
        state.last_step_end = now;
    }

    /// Waits for `entities` of the instance's share of a capped scan (at most `SHARE_WAIT`);
    /// `false` if it did not come.
    pub async fn take_share(&self, entities: u64) -> bool {
        if lock(&self.cap_in_use).is_none() {
            return true;
        }
        tokio::time::timeout(SHARE_WAIT, self.share.take(entities))
            .await
            .is_ok()
    }

    pub fn give_back_share(&self, entities: u64) {
        if lock(&self.cap_in_use).is_some() {
            self.share.give_back(entities);
        }
    }

    /// Entities per second moved over the last `RATE_SPAN`.
    fn rate_moved(&self, now: f64) -> f64 {
        let state = lock(&self.state);
        let Some(&(from, before)) = state.moved_log.front() else {
            return 0.0;
        };
        let moved = self.moved.load(Ordering::Relaxed);
        if now - from < 0.5 {
            return 0.0;
        }
        (moved - before) as f64 / (now - from)
    }
}

/// The instance's refresher: every tick while it runs steps of the scan and for `GRACE`
/// after, learning from its back-off's cuts and keeping its share of a cap.
async fn tick(engine: Arc<Engine>, pace: Arc<InstancePace>) {
    let scan = &engine.pacing;
    loop {
        tokio::time::sleep(TICK).await;
        if engine.is_done() {
            break;
        }
        let now = engine.now();
        if note_moved_and_idle(&pace, now) {
            leave(&pace).await;
            return;
        }
        let rate = learn(&engine, &pace, now);
        // A capped scan: the instance's share.
        let Some(cap) = scan.cap() else {
            continue;
        };
        keep_share(&engine, &pace, cap, rate).await;
    }
}

/// Logs what the instance moved by `now`; `true` when it has run no step for `GRACE`.
fn note_moved_and_idle(pace: &InstancePace, now: f64) -> bool {
    let moved = pace.moved.load(Ordering::Relaxed);
    let mut state = lock(&pace.state);
    state.moved_log.push_back((now, moved));
    while state
        .moved_log
        .front()
        .is_some_and(|(t, _)| now - t > RATE_SPAN)
    {
        state.moved_log.pop_front();
    }
    state.running + state.waiting == 0 && now - state.last_step_end > GRACE
}

/// The instance leaves the scan: its slices given back, its share cleared.
async fn leave(pace: &InstancePace) {
    let share = lock(&pace.slices).take();
    *lock(&pace.cap_in_use) = None;
    pace.share.set_rate(None);
    if let Some(share) = share {
        share.leave().await;
    }
    lock(&pace.state).ticking = false;
}

/// Learning from the back-off's cuts: reports into the scan's round, settles it; the rate the
/// instance moved over the last `RATE_SPAN`.
fn learn(engine: &Arc<Engine>, pace: &InstancePace, now: f64) -> f64 {
    let scan = &engine.pacing;
    let cuts = pace.source.cuts();
    let cut = {
        let mut state = lock(&pace.state);
        let cut = cuts > state.cuts_seen;
        state.cuts_seen = cuts;
        if cut && state.report_at.is_none() {
            state.report_at = Some(now + REPORT_DELAY);
        }
        cut
    };
    let rate = pace.rate_moved(now);
    if cut && scan.learned().is_some() {
        let granted = pace.share.rate().unwrap_or(f64::INFINITY);
        if rate >= granted * PRESSING {
            scan.refused_pressing(engine, now);
        }
    }
    let report_due = {
        let mut state = lock(&pace.state);
        match state.report_at {
            Some(at) if now >= at => {
                state.report_at = None;
                true
            }
            _ => false,
        }
    };
    // Without a cut of its own, the instance reports what it moves into an open round.
    scan.report(engine, pace.instance, rate, now, report_due);
    scan.settle(engine, now);
    rate
}

/// Keeps the instance's share of a capped scan: its slices ticked with its demand, its rate
/// set to what they grant.
async fn keep_share(engine: &Arc<Engine>, pace: &InstancePace, cap: f64, rate: f64) {
    let scan = &engine.pacing;
    let share = {
        let mut slices = lock(&pace.slices);
        let share = slices.get_or_insert_with(|| {
            pace.share.set_rate(Some(0.0));
            Arc::new(ScanShare::new(
                scan.store.clone(),
                scan.clock.clone(),
                "scan",
                &format!("instance-{}", pace.instance),
                cap,
            ))
        });
        if (share.cap() - cap).abs() > 1e-9 {
            share.set_cap(cap);
        }
        share.clone()
    };
    *lock(&pace.cap_in_use) = Some(cap);
    let waiting = lock(&pace.state).waiting > 0;
    let held_back = pace.share.held_since(
        tokio::time::Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(tokio::time::Instant::now),
    );
    let demand = Demand {
        wants_more: held_back || waiting || share.granted() <= 0.0,
        used: rate,
    };
    share.tick(demand).await;
    pace.share.set_rate(Some(share.granted()));
}
