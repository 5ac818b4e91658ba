//! A scan without a cap learns one from the accounts' refusals, so that it settles just under
//! where an account starts refusing, whatever the number of processes running it, and keeps
//! that ceiling for the scan as a whole (a ceiling per process would strand the rate of
//! processes that leave, and hold back those that stay).
//!
//! When a process's back-off for the account a scan reads is cut (the account refused), the
//! process reports, a few seconds later, where the account began to refuse it (what the account
//! served it over the seconds before the refusal, or where its back-off takes the account to
//! refuse it if more; the handler's refresher) into the scan's learning round (the row
//! `pace~learn`): the first report opens a round, announced on the scan row, and names the
//! two seconds its figure counts; every other process running the scan reports within the
//! next [`ROUND`] what the account served it over the same two seconds (over seconds of its
//! own, a process that took up the room the opener's back-off left counted that room twice: a
//! devhost round summed 5,671 entities/s where 2,500 were left). The round's sum is then where
//! the account refused the scan, all processes together; the first process to see the round
//! over closes it, and the scan's cap becomes [`LEARNED_SHARE`] of the sum (the scan row's
//! `learnedCap`, which every process reads with the scan). On a scan with no cap yet, the
//! round sets that share of its sum so far from its first report on, published with the round
//! and raised by the reports that move it 5% or more ([`Learning::provisional`]; each reporter
//! applies it at once, the others with their next read of the scan; a process under the cap
//! joins only such a round), and its close makes it final: with the cap only
//! at the close, the processes ran the round's eight seconds on their own back-offs, whose
//! sum was often over the account (devhost, beside an application: 1.41% and 1.69% of the
//! application's requests refused, most of them in those seconds). A lowering in the open
//! round takes the whole step off the round's cap, and the parts reported after it count at
//! that share ([`Learning::round_lowerings`]). The cap keeps what the back-offs
//! found when they lift, and when processes come and go. From then on the scan is paced as a
//! capped one (its slices, `tablescan_pace`) at that cap; a refusal of a process using its whole
//! share of it, or refusals that keep coming, lower it to [`LOWER`] of what the scan moved
//! then, or the first time after a round (whose cap comes from one sample of a bursty account)
//! to [`LOWER`] squared of the cap (at most once per [`LOWER_EVERY`], or [`LOWER_SEEN_EVERY`]
//! after a round or a raise for a process that ran under the cap), and a cap that has held a
//! quiet while ([`quiet_for`]) while the scan used all of it is raised by [`RAISE`], so a
//! ceiling set while an application was busy is found again when it is not.
//!
//! A raise needs the cap to be what binds: the scan as a whole (every process's last report on
//! its slices, one read of the slice rows) moved at least [`BINDING`] of it, in two reads at
//! least [`LOOK_AGAIN`] apart at that cap (the lower of the two counts). One read is noisy:
//! each process reports whole pages over two seconds, renewed at moments of its own, and the
//! sum wanders a few percent either way; read every quiet while at a cap the scan moved 87% of,
//! a read over 90% came sooner or later and raised it, twice in one paused-clock run (a cap of
//! 10,132 on an account taking 8,000, reads of 7,500-8,300 with one over 8,685). Without that
//! check the cap drifted up while something else held the scan back (an account that answers
//! slower before it refuses, the processes' own back-offs): each process that used its own
//! slices in full asked for a raise and got one every quiet while, and the simulator's count of
//! 35M rows learned 46,547 entities/s on an account taking 20,000, a cap that no longer held
//! anything back from the first burst after a quiet spell. A refusal at the learned cap lowers
//! it and holds raises off for a quiet while; it leaves no ceiling over later raises. A ceiling
//! (97% of the refused cap, for ten minutes) was tried: refusals at the cap come from bursts
//! too (three processes moved 4,314 entities in one second over a cap near 2,060 in the devhost
//! test of an account taking 3,000), and that ceiling held the scan at 2,000 entities/s, 81% of
//! the account, where without it the scan ran at 91% (one run each, c59f746). Raises stay
//! conservative without it: only while the cap binds, after a quiet while, and not while any
//! process was refused or answered slowly (the refresher). The quiet while is counted in the
//! scan's requests as well as in seconds (a hundred pages' worth of entities, at least 20 s),
//! since the scan's few requests are what tells it the account refuses others, and each raise
//! a lowering followed doubles it (up to eight times): where the account's ceiling holds, the
//! scan probes over it seldom, and an application beside it pays for few probes.
//!
//! Every change of the cap is written to the learning row and the scan row in one transaction
//! (both are in the scan's partition): written apart, a failure between the two writes left
//! the learning row saying a cap was set that no process read, until the next change.
//!
//! Cost: a report is a read and a conditional write of one row (retried at most [`TRIES`]
//! times when processes report at once); a round at most every [`BETWEEN_ROUNDS`]; a raise a
//! transaction of two rows and a read of the slices (at most 16 rows) at most every [`QUIET`],
//! and a look that raises nothing (a read of the slices and a write of the learning row) at
//! most every [`LOOK_AGAIN`] from [`LOOK_AGAIN`] before the raise is due (for a cap that never
//! binds, for the rest of the scan: about 4 entities a second); a lowering, per process, a read
//! at most
//! every [`LOWER_EVERY`] while it is refused, one more under a cap just changed (and a
//! conditional write, which only one process wins), and for the winner a read of the slices
//! (none for the first lowering after a round), of the row again and a transaction, per scan
//! at most that often. A round that sets the cap writes the scan row with a report only when
//! the report raises the cap 5% or more (other writers of the scan row write it
//! conditionally); each reporter reads the row once more to apply the cap, and every process
//! in the scan closes the round once (a read; the first, a write).

use std::time::Duration;

use super::ledger::{Ledger, LedgerError};
use super::rows::{number, ScanRow, LEARN_ROW};
use tablescan_storage::table::batch::IfMatch;
use tablescan_storage::table::entity::{Entity, Value};

