//! What a process let through over the last second, so that no second holds more than the rate.
//!
//! The token bucket ([`super::TokenBucket`]) holds a rate over time, but it cannot see when what
//! it granted was earned: a page paid for in full and answered short gives its unused rows back
//! when the answer comes, capacity earned while the request was on its way, and the takers
//! behind spend it on top of what is earned now. Over a long run that evens out; over a short
//! window it does not (one process alone measured 110% of its cap over 5 seconds). A cap is
//! judged over windows of a few seconds, as the service judges its targets, so the window is
//! enforced as such: a taker goes only when what was let through in the last second, plus what
//! it takes, is within what the rate earned over that second. Any longer window is a sum of
//! seconds, so holds the same bound.
//!
//! What the rate earned is its integral over the second, not the present rate times a second:
//! a process's part of a scan's cap changes as others join and leave, and parts that add up to
//! the cap at every moment add up to it over any window only as integrals. (Held to the present
//! rate, a process whose part had just been cut from the whole cap to a third stopped for most
//! of a second: a cost paid at every join, 5% of a capped count's average.)
//!
//! With no rate there is no limit, but takers are still recorded: a rate may come (a learned
//! cap taking over from the back-offs), and what went in its first second's window counts
//! against it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use super::Rate;

/// The window: a second, so that every window of whole seconds (5 s included) holds the bound.
const WINDOW: Duration = Duration::from_secs(1);

/// How far a second may go over what the rate earned in it: a process held up (a stall of the
/// machine, a page given back) may catch up by a tenth, no more. Over a long run the bucket holds
/// the rate itself; over any whole number of seconds, the cap is held within 10%.
/// (Measured through devhost: held to 100%, a capped count averaged 73-78% of its cap; with
/// the tenth, 75-80%, and no 5-second window over 106%.)
const CATCH_UP: f64 = 1.1;

/// The longest wait between two looks while a taker waits: the rate may change meanwhile.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Entities let through, with when, over the last [`WINDOW`], and the rate over it.
#[derive(Debug)]
pub struct RecentUse {
    sent: Mutex<Sent>,
}

#[derive(Debug)]
struct Sent {
    /// What each taker took, oldest first, with when and its ticket.
    entries: VecDeque<Entry>,
    /// The sum of `entries`, kept as they come and go: a take costs the same however many
    /// takers the second held (uncapped, thousands).
    used: u64,
    next_ticket: u64,
    /// The rate from each moment it was set, oldest first: the last one set before the window
    /// began, then every change within it. A part with no rate earned what the rate now earns
    /// (see [`Sent::earned`]); no rate now, no limit.
    rates: VecDeque<(Instant, Rate)>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Instant,
    entities: u64,
    ticket: u64,
}

/// A taker's entry in the window, to give back what it did not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

impl RecentUse {
    /// Starts at `rate`, with nothing earned yet.
    pub fn new(rate: Rate) -> Self {
        RecentUse {
            sent: Mutex::new(Sent {
                entries: VecDeque::new(),
                used: 0,
                next_ticket: 0,
                rates: VecDeque::from([(Instant::now(), rate)]),
            }),
        }
    }

    /// The rate from now on.
    pub fn set_rate(&self, rate: Rate) {
        let mut sent = self.lock();
        if sent.rates.back().is_some_and(|(_, last)| *last == rate) {
            return;
        }
        let now = Instant::now();
        sent.rates.push_back((now, rate));
        sent.forget_older(now);
    }

    /// Waits until `entities` fit in what the rate earned over the last second, then counts
    /// them. A taker larger than that goes once the window is empty (else it would never go);
    /// no rate, no wait (but counted, for a rate that may come).
    pub async fn admit(&self, entities: u64) -> Ticket {
        loop {
            let wait = {
                let mut sent = self.lock();
                let now = Instant::now();
                sent.forget_older(now);
                let used = sent.used;
                match sent.earned(now).map(|earned| earned * CATCH_UP) {
                    Some(room) if used > 0 && (used + entities) as f64 > room => {
                        // The oldest entry leaves the window first: wait for it at most.
                        let oldest = sent.entries.front().map_or(now, |entry| entry.at);
                        Err((oldest + WINDOW).saturating_duration_since(now))
                    }
                    // Recorded with no rate too (see the module's doc).
                    Some(_) | None => Ok(sent.push(now, entities)),
                }
            };
            match wait {
                Err(wait) => {
                    tokio::time::sleep(wait.clamp(Duration::from_millis(1), LOOK_EVERY)).await
                }
                Ok(ticket) => return ticket,
            }
        }
    }

