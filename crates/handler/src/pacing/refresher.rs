//! Keeps a scan's pace in this process up to date while the process runs steps of it: for a
//! capped scan (set or learned), runs the slice protocol every [`TICK`] and sets the share's
//! rate to what the process holds; for every scan, learns from the account's refusals
//! (`job::learning`): a cut of the account's back-off is reported with what the process moved,
//! the round closed when it is over, and a learned cap that held quietly while used in full
//! raised (asked for only while the account has not refused this process for a quiet while
//! and answers it at its usual speed; the ledger checks that the scan as a whole uses most of
//! it). When the process has had no
//! step of the scan for [`GRACE`], it gives its slices back and removes the scan.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tablescan_pace::{Clock, Demand};
use tokio::time::Instant;

use super::round_hold::HOLD_PAST_ROUND;
use super::{lock, LeaseClock, ScanPace, Scans};
use tablescan_ledger::learning::{
    quiet_for, OwnFigure, Reported, ASK_RAISE_EVERY, LOWER_EVERY, LOWER_SEEN_EVERY, QUIET, ROUND,
};

mod moved;

use moved::{MovedHistory, RATE_SPAN};

/// How long a process runs under a learned cap before a refusal it meets is news of that cap:
/// the answers to requests sent before it took over come within a second, and the ledger takes
/// a lowering under a cap a round or a raise set only this long after the change
/// (`LOWER_SEEN_EVERY`, counted from the ledger's change, which comes before this process's):
/// a try sooner would be refused, and spend the process's one try on the short clock.
const SEEN_FOR: Duration = LOWER_SEEN_EVERY;
/// How often the refresher runs.
const TICK: Duration = Duration::from_millis(100);
/// How long a process stays in a scan after its last step of it ended: the next work item may
/// be a moment away in the queue, and a capped scan's slices are kept meanwhile.
pub(super) const GRACE: Duration = Duration::from_secs(5);
/// How long giving the slices back may take; past it their leases run out by themselves.
const LEAVE_TIME: Duration = Duration::from_secs(2);
/// How long one round of the slice protocol may take before the rate is set again from the
/// leases: well under the clocks' margin (`tablescan_pace::CLOCK_MARGIN_MS`), so a lease never
/// runs out at the store while this process's rate still spends it.
const TICK_TIME: Duration = Duration::from_millis(400);
/// A process with no step of the scan for this long gives its slices back (it stays in the
/// scan, and takes slices again when a step comes).
const IDLE_RELEASE: Duration = Duration::from_secs(1);
/// How long after a cut of the account's back-off the process reports what it moves: the
/// back-off recovers to its ceiling within about two seconds, and what the process moves over
/// the [`RATE_SPAN`] after that is what the account gives it at that ceiling (a report at the
/// cut would count the burst that met the refusal, above what the account takes; one at 3 s
/// counted a second of the recovery, and learned caps 10-25% under the account's room).
pub(super) const REPORT_DELAY: Duration = Duration::from_secs(4);
/// How far back a process keeps what it moved: a report into a round counts the [`RATE_SPAN`]
/// its opener's figure counted, which ends at the opener's refusal at the earliest, and comes
/// at the latest as the round ends, `ROUND` after it opened, which its opener did
/// [`REPORT_DELAY`] after that refusal; two seconds more for the ledger's answers and clocks
/// read at moments apart.
const HISTORY: Duration =
    Duration::from_secs(RATE_SPAN.as_secs() + REPORT_DELAY.as_secs() + ROUND.as_secs() + 2);
/// A process refused while it moves at least this share of what its slices grant presses on
/// the account with the scan's cap (see [`Refresher::lower`]).
const PRESSING: f64 = 0.8;
/// A process the account refuses again this soon after its last refusal is held back by the
/// account, not by the scan's cap, whatever share of the cap it uses: the cap is over what the
/// account gives, and is lowered. Longer than the back-off's lift (12 s after a refusal), so
/// that a refusal met when the lifted back-off sends its burst counts too.
const REFUSED_AGAIN_WITHIN: Duration = Duration::from_secs(15);

