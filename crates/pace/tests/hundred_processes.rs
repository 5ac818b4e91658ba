//! The cap shared by 100 processes present at once, joining, leaving and crashing, on a paused
//! clock and an in-memory store: each process runs the protocol as the handler does (a tick
//! every 100 ms, its token bucket's rate set to what it holds) with eight steps that read as
//! fast as their rate lets them, and asks the scan's ledger what else the handler asks of it
//! (`ledger_traffic`: cancel checks, claim renewals, learning rounds, through the ledger's own
//! code).
//!
//! All 100 join in the first 10 s; each stays 60 to 120 s and is replaced half a second after it
//! leaves or crashes, so 100 are present at once through the measured window (20 s to 95 s),
//! 48 of them replaced from 60 s on. (With stays of 30 to 60 s, 2.3 replacements a second, the
//! slices cost 153 entities/s and only 80% of the cap is used: docs/scan.md.)
//!
//! Checked: over every 5-second window the entities let through stay within 10% of the cap, over
//! the measured window at least 90% of it is used on average, and what the pacing, the cancel
//! checks, the renewals and the learning cost the ledger over that window, per second, stays
//! under 200 (printed part by part). A second test runs the same hundred with steps in bursts,
//! and holds them to 60% and 300 entities/s (see
//! [`a_hundred_processes_working_in_bursts_hold_the_cap`]).

mod ledger_traffic;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_traffic::{Tally, Traffic};
use tablescan_pace::{Clock, Demand, InMemorySlices, ScanShare};
use tablescan_storage::pacing::TokenBucket;
use tokio::time::Instant;

const CAP: f64 = 10_000.0;
/// Processes present at once: each seat holds one, replaced when it leaves or crashes.
const SEATS: usize = 100;
/// How long a seat stays empty between a process's end and its replacement's join.
const REPLACED_AFTER: Duration = Duration::from_millis(500);
/// The run's end: every process present then leaves.
const RUN_END: Duration = Duration::from_secs(100);
/// The window measured: every seat filled since the first 10 s, and the protocol settled.
const MEASURED: (f64, f64) = (20.0, 95.0);
const STEPS: usize = 8;
const PAGE: u64 = 100;
const TICK: Duration = Duration::from_millis(100);
/// A process with no step for this long gives its slices back (the handler's refresher).
const IDLE_RELEASE: Duration = Duration::from_secs(1);

/// The run's wall clock, in epoch milliseconds: a fixed moment at the run's start, moved by
/// tokio's paused clock. (`TokioClock` anchors once per test binary, so a run beside the other
/// test measured other figures than a run alone: 94.2% used instead of 94.6%.)
#[derive(Clone, Copy)]
struct RunClock {
    start: Instant,
}

impl Clock for RunClock {
    fn now_ms(&self) -> u64 {
        /// 2026-11-28 00:00 UTC.
        const AT_START_MS: u64 = 1_795_824_000_000;
        AT_START_MS + Instant::now().duration_since(self.start).as_millis() as u64
    }
}

/// Entities let through, with when.
type Log = Arc<Mutex<Vec<(Instant, u64)>>>;

/// How a process ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// Gives its slices back.
    Leaves,
    /// Stops without a word: its leases run out.
    Crashes,
}

/// When a process has steps to run.
#[derive(Clone, Copy, PartialEq)]
enum Work {
    /// All the time it is present.
    Steady,
    /// In bursts, as a process between queue messages: steps for 3 to 9 s, then none for 1.5
    /// to 5 s (so, a second into each pause, it gives its slices and its ask back: `leave`).
    Bursts,
}

/// How long the `n`th burst, or the `n`th pause after one, of process `i` lasts.
fn burst(i: usize, n: u64, busy: bool) -> Duration {
    let spread = (i as u64 * 7919 + n * 104_729) % 1_000;
    match busy {
        true => Duration::from_millis(3_000 + spread * 6),
        false => Duration::from_millis(1_500 + spread * 7 / 2),
    }
}

struct Process {
    share: ScanShare<InMemorySlices, RunClock>,
    /// Whether it has steps to run now.
    busy: AtomicBool,
    bucket: TokenBucket,
    /// Entities taken in the current and the previous 100 ms ticks... summed over the last
    /// second by the ticker.
    moved: AtomicU64,
    stop: AtomicBool,
}

