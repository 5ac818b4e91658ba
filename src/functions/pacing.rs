//! A scan's rate cap, shared by every process that runs it, with no coordinator on the path of
//! a request.
//!
//! Each process keeps, per scan it runs steps of, a token bucket ([`TokenBucket`]) that every
//! read and write of those steps pays into before it is sent: rows asked for (a short page gives
//! the rest back) and rows written. The bucket's rate is the process's share of the cap, worked
//! out by `functions::shares` from what every process running the scan wants: the whole cap
//! while its steps are held back by their share, else what it used lately with room to grow.
//! Each process learns the others' wants from the scan's presence rows in the ledger
//! (`job::presence`), renewing its own once a [`REFRESH`] and reading all of them once a
//! [`read_period`]: 400 ms while one or two processes run the scan, longer as more do, so that the
//! reads cost at most five entities per second per process, whatever the scan's size and
//! however many instances run it. Beside the bucket, a record of the last second's use
//! ([`RecentUse`]) holds every second within a tenth of what the share earned in it: the bucket
//! holds the rate over time, not over short windows.
//!
//! Why the shares never add up to more than the cap, though every process's view is up to a read
//! period old: a process lowers its want at once, and raises it (joining is raising it from
//! nothing) only at a time 1.6 read periods after it wrote the raise, by which time every other
//! process has read it and made room (and a view older than 1.5 periods stops the process).
//! Leaving is safe at any time (the others only gain later).
//!
//! The other designs considered (docs/scan.md): a share carried by each work item and divided
//! among its children undershoots, because most items wait in the queue holding a share they do
//! not use; a budget handed out by the ledger per step makes one row the point every step of
//! every instance contends for.
//!
//! Slots: a step of a paced scan may read only so fast, so a process runs no more steps of the
//! scan at once than its rate gives each [`STEP_RATE`]; the rest wait for a slot (up to
//! [`MAX_SLOT_WAIT`], then run all the same: the bucket still holds the rate). Fewer steps, each
//! reading longer pages, cost fewer queries and ledger writes than many starved ones.
//!
//! The same slots and page sizes follow the account's back-off ([`Governor`]) when the account
//! has said it is busy, capped or not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use super::shares::{allocation, Wants, CLOCK_MARGIN_MS};
use crate::job::presence::Presence;
use crate::job::rows::millis;
use crate::job::Ledger;
use crate::storage::pacing::{Governor, RecentUse, Ticket, TokenBucket};

/// How often a process renews its presence row.
pub const REFRESH: Duration = Duration::from_secs(1);
/// Per process running the scan, how much longer between two reads of the presence rows: a read
/// costs one entity per process, so with `n` processes each reads every `n` × 200 ms at the
/// least, and the reads of all of them cost at most 5 entities per second per process (600 per
/// second for 100 processes with their writes, 3% of an account's target).
const READ_SPACING_PER_PROCESS: Duration = Duration::from_millis(200);
/// The shortest time between two reads of the presence rows: a process joining waits 1.6 of
/// them (under a second while few processes run the scan), and the work it was sent waits too.
const MIN_READ_PERIOD: Duration = Duration::from_millis(400);
/// How long after it wrote a larger want (or joined) a process starts using it, in read periods
/// of the others: they have all read it by then.
const RAISE_WAIT_PERIODS: f64 = 1.6;
/// A view of the other processes older than this many read periods stops the process's use of
/// its share: less than the notice a raise gives ([`RAISE_WAIT_PERIODS`]), so that a process
/// whose reads fall behind (a loaded machine) stops before it could miss a raise, rather than
/// after.
const STALE_VIEW_PERIODS: f64 = 1.5;
/// How long a presence row counts after it was written.
const ROW_LIFETIME: Duration = Duration::from_secs(5);
/// How long a process stays present after its last step of a scan ended: the next message may
/// be a moment away, and joining again costs the joiner (only) a wait.
const GRACE: Duration = Duration::from_millis(500);
/// How often a process looks whether a newcomer's start time has come.
const TICK: Duration = Duration::from_millis(100);