/// How long a round takes reports: long enough for every process running the scan to read
/// the scan (every few seconds, `functions::app::CANCEL_CHECK_EVERY`), see the round and report.
pub const ROUND: Duration = Duration::from_secs(8);
/// The least time from one round's start to the next's.
pub const BETWEEN_ROUNDS: Duration = Duration::from_secs(12);
/// The cap learned, as a share of the round's sum: where the account refused the scan (what
/// it served the processes over the seconds the round counts), less a margin for the burst an
/// account lets through before it refuses and for the reports' noise.
pub const LEARNED_SHARE: f64 = 0.9;
/// How long a learned cap holds, used in full and with no refusal, before it is raised, at
/// the least (see [`quiet_for`]).
pub const QUIET: Duration = Duration::from_secs(20);
/// How many entities a scan moves under a learned cap with no refusal before it is raised, at
/// the least (see [`quiet_for`]): a hundred full pages. An account over its limit refuses a
/// share of the requests that come, the scan's and an application's alike, and a scan sends few
/// requests (a page is up to 1,000 entities; an application's request is often one): a hundred
/// of them without a refusal say the account refused under about 3% of requests (at 3%, a
/// hundred pass unrefused one time in twenty). At 2,500 entities/s that is 40 s, not
/// [`QUIET`]: in the devhost test of an account taking 3,000 entities/s beside an application
/// sending 500, two raises 20 s apart took the cap to 2,800 while only the application's
/// requests were refused (6.11% of them after the first 10 s, f9e9f70).
pub const QUIET_ENTITIES: f64 = 100_000.0;
/// The most raises followed by a lowering that each double the quiet while before the next
/// raise (see [`quiet_for`]).
pub const MOST_FAILED_RAISES: u32 = 3;
/// How much a raise adds.
pub const RAISE: f64 = 1.05;
/// The least time between two looks at whether the learned cap binds, and how long before a
/// raise is due the first look may come: a raise takes two binding reads this far apart (the
/// slices' reports renewed in between, `tablescan_pace::RENEW_EVERY`). Short, so that a look
/// that met a moment's dip (a process that just took slices over and has not reported yet)
/// does not hold the raise off a whole quiet while: in devhost's default count alone, one such
/// look and the [`QUIET`] it held the next off left the scan at 92% of the account to its end.
pub const LOOK_AGAIN: Duration = Duration::from_secs(4);
/// How often a process that uses its whole share of a learned cap asks for a raise: a second
/// over [`LOOK_AGAIN`], so that its own asks never meet the ledger's gap between looks (its
/// timer and the time it sends run apart by up to a refresher's tick), and one process alone
/// brings the two looks a raise takes.
pub const ASK_RAISE_EVERY: Duration = Duration::from_secs(5);
/// A learned cap is raised only while the scan, all its processes together, moves at least
/// this share of it: under it, something else limits the scan (the account answering slower,
/// the processes' back-offs, too few work items), and a higher cap would only let the next
/// burst through.
pub const BINDING: f64 = 0.9;
/// How much a lowering keeps of what the scan moved when refused, or of the learned cap if it
/// moved more (see [`lowered_cap`]).
pub const LOWER: f64 = 0.9;
/// The least time between a change of the learned cap and a lowering: every process reads the
/// scan (and its cap) within `functions::app::CANCEL_CHECK_EVERY`, and refusals met before it
/// did are not news.
pub const LOWER_EVERY: Duration = Duration::from_secs(6);
/// The least time between a change of the learned cap by a round or a raise and a lowering
/// asked for by a process that had run under that very cap for a while when the account
/// refused it (`lower_learned_cap`'s `seen`). The other processes run under that cap or under
/// a lower one (a raise reaches them within their next read of the scan), so the account's
/// refusal at it is news of it. Not after a lowering: processes that have not read it yet still
/// run at the cap before, and a refusal they cause is no news of the lowered one (lowerings 2 s
/// apart could take a cap to half before the others applied the first). With [`LOWER_EVERY`]
/// alone, the refusals that met a first cap learned too high (over what an application beside
/// the scan left it) went unheeded, and the next lowering came 20 s later, the application
/// refused meanwhile.
pub const LOWER_SEEN_EVERY: Duration = Duration::from_secs(2);
/// How many times a report or a raise is tried when another process wrote the row meanwhile.
const TRIES: usize = 3;
/// The least cap learned (entities per second): a scan always moves.
const LEAST_CAP: f64 = 100.0;

/// The learning row as read: its round and the cap it last set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Learning {
    /// When the last round opened (epoch ms), 0 before any.
    pub round_at_ms: u64,
    /// The end of the seconds its opener's figure counted (epoch ms, the opener's clock: the
    /// refusal, or the report for a figure of what the process moved since): every report
    /// into the round counts the same seconds. 0 in a row written before it was kept: the
    /// round's opening stands for it.
    pub counted_to_ms: u64,
    /// What the round's reports add up to, entities per second.
    pub sum: f64,
    pub reporters: u64,
    /// Who reported in the open round ([`reporter_mark`]s of the paces' holder names,
    /// comma-separated; emptied when the round closes): a report is counted once however often
    /// it is sent. A conditional write that the service applied but answered with a 500 is
    /// sent again, meets 412 (the row changed: by itself), and was read and added afresh:
    /// counted twice, the round's sum and the cap learned from it too high.
    pub reported_by: String,
    /// Whether the round was closed (its cap set).
    pub closed: bool,
    /// The cap last set (by a round or a raise), and when.
    pub cap: Option<f64>,
    /// The highest cap set so far: a floor for later rounds (see [`next_cap`]).
    pub peak: f64,
    pub cap_at_ms: u64,
    /// When a lowering last set the cap, or claimed to (epoch ms), 0 before any.
    pub lowered_at_ms: u64,
    /// When a raise last set the cap (epoch ms), 0 before any.
    pub raised_at_ms: u64,
    /// Raises a lowering followed, less raises that held until the next, at most
    /// [`MOST_FAILED_RAISES`]: each doubles the quiet while before a raise ([`quiet_for`]).
    pub failed_raises: u32,
    /// When a look at the cap last raised nothing (epoch ms): the next look waits
    /// [`LOOK_AGAIN`] from then, so that processes do not read the slices again and again.
    pub looked_at_ms: u64,
    /// What the scan moved at that look (entities per second): the next look raises only if
    /// this read bound the cap too.
    pub looked_rate: f64,
    /// Whether a round set the cap in force and no lowering or raise has changed it since:
    /// its next lowering takes the whole step ([`lowered_round_cap`]). A flag of its own, not
    /// read off the times: a lowering's claim moves `cap_at_ms` before it lowers, and a claim
    /// that never became a lowering (its process crashed, a request failed, another won)
    /// would leave the round's cap to the gentler rule.
    pub from_round: bool,
    /// Whether the cap is the open round's so far: a round that opened on a scan with no cap
    /// sets one from its first report on, and reports into it raise it with the round's sum
    /// ([`round_cap`]), until the close makes it final.
    pub provisional: bool,
    /// How many lowerings came while the round set the cap: each keeps [`LOWER`] squared of
    /// the round's cap ([`round_cap_now`](Self::round_cap_now)), and the parts reported
    /// after it still count at that share. (Kept as the lowered cap alone, the round's cap
    /// stayed at the share of the parts reported before the lowering: at scale, a fraction
    /// of the scan, the opener's part alone.)
    pub round_lowerings: u32,
    etag: Option<String>,
}