/// One process (the `i`th): joins at `join`, runs its steps (as `work` says) and its ticker
/// until `end`, then leaves or crashes.
async fn run_process(
    (store, clock): (InMemorySlices, RunClock),
    traffic: Arc<Traffic>,
    (i, work): (usize, Work),
    join: Duration,
    end: (Duration, End),
    log: Log,
) {
    tokio::time::sleep(join).await;
    let process = Arc::new(Process {
        share: ScanShare::new(store, clock, "scan", &format!("process-{i:03}"), CAP),
        busy: AtomicBool::new(true),
        bucket: TokenBucket::new(Some(0.0)),
        moved: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let steps: Vec<_> = (0..STEPS)
        .map(|_| {
            let (process, log) = (process.clone(), log.clone());
            tokio::spawn(async move {
                while !process.stop.load(Ordering::Relaxed) {
                    if !process.busy.load(Ordering::Relaxed) || process.share.granted() <= 0.0 {
                        // No share: the handler gives the work item back.
                        tokio::time::sleep(TICK).await;
                        continue;
                    }
                    process.bucket.take(PAGE).await;
                    if process.stop.load(Ordering::Relaxed) || !process.busy.load(Ordering::Relaxed)
                    {
                        // The burst ended while the page waited for its share: not read.
                        continue;
                    }
                    process.moved.fetch_add(PAGE, Ordering::Relaxed);
                    log.lock().unwrap().push((Instant::now(), PAGE));
                }
            })
        })
        .collect();
    let bursts = (work == Work::Bursts).then(|| {
        let process = process.clone();
        tokio::spawn(async move {
            for n in 0.. {
                tokio::time::sleep(burst(i, n, true)).await;
                process.busy.store(false, Ordering::Relaxed);
                tokio::time::sleep(burst(i, n, false)).await;
                process.busy.store(true, Ordering::Relaxed);
            }
        })
    });
    let ticker = {
        let process = process.clone();
        tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64);
            let mut idle_since = None;
            while !process.stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                let busy = process.busy.load(Ordering::Relaxed);
                idle_since = if busy { None } else { idle_since.or(Some(now)) };
                if idle_since.is_some_and(|since| now.duration_since(since) >= IDLE_RELEASE) {
                    // No step here for a while: the slices go where the steps are (the
                    // handler's refresher does the same, each tick while idle).
                    process.bucket.set_rate(Some(0.0));
                    process.share.leave().await;
                }
                let moved = process.moved.load(Ordering::Relaxed);
                let since = now.duration_since(last.0).as_secs_f64();
                let used = if since > 0.0 {
                    (moved - last.1) as f64 / since
                } else {
                    0.0
                };
                if since >= 1.0 {
                    last = (now, moved);
                }
                let held_back = process
                    .bucket
                    .held_since(now.checked_sub(Duration::from_secs(1)).unwrap_or(now));
                let demand = Demand {
                    wants_more: busy && (held_back || process.share.granted() <= 0.0),
                    used,
                };
                process.share.tick(demand).await;
                process.bucket.set_rate(Some(process.share.granted()));
                tokio::time::sleep(TICK).await;
            }
        })
    };
    let ledger_work = ledger_work(&process, &traffic);
    tokio::time::sleep(end.0.saturating_sub(join)).await;
    // Stop using the share before giving it back, as the handler does.
    process.bucket.set_rate(Some(0.0));
    process.stop.store(true, Ordering::Relaxed);
    ticker.await.unwrap();
    if let Some(bursts) = bursts {
        bursts.abort();
    }
    for task in ledger_work {
        task.await.unwrap();
    }
    if end.1 == End::Leaves {
        process.share.leave().await;
    }
    for step in steps {
        step.abort();
    }
}

/// The process's other work on the scan's ledger: its steps' claim renewals and its cancel
/// checks and learning, until it stops.
fn ledger_work(process: &Arc<Process>, traffic: &Arc<Traffic>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks: Vec<_> = (0..STEPS * 2)
        .map(|n| {
            let (process, traffic) = (process.clone(), traffic.clone());
            tokio::spawn(async move { traffic.renew_steps(&process.stop, n % 2 == 1).await })
        })
        .collect();
    let (process, traffic) = (process.clone(), traffic.clone());
    tasks.push(tokio::spawn(async move {
        let rate = || process.share.granted();
        let refused_at = Duration::from_secs_f64(MEASURED.0);
        traffic
            .checks_and_learning(&process.stop, refused_at, rate)
            .await
    }));
    tasks
}

