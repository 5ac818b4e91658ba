//! A scan's pace in this process: how many of its steps may run here at once, how fast they
//! may read and write, and, for a capped scan, this process's part of the cap.
//!
//! Each process keeps, per scan it runs steps of, a token bucket ([`TokenBucket`]) that every
//! read and write of those steps pays into before it is sent: rows asked for (a short page gives
//! the rest back) and rows written. For a capped scan the bucket's rate is what the process
//! holds of the cap: its leased slices (`tablescan_pace`), renewed, taken and given back by a
//! refresher task a tick at a time; beside the bucket, a record of the last second's use
//! ([`RecentUse`]) holds every second within a tenth of that rate. An uncapped scan's bucket
//! is unlimited; its reads and writes are paced only by the account's back-off ([`Governor`]).
//!
//! Admission: a step may start only while the process runs fewer steps of the scan than its
//! rate gives each [`STEP_RATE`] (all of them while nothing limits it). A step that is not
//! admitted within a few seconds ([`ADMIT_WAIT`]) is not run here: the caller gives its work
//! item back to the queue for later, so that no invocation waits long for a share (holding its
//! place in the host, and a long queue that makes the platform add instances that could only
//! split the cap further). Fewer steps, each reading longer pages, also cost fewer queries and
//! ledger writes than many starved ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use ledger_health::LedgerHealth;
use tablescan_engine::{ReadMode, ScanOptions};
use tablescan_ledger::{Ledger, ScanRecord};
use tablescan_pace::ScanShare;
use tablescan_storage::pacing::{Governor, RecentUse, Ticket, TokenBucket};

/// The wall clock a process's leases and learning rounds are written in, chosen when its
/// [`Pacing`] is made: the machine's clock in the handler (`tablescan_pace::SystemClock`), one
/// that moves with tokio's clock in tests and in the simulator, which run on a paused clock
/// that the machine's clock would not follow.
#[derive(Clone)]
pub struct LeaseClock(Arc<dyn tablescan_pace::Clock>);

impl LeaseClock {
    pub fn new(clock: impl tablescan_pace::Clock) -> Self {
        LeaseClock(Arc::new(clock))
    }
}

impl tablescan_pace::Clock for LeaseClock {
    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }
}

/// How long a step waits to be admitted before its work item is given back.
pub const ADMIT_WAIT: Duration = Duration::from_secs(3);
/// The longest a work item given back waits before it is delivered again. The simulator's
/// paced 35M-row count at 20,000 entities/s chose it (`simulator --plan consumption
/// --account-entities-per-second 20000 --app-load 2000 [--cap 10000] --case count-35m`):
/// with 30 s the capped count gave back 433k items instead of 2.34M but ran 1.10 times its
/// bound instead of 1.02 (slices stood idle while the items that could use them waited out
/// long delays); with 16 s, 635k and 1.05, and the default count 346k instead of 1.38M at
/// 1.17 instead of 1.20.
pub const GIVE_BACK_MAX: Duration = Duration::from_secs(16);

/// How long a work item not admitted stays out of sight when given back for the
/// `times_given_back + 1`-th time in a row: between half and all of 2, 4, 8, then 16 seconds,
/// `unit` (uniform in 0..1) placing it, so that items given back together do not come back
/// together. The first is short because the share it waited for may come free a moment later
/// (the last steps of a scan); each later one doubles because an item that keeps finding no
/// room belongs to a scan with more items than its pace runs at once, and every return costs
/// an invocation (waiting up to [`ADMIT_WAIT`]) and three queue operations. The platform
/// counts invisible messages in a queue's length, so this does not keep it from adding
/// instances; it keeps those instances from spending their time on returns.
pub fn give_back_delay(times_given_back: u32, unit: f64) -> Duration {
    let ceiling = Duration::from_secs(2u64 << times_given_back.min(5)).min(GIVE_BACK_MAX);
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    ceiling.mul_f64(0.5 + 0.5 * unit)
}