impl Learning {
    fn from_entity(e: &Entity) -> Learning {
        let double = |name: &str| match e.properties.get(name) {
            Some(Value::Double(x)) if x.is_finite() => Some(x.max(0.0)),
            _ => None,
        };
        Learning {
            round_at_ms: number(e, "roundAt"),
            counted_to_ms: number(e, "countedTo"),
            sum: double("sum").unwrap_or(0.0),
            reporters: number(e, "reporters"),
            reported_by: match e.properties.get("reportedBy") {
                Some(Value::String(names)) => names.clone(),
                _ => String::new(),
            },
            closed: matches!(e.properties.get("closed"), Some(Value::Boolean(true))),
            cap: double("cap").filter(|cap| *cap >= 1.0),
            peak: double("peak").unwrap_or(0.0),
            cap_at_ms: number(e, "capAt"),
            lowered_at_ms: number(e, "loweredAt"),
            raised_at_ms: number(e, "raisedAt"),
            failed_raises: number(e, "failedRaises").min(u64::from(MOST_FAILED_RAISES)) as u32,
            looked_at_ms: number(e, "lookedAt"),
            looked_rate: double("lookedRate").unwrap_or(0.0),
            from_round: matches!(e.properties.get("fromRound"), Some(Value::Boolean(true))),
            provisional: matches!(e.properties.get("provisional"), Some(Value::Boolean(true))),
            round_lowerings: number(e, "roundLowerings").min(u64::from(u32::MAX)) as u32,
            etag: e.etag.clone(),
        }
    }

    fn to_entity(&self, scan: &str) -> Entity {
        let int = |x: u64| Value::Int64(x.min(i64::MAX as u64) as i64);
        let mut e = Entity::new(scan, LEARN_ROW)
            .with("roundAt", int(self.round_at_ms))
            .with("countedTo", int(self.counted_to_ms))
            .with("sum", Value::Double(self.sum))
            .with("reporters", int(self.reporters))
            .with("reportedBy", Value::String(self.reported_by.clone()))
            .with("closed", Value::Boolean(self.closed))
            .with("capAt", int(self.cap_at_ms))
            .with("loweredAt", int(self.lowered_at_ms))
            .with("raisedAt", int(self.raised_at_ms))
            .with("failedRaises", int(u64::from(self.failed_raises)))
            .with("peak", Value::Double(self.peak))
            .with("lookedAt", int(self.looked_at_ms))
            .with("lookedRate", Value::Double(self.looked_rate.max(0.0)))
            .with("fromRound", Value::Boolean(self.from_round))
            .with("provisional", Value::Boolean(self.provisional))
            .with("roundLowerings", int(u64::from(self.round_lowerings)));
        if let Some(cap) = self.cap {
            e.properties.insert("cap".into(), Value::Double(cap));
        }
        e
    }

    /// The cap the open round sets now, if it sets one ([`provisional`](Self::provisional)):
    /// [`round_cap`] of its sum, [`LOWER`] squared of that for each lowering while it set it
    /// (never under a quarter of the highest cap set, nor [`LEAST_CAP`]).
    fn round_cap_now(&self) -> Option<f64> {
        self.provisional.then(|| {
            let kept = (LOWER * LOWER).powi(self.round_lowerings.min(64) as i32);
            (round_cap(self.peak, self.sum) * kept)
                .max(self.peak * LEAST_OF_PEAK)
                .max(LEAST_CAP)
        })
    }

    /// This row with the cap its open round sets now, if the round sets one and it moved the
    /// cap by [`ROUND_CAP_STEP`] or more (each change is written on the scan row too, which
    /// other writers change conditionally: every report of a hundred processes would make
    /// them try again; the close sets it exactly), changed at `now_ms`.
    fn with_round_cap(self, now_ms: u64) -> Learning {
        let Some(cap) = self.round_cap_now() else {
            return self;
        };
        if self.cap.is_some_and(|before| cap < before * ROUND_CAP_STEP) {
            return self;
        }
        Learning {
            cap: Some(cap),
            peak: self.peak.max(cap),
            cap_at_ms: now_ms,
            from_round: true,
            ..self
        }
    }

    /// Whether the last raise was followed by a lowering (or a lowering's claim) before any
    /// other raise.
    fn raise_failed(&self) -> bool {
        self.raised_at_ms > 0 && self.lowered_at_ms >= self.raised_at_ms
    }

    /// Whether `reporter` reported in the round.
    fn reported(&self, reporter: &str) -> bool {
        let mark = reporter_mark(reporter);
        self.reported_by.split(',').any(|name| name == mark)
    }

