//! A scan with no cap of its own, run by two processes against an account that refuses above a
//! fixed rate, learns a cap near that rate: admission, the step pace, the back-off's cuts, the
//! refreshers' reports and the round's close all the handler's own, on a paused clock and the
//! in-memory ledger.

use std::collections::VecDeque;

use super::tests::{ledger, record};
use super::*;

/// What the account takes, entities per second, over any second.
const ACCOUNT_RATE: f64 = 8_000.0;
/// Entities each page asks for at most.
const PAGE: u16 = 1_000;
/// How long a page takes to come back.
const LATENCY: Duration = Duration::from_millis(20);

/// An account that serves pages while what it served over the last second stays within
/// [`ACCOUNT_RATE`], and refuses the rest.
#[derive(Default)]
struct Account(Mutex<VecDeque<(Instant, u64)>>);

impl Account {
    /// Whether `entities` more are served now.
    fn serve(&self, entities: u64) -> bool {
        let now = Instant::now();
        let mut served = lock(&self.0);
        while served
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= Duration::from_secs(1))
        {
            served.pop_front();
        }
        let within: u64 = served.iter().map(|(_, n)| n).sum();
        if (within + entities) as f64 > ACCOUNT_RATE {
            return false;
        }
        served.push_back((now, entities));
        true
    }
}

/// One step reading page after page until `until`, through its process's pacing.
async fn step_reading(
    pacing: Arc<Pacing>,
    ledger: Ledger,
    scan: ScanRecord,
    source: Arc<Governor>,
    account: Arc<Account>,
    until: Instant,
) {
    while Instant::now() < until {
        let Ok(step) = pacing
            .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
            .await
        else {
            continue;
        };
        let end = (Instant::now() + Duration::from_secs(15)).min(until);
        while Instant::now() < end {
            let top = step.page_size(PAGE);
            let ticket = step.before_read(u64::from(top)).await;
            tokio::time::sleep(LATENCY).await;
            if account.serve(u64::from(top)) {
                step.after_read(ticket, u64::from(top), 0);
            } else {
                source.throttled();
                step.after_read(ticket, 0, u64::from(top));
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_default_scan_learns_a_cap_near_what_its_account_takes() {
    let ledger = ledger().await;
    let scan = record("scan-learns", None);
    let row = tablescan_ledger::rows::ScanRow::new("{}".into(), time::OffsetDateTime::now_utc());
    ledger
        .table()
        .upsert(
            &row.to_entity(&scan.id),
            tablescan_storage::table::WriteMode::Replace,
        )
        .await
        .unwrap();
    let account = Arc::new(Account::default());
    let until = Instant::now() + Duration::from_secs(40);
    let mut steps = Vec::new();
    for _ in 0..2 {
        // A process: its pacing, and its back-off of the account.
        let pacing = Arc::new(Pacing::new(tablescan_pace::TokioClock));
        let source = Arc::new(Governor::default());
        for _ in 0..4 {
            steps.push(tokio::spawn(step_reading(
                pacing.clone(),
                ledger.clone(),
                scan.clone(),
                source.clone(),
                account.clone(),
                until,
            )));
        }
    }
    let start = Instant::now();
    let learned = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let learning = ledger.learning(&scan.id).await.unwrap();
        if let Some(cap) = learning.and_then(|l| l.cap) {
            break cap;
        }
        assert!(Instant::now() < until, "no cap learned in 40 s");
    };
    let took = start.elapsed();
    for step in steps {
        step.abort();
    }
    // The first refusal comes within a second, a report 4 s after it, and the round closes
    // `ROUND` after it opened.
    assert!(
        took <= Duration::from_secs(4) + tablescan_ledger::learning::ROUND * 2,
        "learned only after {took:?}"
    );
    assert!(
        (0.6 * ACCOUNT_RATE..=1.1 * ACCOUNT_RATE).contains(&learned),
        "learned {learned}, the account takes {ACCOUNT_RATE}"
    );
}