/// The rate one step of a paced scan is given at least (entities per second).
pub const STEP_RATE: f64 = 300.0;
/// How long after its place is earned a page reserved ahead may still use it.
const RESERVATION_LIFE: Duration = Duration::from_millis(100);
/// How many seconds of its share one page of a paced step holds.
const PAGE_SECONDS: f64 = 0.5;
/// The smallest page a paced step asks for.
const MIN_PAGE: u16 = 100;

/// How many seconds of a step's part of the rate its smallest page, and its largest write, may
/// take to earn, where [`MIN_PAGE`] would take longer: a quarter of [`SHARE_WAIT`], since a
/// step waits for the page it reserved ahead as well as for this one, behind the other steps
/// of its process. A page or write the share cannot pay within [`SHARE_WAIT`] times out
/// whenever it is asked for: a scan capped under 40 entities/s (20 for a step alone), a low cap
/// split into slices over many processes (16 slices of 300 entities/s are 19 each), or an
/// import's chunk of 1,000 rows under 200 entities/s read or wrote nothing, step after step,
/// its items given back for ever.
const AFFORDABLE_SECONDS: f64 = SHARE_WAIT.as_secs_f64() / 4.0;

/// The page a step asks for at `per_step` entities per second, at most `top` (at least 1):
/// half a second of it, not under [`MIN_PAGE`] unless that takes longer than
/// [`AFFORDABLE_SECONDS`] to earn.
fn page_size(per_step: f64, top: u16) -> u16 {
    let top = top.max(1);
    let affordable = (per_step * AFFORDABLE_SECONDS).clamp(1.0, f64::from(u16::MAX)) as u16;
    let least = MIN_PAGE.min(affordable).min(top);
    ((per_step * PAGE_SECONDS) as u16).clamp(least, top)
}

/// Whether the process's share of a scan, `granted` entities per second, is too small for any
/// step of it (`running` of them): half a second of it is under the smallest page, so every
/// page waits for more than the share earns while the page is read, and the process moves
/// less than [`tablescan_pace::WANTS_MORE_AT`] of its grant however much it is held back. Such
/// a process was not taken to want more, and only one that wants more looks for slices the
/// others do not use: in a devhost run a default scan moved 100 entities a second, one
/// smallest page, for 13 s under a learned cap of 2,416 (a slice of it: 151) with no refusal.
/// Counted per step it took in processes running many steps on a fair grant too (a third of
/// 3,000 over five steps), and the default alone ran at 90% in two runs: slices asked to and
/// fro between busy processes is the likely cause, not established.
pub(crate) fn starved(granted: f64, running: usize) -> bool {
    running > 0 && granted > 0.0 && granted * PAGE_SECONDS < f64::from(MIN_PAGE)
}

/// This process's pacing of every scan it runs steps of.
pub struct Pacing {
    /// Names this process in the slices it leases.
    process: String,
    clock: LeaseClock,
    scans: Scans,
    /// How many scan paces this process has made: each leases under a name of its own.
    paces_made: AtomicU64,
}

/// The scans this process paces. A refresher removes its scan while holding the lock, so a
/// step that arrives meanwhile finds the scan gone and starts afresh, never a removed one.
type Scans = Arc<tokio::sync::Mutex<HashMap<String, Arc<ScanPace>>>>;

impl Pacing {
    /// A process's pacing, its leases and learning rounds timed by `clock`, the process named
    /// at random (unique among the processes that share a ledger).
    pub fn new(clock: impl tablescan_pace::Clock) -> Self {
        Self::named(clock, tablescan_ledger::ledger::new_scan_id())
    }

    /// A process's pacing under the name `process`, which no other process sharing the ledger
    /// may have. The simulator names its instances so that a run repeats exactly: the name
    /// seeds the order in which a process probes the slices of a cap (`ScanShare`).
    pub fn named(clock: impl tablescan_pace::Clock, process: String) -> Self {
        Pacing {
            process,
            clock: LeaseClock::new(clock),
            scans: Scans::default(),
            paces_made: AtomicU64::new(0),
        }
    }
}

