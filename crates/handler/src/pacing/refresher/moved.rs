//! What a process moved for a scan, counted a refresher's tick apart over the last
//! [`HISTORY`]: what it moves now, and what the account served it over the seconds before its
//! refusal, or over the seconds a learning round another process opened counts.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use tablescan_ledger::learning::ROUND;

/// What the process moved over this long is what it reports when an account refuses it.
pub(super) const RATE_SPAN: Duration = Duration::from_secs(2);
/// How long after a cut of the account's back-off the process reports what it moves: the
/// back-off recovers to its ceiling within about two seconds, and what the process moves over
/// the [`RATE_SPAN`] after that is what the account gives it at that ceiling (a report at the
/// cut would count the burst that met the refusal, above what the account takes; one at 3 s
/// counted a second of the recovery, and learned caps 10-25% under the account's room).
pub(in crate::pacing) const REPORT_DELAY: Duration = Duration::from_secs(4);
/// What an account that was not busy serves at first over what it takes, in seconds of it
/// (see [`MovedHistory::served_before`]).
const ACCOUNT_BURST: Duration = Duration::from_secs(1);
/// How far back the counts are kept: a report into a round counts the [`RATE_SPAN`] its
/// opener's figure counted, which ends at the opener's refusal at the earliest, and comes at
/// the latest as the round ends, [`ROUND`] after it opened, which its opener did
/// [`REPORT_DELAY`] after that refusal; two seconds more for the ledger's answers and clocks
/// read at moments apart.
pub(super) const HISTORY: Duration =
    Duration::from_secs(RATE_SPAN.as_secs() + REPORT_DELAY.as_secs() + ROUND.as_secs() + 2);

/// Counts of what the process moved (its pace's running total), with when they were taken.
pub(super) struct MovedHistory {
    /// When the pace started: its total was 0 then.
    started: Instant,
    /// The counts taken over the last [`HISTORY`], oldest first.
    counts: VecDeque<(Instant, u64)>,
    /// Whether counts were dropped for age: before the oldest kept, the total is not known.
    dropped: bool,
}

impl MovedHistory {
    pub(super) fn new(started: Instant) -> Self {
        MovedHistory {
            started,
            counts: VecDeque::new(),
            dropped: false,
        }
    }

    /// Takes the running total `moved` at `now`, and forgets counts older than [`HISTORY`].
    pub(super) fn note(&mut self, now: Instant, moved: u64) {
        self.counts.push_back((now, moved));
        while self
            .counts
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > HISTORY)
        {
            self.counts.pop_front();
            self.dropped = true;
        }
    }

    /// What the process had moved by `at`: read between the counts taken around it, in
    /// proportion to the time (a count a tick before the window's start, taken as at its
    /// start, counted a tick's moves too many: 5% of two seconds at a tick of 100 ms); the last
    /// count for a time after it, the oldest kept for one before it, 0 before the start.
    fn moved_by(&self, at: Instant) -> f64 {
        if at <= self.started {
            return 0.0;
        }
        let after = self.counts.partition_point(|(taken, _)| *taken <= at);
        let before = match after.checked_sub(1) {
            Some(index) => self.counts[index],
            None if self.dropped => return self.counts.front().map_or(0.0, |c| c.1 as f64),
            None => (self.started, 0),
        };
        let Some(&(next_at, next)) = self.counts.get(after) else {
            return before.1 as f64;
        };
        let gap = next_at.duration_since(before.0).as_secs_f64();
        let into = at.duration_since(before.0).as_secs_f64();
        let moved_in_gap = next.saturating_sub(before.1) as f64;
        if gap > 0.0 {
            before.1 as f64 + moved_in_gap * (into / gap)
        } else {
            before.1 as f64
        }
    }

    /// Entities per second the process moved lately: over the [`RATE_SPAN`] to its last count
    /// (over a second at least: a process that just started would otherwise report a moment's
    /// burst as a rate).
    pub(super) fn rate(&self) -> f64 {
        let Some(&(last_at, last)) = self.counts.back() else {
            return 0.0;
        };
        let from = last_at
            .checked_sub(RATE_SPAN)
            .unwrap_or(self.started)
            .max(self.started);
        let span = last_at.duration_since(from).max(Duration::from_secs(1));
        (last as f64 - self.moved_by(from)).max(0.0) / span.as_secs_f64()
    }

    /// Entities per second the account served the process over the last [`RATE_SPAN`]; for a
    /// process that started within it, what it served since it started over that time and
    /// [`ACCOUNT_BURST`] more. An account that was not busy serves a burst at first (what it
    /// has in hand, a second's worth where it keeps a bucket of one), and counted over the
    /// time alone that burst read as a rate far over what the account takes: a test's two
    /// processes on an account taking 8,000 entities/s reported 12,308 together, and devhost's
    /// one process on an account taking 3,000 reported 3,877 (a cap learned over the account,
    /// and the application beside it refused until it was lowered).
    pub(super) fn served_before(&self, now: Instant) -> f64 {
        self.served_over(now.checked_sub(RATE_SPAN).unwrap_or(self.started), now)
    }

    /// Entities per second the account served the process from `from` to `to`; for a process
    /// that started in between, what it served from its start over that time and
    /// [`ACCOUNT_BURST`] more (see [`served_before`](Self::served_before)); 0 for one that
    /// started after.
    fn served_over(&self, from: Instant, to: Instant) -> f64 {
        if to <= self.started {
            return 0.0;
        }
        let span = if from <= self.started {
            to.duration_since(self.started) + ACCOUNT_BURST
        } else {
            to.saturating_duration_since(from)
        };
        if span.is_zero() {
            return 0.0;
        }
        let moved = (self.moved_by(to) - self.moved_by(from)).max(0.0);
        moved / span.as_secs_f64()
    }

    /// Entities per second the account served the process over the [`RATE_SPAN`] to `to_ms`
    /// (epoch ms, on the clock that reads `now_ms` at `now`): the seconds a learning round
    /// counts, those its opener's figure counts, so that every report into it counts the same.
    /// Counted over seconds of each reporter's own, the sum counted twice the room one process
    /// left another after its back-off's cut (a devhost run beside an application: 3,071
    /// entities/s served the opener before its refusal, 2,600 the next process four seconds
    /// later, once the opener had backed off; a sum of 5,671 where the account left 2,500). 0
    /// for seconds this clock puts after now, or further back than this process's clock goes:
    /// nothing this process moved is known to have come in them.
    pub(super) fn served_to(&self, to_ms: u64, now: Instant, now_ms: u64) -> f64 {
        let Some(ago) = now_ms.checked_sub(to_ms) else {
            return 0.0;
        };
        let Some(to) = now.checked_sub(Duration::from_millis(ago)) else {
            return 0.0;
        };
        self.served_over(to.checked_sub(RATE_SPAN).unwrap_or(self.started), to)
    }
}

#[cfg(test)]
mod tests;