/// Now, in epoch milliseconds: the clock the presence rows' times are in.
#[cfg(not(test))]
fn wall_ms() -> u64 {
    millis(OffsetDateTime::now_utc())
}

/// Now, in epoch milliseconds, moving with tokio's clock, so that tests on paused time see the
/// rows' times pass.
#[cfg(test)]
fn wall_ms() -> u64 {
    static ANCHOR: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();
    let (at, wall) = *ANCHOR.get_or_init(|| (Instant::now(), millis(OffsetDateTime::now_utc())));
    // Tests run side by side, each on a paused clock of its own: one may be behind the clock
    // that set the anchor, and its time must move all the same.
    let now = Instant::now();
    if now >= at {
        wall + (now - at).as_millis() as u64
    } else {
        wall - (at - now).as_millis() as u64
    }
}

/// How often a process reads the presence rows when `members` processes run the scan.
pub fn read_period(members: usize) -> Duration {
    MIN_READ_PERIOD.max(READ_SPACING_PER_PROCESS * members.min(10_000) as u32)
}
/// After this long without writing its row or reading the others' (the ledger unreachable), a
/// process runs on a fallback share rather than stopping: [`FALLBACK_SHARE`] of the cap. Shorter
/// than a row's lifetime, so the others still count it when it falls back; once it reaches
/// the ledger again it joins afresh.
const FALLBACK_AFTER: Duration = Duration::from_secs(3);
/// The share of the cap a process takes while it cannot read the other processes: low enough
/// that ten such processes stay within the cap, and never nothing, so a scan goes on.
const FALLBACK_SHARE: f64 = 0.1;
/// How long a withdrawal may hold up the steps that join meanwhile; past it the row runs out.
const WITHDRAW_TIME: Duration = Duration::from_secs(2);
/// The rate one step of a paced scan is given at least (entities per second).
pub const STEP_RATE: f64 = 300.0;
/// How long a step waits for a slot before it runs anyway.
pub const MAX_SLOT_WAIT: Duration = Duration::from_secs(180);
/// How long after its place is earned a page reserved ahead may still use it.
const RESERVATION_LIFE: Duration = Duration::from_millis(100);
/// How many seconds of its share one page of a paced step holds.
const PAGE_SECONDS: f64 = 0.5;
/// The smallest page a paced step asks for.
const MIN_PAGE: u16 = 100;

/// This process's pacing of every scan it runs steps of.
pub struct Pacing {
    /// Names this process in the scans' presence rows.
    process: String,
    scans: Scans,
}

/// The scans this process paces. A refresher withdraws its scan while holding the lock, so a
/// step that arrives meanwhile finds the scan gone and starts afresh, never a withdrawn one.
type Scans = Arc<tokio::sync::Mutex<HashMap<String, Arc<ScanPace>>>>;

impl Default for Pacing {
    fn default() -> Self {
        Pacing {
            process: crate::job::ledger::new_scan_id(),
            scans: Scans::default(),
        }
    }
}

/// One scan's pacing in this process.
pub struct ScanPace {
    scan: String,
    /// The scan's cap in entities per second, if it has one.
    cap: Option<f64>,
    /// This process's share of the cap; unlimited for a scan without one.
    share: TokenBucket,
    /// What the share let through over the last second, so that no second holds more than a
    /// tenth over what the share earned in it (the bucket alone lets give-backs spend capacity
    /// earned earlier).
    recent: RecentUse,
    /// Entities this process moved for the scan, for the rate it reports.
    moved: AtomicU64,
    /// Whether this process joined to run the scan's first step (see [`Pacing::step`]).
    root: bool,
    state: Mutex<PaceState>,
}

