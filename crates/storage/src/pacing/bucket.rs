//! A token bucket that paces by pre-payment: each taker reserves its entities at once and waits
//! until the bucket has earned them. Nothing is stored for later (no burst), so over any span of
//! time what is let through never exceeds the rate times the span, which is what a cap measured
//! over short windows needs; and because reservations are made in arrival order, takers are
//! served first come, first served without a queue of their own. A rate lowered while takers
//! wait holds them back too, so a share cut when another process joins is a cut at once.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The most time one look at the bucket credits at its rate (waiting takers look at least every
/// 250 ms).
const MAX_ACCRUAL_GAP: Duration = Duration::from_millis(300);

/// The most places reserved with no rate that a rate set later charges (see
/// `State::unpaid`): far more than a process's steps hold ahead at once.
const MOST_UNPAID: usize = 256;

/// Entities per second, or no limit.
pub type Rate = Option<f64>;

/// Paces takers to a rate that may change while they wait.
#[derive(Debug)]
pub struct TokenBucket {
    state: Mutex<State>,
}

/// Two running totals: entities reserved, and entities earned at the rate (never more than
/// reserved: no credit builds up while nobody takes); and the spans of places given up ahead of
/// the rate. A taker's place is the total reserved with it; it may go once everything up to it
/// is earned or given up. Places rather than times make a rate changed while takers wait apply
/// to them too.
#[derive(Debug)]
struct State {
    rate: Rate,
    reserved: f64,
    earned: f64,
    /// Spans of places given up unearned after the last place earned, in order and apart: the
    /// rate passes over them without earning them, so a later taker goes sooner and an earlier
    /// one not at all sooner. (Earned across instead, a span given up behind a waiting taker
    /// would let that taker go early, over the rate.)
    released: VecDeque<(f64, f64)>,
    /// When `earned` was last brought up to date.
    at: Instant,
    /// Places reserved while there was no rate that have not gone yet nor been given up, with
    /// their entities, in the order reserved: earned as they were reserved, they would all go
    /// at once after a rate is set, over it; a rate set then charges them
    /// ([`TokenBucket::set_rate`]).
    unpaid: Vec<(f64, f64)>,
    /// When a taker last had to wait: the rate held something back.
    held_at: Option<Instant>,
}

impl State {
    fn settle(&mut self, now: Instant) {
        match self.rate {
            Some(rate) => {
                // A longer gap between two looks means the process was not running (a stall,
                // a starved CPU): its waiting takers' places were earned meanwhile and would
                // all go at once when it runs again. What a stall holds back is forfeit.
                let elapsed = now
                    .saturating_duration_since(self.at)
                    .min(MAX_ACCRUAL_GAP)
                    .as_secs_f64();
                self.credit(elapsed * rate);
            }
            None => {
                self.earned = self.reserved;
                self.released.clear();
            }
        }
        self.at = now;
    }

    /// Owes again the places reserved with no rate that have not gone: the line earns from
    /// the first of them, and passes over every place between and after them (gone, or given
    /// up), up to the last reserved.
    fn charge_unpaid(&mut self) {
        let unpaid = std::mem::take(&mut self.unpaid);
        let Some(&(first, entities)) = unpaid.first() else {
            return;
        };
        self.earned = first - entities;
        self.released.clear();
        let mut end = first;
        for &(place, entities) in &unpaid[1..] {
            if place - entities > end {
                self.released.push_back((end, place - entities));
            }
            end = place;
        }
        if self.reserved > end {
            self.released.push_back((end, self.reserved));
        }
    }

    /// No longer owed again by a rate set later: the place went, or was given up.
    fn settled(&mut self, place: f64) {
        if let Some(at) = self.unpaid.iter().position(|(p, _)| *p == place) {
            self.unpaid.remove(at);
        }
    }