    /// The round's reporters with `reporter` added, unless the list is as long as a row
    /// bears ([`MOST_REPORTED_CHARS`]): then the report counts unlisted.
    fn reported_with(&self, reporter: &str) -> String {
        let mark = reporter_mark(reporter);
        if self.reported_by.is_empty() {
            mark
        } else if self.reported_by.len() + 1 + mark.len() > MOST_REPORTED_CHARS {
            self.reported_by.clone()
        } else {
            format!("{},{mark}", self.reported_by)
        }
    }

    /// Whether a round is open for reports at `now_ms`.
    pub fn open(&self, now_ms: u64) -> bool {
        !self.closed && self.round_at_ms + ms(ROUND) > now_ms
    }

    /// The end of the seconds the last round counts (epoch ms).
    pub fn counted_to(&self) -> u64 {
        if self.counted_to_ms > 0 {
            self.counted_to_ms
        } else {
            self.round_at_ms
        }
    }

    /// Whether a round is over and not closed yet at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        !self.closed && self.round_at_ms > 0 && self.round_at_ms + ms(ROUND) <= now_ms
    }
}

/// The longest list of a round's reporters kept: a string property holds up to 32K
/// characters, and 30,000 are some 1,700 reporters.
const MOST_REPORTED_CHARS: usize = 30_000;

/// How a round's list names `reporter`: the name itself when it is short and has no comma,
/// else its 64-bit FNV-1a hash in hex (a pace's holder name is a UUID and a number, some 35
/// characters: hashed, a thousand fit the list).
fn reporter_mark(reporter: &str) -> String {
    if reporter.len() <= 16 && !reporter.contains(',') {
        return reporter.to_string();
    }
    let hash = reporter
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("{hash:016x}")
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// The cap a round sets from what the scan moved (`sum`), given the cap it had, if any, and the
/// highest it ever had. A scan that moved well under its cap when refused did not press on the
/// account with its volume (an application got busier, or the refusals were faults of their
/// own): its cap stays, and each process's own back-off covers the moment. Refusals of the
/// account do not bring a scan below a quarter of the highest cap it learned: refusals that
/// come whatever the rate (an account failing a share of requests) would otherwise halve the
/// cap round after round.
pub fn next_cap(cap: Option<f64>, peak: f64, sum: f64) -> f64 {
    let learned = sum * LEARNED_SHARE;
    let next = match cap {
        Some(cap) if sum < cap * PUSHING => cap,
        _ => learned,
    };
    next.max(peak * LEAST_OF_PEAK).clamp(LEAST_CAP, MOST_CAP)
}

/// How long after the cap's last change a lowering of `current`'s cap `cap` waits: the short
/// while ([`LOWER_SEEN_EVERY`]) for a process that ran under that very cap (`seen`) when a
/// round or a raise set it, the long one ([`LOWER_EVERY`]) otherwise.
fn lowering_wait(current: &Learning, cap: f64, seen: Option<f64>) -> Duration {
    let under_it = seen.is_some_and(|seen| (seen - cap).abs() <= cap.abs() * 1e-9);
    let by_lowering = current.lowered_at_ms > 0 && current.lowered_at_ms >= current.cap_at_ms;
    if under_it && !by_lowering {
        LOWER_SEEN_EVERY
    } else {
        LOWER_EVERY
    }
}

/// The cap an open round sets on a scan that had none, from the sum of its reports so far:
/// [`LEARNED_SHARE`] of it (within the bounds of [`next_cap`]).
pub fn round_cap(peak: f64, sum: f64) -> f64 {
    next_cap(None, peak, sum)
}

/// How long a learned cap of `cap` entities a second must hold, with no refusal and no other
/// change, before it is raised: [`QUIET`], or the time the scan takes to move
/// [`QUIET_ENTITIES`] at that cap if longer, doubled for each raise a lowering followed
/// (`failed_raises`, at most [`MOST_FAILED_RAISES`]). A raise probes over where the account
/// refused, and an application on the account pays for the probe (its requests are refused
/// until the scan's are, and a lowering follows): a scan whose raises keep failing probes
/// seldom, as the ceiling the account showed holds, and one whose raises hold (the application
/// went quiet) probes as often as before, a held raise taking one doubling back.
pub fn quiet_for(cap: f64, failed_raises: u32) -> Duration {
    let moving = if cap.is_finite() && cap > 0.0 {
        Duration::from_secs_f64((QUIET_ENTITIES / cap).min(3_600.0))
    } else {
        QUIET
    };
    QUIET.max(moving) * (1 << failed_raises.min(MOST_FAILED_RAISES))
}

/// The cap a raise sets, if any: [`RAISE`] over `cap` when the scan moved (`scan_rate`, all its
/// processes together) at least [`BINDING`] of it. `None` when the cap is not what limits the
/// scan, or is at the most a cap can be.
pub fn raised_cap(cap: f64, scan_rate: f64) -> Option<f64> {
    if scan_rate.is_nan() || scan_rate < cap * BINDING {
        return None;
    }
    let raised = (cap * RAISE).min(MOST_CAP);
    (raised > cap).then_some(raised)
}

/// The cap a lowering sets: [`LOWER`] of what the scan as a whole moved when refused
/// (`scan_rate`, its slices' reports), or of the cap if it moved more or that is unknown (0:
/// the slices could not be read, or none reported); never under [`LOWER`] squared of the cap
/// in one lowering, since the reports understate what the scan moves (a slice just handed over
/// reports 0, a refused process reports after its back-off's cut) and a scan near its end
/// moves little whatever its cap: a cap cut to that would take minutes of raises to come back. A cap the scan does not reach while the
/// account refuses it is no ceiling: each process's back-off is what holds it then, and the
/// back-offs lift after a quiet while, send a burst and meet the refusals again, which an
/// application on the account meets too (a devhost run beside one: a learned cap of 3,110
/// entities/s where 2,500 were left, the scan moving 2,400, and 7.8% of the application's
/// requests refused). Never under a quarter of the highest cap learned, nor [`LEAST_CAP`].
pub fn lowered_cap(cap: f64, scan_rate: f64, peak: f64) -> f64 {
    let moved = if scan_rate.is_finite() && scan_rate > 0.0 {
        scan_rate.min(cap)
    } else {
        cap
    };
    (moved * LOWER)
        .max(cap * LOWER * LOWER)
        .max(peak * LEAST_OF_PEAK)
        .max(LEAST_CAP)
}

/// The cap the first lowering after a round sets: [`LOWER`] squared of the round's cap, the
/// most one lowering takes, whatever the scan moved. A round's cap is [`LEARNED_SHARE`] of what
/// the account served the reporters over the seconds before it refused them, and an account
/// lets a burst through before it refuses (the service, and devhost's fault proxy, whose bucket
/// holds a second's worth): in devhost's test of an account taking 3,000 entities/s beside an
/// application sending 500, the reports said 3,067-3,364, and the caps learned, 2,760-3,028,
/// were over the 2,500 the application left. A refusal under that cap is the first news that
/// the round's sample was high. Lowered to [`LOWER`] of what the scan moved, a scan moving its
/// cap lost only a tenth (2,994 to 2,694), and the next lowering needed a refusal of the scan
/// itself, rare while the application's many small requests took most of them: 31 s later, the
/// application refused 1.59% of its requests after the first 10 s where the goal is 1% (one
/// run of nine, 9e969e7). Taken the whole step, six runs of seven stayed under 1% (0.28-0.63%;
/// 7ed0471, docs/scan.md); in the seventh, 1.27%, most of them as the round's cap took over from
/// the back-offs, before any lowering could come. A cap a lowering or a raise set is lowered by
/// [`lowered_cap`]. Never under a quarter of the highest cap learned, nor [`LEAST_CAP`].
pub fn lowered_round_cap(cap: f64, peak: f64) -> f64 {
    (cap * LOWER * LOWER)
        .max(peak * LEAST_OF_PEAK)
        .max(LEAST_CAP)
}

/// A scan moving at least this share of its cap when refused presses on the account.
const PUSHING: f64 = 0.8;
/// The least rise of an open round's cap that a report writes (see `Learning::with_round_cap`).
const ROUND_CAP_STEP: f64 = 1.05;
/// The least share of its highest learned cap a round leaves a scan.
const LEAST_OF_PEAK: f64 = 0.25;
/// The most a learned cap can be (the highest cap a request may name).
const MOST_CAP: f64 = tablescan_api::MAX_RATE_CAP as f64;

/// Whether a conditional write failed because another process wrote the row first.
fn lost_to_another_writer(e: &tablescan_storage::StorageError) -> bool {
    use tablescan_storage::{ErrorKind, Reason};
    let lost = |reason: Reason| reason.is_gone_or_changed() || reason == Reason::AlreadyExists;
    match e.kind() {
        ErrorKind::Batch { error, .. } => lost(error.reason()),
        _ => lost(e.reason()),
    }
}

/// What a report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// Counted in the round that opened at this time (epoch ms).
    In(u64),
    /// Not counted: a round ran a moment ago, or the row kept changing.
    Skipped,
    /// Nothing to count: the process moved under an entity a second over the seconds the
    /// round counts.
    Nothing,
}