#[derive(Debug, Default)]
struct PaceState {
    running: usize,
    waiting: usize,
    /// What this process wants of the cap, as written in its presence row, once it has
    /// announced itself.
    wants: Option<Wants>,
    /// The other processes' presence rows as last read.
    others: Vec<Presence>,
    /// When the other processes were last read.
    view_at: Option<Instant>,
    /// How many processes share the cap now (this one too), from the last view.
    members: usize,
    /// When the last step ended, if none runs or waits now.
    idle_since: Option<Instant>,
    /// Set while the process cannot write its row or read the others' (for
    /// [`FALLBACK_AFTER`]): it runs on [`FALLBACK_SHARE`] of the cap.
    fallback: bool,
}

/// A place reserved in a scan's share ahead of a read ([`StepPace::reserve_read`]).
#[derive(Debug, Clone, Copy)]
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
}

impl Pacing {
    /// Enters a step of `scan` (capped at `cap` entities per second, if any) reading from the
    /// account behind `source`; waits for a slot when the scan is paced.
    ///
    /// `root` says the step is the scan's first: until it finishes no other step of the scan
    /// exists (its children are written by its finish), so if no other process is present it
    /// starts at once instead of waiting for others to see it.
    pub async fn step(
        &self,
        ledger: &Ledger,
        scan: &str,
        cap: Option<u32>,
        source: Arc<Governor>,
        root: bool,
    ) -> StepPace {
        let pace = {
            let mut scans = self.scans.lock().await;
            let pace = scans
                .entry(scan.to_string())
                .or_insert_with(|| {
                    let pace = Arc::new(ScanPace::new(scan, cap, root));
                    let refresher = Refresher {
                        pace: pace.clone(),
                        ledger: ledger.clone(),
                        process: self.process.clone(),
                        scans: self.scans.clone(),
                    };
                    tokio::spawn(refresher.run());
                    pace
                })
                .clone();
            pace.lock().waiting += 1;
            pace
        };
        if let Some(cap) = cap {
            source.start_at(f64::from(cap));
        }
        let started = Instant::now();
        loop {
            {
                let mut state = pace.lock();
                let slots = pace.slots(&state, &source);
                if state.running < slots || started.elapsed() >= MAX_SLOT_WAIT {
                    state.waiting -= 1;
                    state.running += 1;
                    state.idle_since = None;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        StepPace { pace, source }
    }
}

impl ScanPace {
    fn new(scan: &str, cap: Option<u32>, root: bool) -> Self {
        let cap = cap.map(f64::from);
        ScanPace {
            scan: scan.to_string(),
            cap,
            share: TokenBucket::new(cap),
            recent: RecentUse::new(cap.map(|_| 0.0)),
            moved: AtomicU64::new(0),
            root,
            state: Mutex::new(PaceState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PaceState> {
        // Plain counters: a panic elsewhere cannot leave them half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rate this process's steps of the scan may use now, if anything limits it.
    fn rate(&self, source: &Governor) -> Option<f64> {
        match (
            self.share.rate().filter(|_| self.cap.is_some()),
            source.rate(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How many steps may run at once: all of them unless something limits the rate; for a
    /// capped scan, none before the first view of the other processes.
    fn slots(&self, state: &PaceState, source: &Governor) -> usize {
        if self.cap.is_some() && state.view_at.is_none() && !state.fallback {
            return 0;
        }
        match self.rate(source) {
            // One more than the rate needs: a step between two work items (finishing, its
            // follow-ups on their way through the queue) leaves its part to the others.
            Some(rate) => ((rate / STEP_RATE).ceil() as usize + 1).clamp(2, 64),
            None => usize::MAX,
        }
    }

    /// Whether the process may use its share: it has been present long enough for every other
    /// process to count it, and its own view of them is fresh; or it runs on the fallback share.
    fn may_use_share(&self) -> bool {
        if self.cap.is_none() {
            return true;
        }
        let state = self.lock();
        let period = read_period(state.members);
        state.fallback
            || state.wants.is_some_and(|w| w.in_use(wall_ms()) > 0.0)
                && state
                    .view_at
                    .is_some_and(|at| at.elapsed() < period.mul_f64(STALE_VIEW_PERIODS))
    }
}

impl StepPace {
    /// How many rows to ask for in the next page: half a second's worth of the step's part of the
    /// rate (at least 100 rows), at most `top`.
    pub fn page_size(&self, top: u16) -> u16 {
        let Some(rate) = self.pace.rate(&self.source) else {
            return top;
        };
        let running = self.pace.lock().running.max(1) as f64;
        let top = top.max(1);
        let least = MIN_PAGE.min(top);
        ((rate / running * PAGE_SECONDS) as u16).clamp(least, top)
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
        self.wait_to_use_share().await;
        // A place earned a while ago (the step wrote, or waited, between its pages) would go
        // on top of what is earned now: it is given up, and the page pays afresh.
        let reserved = reserved.filter(|reserved| {
            let fresh = Instant::now() <= reserved.due + RESERVATION_LIFE;
            if !fresh {
                self.release(*reserved);
            }
            fresh
        });
        let Some(reserved) = reserved else {
            self.source.take(entities).await;
            return self.take_share(entities).await;
        };
        self.source.wait(reserved.source_place).await;
        self.pace.share.wait(reserved.share_place).await;
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
        self.pace.moved.fetch_add(entities, Ordering::Relaxed);
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
        let _ = self
            .pace
            .moved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(reserved.entities))
            });
        self.pace
            .share
            .release(reserved.share_place, reserved.entities);
        self.source
            .release(reserved.source_place, reserved.entities);
    }

    /// Returns entities paid for and not read (a short page, a failed request).
    pub fn after_read(&self, ticket: Ticket, unused: u64) {
        self.give_back_share(unused);
        self.pace.recent.give_back(ticket, unused);
        self.source.give_back(unused);
    }

    /// Waits until `entities` may be written through `target`'s back-off (the share paid
    /// last, as for reads).
    pub async fn before_write(&self, entities: u64, target: &Governor) {
        self.wait_to_use_share().await;
        target.take(entities).await;
        self.take_share(entities).await;
    }

    async fn wait_to_use_share(&self) {
        while !self.pace.may_use_share() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn take_share(&self, entities: u64) -> Ticket {
        self.pay_share(entities).await;
        self.within_the_last_second(entities).await
    }

    /// Pays `entities` into the share's bucket, counted as moved.
    async fn pay_share(&self, entities: u64) {
        self.pace.moved.fetch_add(entities, Ordering::Relaxed);
        self.pace.share.take(entities).await;
    }

    /// The share's rate held over the last second too ([`RecentUse`]): what the bucket let go
    /// on capacity earned earlier (given back by short pages) waits for room.
    async fn within_the_last_second(&self, entities: u64) -> Ticket {
        self.pace.recent.admit(entities).await
    }

    fn give_back_share(&self, entities: u64) {
        let _ = self
            .pace
            .moved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(entities))
            });
        self.pace.share.give_back(entities);
    }
}

impl Drop for StepPace {
    fn drop(&mut self) {
        let mut state = self.pace.lock();
        state.running = state.running.saturating_sub(1);
        if state.running + state.waiting == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

/// Renews this process's presence in a scan once a [`REFRESH`] and reads the others' once a
/// [`read_period`], until the process has had no step of the scan for [`GRACE`]; then
/// withdraws.
struct Refresher {
    pace: Arc<ScanPace>,
    ledger: Ledger,
    process: String,
    scans: Scans,
}

impl Refresher {
    async fn run(self) {
        let pace = &self.pace;
        let mut last = (Instant::now(), 0u64);
        let mut next_write = Instant::now();
        let mut next_read = Instant::now();
        let mut last_success = Instant::now();
        loop {
            let now = Instant::now();
            if self.withdrawn().await {
                return;
            }
            let mut failed = false;
            // A capped scan's newcomer reads first: its start time must leave the others, who
            // read once a period, time to see it.
            let capped = pace.cap.is_some();
            let joining = capped && pace.lock().wants.is_none();
            if capped && (now >= next_read || joining) {
                match self.ledger.presence(&pace.scan).await {
                    Ok(rows) => {
                        let others: Vec<Presence> = rows
                            .into_iter()
                            .filter(|p| p.process != self.process)
                            .collect();
                        let mut state = pace.lock();
                        state.others = others;
                        state.view_at = Some(now);
                        next_read = now + read_period(state.members.max(1));
                    }
                    Err(e) => {
                        failed = true;
                        tracing::warn!(scan = %pace.scan, "could not read the scan's processes: {e}")
                    }
                }
            }
            if now >= next_write || joining {
                let wall = wall_ms();
                let moved = pace.moved.load(Ordering::Relaxed);
                let elapsed = now.saturating_duration_since(last.0).as_secs_f64();
                let rate = if elapsed > 0.0 {
                    moved.saturating_sub(last.1) as f64 / elapsed
                } else {
                    0.0
                };
                last = (now, moved);
                let wants = self.renewed_wants(wall, rate);
                self.lowered(wants, wall);
                let presence = Presence {
                    process: self.process.clone(),
                    until_ms: wall + ROW_LIFETIME.as_millis() as u64,
                    want: wants.want,
                    next_want: wants.next,
                    from_ms: wants.from_ms,
                    rate,
                };
                match self.ledger.announce(&pace.scan, &presence).await {
                    Ok(()) => {
                        next_write = now + REFRESH;
                        self.written(wants, wall);
                    }
                    Err(e) => {
                        failed = true;
                        tracing::warn!(scan = %pace.scan, "could not renew this process's presence: {e}")
                    }
                }
            }
            if !failed {
                last_success = Instant::now();
                let mut state = pace.lock();
                if state.fallback {
                    // Back from the fallback share: join afresh.
                    state.fallback = false;
                    state.wants = None;
                }
            } else if last_success.elapsed() >= FALLBACK_AFTER {
                pace.lock().fallback = true;
            }
            self.share_out();
            tokio::time::sleep(TICK).await;
        }
    }

    /// What this process wants of the cap from now on, as its next row will say: on its first
    /// row, the whole cap at once if it runs the scan's first step alone, else what its waiting
    /// steps may use, from a time every other process will have read the row by; later,
    /// renewed from what it used (`used`, entities per second) and whether its steps are held
    /// back.
    fn renewed_wants(&self, wall: u64, used: f64) -> Wants {
        let pace = &self.pace;
        // An uncapped scan's rows only report its rate.
        let cap = pace.cap.unwrap_or(f64::INFINITY);
        let state = pace.lock();
        let others = state.others.iter().filter(|p| p.until_ms > wall).count();
        let raise_at = |members: usize| {
            // Reads come a tick late at worst.
            let wait = read_period(members).mul_f64(RAISE_WAIT_PERIODS) + TICK;
            wall + wait.as_millis() as u64 + CLOCK_MARGIN_MS
        };
        match state.wants {
            None if pace.root && others == 0 => Wants::alone(cap, wall),
            // What its steps waiting now may use, at first.
            None => Wants::joining(
                cap,
                STEP_RATE * state.waiting.max(1) as f64,
                raise_at(others + 1),
            ),
            Some(wants) => {
                let part = pace.share.rate().unwrap_or(f64::INFINITY);
                let held_back = state.waiting > 0;
                wants.renewed(cap, used, part, held_back, wall, raise_at(state.members))
            }
        }
    }

    /// Whether `wants` raise what this process uses at `wall` (joining is a raise).
    fn raises(&self, wants: &Wants, wall: u64) -> bool {
        self.pace
            .lock()
            .wants
            .is_none_or(|old| wants.next > old.in_use(wall))
    }

    /// Takes `wants` as this process's own before they are written, if they raise nothing:
    /// using less than the row will say is always safe, using more than the others have read
    /// is not.
    fn lowered(&self, wants: Wants, wall: u64) {
        if !self.raises(&wants, wall) {
            self.pace.lock().wants = Some(wants);
            self.share_out();
        }
    }

    /// Takes `wants`, written at `wall` (epoch ms), as this process's own, unless the write
    /// took so long that a raise in it may not be read by every other process before it takes
    /// effect: then the old wants stay, and the next row announces the raise afresh.
    fn written(&self, wants: Wants, wall: u64) {
        let raises = self.raises(&wants, wall);
        let mut state = self.pace.lock();
        let took = wall_ms().saturating_sub(wall);
        let slack = read_period(state.members).as_millis() as u64 / 2;
        if raises && took > slack {
            tracing::debug!(scan = %self.pace.scan, took, "a raise of this process's want was written too late to count");
            return;
        }
        state.wants = Some(wants);
    }

    /// Sets this process's share from the last view: its part of the cap given what it wants
    /// and what the other processes whose rows still count want (a raise counted from a little
    /// before its time, see [`Wants::counted_of`]); on the fallback, a fixed small share.
    fn share_out(&self) {
        let pace = &self.pace;
        let Some(cap) = pace.cap else {
            return;
        };
        let now_ms = wall_ms();
        let mut state = pace.lock();
        if state.fallback {
            pace.share.set_rate(Some(cap * FALLBACK_SHARE));
            pace.recent.set_rate(Some(cap * FALLBACK_SHARE));
            return;
        }
        let others: Vec<f64> = state
            .others
            .iter()
            .filter(|p| p.until_ms > now_ms)
            .map(|p| Wants::counted_of(p, now_ms))
            .filter(|want| *want > 0.0)
            .collect();
        // While joining, the part it will have (it uses none before its time).
        let mine = match state.wants {
            Some(wants) if wants.in_use(now_ms) > 0.0 => wants.in_use(now_ms),
            Some(wants) => wants.next,
            None => cap,
        };
        let members = 1 + others.len();
        if members != state.members && state.view_at.is_some() {
            tracing::info!(
                scan = %pace.scan,
                "{members} processes share the scan's cap of {cap}/s; this one runs {} steps, {} waiting",
                state.running,
                state.waiting
            );
        }
        state.members = members;
        let part = allocation(cap, mine, &others);
        pace.share.set_rate(Some(part));
        // The window counts the part only from when the process may use it: before, the others
        // do not count it yet, and the parts in use add up to the cap without it.
        let joined = state.wants.is_some_and(|wants| wants.in_use(now_ms) > 0.0);
        pace.recent.set_rate(Some(if joined { part } else { 0.0 }));
    }

    /// Withdraws this process from the scan if it has had no step of it for [`GRACE`]; whether
    /// it did. Holds the scans' lock throughout, so no step joins a withdrawn scan.
    async fn withdrawn(&self) -> bool {
        let mut scans = self.scans.lock().await;
        let idle = {
            let state = self.pace.lock();
            let grace = GRACE.max(read_period(state.members));
            state.idle_since.is_some_and(|at| at.elapsed() >= grace)
        };
        if !idle {
            return false;
        }
        let withdrawal = self.ledger.withdraw(&self.pace.scan, &self.process);
        match tokio::time::timeout(WITHDRAW_TIME, withdrawal).await {
            Ok(Ok(())) => {}
            // The row runs out by itself.
            Ok(Err(e)) => {
                tracing::debug!(scan = %self.pace.scan, "could not withdraw this process's presence: {e}")
            }
            Err(_) => {
                tracing::debug!(scan = %self.pace.scan, "withdrawing this process's presence took too long")
            }
        }
        scans.remove(&self.pace.scan);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::table::in_memory::InMemoryTable;

    /// Entities let through, with when.
    type Log = Arc<Mutex<Vec<(Instant, u64)>>>;

    /// One process's steps of the scan: `steps` at once, each reading pages of up to `top` rows
    /// as the pace allows, `pause` apart, until `end`.
    async fn run_process(
        pacing: Arc<Pacing>,
        ledger: Ledger,
        (steps, top, pause): (usize, u16, Duration),
        end: Instant,
        log: Log,
    ) {
        // A governor of its own, as each process has: tests run side by side in one binary.
        let source = Arc::new(Governor::default());
        let tasks: Vec<_> = (0..steps)
            .map(|_| {
                let (pacing, ledger, source, log) =
                    (pacing.clone(), ledger.clone(), source.clone(), log.clone());
                tokio::spawn(async move {
                    while Instant::now() < end {
                        let step = pacing
                            .step(&ledger, "scan1", Some(3_000), source.clone(), false)
                            .await;
                        // A step of ten pages.
                        for _ in 0..10 {
                            let top = step.page_size(top);
                            step.before_read(u64::from(top)).await;
                            log.lock().unwrap().push((Instant::now(), u64::from(top)));
                            tokio::time::sleep(pause).await;
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    }

    /// Processes sharing a cap of 3,000/s on one in-memory ledger, each with its load, started
    /// after its delay, for 30 s: the entities let through, with when.
    async fn share_for_30_seconds(loads: Vec<(Duration, (usize, u16, Duration))>) -> Let {
        let table = InMemoryTable::new("ledger");
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table);
        let log: Log = Arc::default();
        let start = Instant::now();
        let end = start + Duration::from_secs(30);
        let mut processes = Vec::new();
        for (delay, load) in loads {
            let (ledger, log) = (ledger.clone(), log.clone());
            processes.push(tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                run_process(Arc::new(Pacing::default()), ledger, load, end, log).await;
            }));
        }
        for process in processes {
            process.await.unwrap();
        }
        let log = log.lock().unwrap().clone();
        Let { start, log }
    }

    /// What a test let through.
    struct Let {
        start: Instant,
        log: Vec<(Instant, u64)>,
    }

    impl Let {
        fn within(&self, from: Duration, to: Duration) -> u64 {
            self.log
                .iter()
                .filter(|(at, _)| *at >= self.start + from && *at < self.start + to)
                .map(|(_, n)| n)
                .sum()
        }

        /// The most in any 5 seconds (sliding by 100 ms).
        fn fullest_5_seconds(&self) -> u64 {
            let mut from = Duration::ZERO;
            let mut most = 0;
            while from + Duration::from_secs(5) <= Duration::from_secs(30) {
                most = most.max(self.within(from, from + Duration::from_secs(5)));
                from += Duration::from_millis(100);
            }
            most
        }
    }

    #[test]
    fn reads_space_out_as_processes_join_so_their_cost_stays_bounded() {
        assert_eq!(read_period(1), MIN_READ_PERIOD);
        assert_eq!(read_period(5), REFRESH);
        assert_eq!(read_period(100), Duration::from_secs(20));
        // Entities read per second by all processes together: n rows, n readers, per period.
        for n in [1usize, 3, 10, 50, 100, 1_000] {
            let per_second = (n * n) as f64 / read_period(n).as_secs_f64();
            assert!(
                per_second <= 5.0 * n as f64,
                "{n} processes read {per_second}/s"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_process_that_cannot_reach_the_ledger_goes_on_at_a_fallback_share() {
        let table = InMemoryTable::new("ledger");
        // Never created: every ledger request fails.
        let ledger = Ledger::in_memory(table);
        let pacing = Pacing::default();
        let source = crate::storage::pacing::governor("table fallback-test-source");
        let start = Instant::now();
        let step = pacing
            .step(&ledger, "scan4", Some(2_000), source, false)
            .await;
        step.before_read(400).await;
        // Waited for the fallback, then 400 entities at a tenth of the cap.
        let waited = start.elapsed();
        assert!(
            waited >= FALLBACK_AFTER && waited <= FALLBACK_AFTER + Duration::from_secs(4),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_step_alone_starts_at_once_and_a_newcomer_waits_to_be_seen() {
        let table = InMemoryTable::new("ledger");
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table);
        let source = crate::storage::pacing::governor("table root-test-source");
        let start = Instant::now();
        let first = Pacing::default();
        let root = first
            .step(&ledger, "scan5", Some(1_000), source.clone(), true)
            .await;
        root.before_read(100).await;
        assert!(
            start.elapsed() <= Duration::from_millis(300),
            "{:?}",
            start.elapsed()
        );
        let second = Pacing::default();
        let start = Instant::now();
        let child = second
            .step(&ledger, "scan5", Some(1_000), source, false)
            .await;
        child.before_read(100).await;
        // 1.6 read periods of two processes, a tick, and the clock margin.
        let wait = read_period(2).mul_f64(RAISE_WAIT_PERIODS) + TICK + Duration::from_millis(100);
        assert!(start.elapsed() >= wait, "{:?}", start.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn pages_are_a_share_of_the_rate_within_the_asked_size() {
        let table = InMemoryTable::new("ledger");
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table);
        let pacing = Pacing::default();
        let source = crate::storage::pacing::governor("table pages-test-source");
        let step = pacing
            .step(&ledger, "scan2", Some(1_000), source, false)
            .await;
        // Alone, one step: half a second of 1,000/s.
        assert_eq!(step.page_size(1000), 500);
        // Never more than asked, never below 100 unless asked for fewer, never zero.
        assert_eq!(step.page_size(300), 300);
        assert_eq!(step.page_size(10), 10);
        assert_eq!(step.page_size(0), 1);
        let slow = pacing
            .step(
                &ledger,
                "scan3",
                Some(20),
                crate::storage::pacing::governor("x"),
                false,
            )
            .await;
        assert_eq!(slow.page_size(1000), 100);
        assert_eq!(slow.page_size(5), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn processes_joining_one_by_one_share_the_cap_without_exceeding_it() {
        // Three processes, joining at 0, 4 and 8 seconds; 8 steps each.
        let busy = (8, 1000, Duration::from_millis(30));
        let joins = [0, 4, 8].map(|at| (Duration::from_secs(at), busy));
        let let_through = share_for_30_seconds(joins.to_vec()).await;
        // Every 5-second window at most 3.5% over the cap (the test of the whole app allows
        // 10%), from the granularity of pages. A newcomer that used its share before the
        // others had seen it (no join wait) puts 13% over.
        let most = let_through.fullest_5_seconds();
        // Near the cap from the first process's start on: a newcomer's wait to join costs the
        // others nothing (they make room at its start time, not when they first see it).
        let steady = let_through.within(Duration::from_secs(2), Duration::from_secs(30));
        assert!(
            most <= 15_525,
            "{most} entities in a 5 s window: over 103.5% of the cap"
        );
        assert!(
            steady >= 79_800,
            "{steady} entities in 28 s: under 95% of the cap"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_process_with_little_to_do_leaves_its_part_to_a_busy_one() {
        // One process reads all it can; the other a page of 100 rows a second.
        let busy = (8, 1000, Duration::from_millis(30));
        let light = (1, 100, Duration::from_secs(1));
        let let_through =
            share_for_30_seconds(vec![(Duration::ZERO, busy), (Duration::ZERO, light)]).await;
        let most = let_through.fullest_5_seconds();
        // Equal shares would hold the busy one to half the cap: 1,600/s of 3,000 in all.
        let steady = let_through.within(Duration::from_secs(5), Duration::from_secs(30));
        println!("{most} entities in the fullest 5 s; {steady} in the 25 s from 5 s on");
        assert!(
            most <= 15_525,
            "{most} entities in a 5 s window: over 103.5% of the cap"
        );
        assert!(
            steady >= 67_500,
            "{steady} entities in 25 s: under 90% of the cap"
        );
    }
}