pub(super) struct Refresher {
    pace: Arc<ScanPace>,
    scans: Scans,
    /// What the process moved, a tick apart, over the last seconds.
    moved: MovedHistory,
    /// The account back-off's cuts seen so far (`None` before the first step named it).
    cuts_seen: Option<u64>,
    /// The report this process is to send into the scan's learning round, if any.
    planned: Option<PlannedReport>,
    /// What the account served this process over the seconds before the cuts it is to
    /// report (the most, of several): where the account began to refuse it; and when that cut
    /// came (epoch ms), the end of those seconds.
    served_before_cut: Option<(f64, u64)>,
    /// When the round this process reported into is over, to close it.
    close_at_ms: Option<u64>,
    /// The last round (its opening, epoch ms) this process tried to close.
    close_tried_round: u64,
    /// The round this process reported into last (its opening, epoch ms).
    reported_round: u64,
    /// When this process last tried to raise the learned cap.
    raise_tried: Option<Instant>,
    /// When this process last tried to lower it.
    lower_tried: Option<Instant>,
    /// When the account's back-off here last cut (the account refused this process), once the
    /// scan has a learned cap: no raise is asked for within [`QUIET`] of it.
    last_cut: Option<Instant>,
    /// When [`log_pace`](Self::log_pace) last wrote.
    logged_at: Option<Instant>,
}

impl Refresher {
    pub(super) fn new(pace: Arc<ScanPace>, scans: Scans) -> Self {
        Refresher {
            pace,
            scans,
            moved: MovedHistory::new(Instant::now(), HISTORY),
            cuts_seen: None,
            planned: None,
            served_before_cut: None,
            close_at_ms: None,
            close_tried_round: 0,
            reported_round: 0,
            raise_tried: None,
            lower_tried: None,
            last_cut: None,
            logged_at: None,
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            if self.removed().await {
                return;
            }
            let now = Instant::now();
            self.note_moved(now);
            self.learn().await;
            if let Some(slices) = self.pace.slices() {
                let demand = self.demand(now);
                self.set_rate(&slices);
                if self.idle_for(IDLE_RELEASE) {
                    // No step here: the slices go where the steps are, not after the grace.
                    self.pace.share.set_rate(Some(0.0));
                    let _ = tokio::time::timeout(TICK_TIME, slices.leave()).await;
                }
                // A slow ledger must not keep the rate from following the leases: the round is
                // cut short (its writes are conditional, so one cut off is harmless) and the
                // rate set again from what the leases allow now.
                let _ = tokio::time::timeout(TICK_TIME, slices.tick(demand)).await;
                let granted = self.set_rate(&slices);
                // Raised only by a process that uses its whole share and would use more.
                if demand.wants_more && granted > 0.0 && demand.used >= granted * 0.9 {
                    self.raise(now).await;
                }
            }
            self.log_pace(now);
            tokio::time::sleep(TICK).await;
        }
    }

    /// Once a second, at debug level (`TABLESCAN_LOG=info,tablescan_handler::pacing=debug`),
    /// where the process's pace of the scan stands: its cap, its slices and what they grant,
    /// what it moved, its steps running and waiting, the account's back-off. What the devhost
    /// runs' faults were found with (docs/scan.md, "Pacing").
    fn log_pace(&mut self, now: Instant) {
        if !tracing::enabled!(tracing::Level::DEBUG)
            || self
                .logged_at
                .is_some_and(|at| now.saturating_duration_since(at) < Duration::from_secs(1))
        {
            return;
        }
        self.logged_at = Some(now);
        let (running, waiting) = {
            let state = self.pace.lock();
            (state.running, state.waiting)
        };
        let back_off = lock(&self.pace.source)
            .as_ref()
            .and_then(|(source, _)| source.rate());
        let slices = self.pace.slices();
        let demand = self.demand(now);
        tracing::debug!(
            scan = %self.pace.scan,
            cap = ?*lock(&self.pace.cap),
            slices = ?slices.as_ref().map(|s| s.usable()),
            granted = ?slices.as_ref().map(|s| s.granted().round()),
            moved = demand.used.round(),
            wants_more = demand.wants_more,
            running,
            waiting,
            back_off = ?back_off.map(f64::round),
            slow = self.account_answers_slowly(),
            "pace"
        );
    }

