//! What a process moved for a scan, counted a refresher's tick apart over the last seconds:
//! what it moves now, and what the account served it over the seconds before its refusal, or
//! over the seconds a learning round another process opened counts.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// What the process moved over this long is what it reports when an account refuses it.
pub(super) const RATE_SPAN: Duration = Duration::from_secs(2);
/// What an account that was not busy serves at first over what it takes, in seconds of it
/// (see [`MovedHistory::served_before`]).
const ACCOUNT_BURST: Duration = Duration::from_secs(1);
/// How long after its start a process's counts still hold the account's first burst: the
/// figure of a refusal whose window begins this soon is counted from the start too, and the
/// lesser taken (see [`MovedHistory::served_before`]).
const BURST_AFTERMATH: Duration = RATE_SPAN;

/// Counts of what the process moved (its pace's running total), with when they were taken.
pub(super) struct MovedHistory {
    /// When the pace started: its total was 0 then.
    started: Instant,
    /// How long counts are kept.
    keep: Duration,
    /// The counts taken over the last `keep`, oldest first.
    counts: VecDeque<(Instant, u64)>,
    /// Whether counts were dropped for age: before the oldest kept, the total is not known.
    dropped: bool,
}

impl MovedHistory {
    pub(super) fn new(started: Instant, keep: Duration) -> Self {
        MovedHistory {
            started,
            keep,
            counts: VecDeque::new(),
            dropped: false,
        }
    }

    /// Takes the running total `moved` at `now`, and forgets counts older than it keeps.
    pub(super) fn note(&mut self, now: Instant, moved: u64) {
        self.counts.push_back((now, moved));
        while self
            .counts
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > self.keep)
        {
            self.counts.pop_front();
            self.dropped = true;
        }
    }

    /// Whether the process moved anything over the counts kept.
    pub(super) fn moved_lately(&self) -> bool {
        let first = if self.dropped {
            self.counts.front().map_or(0, |c| c.1)
        } else {
            0
        };
        self.counts.back().is_some_and(|last| last.1 > first)
    }

    /// What the process had moved by `at`: 0 at its start or before; read between the counts
    /// taken around it (or the start, before the first), in proportion to the time (a count a
    /// tick before a window's start, taken as at its start, counted a tick's moves too many:
    /// 5% of two seconds at a tick of 100 ms); the last count for a time after it. `None` for a
    /// time before the oldest count kept, once counts were dropped: not known.
    fn moved_by(&self, at: Instant) -> Option<f64> {
        if at <= self.started {
            return Some(0.0);
        }
        let after = self.counts.partition_point(|(taken, _)| *taken <= at);
        let before = match after.checked_sub(1) {
            Some(index) => self.counts[index],
            None if self.dropped => return None,
            None => (self.started, 0),
        };
        let Some(&(next_at, next)) = self.counts.get(after) else {
            return Some(before.1 as f64);
        };
        let gap = next_at.duration_since(before.0).as_secs_f64();
        let into = at.duration_since(before.0).as_secs_f64();
        let moved_in_gap = next.saturating_sub(before.1) as f64;
        if gap > 0.0 {
            Some(before.1 as f64 + moved_in_gap * (into / gap))
        } else {
            Some(before.1 as f64)
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
        // Counts are kept for longer than the span: the start of it is known.
        let first = self.moved_by(from).unwrap_or(last as f64);
        (last as f64 - first).max(0.0) / span.as_secs_f64()
    }

    /// Entities per second the account served the process over the last [`RATE_SPAN`] before
    /// its refusal now (see [`served_over`](Self::served_over)); for a process that started
    /// [`BURST_AFTERMATH`] or less before that window, that or what it served since it started
    /// over that time and [`ACCOUNT_BURST`] more, whichever is less. An account that was not
    /// busy serves a burst at first (what it has in hand, a second's worth where it keeps a
    /// bucket of one), and the process it first refuses, the one whose figure opens the round,
    /// has it in the seconds before: counted over the time alone, a test's two processes on an
    /// account taking 8,000 entities/s reported 12,308 together, and devhost's one process on
    /// an account taking 3,000 reported 3,877 (a cap learned over the account, and the
    /// application beside it refused until it was lowered). The burst is still in a window
    /// that begins a moment after the start: the account serves what it has in hand while the
    /// process ramps, and refuses once that is spent, two or three seconds in; over the two
    /// seconds before such refusals devhost's process reported 3,327-3,707 (2da5afa: caps of
    /// 2,994-3,336 learned, refused, and lowered by the whole step). The lesser of the two
    /// keeps a process that stood idle in the window at what it served there. Only the
    /// opener's own figure: a process that joins a round counts the round's seconds as they
    /// were ([`served_to`](Self::served_to)), and one that started on a busy account had no
    /// burst to take out (counted from its start with a second added, a process that started
    /// a second before the window at a steady rate read three quarters of it).
    pub(super) fn served_before(&self, now: Instant) -> f64 {
        let from = now.checked_sub(RATE_SPAN).unwrap_or(self.started);
        let own = self.served_over(from, now);
        if from > self.started && from <= self.started + BURST_AFTERMATH {
            own.min(self.since_start(now))
        } else {
            own
        }
    }

    /// Entities per second the account served the process from `from` to `to`; for a process
    /// that started in between, what it served from its start over that time and
    /// [`ACCOUNT_BURST`] more ([`since_start`](Self::since_start)); 0 for one that started
    /// after, or seconds older than the counts kept.
    fn served_over(&self, from: Instant, to: Instant) -> f64 {
        if to <= self.started {
            return 0.0;
        }
        if from <= self.started {
            return self.since_start(to);
        }
        self.moved_between(from, to, to.saturating_duration_since(from))
    }

    /// Entities per second the process moved from its start to `to`, over that time and
    /// [`ACCOUNT_BURST`] more: what an account that was idle served it, its first burst taken
    /// out.
    fn since_start(&self, to: Instant) -> f64 {
        if to <= self.started {
            return 0.0;
        }
        self.moved_between(
            self.started,
            to,
            to.duration_since(self.started) + ACCOUNT_BURST,
        )
    }

    /// What moved from `from` to `to`, per second of `span`; 0 over no time or where a count is
    /// not known.
    fn moved_between(&self, from: Instant, to: Instant, span: Duration) -> f64 {
        if span.is_zero() {
            return 0.0;
        }
        match (self.moved_by(from), self.moved_by(to)) {
            (Some(from), Some(to)) => (to - from).max(0.0) / span.as_secs_f64(),
            _ => 0.0,
        }
    }

    /// Entities per second the account served the process over the [`RATE_SPAN`] to `to_ms`
    /// (epoch ms, on the clock that reads `now_ms` at `now`): the seconds a learning round
    /// counts, those its opener's figure counts, so that every report into it counts the same
    /// (docs/scan.md, step 2). Seconds this clock puts after now end now: the opener's figure
    /// may count the seconds to its report, and a process reporting a moment after it on a
    /// clock a moment behind counted nothing. 0 for seconds older than the counts kept.
    pub(super) fn served_to(&self, to_ms: u64, now: Instant, now_ms: u64) -> f64 {
        let ago = Duration::from_millis(now_ms.saturating_sub(to_ms));
        let Some(to) = now.checked_sub(ago) else {
            return 0.0;
        };
        self.served_over(to.checked_sub(RATE_SPAN).unwrap_or(self.started), to)
    }
}

#[cfg(test)]
mod tests;