/// Entities let through in `[from, to)` seconds after `start`.
fn within(log: &[(Instant, u64)], start: Instant, from: f64, to: f64) -> u64 {
    log.iter()
        .filter(|(at, _)| {
            let t = at.duration_since(start).as_secs_f64();
            t >= from && t < to
        })
        .map(|(_, n)| n)
        .sum()
}

/// Who joins when, and how each ends: the seats filled one after another in the first 10 s,
/// each process staying 60 to 120 s and replaced [`REPLACED_AFTER`] its end; every tenth
/// crashes; those present at [`RUN_END`] leave then.
fn plan() -> Vec<(Duration, (Duration, End))> {
    let mut plan = Vec::new();
    for seat in 0..SEATS {
        let mut join = Duration::from_millis(100 * seat as u64);
        while join < RUN_END {
            let i = plan.len();
            let stay = Duration::from_secs(60 + (i as u64 * 7) % 61);
            let end = if join + stay >= RUN_END {
                (RUN_END, End::Leaves)
            } else if i % 10 == 9 {
                (join + stay, End::Crashes)
            } else {
                (join + stay, End::Leaves)
            };
            plan.push((join, end));
            join = end.0 + REPLACED_AFTER;
        }
    }
    plan
}

/// Processes present `t` seconds in.
fn present(plan: &[(Duration, (Duration, End))], t: f64) -> usize {
    plan.iter()
        .filter(|(join, (end, _))| join.as_secs_f64() <= t && t < end.as_secs_f64())
        .count()
}

/// What the slices, the cancel checks, the renewals and the learning cost the ledger over the
/// measured window.
async fn measure_costs(store: InMemorySlices, traffic: Arc<Traffic>, start: Instant) -> [Tally; 5] {
    let tallies = || {
        [
            Tally {
                requests: store.counts.requests.load(Ordering::Relaxed),
                entities: store.counts.entities(),
            },
            traffic.checks.tally(),
            traffic.renewals.tally(),
            traffic.learning.tally(),
            traffic.slow_renewals.tally(),
        ]
    };
    tokio::time::sleep_until(start + Duration::from_secs_f64(MEASURED.0)).await;
    let before = tallies();
    tokio::time::sleep_until(start + Duration::from_secs_f64(MEASURED.1)).await;
    let after = tallies();
    std::array::from_fn(|k| after[k].since(before[k]))
}