    /// Sets the share's rate to what the process's leases allow now; that rate.
    fn set_rate(
        &self,
        slices: &tablescan_pace::ScanShare<tablescan_ledger::Ledger, LeaseClock>,
    ) -> f64 {
        let granted = slices.granted();
        self.pace.share.set_rate(Some(granted));
        self.pace.recent.set_rate(Some(granted));
        granted
    }

    fn note_moved(&mut self, now: Instant) {
        self.moved
            .note(now, self.pace.moved.load(Ordering::Relaxed));
    }

    fn demand(&self, now: Instant) -> Demand {
        let (running, waiting) = {
            let state = self.pace.lock();
            (state.running, state.waiting)
        };
        let held_back = self
            .pace
            .share
            .held_since(now.checked_sub(Duration::from_secs(1)).unwrap_or(now));
        // No rate (an uncapped scan) counts as no grant: any hold is want. The bucket keeps a
        // rate of 0 as a tiny one, which `judged` takes as none too.
        let granted = self.pace.share.rate().unwrap_or(0.0);
        let starved = held_back && super::starved(granted, running);
        // Steps running with no grant at all want one whether or not the bucket holds them:
        // as a learned cap takes over, steps that reserved their next page before it wait in
        // the last second's window (`RecentUse`), which marks no hold, and the process took
        // no slice until one of them reached the bucket (devhost: the only process running
        // steps held none for 1.0-1.8 s after the cap took over, and the scan moved 945-1,919
        // entities a second then on an account taking 3,000; docs/scan.md, the runs of
        // 2026-11-29 from 14:20).
        let unslotted = running > 0 && self.pace.slices().is_some_and(|s| s.usable() == 0);
        Demand::judged(
            waiting > 0 || starved || unslotted,
            held_back,
            self.moved.rate(),
            granted,
        )
    }

    /// Reports a new cut of the account's back-off into the scan's learning round, and closes
    /// the round this process reported into once it is over.
    async fn learn(&mut self) {
        let now_ms = self.pace.clock.now_ms();
        let source = lock(&self.pace.source).clone();
        let Some((source, cuts_before)) = source else {
            return;
        };
        let seen = *self.cuts_seen.get_or_insert(cuts_before);
        let cuts = source.cuts();
        let now = Instant::now();
        let round = self.pace.round_ms.load(Ordering::Relaxed);
        if self.pace.has_learned.load(Ordering::Relaxed) {
            self.lower_if_pressing(cuts, seen, now, now_ms).await;
            self.finish_round_under_its_cap(round, now, now_ms).await;
            return;
        }
        let learning_until = super::round_hold::learning_until_ms(round, false, now_ms);
        if learning_until > now_ms {
            source.hold_until(now + Duration::from_millis(learning_until - now_ms));
            if self.pace.has_learned.load(Ordering::Relaxed) {
                // The cap came (and lifted the back-off) as the hold was set: no hold then.
                source.lift();
            }
            // Every process running the scan closes the round once it is over, not only those
            // that reported into it: a process that joined meanwhile waits for its cap, and
            // would wait in vain if every reporter had left.
            if self.close_at_ms.is_none() && round > self.close_tried_round {
                self.close_at_ms = Some(round_end(round));
            }
        }
        if cuts > seen {
            self.cuts_seen = Some(cuts);
            // What the account served before it refused counts in the report this cut plans,
            // and in no later one; never more than the rate it refused.
            if self.plan_report_of_cut(now, now_ms) {
                let served = self
                    .moved
                    .served_before(now)
                    .min(source.refused_rate().unwrap_or(f64::INFINITY));
                if self.served_before_cut.is_none_or(|(most, _)| served > most) {
                    self.served_before_cut = Some((served, now_ms));
                }
            }
        }
        self.join_open_round(now_ms);
        if let Some(planned) = self.planned.filter(|planned| planned.due(now)) {
            self.planned = None;
            let own_refusal = matches!(planned, PlannedReport::OwnRefusal { .. });
            let own = (own_refusal && cuts > cuts_before).then(|| self.own_figure(&source, now_ms));
            self.served_before_cut = None;
            self.report(own, false, now, now_ms).await;
        }
        self.close_round_when_over(now_ms).await;
    }

