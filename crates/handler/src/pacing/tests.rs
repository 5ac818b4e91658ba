//! Admission and shares of a capped scan in one and two processes, on a paused clock and the
//! in-memory ledger. (The cap across 100 processes is tested in `tablescan_pace` itself.)

use super::*;
use tablescan_storage::table::in_memory::InMemoryTable;

/// A scan record as a process reads it: id, and cap if any.
pub(crate) fn record(id: &str, cap: Option<u32>) -> ScanRecord {
    let settings = |name: &str| {
        (name == tablescan_api::DEFAULT_CONNECTION).then(|| "UseDevelopmentStorage=true".into())
    };
    let body = r#"{"table":"things","action":{"type":"count"}}"#;
    let mut spec = tablescan_api::ScanSpec::parse_with(body, &settings, None).unwrap();
    spec.max_rows_per_second = cap;
    ScanRecord {
        id: id.to_string(),
        spec,
        created_at: time::OffsetDateTime::now_utc(),
        started_at: None,
        cancelled_at: None,
        paused_at: None,
        resumed_at: None,
        resume_from: None,
        manifest_at: None,
        manifest_trouble: Default::default(),
        redrive_looked_at: None,
        learned_cap: None,
        learn_round_ms: 0,
    }
}

pub(crate) async fn ledger() -> Ledger {
    let table = InMemoryTable::new("ledger");
    table.create_if_missing().await.unwrap();
    Ledger::in_memory(table)
}

/// A ledger holding the scan row of `scan` (no cap of its own): what the refresher reads and
/// the learned cap is published to.
pub(super) async fn ledger_with_scan_row(scan: &str) -> Ledger {
    let ledger = ledger().await;
    let row = tablescan_ledger::rows::ScanRow::new("{}".into(), time::OffsetDateTime::now_utc());
    ledger
        .table()
        .upsert(
            &row.to_entity(scan),
            tablescan_storage::table::WriteMode::Replace,
        )
        .await
        .unwrap();
    ledger
}