/// One scan's pacing in this process.
pub struct ScanPace {
    scan: String,
    /// The cap the scan's request set, entities per second, if any.
    set: Option<f64>,
    /// The cap it is paced at now: the set one, or one learned from the accounts' refusals
    /// (see [`cap_of`]).
    cap: Mutex<Option<f64>>,
    /// When the cap last changed here.
    cap_changed: Mutex<Instant>,
    /// This process's part of the cap, once the scan has one.
    slices: Mutex<Option<Arc<ScanShare<Ledger, LeaseClock>>>>,
    ledger: Ledger,
    /// Names this pace in the slices it leases: the process's name and the pace's number.
    holder: String,
    /// The clock its leases and learning rounds are written in.
    clock: LeaseClock,
    /// The back-off of the account the scan reads, as its first step here found it, and how
    /// many cuts it had made then (those were not this scan's).
    source: Mutex<Option<(Arc<Governor>, u64)>>,
    /// The back-off of the queue the scan's steps put their messages on, once one put there
    /// ([`StepPace::before_put`]): a queue takes about 2,000 messages a second, far less than
    /// an account's entities, so the steps' slots and pages follow it as they follow the
    /// source's.
    output: Mutex<Option<Arc<Governor>>>,
    /// What the process may use of the scan's rate: its slices' worth for a capped scan,
    /// unlimited otherwise.
    share: TokenBucket,
    /// What the share let through over the last second, so that no second holds more than a
    /// tenth over what the share earned in it (the bucket alone lets give-backs spend capacity
    /// earned earlier).
    recent: RecentUse,
    /// When the scan's last learning round opened, as this process last read the scan: its
    /// refresher reports into it (`job::learning`).
    round_ms: AtomicU64,
    /// Whether the scan has learned a cap (in force or not: its request may set a lower one).
    has_learned: std::sync::atomic::AtomicBool,
    /// Entities this process moved for the scan (rows the account returned, rows written): what
    /// its slices report, and what it reports when an account refuses it.
    moved: AtomicU64,
    /// The scan's slots here as its ledger partition's strains allow.
    ledger_health: LedgerHealth,
    /// Steps of the scan ended here: what its strains are judged against ([`ledger_health`]).
    ended: AtomicU64,
    /// Strains of the partition met outside `Ledger::commit_counted`
    /// ([`StepPace::ledger_strained`]), counted with the ledger's.
    strains_noted: AtomicU64,
    /// Until when (epoch ms) this process runs none of the scan's steps unless the scan has a
    /// cap: it joined the scan while the scan learned its cap ([`round_hold`]); 0 if not.
    joined_learning_until_ms: u64,
    state: Mutex<PaceState>,
}

/// Locks plain data: a panic elsewhere cannot leave it half-written.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct PaceState {
    running: usize,
    waiting: usize,
    /// When the last step ended, if none runs or waits now.
    idle_since: Option<Instant>,
    /// When a step of the scan was last given back here for want of room.
    given_back_at: Option<Instant>,
}

/// A place reserved in a scan's share ahead of a read ([`StepPace::reserve_read`]): used or
/// released once (not `Copy`: given up twice, it would be skipped twice).
#[derive(Debug)]
pub struct Reservation {
    source_place: f64,
    share_place: f64,
    /// When the share's place is earned, at the rate of the moment it was reserved.
    due: Instant,
    entities: u64,
}

/// A step's place in its scan's pacing: released when dropped.
pub struct StepPace {
    pace: Arc<ScanPace>,
    /// The back-off of the account the scan reads.
    source: Arc<Governor>,
    /// Whether the scan's steps filled this process's room for it when this one was admitted
    /// ([`crowded`]).
    crowded: bool,
}

/// Whether a scan has more work items than its pace runs at once, as one process sees it when
/// it admits a step: that step took the last of the scan's slots here, or a step of the scan was
/// given back here within the longest give-back delay ([`GIVE_BACK_MAX`]). (Steps waiting behind
/// it while room is left are not a sign: they are admitted at their next look.) A step admitted
/// so splits less ([`shape_for_admission`]): more items would only wait too, each given back
/// again and again, and the queue's length (which counts them, visible or not) would bring the
/// platform more instances that only split the same rate. The slots follow the scan's cap (set
/// or learned) and the account's back-off in this process: a scan with neither is never
/// crowded.
pub fn crowded(running: usize, slots: usize, gave_back_lately: bool) -> bool {
    running >= slots || gave_back_lately
}