    /// For a scan that has a ceiling already (rounds are for learning the first): refused
    /// again (`cuts` over `seen`) while using all of its share here, or refused again within
    /// [`REFUSED_AGAIN_WITHIN`] of its last refusal, the ceiling is too high for what else runs
    /// on the account now; it is lowered (`Ledger::lower_learned_cap`, to a share of what the
    /// scan moved), at most once a while per process (checked here first, so that a process
    /// refused again and again reads the ledger once a while; of a hundred refused at once,
    /// each reads the learning row once and one wins the lowering). A single refusal of a process that used
    /// little of its share lowers nothing: one slow request, or a fault, is no ceiling.
    async fn lower_if_pressing(&mut self, cuts: u64, seen: u64, now: Instant, now_ms: u64) {
        // A refusal before the cap came is no figure for a round any more: the cap's
        // lowering takes refusals from now on. (A part in the open round is still sent.)
        if matches!(self.planned, Some(PlannedReport::OwnRefusal { .. })) {
            self.planned = None;
        }
        self.cuts_seen = Some(cuts);
        let refused_again = cuts > seen
            && self
                .last_cut
                .is_some_and(|at| now.saturating_duration_since(at) < REFUSED_AGAIN_WITHIN);
        if cuts > seen {
            self.last_cut = Some(now);
        }
        // Under a cap it has seen, a process tries once as soon as the ledger may take it
        // (`LOWER_SEEN_EVERY`), then once a while as under any other: the learning row's reads
        // stay at one per process per `LOWER_EVERY` while refusals go on.
        let seen_cap = self.seen_cap(now);
        let tried_under_it =
            seen_cap.is_some_and(|(_, since)| self.lower_tried.is_some_and(|at| at >= since));
        let every = if seen_cap.is_some() && !tried_under_it {
            LOWER_SEEN_EVERY
        } else {
            LOWER_EVERY
        };
        let tried_lately = self
            .lower_tried
            .is_some_and(|at| now.saturating_duration_since(at) < every);
        // Under a learned cap adopted less than `SEEN_FOR` ago no try is made: the ledger
        // takes none so soon after a change (`LOWER_EVERY`, or `LOWER_SEEN_EVERY` for a
        // process that names the cap), and a try refused would spend the early one, the next
        // coming `LOWER_EVERY` later. A first cap learned over the room an application left was
        // refused a second after it took over, and lowered only 9.6 s after the round.
        let just_adopted = seen_cap.is_none() && self.learned_in_force();
        if cuts > seen && !just_adopted && !tried_lately && (refused_again || self.pressing(now)) {
            self.lower_tried = Some(now);
            self.lower(now_ms, seen_cap.map(|(cap, _)| cap)).await;
        }
    }

    /// For a scan with a cap: the round that set it from its first report on (`round`, its
    /// opening as last read, epoch ms) takes this process's part too while it is open (the
    /// round's cap is [`LEARNED_SHARE`](tablescan_ledger::learning::LEARNED_SHARE) of the
    /// parts so far, and each part raises it; a round that sets no cap takes none:
    /// `Ledger::join_round_setting_cap`), and is closed once it is over by each process that
    /// ran the scan in it or joined it within [`HOLD_PAST_ROUND`] of its end (a close is a
    /// read of the learning row, and for the one that closes it a write; once per process and
    /// round). A round left open past that, every process gone, is closed by the next ask for
    /// a raise (`Ledger::raise_learned_cap`).
    async fn finish_round_under_its_cap(&mut self, round: u64, now: Instant, now_ms: u64) {
        let recent = now_ms < round_end(round).saturating_add(HOLD_PAST_ROUND.as_millis() as u64);
        if round > self.close_tried_round && self.close_at_ms.is_none() && recent {
            self.close_at_ms = Some(round_end(round));
        }
        self.join_open_round(now_ms);
        if matches!(self.planned, Some(PlannedReport::Join)) {
            self.planned = None;
            self.served_before_cut = None;
            self.report(None, true, now, now_ms).await;
        }
        self.close_round_when_over(now_ms).await;
    }