#[tokio::test(start_paused = true)]
async fn a_capped_scans_first_step_runs_at_once_at_the_whole_cap() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    let start = Instant::now();
    let step = pacing
        .admit(&ledger, &record("scan1", Some(1_000)), source, ADMIT_WAIT)
        .await
        .unwrap();
    // Joined and took every slice within a tick or two.
    assert!(
        start.elapsed() <= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    // Alone, one step: half a second of 1,000/s.
    assert_eq!(step.page_size(1000), 500);
    // Never more than asked, never below 100 unless asked for fewer, never zero.
    assert_eq!(step.page_size(300), 300);
    assert_eq!(step.page_size(10), 10);
    assert_eq!(step.page_size(0), 1);
    let start = Instant::now();
    step.before_read(500).await;
    step.before_read(500).await;
    // 1,000 entities at 1,000/s: no burst, no wait beyond the rate.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took <= Duration::from_millis(1_200),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_share_did_not_come_in_time_charges_nothing_to_the_next() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let step = pacing
        .admit(
            &ledger,
            &record("scan-w", Some(1_000)),
            Arc::new(Governor::default()),
            ADMIT_WAIT,
        )
        .await
        .unwrap();
    let target = Governor::default();
    // Ten seconds of the cap: the share does not come within SHARE_WAIT.
    let start = Instant::now();
    let refused = step.before_write(10_000, &target).await;
    assert!(refused.is_err());
    assert!(start.elapsed() <= SHARE_WAIT + Duration::from_millis(300));
    // What it reserved and did not get went back: the next write waits for its own 100
    // entities only. (The wait kept them charged once: the next write waited for 5,000 more,
    // at the eighth of the cap the process holds by then, having moved nothing: 40 s.)
    let start = Instant::now();
    step.before_write(100, &target).await.unwrap();
    assert!(
        start.elapsed() <= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    // And so for a read whose wait was cut short with a page reserved ahead.
    let reserved = step.reserve_read(10_000);
    let cut = tokio::time::timeout(
        SHARE_WAIT,
        step.before_reserved_read(10_000, Some(reserved)),
    )
    .await;
    assert!(cut.is_err());
    let start = Instant::now();
    step.before_read(100).await;
    assert!(
        start.elapsed() <= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// A scan capped under what a page of 100 rows takes in SHARE_WAIT reads and writes all the
/// same: its pages, and the most rows a write carries, are what its share earns in a quarter
/// of SHARE_WAIT. (With pages of at least 100 rows, a scan capped at 10 entities/s timed out
/// every read: each step ended having read nothing, and its item came back for ever.)
#[tokio::test(start_paused = true)]
async fn a_scan_capped_under_a_page_in_the_shares_wait_still_reads_and_writes() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let step = pacing
        .admit(
            &ledger,
            &record("scan-slow", Some(10)),
            Arc::new(Governor::default()),
            ADMIT_WAIT,
        )
        .await
        .unwrap();
    let page = step.page_size(1000);
    assert_eq!(page, 12, "what 10 entities/s earn in 1.25 s");
    // Page after page, each reserved ahead as `PacedReader` does, within SHARE_WAIT each.
    let start = Instant::now();
    let mut reserved = None;
    for _ in 0..5 {
        let ticket = tokio::time::timeout(
            SHARE_WAIT,
            step.before_reserved_read(u64::from(page), reserved.take()),
        )
        .await
        .expect("a page's share within SHARE_WAIT");
        reserved = Some(step.reserve_read(u64::from(page)));
        step.after_read(ticket, u64::from(page), 0);
    }
    step.release(reserved.take().unwrap());
    // 60 entities at 10/s, no faster.
    assert!(
        start.elapsed() >= Duration::from_millis(5_800),
        "{:?}",
        start.elapsed()
    );
    // Writes are cut to what the share earns in 1.25 s: such a write's share comes in time...
    assert_eq!(step.write_size(), Some(12));
    let start = Instant::now();
    step.before_write(12, &Governor::default()).await.unwrap();
    let took = start.elapsed();
    assert!(took <= Duration::from_millis(1_300), "{took:?}");
    // ...where a write of 100 rows (ten seconds of the share) would time out, every time.
    assert!(step.before_write(100, &Governor::default()).await.is_err());
    // Nothing limits an uncapped scan's writes until its account refuses.
    let uncapped = pacing
        .admit(
            &ledger,
            &record("scan-free", None),
            Arc::new(Governor::default()),
            ADMIT_WAIT,
        )
        .await
        .unwrap();
    assert_eq!(uncapped.write_size(), None);
}

#[test]
fn a_page_is_half_a_second_of_the_share_and_never_takes_long_to_earn() {
    // Half a second, at least 100 rows where they are earned within a quarter of SHARE_WAIT.
    assert_eq!(page_size(10_000.0, 1000), 1000);
    assert_eq!(page_size(1_000.0, 1000), 500);
    assert_eq!(page_size(100.0, 1000), 100);
    // A slice of a cap of 300 entities/s in each of 16 processes: 18.75/s.
    assert_eq!(page_size(18.75, 1000), 23);
    assert_eq!(page_size(1.0, 1000), 1);
    assert_eq!(page_size(0.0, 1000), 1);
    // Never more than asked, never zero.
    assert_eq!(page_size(18.75, 5), 5);
    assert_eq!(page_size(1_000.0, 0), 1);
    for tenths in 1..100_000u32 {
        let rate = f64::from(tenths) / 10.0;
        let page = f64::from(page_size(rate, 1000));
        // Earned within a quarter of SHARE_WAIT (one row at least)...
        if rate * AFFORDABLE_SECONDS >= 1.0 {
            assert!(page / rate <= AFFORDABLE_SECONDS, "{rate}: {page}");
        }
        // ...and no smaller than 100 rows where those are.
        if rate * AFFORDABLE_SECONDS >= f64::from(MIN_PAGE) {
            assert!(page >= f64::from(MIN_PAGE), "{rate}: {page}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_uncapped_step_is_admitted_at_once_and_reads_whole_pages() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let step = pacing
        .admit(
            &ledger,
            &record("scan2", None),
            Arc::new(Governor::default()),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(step.page_size(1000), 1000);
    // Nothing was written to the ledger for it.
    assert!(tablescan_pace::SliceStore::read_all(&ledger, "scan2")
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_process_without_a_share_gives_the_step_back_and_gets_one_when_the_holder_leaves() {
    let ledger = ledger().await;
    let first = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    // The first process takes the whole cap and keeps it while its step runs.
    let held = first
        .admit(
            &ledger,
            &record("scan3", Some(3_000)),
            source.clone(),
            ADMIT_WAIT,
        )
        .await
        .unwrap();
    held.before_read(100).await;
    let second = Pacing::new(tablescan_pace::TokioClock);
    let start = Instant::now();
    // A wait shorter than a hand-over takes (a look, then the holder's next renewal: about a
    // second, `tablescan_pace::HAND_OVER_EVERY`).
    let wait = Duration::from_millis(500);
    let refused = second
        .admit(&ledger, &record("scan3", Some(3_000)), source.clone(), wait)
        .await
        .err()
        .expect("no share while another process holds the whole cap");
    assert_eq!(refused.slots, 0);
    // It waited no longer than it may.
    assert!(start.elapsed() <= wait + Duration::from_millis(100));
    // The first process's step ends; after its grace it gives the slices back.
    drop(held);
    tokio::time::sleep(refresher::GRACE + Duration::from_secs(1)).await;
    let step = second
        .admit(
            &ledger,
            &record("scan3", Some(3_000)),
            source,
            Duration::from_secs(20),
        )
        .await
        .expect("the slices given back are found");
    step.before_read(100).await;
}

#[tokio::test(start_paused = true)]
async fn two_busy_processes_never_use_more_than_the_cap_together() {
    let ledger = ledger().await;
    let log: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let start = Instant::now();
    let end = start + Duration::from_secs(30);
    let mut tasks = Vec::new();
    for process in 0..2 {
        let pacing = Arc::new(Pacing::new(tablescan_pace::TokioClock));
        for _ in 0..6 {
            let (pacing, ledger, log) = (pacing.clone(), ledger.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(process * 4)).await;
                let source = Arc::new(Governor::default());
                while Instant::now() < end {
                    let Ok(step) = pacing
                        .admit(
                            &ledger,
                            &record("scan4", Some(2_000)),
                            source.clone(),
                            ADMIT_WAIT,
                        )
                        .await
                    else {
                        continue;
                    };
                    for _ in 0..10 {
                        let top = step.page_size(1000);
                        let ticket = step.before_read(u64::from(top)).await;
                        // Full pages, counted as moved as the engine's reader counts them:
                        // what a process moves is how its slices know it wants more.
                        step.after_read(ticket, u64::from(top), 0);
                        log.lock().unwrap().push((Instant::now(), u64::from(top)));
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let log = log.lock().unwrap().clone();
    let within = |from: f64, to: f64| -> u64 {
        log.iter()
            .filter(|(at, _)| {
                let t = at.duration_since(start).as_secs_f64();
                t >= from && t < to
            })
            .map(|(_, n)| n)
            .sum()
    };
    let mut most = 0;
    let mut from = 0.0;
    while from + 5.0 <= 30.0 {
        most = most.max(within(from, from + 5.0));
        from += 0.1;
    }
    let used = within(0.0, 30.0);
    assert!(
        most <= 11_000,
        "{most} entities in a 5 s window: over 110% of the cap"
    );
    assert!(
        used >= 54_000,
        "{used} entities in 30 s: under 90% of the cap"
    );
}

#[tokio::test(start_paused = true)]
async fn an_uncapped_scan_learns_a_cap_from_a_refusal_and_is_paced_by_it() {
    let ledger = ledger_with_scan_row("scan5").await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    let scan = record("scan5", None);
    let step = pacing
        .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
        .await
        .unwrap();
    assert_eq!(step.page_size(1000), 1000, "unlimited at first");
    // Two seconds at 2,000 entities a second, then the account refuses.
    for _ in 0..20 {
        let ticket = step.before_read(200).await;
        step.after_read(ticket, 200, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    source.throttled();
    // The process goes on as its back-off lets it; a few seconds after the cut the refresher
    // reports its own figure (what it was served before the refusal, or what it moves since if
    // more, no more than its back-off's estimate), the round closes later, and the cap is 90%
    // of that figure (this process is the only one).
    let end = Instant::now() + super::refresher::REPORT_DELAY + Duration::from_millis(300);
    while Instant::now() < end {
        let ticket = step.before_read(200).await;
        step.after_read(ticket, 200, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still moving while the round takes reports.
    let end = Instant::now() + tablescan_ledger::learning::ROUND + Duration::from_millis(500);
    while Instant::now() < end {
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let learned = ledger.learning("scan5").await.unwrap().unwrap();
    let cap = learned.cap.expect("a cap learned");
    assert!((700.0..=2_000.0).contains(&cap), "{cap}");
    // The scan is paced by it now, through slices, and every process reading the scan sees
    // it on the scan row.
    let row = ledger
        .table()
        .get_entity("scan5", tablescan_ledger::rows::SCAN_ROW)
        .await
        .unwrap()
        .unwrap();
    let published = tablescan_ledger::rows::ScanRow::from_entity(&row)
        .unwrap()
        .learned_cap;
    assert_eq!(published, Some(cap), "published on the scan row");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    for _ in 0..10 {
        step.before_read(cap as u64 / 10).await;
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(800),
        "{took:?}: not paced by the learned cap"
    );
    // The cap took over from the back-off, which no longer limits the process.
    assert_eq!(source.rate(), None, "the back-off was lifted");
    // Refused again while it uses its whole share: once the cap has stood a while, the scan's
    // cap is lowered (no new round), and the process is paced by the lower one.
    let end = Instant::now() + tablescan_ledger::learning::LOWER_EVERY;
    while Instant::now() < end {
        let ticket = step.before_read(cap as u64 / 10).await;
        step.after_read(ticket, cap as u64 / 10, 0);
    }
    source.throttled();
    let end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < end {
        let ticket = step.before_read(cap as u64 / 20).await;
        step.after_read(ticket, cap as u64 / 20, 0);
    }
    let lowered = ledger.learning("scan5").await.unwrap().unwrap();
    // The first lowering after the round that set the cap: the whole step.
    let expected = tablescan_ledger::learning::lowered_round_cap(cap, cap);
    assert!(
        lowered.cap.is_some_and(|c| (c - expected).abs() < 1e-6),
        "{:?}, not {expected}",
        lowered.cap
    );
    assert_eq!(lowered.round_at_ms, learned.round_at_ms, "no new round");
}

#[test]
fn each_give_back_in_a_row_waits_about_twice_as_long_up_to_16_seconds() {
    let bounds = |n: u32| (give_back_delay(n, 0.0), give_back_delay(n, 1.0));
    assert_eq!(bounds(0), (Duration::from_secs(1), Duration::from_secs(2)));
    assert_eq!(bounds(1), (Duration::from_secs(2), Duration::from_secs(4)));
    assert_eq!(bounds(3), (Duration::from_secs(8), Duration::from_secs(16)));
    for n in [3, 4, 5, 6, 40, u32::MAX] {
        assert_eq!(bounds(n), (GIVE_BACK_MAX / 2, GIVE_BACK_MAX), "after {n}");
    }
    assert_eq!(give_back_delay(2, f64::NAN), give_back_delay(2, 0.5));
    let middle = give_back_delay(2, 0.5);
    assert!(middle > bounds(2).0 && middle < bounds(2).1);
}

/// A capped scan's steps in one process: those admitted while its slots have room may split
/// their rest (the scan's fan-out); the one that takes the last slot hands its rest on whole. A scan with no cap, in a process its account has not
/// refused, is never crowded.
#[tokio::test(start_paused = true)]
async fn the_step_that_fills_the_scans_slots_here_splits_nothing_off() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    // 900 entities/s: three steps' worth at STEP_RATE, plus one: four slots.
    let scan = record("scan1", Some(900));
    let mut steps = Vec::new();
    for _ in 0..4 {
        let step = pacing
            .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
            .await
            .unwrap();
        steps.push(step);
    }
    let admitted: Vec<bool> = steps.iter().map(StepPace::crowded).collect();
    assert_eq!(admitted, [false, false, false, true]);
    let shaped = |crowded, mode| {
        let mut options = ScanOptions {
            mode,
            ..ScanOptions::default()
        };
        shape_for_admission(&mut options, crowded);
        (options.fan_out, options.hand_on_whole)
    };
    assert_eq!(shaped(steps[0].crowded(), ReadMode::Rows), (4, false));
    assert_eq!(shaped(steps[3].crowded(), ReadMode::Rows), (1, true));
    // A partition-keys step hands its rest on in one piece but may still cut at its pages.
    let keys = ReadMode::PartitionKeys;
    assert_eq!(shaped(steps[3].crowded(), keys), (1, false));
    // A slot freed and taken again: taken by a crowded step again.
    drop(steps.pop());
    let again = pacing
        .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
        .await
        .unwrap();
    assert!(again.crowded());
    assert!(!crowded(3, 4, false));
    // A step admitted within 16 s of a give-back here is crowded whatever the slots.
    assert!(crowded(1, 4, true));

    let uncapped = record("scan2", None);
    for _ in 0..20 {
        let step = pacing
            .admit(&ledger, &uncapped, source.clone(), ADMIT_WAIT)
            .await
            .unwrap();
        assert!(!step.crowded());
        steps.push(step);
    }
}

/// Steps that arrive together, all of which fit, do not make each other crowded (before, steps
/// waiting behind one admitted made it crowded: twenty steps of a scan capped at 30,000 joining
/// at once marked 19 crowded, waiting only for the process's first slices).
#[tokio::test(start_paused = true)]
async fn steps_arriving_together_that_all_fit_are_not_crowded() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    for cap in [None, Some(30_000)] {
        let scan = record(&format!("scan-{cap:?}"), cap);
        let admits = (0..20).map(|_| pacing.admit(&ledger, &scan, source.clone(), ADMIT_WAIT));
        let steps: Vec<StepPace> = futures_util::future::join_all(admits)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        // 30,000 entities/s: 100 steps' worth; 20 fit with room to spare.
        let crowded = steps.iter().filter(|s| s.crowded()).count();
        assert_eq!(crowded, 0, "cap {cap:?}");
    }
}

#[test]
fn a_share_under_a_smallest_page_a_half_second_is_starved() {
    assert!(starved(150.0, 1));
    assert!(starved(150.0, 3));
    assert!(!starved(200.0, 1));
    // Many steps on a fair share: not starved (their asks would hand slices to and fro).
    assert!(!starved(1_000.0, 5));
    // No grant (wanting more anyway), or no step.
    assert!(!starved(0.0, 1));
    assert!(!starved(150.0, 0));
}