/// The least a report counts, entities per second: a process that moved less did not press on
/// the account, and its report would only hold the round's row.
const LEAST_REPORT: f64 = 1.0;

/// A refused process's own figure of where the account began to refuse it, for a round its
/// report opens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OwnFigure {
    /// Entities per second.
    pub rate: f64,
    /// The end of the two seconds the figure counts (epoch ms): every report into the round
    /// counts the same.
    pub counted_to_ms: u64,
}

impl Ledger {
    /// The scan's learning row, if written.
    pub async fn learning(&self, scan: &str) -> Result<Option<Learning>, LedgerError> {
        let row = self.table().get_entity(scan, LEARN_ROW).await?;
        Ok(row.as_ref().map(Learning::from_entity))
    }

    /// Reports `rate` entities a second as `reporter`'s part in where the account refused
    /// `scan`, over the seconds to now, whether it opens a round or joins one: for tests and
    /// models that keep no history of what a process moved (a process reports with
    /// [`report_into_round`](Self::report_into_round), which counts a joiner's part over the
    /// round's own seconds).
    pub async fn report_refusal(
        &self,
        scan: &str,
        reporter: &str,
        rate: f64,
        now_ms: u64,
    ) -> Result<Reported, LedgerError> {
        let own = OwnFigure {
            rate,
            counted_to_ms: now_ms,
        };
        self.report_into_round(scan, reporter, Some(own), |_| rate, now_ms)
            .await
    }

    /// Reports this process's part (`reporter`, its pace's holder name, unique among the
    /// processes sharing the ledger and free of commas) in where the account refused `scan`:
    /// into the round open now, `joined_rate(to_ms)` entities a second, what it moved over the
    /// two seconds to `to_ms`, those its opener's figure counted (every report into a round
    /// counts the same seconds); with no round open, its `own` figure opens one (a process the
    /// account did not refuse has none, and opens nothing). Decided on the row as read, not
    /// on the scan row as last read by the process, which may be seconds old (a process
    /// refused after another opened a round it had not read yet counted its own seconds: the
    /// room the opener's back-off left, counted twice; docs/scan.md). `joined_rate` is asked
    /// on every try, so it must only compute. Counted once however often it is sent in one
    /// round; nothing under [`LEAST_REPORT`].
    pub async fn report_into_round(
        &self,
        scan: &str,
        reporter: &str,
        own: Option<OwnFigure>,
        joined_rate: impl Fn(u64) -> f64,
        now_ms: u64,
    ) -> Result<Reported, LedgerError> {
        self.report(scan, reporter, own, joined_rate, now_ms, false)
            .await
    }