    /// Earns `entities` of places, passing over the spans given up.
    fn credit(&mut self, entities: f64) {
        let mut left = entities;
        loop {
            self.pass_released();
            match self.released.front() {
                Some(&(from, _)) if self.earned + left >= from => {
                    left -= from - self.earned;
                    self.earned = from;
                }
                _ => {
                    self.earned += left;
                    break;
                }
            }
        }
        self.earned = self.earned.min(self.reserved);
    }

    /// Steps over the spans given up that begin where the earned places end.
    fn pass_released(&mut self) {
        while let Some(&(from, to)) = self.released.front() {
            if from > self.earned {
                break;
            }
            self.earned = self.earned.max(to);
            self.released.pop_front();
        }
    }

    /// How long until `place` is earned, if it is not yet.
    fn wait_for(&self, place: f64) -> Option<Duration> {
        // Spans given up before `place` are not owed.
        let skipped: f64 = self
            .released
            .iter()
            .take_while(|(from, _)| *from < place)
            .map(|(from, to)| to.min(place) - from)
            .sum();
        // Sums of fractions drift: a thousandth of an entity is paid. (Without this, a remainder
        // too small to wait for would make the taker spin.)
        let owed = place - self.earned - skipped;
        if owed <= 1e-3 {
            return None;
        }
        // A rate of (nearly) nothing owes for ever: an hour stands for that (no float
        // overflow), and waiting takers look again long before it ends.
        self.rate.map(|rate| {
            Duration::try_from_secs_f64(owed / rate)
                .unwrap_or(Duration::from_secs(3600))
                .clamp(Duration::from_millis(1), Duration::from_secs(3600))
        })
    }
}

impl TokenBucket {
    pub fn new(rate: Rate) -> Self {
        TokenBucket {
            state: Mutex::new(State {
                rate: rate.map(|r| r.max(f64::MIN_POSITIVE)),
                reserved: 0.0,
                earned: 0.0,
                released: VecDeque::new(),
                at: Instant::now(),
                unpaid: Vec::new(),
                held_at: None,
            }),
        }
    }

    pub fn rate(&self) -> Rate {
        self.lock().rate
    }

    /// Changes the rate, for the takers waiting too. A rate set where there was none charges
    /// the places reserved before it that have not gone yet: reserved with no rate, they were
    /// earned at once, and a step reserves its next page while this one is on its way, so a
    /// process's steps held a page each that would all have gone at once, over the new rate
    /// (devhost: a scan whose learned cap of 2,993 took over as its only process ran nine
    /// steps moved 3,350 entities a second for two seconds, and the account refused it). What
    /// a page that went before the rate gives back unread (a short page) still credits the
    /// line: not told apart, it lets the charged places go that much sooner.
    pub fn set_rate(&self, rate: Rate) {
        let mut state = self.lock();
        state.settle(Instant::now());
        if state.rate.is_none() && rate.is_some() {
            state.charge_unpaid();
        }
        state.rate = rate.map(|r| r.max(f64::MIN_POSITIVE));
    }

    /// Reserves `entities` and waits until they are earned, behind every earlier taker. A wait
    /// given up (its future dropped: a timeout, a step that ended) gives its place back.
    pub async fn take(&self, entities: u64) {
        let place = self.reserve(entities as f64);
        self.hold(place, entities).earned().await;
    }

    /// Waits until a place [`reserve`](Self::reserve)d earlier is earned. Reserving ahead of
    /// the moment the entities are needed (the next page, while this one is on its way) lets
    /// the wait run meanwhile, and nothing goes before it is earned all the same. Not given
    /// back if the wait is given up: callers wait through [`hold`](Self::hold).
    pub(super) async fn wait(&self, place: f64) {
        loop {
            let wait = {
                let mut state = self.lock();
                let now = Instant::now();
                state.settle(now);
                let wait = state.wait_for(place);
                match wait {
                    Some(_) => state.held_at = Some(now),
                    None => state.settled(place),
                }
                wait
            };
            match wait {
                // Looked at again when it ends: the rate may have changed meanwhile.
                Some(wait) => tokio::time::sleep(wait.min(Duration::from_millis(250))).await,
                None => return,
            }
        }
    }

