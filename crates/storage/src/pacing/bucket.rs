//! A token bucket that paces by pre-payment: each taker reserves its entities at once and waits
//! until the bucket has earned them. Nothing is stored for later (no burst), so over any span of
//! time what is let through never exceeds the rate times the span, which is what a cap measured
//! over short windows needs; and because reservations are made in arrival order, takers are
//! served first come, first served without a queue of their own. A rate lowered while takers
//! wait holds them back too, so a share cut when another process joins is a cut at once.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The most time one look at the bucket credits at its rate (waiting takers look at least every
/// 250 ms).
const MAX_ACCRUAL_GAP: Duration = Duration::from_millis(300);

/// Entities per second, or no limit.
pub type Rate = Option<f64>;

/// Paces takers to a rate that may change while they wait.
#[derive(Debug)]
pub struct TokenBucket {
    state: Mutex<State>,
}

/// Two running totals: entities reserved, and entities earned at the rate (never more than
/// reserved: no credit builds up while nobody takes). A taker's place is the total reserved
/// with it; it may go once that much is earned. Places rather than times make a rate changed
/// while takers wait apply to them too.
#[derive(Debug)]
struct State {
    rate: Rate,
    reserved: f64,
    earned: f64,
    /// When `earned` was last brought up to date.
    at: Instant,
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
                self.earned = (self.earned + elapsed * rate).min(self.reserved);
            }
            None => self.earned = self.reserved,
        }
        self.at = now;
    }

    /// How long until `place` is earned, if it is not yet.
    fn wait_for(&self, place: f64) -> Option<Duration> {
        // Sums of fractions drift: a thousandth of an entity is paid. (Without this, a remainder
        // too small to wait for would make the taker spin.)
        let owed = place - self.earned;
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
                at: Instant::now(),
                held_at: None,
            }),
        }
    }

    pub fn rate(&self) -> Rate {
        self.lock().rate
    }

    /// Changes the rate, for the takers waiting too.
    pub fn set_rate(&self, rate: Rate) {
        let mut state = self.lock();
        state.settle(Instant::now());
        state.rate = rate.map(|r| r.max(f64::MIN_POSITIVE));
    }

    /// Reserves `entities` and waits until they are earned, behind every earlier taker.
    pub async fn take(&self, entities: u64) {
        let place = self.reserve(entities as f64);
        self.wait(place).await;
    }

    /// Waits until a place [`reserve`](Self::reserve)d earlier is earned. Reserving ahead of
    /// the moment the entities are needed (the next page, while this one is on its way) lets
    /// the wait run meanwhile, and nothing goes before it is earned all the same.
    pub async fn wait(&self, place: f64) {
        loop {
            let wait = {
                let mut state = self.lock();
                let now = Instant::now();
                state.settle(now);
                let wait = state.wait_for(place);
                if wait.is_some() {
                    state.held_at = Some(now);
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

    /// When a place is earned at the present rate: now if it is already.
    pub fn due(&self, place: f64) -> Instant {
        let mut state = self.lock();
        let now = Instant::now();
        state.settle(now);
        now + state.wait_for(place).unwrap_or(Duration::ZERO)
    }

    /// Gives up a place reserved ahead and not used: the part of it not yet earned goes back
    /// to the takers behind; the part earned is forfeit (granting it now would let it go on top
    /// of what is earned now).
    pub fn release(&self, place: f64, entities: u64) {
        let mut state = self.lock();
        state.settle(Instant::now());
        let unearned = (place - state.earned).clamp(0.0, entities as f64);
        state.earned = (state.earned + unearned).min(state.reserved);
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
        state.earned = (state.earned + entities as f64).min(state.reserved);
    }

    /// How long the entities reserved so far take to earn.
    #[cfg(test)]
    fn backlog(&self) -> Duration {
        let mut state = self.lock();
        state.settle(Instant::now());
        let place = state.reserved;
        state.wait_for(place).unwrap_or(Duration::ZERO)
    }

    /// Reserves `entities`; the place of this reservation, to [`wait`](Self::wait) for.
    pub fn reserve(&self, entities: f64) -> f64 {
        let mut state = self.lock();
        state.settle(Instant::now());
        state.reserved += entities;
        state.reserved
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state inconsistent (plain numbers).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn what_a_stall_held_back_is_forfeit_not_let_through_at_once() {
        let bucket = TokenBucket::new(Some(1_000.0));
        let place = bucket.reserve(3_000.0);
        // Nobody looks for two seconds (the process did not run): only 300 ms are credited.
        tokio::time::advance(Duration::from_secs(2)).await;
        let left = bucket.due(place) - tokio::time::Instant::now();
        assert_eq!(left, Duration::from_millis(2_700));
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_released_after_it_was_earned_is_forfeit_and_before_it_goes_back() {
        let bucket = TokenBucket::new(Some(1_000.0));
        let early = bucket.reserve(500.0);
        let due = bucket.due(early);
        assert_eq!(
            due - tokio::time::Instant::now(),
            Duration::from_millis(500)
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        // Earned a while ago: given up, it does not let the next taker go early.
        bucket.release(early, 500);
        let start = tokio::time::Instant::now();
        bucket.take(1_000).await;
        assert!(
            start.elapsed() >= Duration::from_millis(999),
            "{:?}",
            start.elapsed()
        );
        // Not earned yet: given back, the taker behind it goes that much sooner.
        let ahead = bucket.reserve(1_000.0);
        assert!(bucket.due(ahead) > tokio::time::Instant::now());
        bucket.release(ahead, 1_000);
        let start = tokio::time::Instant::now();
        bucket.take(500).await;
        assert!(
            start.elapsed() <= Duration::from_millis(501),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn takers_are_paced_to_the_rate_with_no_burst() {
        let bucket = TokenBucket::new(Some(1_000.0));
        let start = tokio::time::Instant::now();
        for _ in 0..10 {
            bucket.take(500).await;
        }
        // 5,000 entities at 1,000/s: the last reservation is paid at 5 s, the first at 0.5 s.
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_lowered_while_takers_wait_holds_them_back() {
        let bucket = std::sync::Arc::new(TokenBucket::new(Some(1_000.0)));
        let start = tokio::time::Instant::now();
        let waiting = {
            let bucket = bucket.clone();
            tokio::spawn(async move { bucket.take(2_000).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        // 1,000 of the 2,000 earned; the other 1,000 now at 250/s.
        bucket.set_rate(Some(250.0));
        waiting.await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_of_nothing_holds_takers_until_it_rises() {
        // A process whose share of a cap falls to nothing: its takers wait (they used to panic
        // on the infinite wait) and go once a share comes back.
        let bucket = std::sync::Arc::new(TokenBucket::new(Some(0.0)));
        let start = tokio::time::Instant::now();
        let waiting = {
            let bucket = bucket.clone();
            tokio::spawn(async move { bucket.take(100).await })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!waiting.is_finished());
        bucket.set_rate(Some(100.0));
        waiting.await.unwrap();
        assert!(
            start.elapsed() <= Duration::from_millis(4_300),
            "{:?}",
            start.elapsed()
        );
    }
    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits_and_a_new_rate_applies_to_later_takers() {
        let bucket = TokenBucket::new(None);
        let start = tokio::time::Instant::now();
        bucket.take(1_000_000).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        bucket.set_rate(Some(100.0));
        bucket.take(100).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        bucket.set_rate(Some(1_000.0));
        bucket.take(100).await;
        assert_eq!(start.elapsed(), Duration::from_millis(1_100));
    }

    #[tokio::test(start_paused = true)]
    async fn entities_given_back_shorten_the_wait_of_later_takers() {
        let bucket = TokenBucket::new(Some(1_000.0));
        let start = tokio::time::Instant::now();
        // A page of 1,000 reserved, 200 of it used: the next taker waits for 200 + its 300.
        bucket.reserve(1_000.0);
        bucket.give_back(800);
        assert_eq!(bucket.backlog(), Duration::from_millis(200));
        bucket.take(300).await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_remainder_too_small_to_wait_for_does_not_spin() {
        // Rates and amounts whose sums do not come out even in binary.
        let bucket = TokenBucket::new(Some(333.333_333_3));
        for n in [1u64, 7, 13, 1000, 3] {
            for _ in 0..50 {
                bucket.take(n).await;
            }
            bucket.set_rate(Some(0.1 + n as f64 / 3.0));
        }
        assert!(bucket.backlog() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_takers_share_the_rate() {
        let bucket = std::sync::Arc::new(TokenBucket::new(Some(2_000.0)));
        let start = tokio::time::Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let bucket = bucket.clone();
                tokio::spawn(async move {
                    for _ in 0..5 {
                        bucket.take(250).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        // 8 x 5 x 250 = 10,000 entities at 2,000/s.
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