    /// Reports the part of a process that runs the scan under its learned cap into the round
    /// open now, if that round sets the cap (it opened on a scan with none:
    /// [`Learning::provisional`]), as [`report_into_round`](Self::report_into_round) does;
    /// nothing into any other round (one opened by a process that had not read the cap yet,
    /// whose sum, this process's part in it, would set the cap from the whole scan over the
    /// raises' rules), and it opens none.
    pub async fn join_round_setting_cap(
        &self,
        scan: &str,
        reporter: &str,
        joined_rate: impl Fn(u64) -> f64,
        now_ms: u64,
    ) -> Result<Reported, LedgerError> {
        self.report(scan, reporter, None, joined_rate, now_ms, true)
            .await
    }

    async fn report(
        &self,
        scan: &str,
        reporter: &str,
        own: Option<OwnFigure>,
        joined_rate: impl Fn(u64) -> f64,
        now_ms: u64,
        only_setting_cap: bool,
    ) -> Result<Reported, LedgerError> {
        let counted = |rate: f64| (rate.is_finite() && rate >= LEAST_REPORT).then_some(rate);
        for _ in 0..TRIES {
            let current = self.learning(scan).await?;
            let next = match &current {
                // This report's write was applied: a retry of it, or the last try of the loop
                // answered 412 by a write of its own.
                Some(l) if l.open(now_ms) && l.reported(reporter) => {
                    return Ok(Reported::In(l.round_at_ms))
                }
                Some(l) if l.open(now_ms) && only_setting_cap && !l.provisional => {
                    return Ok(Reported::Nothing)
                }
                Some(l) if l.open(now_ms) => {
                    let Some(rate) = counted(joined_rate(l.counted_to())) else {
                        return Ok(Reported::Nothing);
                    };
                    Learning {
                        sum: l.sum + rate,
                        reporters: l.reporters + 1,
                        reported_by: l.reported_with(reporter),
                        ..l.clone()
                    }
                    .with_round_cap(now_ms)
                }
                Some(l) if now_ms < l.round_at_ms + ms(BETWEEN_ROUNDS) => {
                    return Ok(Reported::Skipped)
                }
                other => {
                    let Some(own) = own.filter(|own| counted(own.rate).is_some()) else {
                        return Ok(Reported::Nothing);
                    };
                    let mut before = other.clone().unwrap_or_default();
                    if before.provisional {
                        // A round that set the cap, over and never closed (its processes
                        // left): its cap is what its close would have set.
                        before.cap = before.round_cap_now();
                        before.provisional = false;
                    }
                    Learning {
                        round_lowerings: 0,
                        round_at_ms: now_ms,
                        counted_to_ms: own.counted_to_ms.min(now_ms),
                        sum: own.rate,
                        reporters: 1,
                        reported_by: reporter_mark(reporter),
                        closed: false,
                        // A scan with no cap yet is paced by the round's from this report on.
                        provisional: before.cap.is_none(),
                        ..before
                    }
                    .with_round_cap(now_ms)
                }
            };
            // Opened: every process running the scan sees it with the scan; and the cap the
            // round sets so far, if it sets one.
            let mut published =
                (next.reporters == 1).then(|| ScanRow::learn_round(scan, next.round_at_ms));
            let cap_before = current.as_ref().and_then(|l| l.cap);
            if let Some(cap) = next
                .cap
                .filter(|cap| next.provisional && Some(*cap) != cap_before)
            {
                let cap = ScanRow::learned(scan, cap);
                match published.as_mut() {
                    Some(change) => change.properties.extend(cap.properties),
                    None => published = Some(cap),
                }
            }
            if self
                .write_learning(scan, &next, current.as_ref(), published)
                .await?
            {
                return Ok(Reported::In(next.round_at_ms));
            }
        }
        Ok(Reported::Skipped)
    }

    /// Closes the scan's round if it is over: the scan's cap becomes its share of the round's
    /// sum (for a round that set the cap, at the share its lowerings kept; for a round on a
    /// scan that had a cap, that cap if the scan moved well under it, `next_cap`). The cap if
    /// this call closed the round.
    pub async fn close_round(&self, scan: &str, now_ms: u64) -> Result<Option<f64>, LedgerError> {
        // Tried again when a report or a lowering wrote the row meanwhile: a round left open
        // is a cap that is not final, out of raises' reach.
        for _ in 0..TRIES {
            let Some(current) = self.learning(scan).await? else {
                return Ok(None);
            };
            if !current.due(now_ms) {
                return Ok(None);
            }
            if let Some(cap) = self.close(scan, &current, now_ms).await? {
                return Ok(Some(cap));
            }
        }
        Ok(None)
    }

    /// Closes the round of `current` (as read, over and not closed): the cap it sets if the
    /// write went through, `None` if another process wrote the row first.
    async fn close(
        &self,
        scan: &str,
        current: &Learning,
        now_ms: u64,
    ) -> Result<Option<f64>, LedgerError> {
        // A round that set the cap as its reports came sets it exactly from its whole sum
        // (the reports wrote only rises of 5% or more), at the share its lowerings kept.
        let cap = match current.round_cap_now() {
            Some(cap) => cap,
            None => next_cap(current.cap, current.peak, current.sum),
        };
        // No ceiling: the sum counts each process's back-off estimate, under what the scan
        // met (a first refusal comes in the ramp, from the processes there then; the
        // simulator's count of 35M rows on 60,000 entities/s summed 35,025, and a ceiling
        // there held it at 34,000 for ten minutes). Raises while the cap binds find the rest.
        // A round that kept the cap sampled nothing that the cap did not already say.
        let changed = current
            .cap
            .is_none_or(|before| (before - cap).abs() > cap * 1e-9);
        // The close makes the round's cap final: its quiet while before a raise, and the
        // while before a lowering, count from now; after a lowering in the round, from the
        // cap's last change if the close leaves it as it was (the next lowering then waits as
        // after any lowering, `lower_learned_cap`). The next lowering takes the gentler step
        // after a lowering in the round: the round's sample was lowered once already.
        let lowered_in_round = current.provisional && current.round_lowerings > 0;
        let next = Learning {
            closed: true,
            cap: Some(cap),
            peak: current.peak.max(cap),
            cap_at_ms: if lowered_in_round && !changed {
                current.cap_at_ms
            } else {
                now_ms
            },
            from_round: !lowered_in_round && (changed || current.from_round),
            provisional: false,
            round_lowerings: 0,
            // Read only while the round is open: no weight on the rows read after it.
            reported_by: String::new(),
            ..current.clone()
        };
        let published = Some(ScanRow::learned(scan, cap));
        if !self
            .write_learning(scan, &next, Some(current), published)
            .await?
        {
            return Ok(None);
        }
        tracing::info!(
            scan,
            cap,
            reporters = current.reporters,
            "an account refused the scan at {:.0} entities/s; it goes on at {cap:.0}/s",
            current.sum
        );
        Ok(Some(cap))
    }