    /// Takes back entities a taker was counted for and did not use (a page answered short),
    /// from its own entry: given back from another, the window would hold less than was sent
    /// in it once that entry left. An entry already out of the window needs nothing.
    pub fn give_back(&self, ticket: Ticket, entities: u64) {
        let sent = &mut *self.lock();
        // Entries are pushed in ticket order and leave from the front: sorted by ticket.
        if let Ok(at) = sent.entries.binary_search_by_key(&ticket.0, |e| e.ticket) {
            let entry = &mut sent.entries[at];
            let taken = entities.min(entry.entities);
            entry.entities -= taken;
            sent.used -= taken;
        }
    }

    /// Entities let through in the last second.
    #[cfg(test)]
    fn used(&self) -> u64 {
        let mut sent = self.lock();
        sent.forget_older(Instant::now());
        sent.used
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sent> {
        // Plain numbers: a panic while holding the lock cannot leave them half-written.
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sent {
    fn forget_older(&mut self, now: Instant) {
        while self
            .entries
            .front()
            .is_some_and(|e| now.saturating_duration_since(e.at) >= WINDOW)
        {
            if let Some(gone) = self.entries.pop_front() {
                self.used -= gone.entities;
            }
        }
        // The rate in force when the window began is the last one set before it.
        while self
            .rates
            .get(1)
            .is_some_and(|(from, _)| now.saturating_duration_since(*from) >= WINDOW)
        {
            self.rates.pop_front();
        }
    }

    /// What the rate earned over the window ending `now` (no longer ago than the first rate
    /// was set); none while there is no rate now. A part of the window that had no rate earned
    /// the rate now: a learned cap that takes over from the back-offs holds from its first
    /// second, what went before it included. (Counted as unlimited, the first second after a
    /// takeover held nothing: devhost's default count moved 3,473 entities in it under a cap of
    /// 2,996, one process having taken all 16 slices while its pages under the back-off were
    /// still counted nowhere, 2026-11-28.)
    fn earned(&self, now: Instant) -> Option<f64> {
        let current = self.rates.back().and_then(|(_, rate)| *rate)?;
        let start = now.checked_sub(WINDOW);
        let mut earned = 0.0;
        for (i, (from, rate)) in self.rates.iter().enumerate() {
            let until = self.rates.get(i + 1).map_or(now, |(next, _)| *next);
            let from = start.map_or(*from, |start| (*from).max(start));
            let rate = rate.unwrap_or(current);
            earned += rate * until.saturating_duration_since(from).as_secs_f64();
        }
        Some(earned)
    }

    fn push(&mut self, at: Instant, entities: u64) -> Ticket {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        // The total first: an overflow panics before either changes.
        self.used += entities;
        self.entries.push_back(Entry {
            at,
            entities,
            ticket,
        });
        Ticket(ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::TokenBucket;

    /// A window that has been at `rate` for a while.
    async fn settled(rate: f64) -> RecentUse {
        let recent = RecentUse::new(Some(rate));
        tokio::time::advance(WINDOW).await;
        recent
    }

    #[tokio::test(start_paused = true)]
    async fn no_second_holds_more_than_a_tenth_over_the_rate() {
        let recent = settled(1_000.0).await;
        for _ in 0..11 {
            recent.admit(100).await;
        }
        let started = Instant::now();
        recent.admit(100).await;
        assert_eq!(
            Instant::now() - started,
            WINDOW,
            "the twelfth hundred waits for the first to leave the window"
        );
        assert_eq!(recent.used(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_taker_larger_than_a_second_goes_into_an_empty_window() {
        let recent = settled(1_000.0).await;
        recent.admit(5_000).await;
        let started = Instant::now();
        recent.admit(1).await;
        assert_eq!(Instant::now() - started, WINDOW);
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_given_back_makes_room_at_once() {
        let recent = settled(1_000.0).await;
        let ticket = recent.admit(1_000).await;
        recent.give_back(ticket, 600);
        let started = Instant::now();
        recent.admit(600).await;
        assert_eq!(Instant::now(), started);
        assert_eq!(recent.used(), 1_000);
    }

    #[tokio::test(start_paused = true)]
    async fn giving_back_more_than_was_taken_or_after_it_left_changes_nothing_else() {
        let recent = settled(1_000.0).await;
        let gone = recent.admit(300).await;
        tokio::time::advance(WINDOW).await;
        let kept = recent.admit(200).await;
        recent.give_back(gone, 300);
        assert_eq!(recent.used(), 200, "the entry had left the window");
        recent.give_back(kept, 500);
        assert_eq!(recent.used(), 0, "no more than the entry held");
    }

    #[tokio::test(start_paused = true)]
    async fn no_rate_no_wait() {
        let recent = RecentUse::new(None);
        let started = Instant::now();
        recent.admit(1_000_000).await;
        recent.admit(1_000_000).await;
        assert_eq!(Instant::now(), started);
        assert_eq!(
            recent.used(),
            2_000_000,
            "recorded, for a rate that may come"
        );
    }

    /// A learned cap taking over from the back-offs: what went in the second before, with no
    /// rate, counts in the cap's first second.
    #[tokio::test(start_paused = true)]
    async fn a_rate_that_comes_holds_its_first_second_with_what_went_before() {
        let recent = RecentUse::new(None);
        tokio::time::advance(WINDOW).await;
        recent.admit(900).await;
        tokio::time::advance(Duration::from_millis(500)).await;
        recent.set_rate(Some(1_000.0));
        // 900 went 0.5 s ago; the window earned 1,000 at the new rate, 1,100 with the tenth.
        let started = Instant::now();
        recent.admit(150).await;
        recent.admit(150).await;
        assert_eq!(
            Instant::now() - started,
            Duration::from_millis(500),
            "the second 150 waits for the 900 to leave the window"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_window_has_earned_only_since_it_began() {
        let recent = RecentUse::new(Some(1_000.0));
        recent.admit(110).await;
        let started = Instant::now();
        recent.admit(110).await;
        assert_eq!(Instant::now() - started, Duration::from_millis(200));
    }

    /// A part cut from the whole cap to a third holds its process back only as far as the
    /// integral says: what the old rate earned in the window still counts.
    #[tokio::test(start_paused = true)]
    async fn a_cut_rate_counts_what_the_old_one_earned_in_the_window() {
        let recent = settled(3_000.0).await;
        for _ in 0..30 {
            recent.admit(100).await;
            tokio::time::advance(Duration::from_millis(33)).await;
        }
        // 3,000 let through over the last second at 3,000/s; now the rate is a third.
        recent.set_rate(Some(1_000.0));
        let started = Instant::now();
        recent.admit(100).await;
        let waited = Instant::now() - started;
        // Held to the present rate it would wait until 2,100 of the 3,000 had left the window
        // (about 0.7 s); by the integral, only until the window earned 100 more than was sent.
        assert!(waited <= Duration::from_millis(150), "{waited:?}");
    }

    /// The case that made the window necessary: pages paid in full at the bucket and answered
    /// short give their rest back when the answer comes, which lets the takers behind go at
    /// once (120% of the rate in one second here); with the window too, no second holds more
    /// than a tenth over it.
    #[tokio::test(start_paused = true)]
    async fn give_backs_through_bucket_and_window_stay_within_every_second() {
        const TAKERS: u64 = 8;
        let rate = 1_000.0;
        let bucket = std::sync::Arc::new(TokenBucket::new(Some(rate)));
        let recent = std::sync::Arc::new(RecentUse::new(Some(rate)));
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let origin = Instant::now();
        let mut takers = Vec::new();
        for _ in 0..TAKERS {
            let (bucket, recent, log) = (bucket.clone(), recent.clone(), log.clone());
            takers.push(tokio::spawn(async move {
                for page in 0..40u64 {
                    bucket.take(200).await;
                    let ticket = recent.admit(200).await;
                    // Pages come in runs of four answered after 300 ms with 20 rows of the
                    // 200 paid, then four full ones: the runs' give-backs come at once.
                    let short = (page / 4) % 2 == 0;
                    let used = if short { 20 } else { 200 };
                    log.lock().unwrap().push((Instant::now() - origin, used));
                    if short {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        bucket.give_back(200 - used);
                        recent.give_back(ticket, 200 - used);
                    }
                }
            }));
        }
        for taker in takers {
            taker.await.unwrap();
        }
        let log = log.lock().unwrap().clone();
        let end = log.iter().map(|(at, _)| *at).max().unwrap();
        let mut from = Duration::ZERO;
        while from + WINDOW <= end {
            let within: u64 = log
                .iter()
                .filter(|(at, _)| *at >= from && *at < from + WINDOW)
                .map(|(_, n)| n)
                .sum();
            assert!(
                within as f64 <= rate * CATCH_UP,
                "{within} entities from {from:?}"
            );
            from += Duration::from_millis(10);
        }
    }
}