/// Checks the cap held within 10% over every 5 s of the run, and at least `least_used` of it
/// was used over the measured window.
fn check_the_cap(
    log: &[(Instant, u64)],
    start: Instant,
    plan: &[(Duration, (Duration, End))],
    least_used: f64,
) {
    let run = RUN_END.as_secs_f64();
    let mut fullest = (0.0, 0u64);
    let mut emptiest = (0.0, u64::MAX);
    let mut from = 0.0;
    while from + 5.0 <= run {
        let n = within(log, start, from, from + 5.0);
        if n > fullest.1 {
            fullest = (from, n);
        }
        if n < emptiest.1 && from >= MEASURED.0 && from + 5.0 <= MEASURED.1 {
            emptiest = (from, n);
        }
        from += 0.1;
    }
    let span = MEASURED.1 - MEASURED.0;
    let average = within(log, start, MEASURED.0, MEASURED.1) as f64 / span;
    let counts: Vec<usize> = (0..(span * 10.0) as usize)
        .map(|t| present(plan, MEASURED.0 + t as f64 / 10.0))
        .collect();
    let (fewest, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    println!(
        "{} processes in all, {SEATS} seats; from {} to {} s: {fewest} to {most} present \
         (mean {mean:.1}); cap {CAP}/s: fullest 5 s (of the whole run) from {:.1} s at {:.0}/s \
         ({:.1}% of the cap), emptiest (measured) from {:.1} s at {:.0}/s, average {average:.0}/s \
         ({:.1}%)",
        plan.len(),
        MEASURED.0,
        MEASURED.1,
        fullest.0,
        fullest.1 as f64 / 5.0,
        fullest.1 as f64 / 5.0 / CAP * 100.0,
        emptiest.0,
        emptiest.1 as f64 / 5.0,
        average / CAP * 100.0,
    );
    let per_5: Vec<String> = (0..(run / 5.0) as usize)
        .map(|w| {
            let from = w as f64 * 5.0;
            format!("{:.0}", within(log, start, from, from + 5.0) as f64 / 5.0)
        })
        .collect();
    println!("entities/s in each 5 s: {}", per_5.join(" "));
    assert!(
        *most == SEATS && mean >= SEATS as f64 - 1.0,
        "{SEATS} present at once"
    );
    assert!(
        fullest.1 as f64 <= CAP * 5.0 * 1.1,
        "over the cap by more than 10% in the 5 s from {:.1} s",
        fullest.0
    );
    assert!(
        average >= CAP * least_used,
        "only {average:.0}/s used on average"
    );
}

/// Prints what each part cost the ledger per second over the measured window; their total
/// (with steps that end at their budget), and the total were every step slow.
fn report_the_cost(costs: [Tally; 5]) -> (f64, f64) {
    let span = MEASURED.1 - MEASURED.0;
    let per_second = |cost: Tally| cost.entities as f64 / span;
    let names = ["slices", "cancel checks", "claim renewals", "learning"];
    for (name, cost) in names.iter().zip(costs) {
        println!(
            "{name:>15}: {:6.1} entities/s ({:.1} requests/s)",
            per_second(cost),
            cost.requests as f64 / span
        );
    }
    let total: f64 = costs[..4].iter().map(|c| per_second(*c)).sum();
    let slow_total = total - per_second(costs[2]) + per_second(costs[4]);
    println!(
        "{:>15}: {total:6.1} entities/s at {SEATS} processes over {span} s (steps of {:.1} s, \
         a claim renewed every {} s; learning: a round at {} s, then a raise tried by each \
         process every {} s)",
        "total",
        ledger_traffic::step_time(false).as_secs_f64(),
        ledger_traffic::RENEW_EVERY.as_secs(),
        MEASURED.0,
        tablescan_ledger::learning::ASK_RAISE_EVERY.as_secs(),
    );
    println!(
        "were every step slow ({:.1} s, to its action's deadline): renewals {:.1} entities/s, \
         total {slow_total:.1}",
        ledger_traffic::step_time(true).as_secs_f64(),
        per_second(costs[4]),
    );
    (total, slow_total)
}

/// Runs every process of the plan, each working as `work` says; checks that the cap held, that
/// at least `least_used` of it was used and that the ledger was asked under `most_cost`
/// entities/s.
async fn run(work: Work, least_used: f64, most_cost: f64) {
    let plan = plan();
    let traffic = Arc::new(Traffic::new(plan.len() * STEPS).await);
    let store = InMemorySlices::default();
    let log: Log = Arc::default();
    let start = Instant::now();
    let measure = tokio::spawn(measure_costs(store.clone(), traffic.clone(), start));
    let tasks: Vec<_> = plan
        .iter()
        .enumerate()
        .map(|(i, (join, end))| {
            tokio::spawn(run_process(
                (store.clone(), RunClock { start }),
                traffic.clone(),
                (i, work),
                *join,
                *end,
                log.clone(),
            ))
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let costs = measure.await.unwrap();
    let log = log.lock().unwrap().clone();
    let (cost, _) = report_the_cost(costs);
    check_the_cap(&log, start, &plan, least_used);
    assert!(cost < most_cost, "the ledger is asked {cost:.1} entities/s");
}

#[tokio::test(start_paused = true)]
async fn a_hundred_processes_present_at_once_hold_the_cap_and_cost_the_ledger_little() {
    run(Work::Steady, 0.9, 200.0).await;
}

/// The same hundred, each with steps in bursts of 3 to 9 s and none for 1.5 to 5 s between:
/// slices and asks go back after a second idle (`leave`), and about two thirds of
/// the processes want more at any time (16 slices: most wait). The cap holds, but the protocol
/// falls short of the steady test's figures here: 66.8% of the cap used and 268.2 entities/s
/// asked of the ledger (slices 229.1) at 670fa00 (the pace code of ebd23e3; docs/scan.md,
/// "Measured"). Where the 16 slices were, sampled every 100 ms: 10.8 with processes that had
/// steps, 0.7 handed to such processes that had not read it yet, 3.5 with processes whose steps
/// had stopped (3.0 of them within the [`IDLE_RELEASE`] second), 0.9 with processes that had
/// crashed, 0.07 free. With [`IDLE_RELEASE`] at 0.3 s instead, 80.0% used; at 0.1 s, 82.8%; the
/// ledger asked 293 entities/s at both. (Handing asked-for slices over 200 ms after the steps
/// stop: 78.8%, 280.5 entities/s; not kept, see docs/scan.md.) The bounds below keep the
/// figures from getting worse.
#[tokio::test(start_paused = true)]
async fn a_hundred_processes_working_in_bursts_hold_the_cap() {
    run(Work::Bursts, 0.6, 300.0).await;
}
