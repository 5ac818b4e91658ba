//! The cap shared by 100 processes joining and leaving, on a paused clock and an in-memory store:
//! each process runs the protocol as the handler does (a tick every 100 ms, its token bucket's
//! rate set to what it holds) with eight steps that read as fast as their rate lets them.
//!
//! Checked: over every 5-second window the entities let through stay within 10% of the cap, on
//! average at least 90% of it is used, and what the protocol costs the store (entities read and
//! written per second, printed) stays under 200 however many processes take part.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablescan_pace::{Demand, InMemorySlices, ScanShare, TokioClock};
use tablescan_storage::pacing::TokenBucket;
use tokio::time::Instant;

const CAP: f64 = 10_000.0;
const PROCESSES: usize = 100;
const STEPS: usize = 8;
const PAGE: u64 = 100;
const TICK: Duration = Duration::from_millis(100);

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

struct Process {
    share: ScanShare<InMemorySlices, TokioClock>,
    bucket: TokenBucket,
    /// Entities taken in the current and the previous 100 ms ticks... summed over the last
    /// second by the ticker.
    moved: AtomicU64,
    stop: AtomicBool,
}

/// One process: joins at `join`, runs its steps and its ticker until `end`, then leaves or
/// crashes.
async fn run_process(
    store: InMemorySlices,
    name: String,
    join: Duration,
    end: (Duration, End),
    log: Log,
) {
    tokio::time::sleep(join).await;
    let process = Arc::new(Process {
        share: ScanShare::new(store, TokioClock, "scan", &name, CAP),
        bucket: TokenBucket::new(Some(0.0)),
        moved: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let steps: Vec<_> = (0..STEPS)
        .map(|_| {
            let (process, log) = (process.clone(), log.clone());
            tokio::spawn(async move {
                while !process.stop.load(Ordering::Relaxed) {
                    if process.share.granted() <= 0.0 {
                        // No share: the handler gives the work item back.
                        tokio::time::sleep(TICK).await;
                        continue;
                    }
                    process.bucket.take(PAGE).await;
                    if process.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    process.moved.fetch_add(PAGE, Ordering::Relaxed);
                    log.lock().unwrap().push((Instant::now(), PAGE));
                }
            })
        })
        .collect();
    let ticker = {
        let process = process.clone();
        tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64);
            while !process.stop.load(Ordering::Relaxed) {
                let now = Instant::now();
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
                    wants_more: held_back || process.share.granted() <= 0.0,
                    used,
                };
                process.share.tick(demand).await;
                process.bucket.set_rate(Some(process.share.granted()));
                tokio::time::sleep(TICK).await;
            }
        })
    };
    tokio::time::sleep(end.0.saturating_sub(join)).await;
    // Stop using the share before giving it back, as the handler does.
    process.bucket.set_rate(Some(0.0));
    process.stop.store(true, Ordering::Relaxed);
    ticker.await.unwrap();
    if end.1 == End::Leaves {
        process.share.leave().await;
    }
    for step in steps {
        step.abort();
    }
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

#[tokio::test(start_paused = true)]
async fn a_hundred_processes_joining_and_leaving_hold_the_cap_and_use_it() {
    let store = InMemorySlices::default();
    let log: Log = Arc::default();
    let start = Instant::now();
    // Joins spread over the first 50 s; each process stays 30 to 60 s; every tenth crashes.
    let plan: Vec<(Duration, (Duration, End))> = (0..PROCESSES)
        .map(|i| {
            let join = Duration::from_millis(500 * i as u64);
            let stay = Duration::from_secs(30 + (i as u64 * 7) % 31);
            let end = if i % 10 == 9 {
                End::Crashes
            } else {
                End::Leaves
            };
            (join, (join + stay, end))
        })
        .collect();
    let measured_to = 80.0;
    let present = |t: f64| {
        plan.iter()
            .filter(|(join, (end, _))| join.as_secs_f64() <= t && t < end.as_secs_f64())
            .count()
    };
    assert!(present(70.0) >= 20, "the plan keeps many processes present");
    let tasks: Vec<_> = plan
        .iter()
        .enumerate()
        .map(|(i, (join, end))| {
            tokio::spawn(run_process(
                store.clone(),
                format!("process-{i:03}"),
                *join,
                *end,
                log.clone(),
            ))
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let log = log.lock().unwrap().clone();

    let mut fullest = (0.0, 0u64);
    let mut emptiest = (0.0, u64::MAX);
    let mut from = 0.0;
    while from + 5.0 <= measured_to {
        let n = within(&log, start, from, from + 5.0);
        if n > fullest.1 {
            fullest = (from, n);
        }
        if n < emptiest.1 {
            emptiest = (from, n);
        }
        from += 0.1;
    }
    let total = within(&log, start, 0.0, measured_to);
    let average = total as f64 / measured_to;
    let cost = store.counts.entities() as f64 / elapsed;
    println!(
        "{PROCESSES} processes (at most {} at once), cap {CAP}/s, {measured_to} s measured: \
         fullest 5 s from {:.1} s at {:.0}/s ({:.1}% of the cap), emptiest from {:.1} s at \
         {:.0}/s, average {average:.0}/s ({:.1}%); the protocol cost the store {cost:.1} \
         entities/s ({} requests, {} entities read, {} written, in {elapsed:.0} s)",
        (0..1200)
            .map(|t| present(f64::from(t) / 10.0))
            .max()
            .unwrap_or(0),
        fullest.0,
        fullest.1 as f64 / 5.0,
        fullest.1 as f64 / 5.0 / CAP * 100.0,
        emptiest.0,
        emptiest.1 as f64 / 5.0,
        average / CAP * 100.0,
        store.counts.requests.load(Ordering::Relaxed),
        store.counts.read.load(Ordering::Relaxed),
        store.counts.written.load(Ordering::Relaxed),
    );
    let per_5: Vec<String> = (0..(elapsed / 5.0) as usize)
        .map(|w| {
            let from = w as f64 * 5.0;
            format!("{:.0}", within(&log, start, from, from + 5.0) as f64 / 5.0)
        })
        .collect();
    println!("entities/s in each 5 s: {}", per_5.join(" "));
    assert!(
        fullest.1 as f64 <= CAP * 5.0 * 1.1,
        "over the cap by more than 10% in the 5 s from {:.1} s",
        fullest.0
    );
    assert!(average >= CAP * 0.9, "only {average:.0}/s used on average");
    assert!(cost < 200.0, "the protocol cost {cost:.1} entities/s");
}