    /// Raises the scan's learned cap if it has held for [`quiet_for`] it with no round since
    /// and the scan, all its processes together, uses [`BINDING`] of it (see [`raised_cap`])
    /// in this read of its slices and in the last look's, at least [`LOOK_AGAIN`] before; the
    /// new cap if this call raised it. The caller says its own process uses all of its share.
    pub async fn raise_learned_cap(
        &self,
        scan: &str,
        now_ms: u64,
    ) -> Result<Option<f64>, LedgerError> {
        let Some(current) = self.learning(scan).await? else {
            return Ok(None);
        };
        let Some(cap) = current.cap else {
            return Ok(None);
        };
        // The raise before held until now: the doubling it would take back at this raise
        // shortens this one's wait already (taken back only after, the raises that followed
        // a held one waited 8, 8, 4 and 2 quiet whiles).
        let held = current.raised_at_ms > 0 && !current.raise_failed();
        let failed_raises = if held {
            current.failed_raises.saturating_sub(1)
        } else {
            current.failed_raises
        };
        // Looks start LOOK_AGAIN before the raise is due, so that the second of the two binding
        // reads a raise takes can come when it is due; and come LOOK_AGAIN apart, however many
        // processes ask. A look that raised nothing holds the next off by LOOK_AGAIN alone:
        // the slices' reports understate the scan at moments (a slice just handed over
        // reports nothing), and one look must not push a raise back by a quiet while.
        let changed = current.cap_at_ms.max(current.round_at_ms);
        let due = changed + ms(quiet_for(cap, failed_raises));
        let looked_at_this_cap = current.looked_at_ms > changed;
        let next_look = if looked_at_this_cap {
            current.looked_at_ms + ms(LOOK_AGAIN)
        } else {
            0
        };
        if current.due(now_ms) {
            // A round over and not closed (every process that ran the scan then has left):
            // closed here, so that its cap does not stay the round's for ever, out of raises'
            // reach.
            self.close_round(scan, now_ms).await?;
            return Ok(None);
        }
        if !current.closed || now_ms < due.saturating_sub(ms(LOOK_AGAIN)).max(next_look) {
            return Ok(None);
        }
        let scan_rate = self.scan_rate(scan, now_ms).await;
        // The lower of this read and the last look's at this cap: no look before, no raise yet.
        let bound = if looked_at_this_cap {
            scan_rate.min(current.looked_rate)
        } else {
            0.0
        };
        let raised = (now_ms >= due).then(|| raised_cap(cap, bound)).flatten();
        let Some(raised) = raised else {
            // Not due, not binding in both reads, or at the most: looked at again soon.
            let looked = Learning {
                looked_at_ms: now_ms,
                looked_rate: scan_rate,
                ..current.clone()
            };
            self.write_learning(scan, &looked, Some(&current), None)
                .await?;
            tracing::debug!(scan, cap, scan_rate, bound, "the learned cap is not raised");
            return Ok(None);
        };
        let next = Learning {
            cap: Some(raised),
            peak: current.peak.max(raised),
            cap_at_ms: now_ms,
            raised_at_ms: now_ms,
            failed_raises,
            from_round: false,
            ..current.clone()
        };
        let published = Some(ScanRow::learned(scan, raised));
        if !self
            .write_learning(scan, &next, Some(&current), published)
            .await?
        {
            return Ok(None);
        }
        tracing::info!(
            scan,
            cap = raised,
            "no refusal for a while: the scan's learned cap is raised"
        );
        Ok(Some(raised))
    }

    /// What the scan moves, all its processes together (entities per second): the sum of what
    /// each live slice's holder reported at its last renewal (every few seconds). 0 when the
    /// slices cannot be read: no raise then, and a lowering takes the cap, not what was moved.
    async fn scan_rate(&self, scan: &str, now_ms: u64) -> f64 {
        use tablescan_pace::SliceStore;
        match self.read_all(scan).await {
            Ok(slices) => slices
                .iter()
                .filter(|slice| !slice.holder.is_empty() && slice.until_ms > now_ms)
                .map(|slice| slice.used)
                .sum(),
            Err(e) => {
                tracing::debug!(scan, "could not read the scan's slices: {e}");
                0.0
            }
        }
    }