/// A step's options as its admission allows: a step admitted [`crowded`] hands the rest of its
/// range on in one piece at its budget's end (`fan_out` 1), and a step that reads rows splits
/// nothing off at all (`ScanOptions::hand_on_whole`: no piece cut at a page's last key
/// either). The tree of a paced scan then stops growing once its pace is full, and grows again
/// where a process has room (figures in docs/scan.md, "What a give-back does not do"). A
/// partition-keys step is left to split: one that seeks reads a partition a query, a few dozen
/// a second, well under what a slot assumes ([`STEP_RATE`]), so its scan's slots fill while its
/// rate does not, and read whole its capped scans ran far over their bound in the simulator.
pub fn shape_for_admission(options: &mut ScanOptions, crowded: bool) {
    if crowded {
        options.fan_out = 1;
        options.hand_on_whole = options.mode == ReadMode::Rows;
    }
}

/// How long a running step's read or write may wait for its share of the rate: a page waits
/// half a second of it normally, but a share may fall to nothing while the step runs (its
/// process lost its slices). Past this the step ends as if throttled, handing on the rest.
pub const SHARE_WAIT: Duration = Duration::from_secs(5);

/// The error a read or write meets when its share did not come in time ([`SHARE_WAIT`]): transient
/// (the step hands its rest on, or is tried again).
pub fn no_share(operation: &'static str, scan: &str) -> tablescan_storage::StorageError {
    tablescan_storage::StorageError::new(
        operation,
        format!("scan {scan}"),
        tablescan_storage::ErrorKind::Transport {
            message: "no share of the scan's rate came in time in this process".to_string(),
            maybe_sent: false,
        },
    )
}

/// A step not admitted in time: its work item should be given back for later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAdmitted {
    /// Steps of the scan running in this process, and what its rate allows.
    pub running: usize,
    pub slots: usize,
    /// How long the scan may still be learning its cap, when that is why: this process joined
    /// the scan while it did, and runs its steps once the cap comes ([`round_hold`]).
    pub learning_for: Option<Duration>,
}

impl std::fmt::Display for NotAdmitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.learning_for.is_some() {
            return write!(
                f,
                "the scan is learning its cap from the account's refusals, and this process \
                 joined it meanwhile: its steps run here once the cap comes"
            );
        }
        write!(
            f,
            "{} steps of the scan run in this process and its share of the scan's rate allows {}",
            self.running, self.slots
        )
    }
}