    /// A place of `entities` reserved earlier, [`release`](Self::release)d unless it is waited
    /// for until earned ([`Place::earned`]): whoever gives up the wait, or never starts it,
    /// cannot leave the place ahead of every later taker. `entities` must be what was reserved
    /// with `place` (more would give up places of others).
    pub fn hold(&self, place: f64, entities: u64) -> Place<'_> {
        Place {
            bucket: self,
            place,
            entities,
            earned: false,
        }
    }

    /// When a place is earned at the present rate: now if it is already.
    pub fn due(&self, place: f64) -> Instant {
        let mut state = self.lock();
        let now = Instant::now();
        state.settle(now);
        now + state.wait_for(place).unwrap_or(Duration::ZERO)
    }

    /// Gives up a place of `entities` reserved and not used: the part of it not yet earned goes
    /// to the takers behind it (never to those ahead); the part earned is forfeit (granting it
    /// now would let it go on top of what is earned now).
    pub fn release(&self, place: f64, entities: u64) {
        let mut state = self.lock();
        state.settle(Instant::now());
        state.settled(place);
        let from = (place - entities as f64).max(state.earned);
        if place <= from {
            return;
        }
        if from <= state.earned {
            state.earned = place.min(state.reserved);
            state.pass_released();
            return;
        }
        // Spans are the places of distinct reservations: they never overlap, unless a place is
        // given up twice, which must not skip it twice (the takers behind would go early).
        let at = state.released.partition_point(|(start, _)| *start < from);
        let overlaps = |span: Option<&(f64, f64)>| {
            span.is_some_and(|&(start, end)| start < place && from < end)
        };
        let before = at.checked_sub(1).and_then(|i| state.released.get(i));
        if overlaps(before) || overlaps(state.released.get(at)) {
            return;
        }
        state.released.insert(at, (from, place));
    }

    /// Whether a taker had to wait for the rate since `since`.
    pub fn held_since(&self, since: Instant) -> bool {
        self.lock().held_at.is_some_and(|at| at >= since)
    }

    /// Returns entities reserved and not used (a page that came back shorter than asked): the
    /// takers behind go that much sooner.
    pub fn give_back(&self, entities: u64) {
        let mut state = self.lock();
        state.settle(Instant::now());
        state.credit(entities as f64);
    }

    /// How long the entities reserved so far take to earn.
    #[cfg(test)]
    fn backlog(&self) -> Duration {
        let mut state = self.lock();
        state.settle(Instant::now());
        let place = state.reserved;
        state.wait_for(place).unwrap_or(Duration::ZERO)
    }

    /// Reserves `entities`; the place of this reservation, to [`hold`](Self::hold) and wait for.
    pub fn reserve(&self, entities: f64) -> f64 {
        let mut state = self.lock();
        state.settle(Instant::now());
        state.reserved += entities;
        let place = state.reserved;
        if state.rate.is_none() {
            // Bounded: a process's steps hold a page or two each ahead; should a place be
            // dropped unreleased, the list must not grow for ever.
            if state.unpaid.len() >= MOST_UNPAID {
                state.unpaid.remove(0);
            }
            state.unpaid.push((place, entities));
        }
        place
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state inconsistent (plain numbers).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A place reserved in a [`TokenBucket`] and not yet earned: given back when dropped unless
/// [`earned`](Self::earned) ran to the end. A taker's wait is cut short by a timeout or by its
/// step's end; a place left reserved would stay ahead of every later taker, charging the rate
/// for entities never sent.
#[must_use = "a place not waited for is given back at once"]
pub struct Place<'a> {
    bucket: &'a TokenBucket,
    place: f64,
    entities: u64,
    earned: bool,
}

impl Place<'_> {
    /// Waits until the place is earned; it is then the taker's.
    pub async fn earned(mut self) {
        self.bucket.wait(self.place).await;
        self.earned = true;
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if !self.earned {
            self.bucket.release(self.place, self.entities);
        }
    }
}

#[cfg(test)]
#[path = "bucket_tests.rs"]
mod tests;