    /// The round this process last read with the scan (its opening, epoch ms), if it is open
    /// at `now_ms`.
    fn open_round(&self, now_ms: u64) -> Option<u64> {
        let round = self.pace.round_ms.load(Ordering::Relaxed);
        (round > 0 && now_ms < round_end(round)).then_some(round)
    }

    /// After a new cut: a report once the back-off has settled ([`REPORT_DELAY`]), counted
    /// once per round (a cut while a round this process reported into is open adds nothing;
    /// one while a round it has not reported into is open joins it at once,
    /// [`join_open_round`](Self::join_open_round)). Whether a report of this cut is planned.
    fn plan_report_of_cut(&mut self, now: Instant, now_ms: u64) -> bool {
        if self.open_round(now_ms).is_some() {
            return false;
        }
        self.planned.get_or_insert(PlannedReport::OwnRefusal {
            at: now + REPORT_DELAY,
        });
        true
    }

    /// A round another process opened, seen with the scan: this process's part counts too, so
    /// it reports now, what it moved over the seconds the round counts (known already: no
    /// wait for its back-off to settle), a report of its own refusal still to come given up
    /// for it (planned for 4 s after its refusal, it could fall after the round's end, too late
    /// for the round and too soon for another, and its part was counted nowhere). One attempt
    /// per round, whatever it meets: lost tries leave the round to the others rather than
    /// pressing on its row.
    fn join_open_round(&mut self, now_ms: u64) {
        let Some(round) = self.open_round(now_ms) else {
            return;
        };
        if round > self.reported_round {
            self.planned = Some(PlannedReport::Join);
            self.served_before_cut = None;
            self.reported_round = round;
        }
    }

    /// Where the account began to refuse this process, for a round its report opens, and the
    /// end of the [`RATE_SPAN`] that figure counts (epoch ms): what the account served it over
    /// the seconds before the refusal (`served_before_cut`, ending at that cut); or, if more, where its back-off takes the account to refuse it (its
    /// estimate), but no more than the account gave it since (what it moved over the last
    /// seconds, ending now, which the back-off brought back to that estimate unless the
    /// account took less).
    ///
    /// What was served before the refusal counts because the back-off's figure alone is far
    /// under it: its first estimate is three quarters of the rate refused (which may be a
    /// burst), and it recovers to 90% of that, so that report, learned at 90%, gave a cap of
    /// about 60% of the rate refused (devhost, an account taking 3,000 entities/s: learned
    /// caps of 2,143 and 2,221). The estimate alone counts what steps asked for, ahead of what
    /// the account served, and learned caps 30-50% over what the account took; what was
    /// served is what the account took.
    fn own_figure(&self, source: &tablescan_storage::pacing::Governor, now_ms: u64) -> OwnFigure {
        let moved = self.moved.rate();
        let recovered = source
            .estimate()
            .map_or(moved, |estimate| estimate.min(moved));
        let (rate, counted_to_ms) = match self.served_before_cut {
            Some((served, cut_ms)) if served > recovered => (served, cut_ms),
            _ => (recovered, now_ms),
        };
        OwnFigure {
            rate,
            counted_to_ms,
        }
    }

    /// Reports this process's part in where the account refused the scan: into the round open
    /// at the ledger, what it moved over the two seconds its opener's figure counts (every
    /// report counts the same seconds, `MovedHistory::served_to`); opening one, if none is
    /// open and this process was refused, `own` ([`own_figure`](Self::own_figure)). The ledger
    /// decides which on the row as it reads it: the round this process last read with the scan
    /// may be seconds old. A process under the scan's learned cap (`under_cap`) reports only
    /// into a round that sets the cap (`Ledger::join_round_setting_cap`). A process that moved
    /// nothing lately and has no figure of its own has nothing to report, and reads nothing.
    async fn report(&mut self, own: Option<OwnFigure>, under_cap: bool, now: Instant, now_ms: u64) {
        if own.is_none() && !self.moved.moved_lately() {
            return;
        }
        let moved = &self.moved;
        let joined_rate = |to_ms: u64| moved.served_to(to_ms, now, now_ms);
        let (ledger, scan, holder) = (&self.pace.ledger, &self.pace.scan, &self.pace.holder);
        let reported = if under_cap {
            ledger
                .join_round_setting_cap(scan, holder, joined_rate, now_ms)
                .await
        } else {
            ledger
                .report_into_round(scan, holder, own, joined_rate, now_ms)
                .await
        };
        tracing::debug!(
            scan = %self.pace.scan, ?own, under_cap, ?reported,
            "a report into the scan's learning round"
        );
        self.reported(reported).await;
    }