impl Pacing {
    /// Admits a step of `scan` (as this process last read it: its cap, set or learned) reading
    /// from the account behind `source`, waiting at most `wait` for room.
    pub async fn admit(
        &self,
        ledger: &Ledger,
        scan: &ScanRecord,
        source: Arc<Governor>,
        wait: Duration,
    ) -> Result<StepPace, NotAdmitted> {
        let pace = self.join(ledger, scan, &source).await;
        // Counted as waiting until admitted or given up, also if this future is dropped (the
        // host went away): a count left behind would keep the scan here for ever.
        let waiting = Waiting(pace.clone());
        let give_up_at = Instant::now() + wait;
        let admitted_crowded;
        loop {
            if let Some(left) = pace.learning_left() {
                // Not waited for here: the cap takes seconds, and the item comes back then.
                return Err(NotAdmitted {
                    running: pace.lock().running,
                    slots: 0,
                    learning_for: Some(left),
                });
            }
            {
                let mut state = pace.lock();
                let slots = pace.slots(&source);
                if state.running < slots {
                    state.running += 1;
                    state.idle_since = None;
                    let gave_back_lately = state
                        .given_back_at
                        .is_some_and(|at| at.elapsed() < GIVE_BACK_MAX);
                    admitted_crowded = crowded(state.running, slots, gave_back_lately);
                    break;
                }
                if Instant::now() >= give_up_at {
                    state.given_back_at = Some(Instant::now());
                    return Err(NotAdmitted {
                        running: state.running,
                        slots,
                        learning_for: None,
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(waiting);
        Ok(StepPace {
            pace,
            source,
            crowded: admitted_crowded,
        })
    }

    /// Takes a fresh read of `scan`, begun at `started`, into its pace here, if the process
    /// runs steps of it: its learned cap (unless the cap changed here since the read began),
    /// and its learning round.
    pub async fn read(&self, scan: &ScanRecord, started: Instant) {
        let pace = self.scans.lock().await.get(&scan.id).cloned();
        if let Some(pace) = pace {
            pace.learned_as_read(scan.learned_cap, started);
            pace.round_ms
                .fetch_max(scan.learn_round_ms, Ordering::Relaxed);
        }
    }

    /// The scan's pace in this process, counting one more step waiting for it, its cap brought
    /// up to date; started (with its refresher) if the process had none.
    async fn join(
        &self,
        ledger: &Ledger,
        scan: &ScanRecord,
        source: &Arc<Governor>,
    ) -> Arc<ScanPace> {
        let mut scans = self.scans.lock().await;
        let pace = scans
            .entry(scan.id.clone())
            .or_insert_with(|| {
                // Leased under a name of this pace's own: a pace of the same scan removed
                // from this process a moment ago may still be giving its slices back.
                let made = self.paces_made.fetch_add(1, Ordering::Relaxed);
                let holder = format!("{}.{made}", self.process);
                let pace = Arc::new(ScanPace::new(ledger, holder, &self.clock, scan));
                let refresher = refresher::Refresher::new(pace.clone(), self.scans.clone());
                tokio::spawn(refresher.run());
                pace
            })
            .clone();
        // The record a step is admitted by may be seconds old (`AppState::scan_record`): its
        // cap is taken only by a pace made from it (`ScanPace::new`). Taken into a running pace,
        // it put back a cap this process had lowered since (a devhost run: 3,050 entities/s
        // again twice in five seconds after the lowering to 2,470); fresh reads bring the
        // others' changes (`Pacing::read`).
        pace.round_ms
            .fetch_max(scan.learn_round_ms, Ordering::Relaxed);
        pace.watch(source);
        {
            let mut state = pace.lock();
            state.waiting += 1;
            state.idle_since = None;
        }
        pace
    }
}

/// The cap a scan is paced at: the one its request set, or the one learned from the accounts'
/// refusals (`job::learning`), whichever is lower.
pub fn cap_of(set: Option<f64>, learned: Option<f64>) -> Option<f64> {
    match (set, learned) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl ScanPace {
    fn new(ledger: &Ledger, holder: String, clock: &LeaseClock, scan: &ScanRecord) -> Self {
        let set = scan.spec.max_rows_per_second.map(f64::from);
        let pace = ScanPace {
            scan: scan.id.clone(),
            set,
            cap: Mutex::new(None),
            cap_changed: Mutex::new(Instant::now()),
            slices: Mutex::new(None),
            ledger: ledger.clone(),
            holder,
            clock: clock.clone(),
            source: Mutex::new(None),
            output: Mutex::new(None),
            share: TokenBucket::new(None),
            recent: RecentUse::new(None),
            moved: AtomicU64::new(0),
            ledger_health: LedgerHealth::default(),
            strains_noted: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            joined_learning_until_ms: round_hold::learning_until_ms(
                scan.learn_round_ms,
                set.is_some() || scan.learned_cap.is_some(),
                tablescan_pace::Clock::now_ms(clock),
            ),
            has_learned: Default::default(),
            round_ms: AtomicU64::new(scan.learn_round_ms),
            state: Mutex::new(PaceState::default()),
        };
        pace.learned(scan.learned_cap);
        pace
    }

    /// [`learned`](Self::learned), from a read of the scan begun at `started`: not if a
    /// learned cap is in force that changed here since (this process changed it in the
    /// ledger, or a newer read did): the read may predate the change. (The check and the
    /// change are not under one lock: a change between them is put back until the next read.)
    fn learned_as_read(&self, learned: Option<f64>, started: Instant) {
        // Only a learned cap in force can be undone: with none (a pace made from a record
        // without one, whose creation counts as a change), the read is the news.
        let learned_in_force = {
            let cap = lock(&self.cap);
            cap.is_some() && self.set.is_none_or(|set| *cap < Some(set))
        };
        if learned_in_force && started < *lock(&self.cap_changed) {
            return;
        }
        self.learned(learned);
    }

    /// Takes `learned` (the scan's learned cap as last read) into the cap: a scan paced by
    /// neither has no slices; one that gets a cap takes slices from then on, and uses nothing
    /// until it holds one.
    pub(super) fn learned(&self, learned: Option<f64>) {
        if learned.is_some() {
            self.has_learned.store(true, Ordering::Relaxed);
        }
        let Some(cap) = cap_of(self.set, learned) else {
            return;
        };
        let mut current = lock(&self.cap);
        if *current == Some(cap) {
            return;
        }
        // The learned cap takes over (it had none, or only the one its request set).
        let takes_over = learned.is_some() && (current.is_none() || *current == self.set);
        *current = Some(cap);
        *lock(&self.cap_changed) = Instant::now();
        if takes_over {
            // The scan's own ceiling, for all its processes, takes over from this process's
            // back-off (`Governor::lift`), which would otherwise hold it under that ceiling
            // until 12 s after its last refusal. The back-off is the account's in this process,
            // shared with its other scans: those are paced by their own caps (set or learned),
            // and one that has none meets the account's next refusal as any scan does, with a
            // cut. A refusal above the cap cuts again, and lowers the cap.
            if let Some((source, _)) = lock(&self.source).as_ref() {
                source.lift();
            }
        }
        let mut slices = lock(&self.slices);
        match slices.as_ref() {
            Some(share) => share.set_cap(cap),
            None => {
                *slices = Some(Arc::new(ScanShare::new(
                    self.ledger.clone(),
                    self.clock.clone(),
                    &self.scan,
                    &self.holder,
                    cap,
                )));
                self.share.set_rate(Some(0.0));
                self.recent.set_rate(Some(0.0));
            }
        }
    }

    /// Remembers the account back-off the scan's steps read through, to learn from its cuts.
    fn watch(&self, source: &Arc<Governor>) {
        lock(&self.source).get_or_insert_with(|| (source.clone(), source.cuts()));
    }

    /// The scan's share of its cap in this process, once it has a cap.
    pub(super) fn slices(&self) -> Option<Arc<ScanShare<Ledger, LeaseClock>>> {
        lock(&self.slices).clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PaceState> {
        // Plain counters: a panic elsewhere cannot leave them half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rate this process's steps of the scan may use now, if anything limits it.
    fn rate(&self, source: &Governor) -> Option<f64> {
        let capped = lock(&self.cap).is_some();
        let output = lock(&self.output).as_ref().and_then(|queue| queue.rate());
        [self.share.rate().filter(|_| capped), source.rate(), output]
            .into_iter()
            .flatten()
            .reduce(f64::min)
    }

    /// How many steps may run at once: all of them unless something limits the rate; none
    /// while a capped scan holds no slice, nor while this process waits for the cap of a scan
    /// it joined as it learned one ([`round_hold`]); never more than the scan's ledger
    /// partition bears ([`ledger_health`]).
    fn slots(&self, source: &Governor) -> usize {
        if self.awaits_cap() {
            return 0;
        }
        let strains = self.ledger.strains(&self.scan) + self.strains_noted.load(Ordering::Relaxed);
        let ended = self.ended.load(Ordering::Relaxed);
        let capped = lock(&self.cap).is_some();
        self.rate_slots(source)
            .min(self.ledger_health.slots(strains, ended, capped))
    }

    /// Whether this process joined the scan while it learned its cap, and waits for the cap
    /// before it runs a step ([`round_hold`]).
    pub(super) fn awaits_cap(&self) -> bool {
        self.learning_left().is_some()
    }

    /// How long this process may still wait for the scan's cap before it runs a step
    /// ([`round_hold`]); `None` when it does not wait.
    fn learning_left(&self) -> Option<Duration> {
        if self.joined_learning_until_ms == 0 || lock(&self.cap).is_some() {
            return None;
        }
        let now = tablescan_pace::Clock::now_ms(&self.clock);
        (now < self.joined_learning_until_ms)
            .then(|| Duration::from_millis(self.joined_learning_until_ms - now))
    }

    /// How many steps may run at once as the rate allows.
    fn rate_slots(&self, source: &Governor) -> usize {
        match self.rate(source) {
            // A share of nothing (no slice held): none; any share at all runs a step or two.
            Some(rate) if rate < 1e-6 => 0,
            // One more than the rate needs: a step between two work items (finishing, its
            // follow-ups on their way through the queue) leaves its part to the others.
            Some(rate) => ((rate / STEP_RATE).ceil() as usize + 1).clamp(2, 64),
            None => usize::MAX,
        }
    }
}

impl StepPace {
    /// A strain of the scan's ledger partition (a counter shard lost to another finish, a
    /// refusal) met where `Ledger::commit_counted` does not count it (the simulator's modelled
    /// finishes): it holds the scan's slots here down as the ledger's own count does.
    pub fn ledger_strained(&self) {
        self.pace.strains_noted.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the step was admitted [`crowded`].
    pub fn crowded(&self) -> bool {
        self.crowded
    }

    /// The scan's steps here now: how many may run at once, run (this one among them) and wait
    /// to be admitted; what `park::unpark_room` decides from.
    pub fn occupancy(&self) -> (usize, usize, usize) {
        let state = self.pace.lock();
        (self.pace.slots(&self.source), state.running, state.waiting)
    }

    /// How many rows to ask for in the next page: half a second's worth of the step's part of the
    /// rate (at least 100 rows, or what that part pays for in [`AFFORDABLE_SECONDS`] if less),
    /// at most `top`.
    pub fn page_size(&self, top: u16) -> u16 {
        let Some(rate) = self.pace.rate(&self.source) else {
            return top;
        };
        let running = self.pace.lock().running.max(1) as f64;
        page_size(rate / running, top)
    }

    /// The most rows one write of this step should carry, where the rate is limited: what the
    /// step's part of it earns in [`AFFORDABLE_SECONDS`], at least one. A page read is sized
    /// to the rate already; this cuts what was not (an import's chunk of up to 1,000 rows, a
    /// page read before the share was cut), so that its share comes within [`SHARE_WAIT`].
    pub fn write_size(&self) -> Option<usize> {
        let rate = self.pace.rate(&self.source)?;
        let running = self.pace.lock().running.max(1) as f64;
        Some((rate / running * AFFORDABLE_SECONDS).clamp(1.0, 1e9) as usize)
    }

    /// Waits until `entities` may be read from the source; the ticket gives back what the
    /// read did not use ([`after_read`](Self::after_read)).
    ///
    /// The scan's share is paid last: what the back-off held up is then let through at the
    /// share's rate, never faster. (Paid first, takers held up behind a slow back-off would
    /// go all at once when it lifts, over the cap.)
    pub async fn before_read(&self, entities: u64) -> Ticket {
        self.before_reserved_read(entities, None).await
    }

    /// As [`before_read`](Self::before_read), with part of the share reserved ahead
    /// ([`reserve_read`](Self::reserve_read)): more is paid for, or the rest given back.
    pub async fn before_reserved_read(
        &self,
        entities: u64,
        reserved: Option<Reservation>,
    ) -> Ticket {
        // A place earned a while ago (the step wrote, or waited, between its pages) would go
        // on top of what is earned now: it is given up, and the page pays afresh.
        let reserved = match reserved {
            Some(stale) if Instant::now() > stale.due + RESERVATION_LIFE => {
                self.release(stale);
                None
            }
            fresh => fresh,
        };
        let Some(reserved) = reserved else {
            self.source.take(entities).await;
            return self.take_share(entities).await;
        };
        // Both held from here: a wait given up (the share did not come in time, the step
        // ended) gives back whichever place is not yet earned.
        let source = self.source.hold(reserved.source_place, reserved.entities);
        let share = self
            .pace
            .share
            .hold(reserved.share_place, reserved.entities);
        source.earned().await;
        share.earned().await;
        if entities > reserved.entities {
            let more = entities - reserved.entities;
            self.source.take(more).await;
            self.pay_share(more).await;
        } else {
            let unused = reserved.entities - entities;
            self.give_back_share(unused);
            self.source.give_back(unused);
        }
        self.within_the_last_second(entities).await
    }

    /// Reserves places for reading `entities` in the account's back-off and the scan's share
    /// without waiting: a step reserves its next page while this one is on its way, so that
    /// the waits and the request's time overlap. Unused, it must be
    /// [`release`](Self::release)d.
    pub fn reserve_read(&self, entities: u64) -> Reservation {
        let share_place = self.pace.share.reserve(entities as f64);
        Reservation {
            source_place: self.source.reserve(entities),
            share_place,
            due: self.pace.share.due(share_place),
            entities,
        }
    }

    /// Gives a reservation up unused: what of it is not yet earned goes back to the line.
    pub fn release(&self, reserved: Reservation) {
        self.pace
            .share
            .release(reserved.share_place, reserved.entities);
        self.source
            .release(reserved.source_place, reserved.entities);
    }

    /// Returns entities paid for and not read (a short page, a failed request), and counts
    /// `used` as moved: what the account served.
    pub fn after_read(&self, ticket: Ticket, used: u64, unused: u64) {
        self.pace.moved.fetch_add(used, Ordering::Relaxed);
        self.give_back_share(unused);
        self.pace.recent.give_back(ticket, unused);
        self.source.give_back(unused);
    }

    /// Waits until `entities` may be written through `target`'s back-off (the share paid
    /// last, as for reads), at most [`SHARE_WAIT`] for the share: a write should carry no more
    /// than [`write_size`](Self::write_size) rows. A share that did not come in time is given
    /// back: what of it was not yet earned goes to the takers behind.
    pub async fn before_write(
        &self,
        entities: u64,
        target: &Governor,
    ) -> Result<(), tablescan_storage::StorageError> {
        target.take(entities).await;
        tokio::time::timeout(SHARE_WAIT, self.take_share(entities))
            .await
            .map_err(|_| no_share("write rows", &self.pace.scan))?;
        self.pace.moved.fetch_add(entities, Ordering::Relaxed);
        Ok(())
    }

    /// Waits until `messages` may be put on the queue behind `queue` (its back-off, then the
    /// scan's share, as [`before_write`](Self::before_write)), and from then on holds the
    /// scan's slots and pages here to the queue's rate too: steps beyond what the queue takes
    /// are given back (and park) instead of running slowly, many at once.
    pub async fn before_put(
        &self,
        messages: u64,
        queue: &Arc<Governor>,
    ) -> Result<(), tablescan_storage::StorageError> {
        lock(&self.pace.output).get_or_insert_with(|| queue.clone());
        self.before_write(messages, queue).await
    }

    /// The scan this step belongs to.
    pub fn scan(&self) -> &str {
        &self.pace.scan
    }

    async fn take_share(&self, entities: u64) -> Ticket {
        self.pay_share(entities).await;
        self.within_the_last_second(entities).await
    }

    /// Pays `entities` into the share's bucket.
    async fn pay_share(&self, entities: u64) {
        self.pace.share.take(entities).await;
    }

    /// The share's rate held over the last second too ([`RecentUse`]): what the bucket let go
    /// on capacity earned earlier (given back by short pages) waits for room.
    async fn within_the_last_second(&self, entities: u64) -> Ticket {
        self.pace.recent.admit(entities).await
    }

    fn give_back_share(&self, entities: u64) {
        self.pace.share.give_back(entities);
    }
}

/// A step waiting to be admitted: no longer counted when dropped.
struct Waiting(Arc<ScanPace>);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.waiting = state.waiting.saturating_sub(1);
        if state.running + state.waiting == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

impl Drop for StepPace {
    fn drop(&mut self) {
        self.pace.ended.fetch_add(1, Ordering::Relaxed);
        let mut state = self.pace.lock();
        state.running = state.running.saturating_sub(1);
        if state.running + state.waiting == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

mod ledger_health;
pub mod park;
mod refresher;
mod round_hold;

#[cfg(test)]
mod learning_tests;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
pub(crate) mod tests;