    /// Lowers the scan's learned cap after the account refused a process that used its whole
    /// share of it, or refused it again and again: the cap is over what the account takes
    /// beside whatever else runs on it (an application's refusals come with the scan's, many
    /// more of them: it sends small requests). To [`LOWER`] of what the scan moved, or of the
    /// cap if it moved more ([`lowered_cap`]; one read of the slices), or, the first time after
    /// a round set the cap, to [`LOWER`] squared of it ([`lowered_round_cap`]). At most once per
    /// [`LOWER_EVERY`], so that every process applies one lowering (it reads the scan every
    /// few seconds) before the next, or [`LOWER_SEEN_EVERY`] when the refused process had run
    /// under the cap in force (`seen`, the cap it ran under) and a round or a raise set it;
    /// never under a quarter of the highest cap learned. While a round sets the cap (it opened
    /// on a scan with none), the round's cap is lowered the same way, by the whole step, and
    /// the parts reported after count at that share ([`Learning::round_lowerings`]); a round
    /// open on a scan that had its cap before holds lowerings off until it closes. The new
    /// cap if this call lowered it; `None` when the scan has no learned cap yet (the refusal
    /// is for a round to learn one), or it was lowered lately.
    pub async fn lower_learned_cap(
        &self,
        scan: &str,
        now_ms: u64,
        seen: Option<f64>,
    ) -> Result<Option<f64>, LedgerError> {
        // In a round that sets the cap, one conditional write, tried again when a report (or
        // a close) wrote the row meanwhile: written as a claim and a lowering apart, a report
        // between the two failed the lowering, and its part raised the cap at the share before
        // it, the lowering undone.
        let mut first_read: Option<u64> = None;
        for _ in 0..TRIES {
            let Some(current) = self.learning(scan).await? else {
                return Ok(None);
            };
            let Some(cap) = current.cap else {
                return Ok(None);
            };
            if current.due(now_ms) {
                // Over and not closed: closed first, its cap final (and changed now, which
                // holds a lowering off a while as after any change).
                self.close_round(scan, now_ms).await?;
                continue;
            }
            if !current.provisional {
                return self.lower_final_cap(scan, current, cap, now_ms, seen).await;
            }
            match first_read {
                None if now_ms < current.cap_at_ms + ms(lowering_wait(&current, cap, seen)) => {
                    return Ok(None)
                }
                None => first_read = Some(current.lowered_at_ms),
                // Another lowering came meanwhile: it answers this refusal too.
                Some(lowered_at) if current.lowered_at_ms > lowered_at => return Ok(None),
                Some(_) => {}
            }
            let lowered_row = Learning {
                round_lowerings: current.round_lowerings + 1,
                cap_at_ms: now_ms,
                lowered_at_ms: now_ms,
                from_round: false,
                ..current.clone()
            };
            let lowered = lowered_row.round_cap_now().unwrap_or(cap).min(cap);
            let next = Learning {
                cap: Some(lowered),
                ..lowered_row
            };
            let published = (lowered < cap).then(|| ScanRow::learned(scan, lowered));
            if self
                .write_learning(scan, &next, Some(&current), published)
                .await?
            {
                tracing::info!(
                    scan,
                    cap = lowered,
                    "the account refused the scan at its round's cap: the cap is lowered"
                );
                // At the floor, the lowering's time is written and the cap stays.
                return Ok((lowered < cap).then_some(lowered));
            }
        }
        Ok(None)
    }

    /// [`lower_learned_cap`](Self::lower_learned_cap) for a cap no round is setting: `current`
    /// as read, its cap `cap`.
    async fn lower_final_cap(
        &self,
        scan: &str,
        current: Learning,
        cap: f64,
        now_ms: u64,
        seen: Option<f64>,
    ) -> Result<Option<f64>, LedgerError> {
        // A round open on a scan that had its cap before sets none; lowerings wait for its
        // close (its sum is not in yet).
        let every = lowering_wait(&current, cap, seen);
        if !current.closed || now_ms < current.cap_at_ms + ms(every) {
            return Ok(None);
        }
        // Claimed first, by a conditional write of its time alone: of the processes refused at
        // once (a hundred, at scale), one wins it, and only that one reads the slices. A
        // failure after the claim leaves the cap as it was, lowered at the next refusal a
        // while later; the claim's time holds off raises meanwhile, and nothing more. The
        // first lowering after a raise counts the raise as failed (in the claim: one at the
        // floor is no less a refusal over the raise), if it comes within a quiet while of the
        // raise: a raise that held longer is no failure (an application that came later).
        let after_raise = current.raised_at_ms > 0
            && now_ms < current.raised_at_ms + ms(quiet_for(cap, current.failed_raises));
        let failed_raises = if after_raise && !current.raise_failed() {
            (current.failed_raises + 1).min(MOST_FAILED_RAISES)
        } else {
            current.failed_raises
        };
        let claim = Learning {
            cap_at_ms: now_ms,
            lowered_at_ms: now_ms,
            failed_raises,
            ..current.clone()
        };
        if !self
            .write_learning(scan, &claim, Some(&current), None)
            .await?
        {
            return Ok(None);
        }
        let Some(claimed) = self.learning(scan).await? else {
            return Ok(None);
        };
        let lowered = if current.from_round {
            lowered_round_cap(cap, current.peak)
        } else {
            lowered_cap(cap, self.scan_rate(scan, now_ms).await, current.peak)
        };
        // Written at the floor too: the refusal's time holds off a raise for a quiet while,
        // and nothing more (see the module's note on a ceiling).
        let next = Learning {
            cap: Some(lowered.min(cap)),
            cap_at_ms: now_ms,
            lowered_at_ms: now_ms,
            from_round: false,
            ..claimed.clone()
        };
        let published = (lowered < cap).then(|| ScanRow::learned(scan, lowered));
        if lowered >= cap
            || !self
                .write_learning(scan, &next, Some(&claimed), published)
                .await?
        {
            return Ok(None);
        }
        tracing::info!(
            scan,
            cap = lowered,
            "the account refused the scan at its learned cap: the cap is lowered"
        );
        Ok(Some(lowered))
    }

    /// Writes `next` over `current` (as read) if nobody wrote the row meanwhile, and with it
    /// `publish`, a change to the scan row (merged), in one transaction (both rows are in the
    /// scan's partition); whether it did. Written apart, a crash or a failed request between
    /// the two left the learning row saying a cap was set that no process ever read, and
    /// nothing published it until the next change. A scan whose row was removed meanwhile has
    /// nothing to pace: its transaction fails as lost.
    async fn write_learning(
        &self,
        scan: &str,
        next: &Learning,
        current: Option<&Learning>,
        publish: Option<Entity>,
    ) -> Result<bool, LedgerError> {
        use tablescan_storage::table::batch::Operation;
        let entity = next.to_entity(scan);
        let learning = match current.and_then(|c| c.etag.clone()) {
            Some(etag) => Operation::Update(entity, IfMatch::Etag(etag)),
            None => Operation::Insert(entity),
        };
        let mut operations = vec![learning];
        operations.extend(publish.map(|change| Operation::Merge(change, IfMatch::Any)));
        match self.table().submit_transaction(&operations).await {
            Ok(_) => Ok(true),
            Err(e) if lost_to_another_writer(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