    /// Takes in what a report into the scan's round did.
    async fn reported(&mut self, reported: Result<Reported, tablescan_ledger::LedgerError>) {
        match reported {
            Ok(Reported::In(round_at)) => {
                self.reported_round = round_at;
                self.pace.round_ms.fetch_max(round_at, Ordering::Relaxed);
                self.close_at_ms = Some(round_end(round_at));
                self.apply_round_cap(round_at).await;
            }
            Ok(Reported::Skipped | Reported::Nothing) => {}
            Err(e) => {
                tracing::debug!(scan = %self.pace.scan, "could not report into the learning round: {e}")
            }
        }
    }

    /// Applies here at once the cap a round that this process just reported into set (a round
    /// on a scan with no cap sets one from its first report on, `Learning::provisional`):
    /// every other process reads it with the scan within `CANCEL_CHECK_EVERY`, and the
    /// reporter, which the account refused a moment ago, should not be the last.
    async fn apply_round_cap(&mut self, round_at: u64) {
        match self.pace.ledger.learning(&self.pace.scan).await {
            Ok(Some(learning)) if learning.round_at_ms == round_at && learning.cap.is_some() => {
                self.pace.learned(learning.cap)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(scan = %self.pace.scan, "could not read the round's cap: {e}")
            }
        }
    }

    /// Closes the round this process reported into once it is over, and applies the cap it
    /// set (whoever closed it) here at once.
    async fn close_round_when_over(&mut self, now_ms: u64) {
        if self.close_at_ms.is_none_or(|at| now_ms < at) {
            return;
        }
        self.close_at_ms = None;
        self.close_tried_round = self.pace.round_ms.load(Ordering::Relaxed);
        let ledger = &self.pace.ledger;
        if let Err(e) = ledger.close_round(&self.pace.scan, now_ms).await {
            tracing::debug!(scan = %self.pace.scan, "could not close a learning round: {e}");
        }
        if let Ok(Some(learning)) = ledger.learning(&self.pace.scan).await {
            self.pace.learned(learning.cap);
        }
    }

    /// Whether the scan's cap is one it learned (its request set none, or a higher one).
    fn learned_in_force(&self) -> bool {
        let cap = *lock(&self.pace.cap);
        cap.is_some() && self.pace.set.is_none_or(|set| cap < Some(set))
    }

    /// Whether this process uses (nearly) all of its share of the scan's cap.
    fn pressing(&self, now: Instant) -> bool {
        let Some(slices) = self.pace.slices() else {
            return false;
        };
        let granted = slices.granted();
        granted > 0.0 && self.demand(now).used >= granted * PRESSING
    }

    /// The learned cap this process has run under for [`SEEN_FOR`] at least, and since when:
    /// a refusal met now was met under it, not under a cap or back-off before it.
    fn seen_cap(&self, now: Instant) -> Option<(f64, Instant)> {
        if !self.learned_in_force() {
            return None;
        }
        // Both under the cap's lock, as `ScanPace::learned` writes them: a cap and the time of
        // the change before it would make a cap just applied look seen.
        let cap = lock(&self.pace.cap);
        let changed = *lock(&self.pace.cap_changed);
        cap.filter(|_| now.saturating_duration_since(changed) >= SEEN_FOR)
            .map(|cap| (cap, changed))
    }

    async fn lower(&mut self, now_ms: u64, seen: Option<f64>) {
        match self
            .pace
            .ledger
            .lower_learned_cap(&self.pace.scan, now_ms, seen)
            .await
        {
            Ok(Some(cap)) => self.pace.learned(Some(cap)),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(scan = %self.pace.scan, "could not lower the learned cap: {e}")
            }
        }
    }

    /// Raises the scan's learned cap, if it has one, has held it quietly for a while, and this
    /// process would use more (at most one try per [`ASK_RAISE_EVERY`]: a raise takes two
    /// binding reads, and a lone process that asked every 10 s, as before, met a dip at one of
    /// two looks often enough to leave a 67-second devhost run without its raise); the ledger
    /// raises it only if the scan as a whole uses most of it (`learning::raised_cap`). A
    /// process the account refused within [`QUIET`] does not ask, whether or not the refusal
    /// lowered the cap: its back-off took the refusal, and the cap is not what holds it. Nor does one the account
    /// answers slowly (`Governor::answers_slowly`): the account queues what it is sent, as it
    /// does before it refuses, and a higher cap would lengthen the queue.
    async fn raise(&mut self, now: Instant) {
        // As long as the ledger's quiet while at this cap: a refusal that lowered nothing (the
        // process did not press, or had tried lately) does not restart the ledger's count.
        let quiet = lock(&self.pace.cap).map_or(QUIET, |cap| quiet_for(cap, 0));
        let refused_lately = self
            .last_cut
            .is_some_and(|at| now.saturating_duration_since(at) < quiet);
        if !self.learned_in_force()
            || refused_lately
            || self.account_answers_slowly()
            || self
                .raise_tried
                .is_some_and(|at| now.saturating_duration_since(at) < ASK_RAISE_EVERY)
        {
            return;
        }
        self.raise_tried = Some(now);
        let now_ms = self.pace.clock.now_ms();
        match self
            .pace
            .ledger
            .raise_learned_cap(&self.pace.scan, now_ms)
            .await
        {
            Ok(Some(cap)) => self.pace.learned(Some(cap)),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(scan = %self.pace.scan, "could not raise the learned cap: {e}")
            }
        }
    }

    /// Whether the account the scan reads answers this process slowly now.
    fn account_answers_slowly(&self) -> bool {
        lock(&self.pace.source)
            .as_ref()
            .is_some_and(|(source, _)| source.answers_slowly())
    }

    /// Whether the process has had no step of the scan, running or waiting, for `span`.
    fn idle_for(&self, span: Duration) -> bool {
        let state = self.pace.lock();
        state.running + state.waiting == 0
            && state.idle_since.is_some_and(|at| at.elapsed() >= span)
    }

    /// Removes the scan from this process if it has had no step of it for [`GRACE`], then gives
    /// its slices back; whether it did. The check and the removal hold the scans' lock, so a
    /// step either joined before (and the scan stays) or starts a pace of its own after.
    async fn removed(&self) -> bool {
        {
            let mut scans = self.scans.lock().await;
            // A process waiting for the scan's cap stays in the scan until it comes: it may be
            // the one to close the round, and its items come back then.
            if !self.idle_for(GRACE) || self.pace.awaits_cap() {
                return false;
            }
            scans.remove(&self.pace.scan);
        }
        // Out of the map: a step that comes now starts a pace of its own, whose slices are
        // leased under a name of its own, so giving these back cannot take its.
        if let Some(slices) = self.pace.slices() {
            self.pace.share.set_rate(Some(0.0));
            if tokio::time::timeout(LEAVE_TIME, slices.leave())
                .await
                .is_err()
            {
                tracing::debug!(scan = %self.pace.scan, "giving the scan's slices back took too long");
            }
        }
        true
    }
}

/// A report a process is to send into its scan's learning round.
#[derive(Debug, Clone, Copy)]
enum PlannedReport {
    /// Of its own refusal, once its back-off has settled after it ([`REPORT_DELAY`]): its own
    /// figure opens a round if none is open.
    OwnRefusal { at: Instant },
    /// Into a round another process opened, at once: with no figure of its own, it opens none.
    Join,
}

impl PlannedReport {
    fn due(&self, now: Instant) -> bool {
        match self {
            PlannedReport::OwnRefusal { at } => now >= *at,
            PlannedReport::Join => true,
        }
    }
}

/// When the round opened at `round` (epoch ms) stops taking reports.
fn round_end(round: u64) -> u64 {
    round.saturating_add(ROUND.as_millis() as u64)
}

#[cfg(test)]
mod tests;
