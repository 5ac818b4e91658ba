//! A scan with no cap of its own, run by two processes against an account that refuses above a
//! fixed rate, learns a cap near that rate, and the cap takes over from the back-offs within a
//! tenth over it from its first second: admission, the step pace, the back-off's cuts, the
//! refreshers' reports and the round's close all the handler's own, on a paused clock and the
//! in-memory ledger.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64};

use super::tests::{ledger_with_scan_row, record};
use super::*;

/// What the account takes, entities per second, over any second.
const ACCOUNT_RATE: f64 = 8_000.0;
/// Entities each page asks for at most.
const PAGE: u16 = 1_000;
/// How long a page takes to come back.
const LATENCY: Duration = Duration::from_millis(20);

/// An account that serves pages while what it served over the last second stays within
/// [`ACCOUNT_RATE`], and refuses the rest; or, once opened, serves everything.
#[derive(Default)]
struct Account {
    /// What it served over the last second, with when.
    recent: Mutex<VecDeque<(Instant, u64)>>,
    /// Whether it serves everything now.
    open: AtomicBool,
    /// Everything it served, with when.
    log: Mutex<Vec<(Instant, u64)>>,
}

impl Account {
    /// Whether `entities` more are served now.
    fn serve(&self, entities: u64) -> bool {
        let served = self.open.load(Ordering::Relaxed) || self.within_its_rate(entities);
        if served {
            lock(&self.log).push((Instant::now(), entities));
        }
        served
    }

    fn within_its_rate(&self, entities: u64) -> bool {
        let now = Instant::now();
        let mut served = lock(&self.recent);
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

/// An account as a process's steps meet it: how long until `entities` asked for now are
/// served, or `None` if refused.
trait Serves: Send + Sync + 'static {
    fn serve_in(&self, entities: u64) -> Option<Duration>;
}

impl Serves for Account {
    fn serve_in(&self, entities: u64) -> Option<Duration> {
        self.serve(entities).then_some(LATENCY)
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
    let scan = record("scan-learns", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let account = Arc::new(Account::default());
    let until = Instant::now() + Duration::from_secs(40);
    let start = Instant::now();
    let steps = two_processes_reading(&scan, &ledger, &account, until);
    let (learned, learned_at) = cap_learned(&ledger, &scan.id, until).await;
    let took = learned_at - start;
    for step in steps {
        step.abort();
    }
    // The first refusal comes within a second, a report 4 s after it, and the round closes
    // `ROUND` after it opened.
    assert!(
        took <= Duration::from_secs(4) + tablescan_ledger::learning::ROUND * 2,
        "learned only after {took:?}"
    );
    // `LEARNED_SHARE` of where the account refused the scan, the round's sum: both processes
    // refused at once, the one whose report opened the round counted what it moved over the
    // two seconds to it (its back-off back at its estimate, more than it was served before its
    // refusal), and the other counted the same two seconds: 7,717 entities/s together (96% of
    // the account; at a share of 0.9, 6,945 learned). The sum is what this test holds to at
    // least 94% of the account (85% learned at a share of 0.9): the processes counted each
    // over seconds of its own summed 8,002, a count in which a process that took up the room
    // another's back-off left counts that room twice (`a_round_counts_each_process_over_the_same_seconds`). Raises take the
    // cap the rest of the way while it binds
    // (`a_default_scans_learned_cap_stays_near_what_its_account_takes`).
    let share = tablescan_ledger::learning::LEARNED_SHARE;
    assert!(
        (0.85 / 0.9 * share * ACCOUNT_RATE..=ACCOUNT_RATE).contains(&learned),
        "learned {learned}, the account takes {ACCOUNT_RATE}"
    );
}

/// Two processes of a default scan, four steps each, reading from `account` until `until`.
fn two_processes_reading(
    scan: &ScanRecord,
    ledger: &Ledger,
    account: &Arc<Account>,
    until: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
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
    steps
}

/// The cap the scan learned, when it appears in the ledger (looked for every 50 ms).
async fn cap_learned(ledger: &Ledger, scan: &str, until: Instant) -> (f64, Instant) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let learning = ledger.learning(scan).await.unwrap();
        if let Some(cap) = learning.and_then(|l| l.cap) {
            return (cap, Instant::now());
        }
        assert!(Instant::now() < until, "no cap learned");
    }
}

/// The cap the scan's round set, when the round is closed (looked for every 50 ms).
async fn round_closed(ledger: &Ledger, scan: &str, until: Instant) -> (f64, Instant) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let learning = ledger.learning(scan).await.unwrap();
        if let Some(cap) = learning.filter(|l| l.closed).and_then(|l| l.cap) {
            return (cap, Instant::now());
        }
        assert!(Instant::now() < until, "no round closed");
    }
}

/// What went in the second that ends at `end` (after it began, up to `end` itself), split into
/// what went before `took_over` and what went from then on.
fn second_to(log: &[(Instant, u64)], end: Instant, took_over: Instant) -> (u64, u64) {
    let start = end.checked_sub(Duration::from_secs(1)).unwrap_or(end);
    log.iter().filter(|(at, _)| *at > start && *at <= end).fold(
        (0, 0),
        |(before, after), (at, n)| {
            if *at < took_over {
                (before + n, after)
            } else {
                (before, after + n)
            }
        },
    )
}

/// Checks every second that ends at a take of `log` from `took_over` on: what went in it from
/// the takeover on fits within a tenth over `cap` with what went before (which alone may be
/// more: it had no cap). Every worst second ends at a take. Returns how many seconds held
/// takes from both sides of the takeover.
fn assert_seconds_from_takeover_hold(
    log: &[(Instant, u64)],
    took_over: Instant,
    cap: f64,
) -> usize {
    let mut straddling = 0;
    for (end, _) in log.iter().filter(|(at, _)| *at >= took_over) {
        let (before, after) = second_to(log, *end, took_over);
        assert!(
            after == 0 || (before + after) as f64 <= 1.1 * cap,
            "{before} entities before the takeover and {after} after it in the second to {:?} \
             after it, under a cap of {cap:.0}",
            *end - took_over
        );
        if before > 0 && after > 0 {
            straddling += 1;
        }
    }
    straddling
}

/// Scan-wide, two processes: the seconds from a learned cap's takeover on hold it, with what
/// the back-offs let through just before, and the cap is used after. The account takes
/// everything once the cap is learned, so what the scan moves from then on is its pacing's
/// doing alone. This guards the scan-wide bound (devhost's default count once moved 3,473
/// entities in the takeover's first second under a cap of 2,996); it held here before f19c952
/// too, the back-offs having moved about the cap before it. The test below is the one a window
/// that ignores what went before fails.
#[tokio::test(start_paused = true)]
async fn the_seconds_around_a_learned_caps_takeover_hold_it() {
    let scan = record("scan-takes-over", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let account = Arc::new(Account::default());
    let until = Instant::now() + Duration::from_secs(60);
    let steps = two_processes_reading(&scan, &ledger, &account, until);
    let (first, learned_at) = cap_learned(&ledger, &scan.id, until).await;
    account.open.store(true, Ordering::Relaxed);
    // The round set the cap from its first report on, and a report may raise it; its close
    // makes it final, and every process that reported applies it then (these processes read
    // no scan row, which would bring it sooner).
    let (cap, closed_at) = round_closed(&ledger, &scan.id, until).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    for step in steps {
        step.abort();
    }
    let log = lock(&account.log).clone();
    // The seconds from the first takeover on hold the highest cap the round set (a process
    // runs under the one it applied last; a report may raise it, the close sets it exactly).
    let straddling = assert_seconds_from_takeover_hold(&log, learned_at, first.max(cap));
    assert!(straddling > 0, "no second held takes from both sides");
    // Used: each of the seconds 2 to 5 after the cap was final holds most of it.
    for second in 2..5 {
        let end = closed_at + Duration::from_secs(second + 1);
        let (_, moved) = second_to(&log, end, learned_at);
        assert!(
            moved as f64 >= 0.8 * cap,
            "{moved} entities in the second from {second} s after the cap of {cap:.0} came"
        );
    }
}

/// An account that queues what it cannot serve at once and refuses a request only when its
/// queue is [`THROTTLE_AFTER`] long: what the simulator's accounts do, and what an account
/// under load does first (its latency rises before it answers 503 Server Busy).
struct QueuingAccount {
    /// When what the account was asked for so far will have been served.
    free_at: Mutex<Instant>,
    /// Entities it served.
    served: AtomicU64,
}

/// How long an account's queue grows before it refuses.
const THROTTLE_AFTER: Duration = Duration::from_secs(2);
/// How long a refusal takes to come back.
const BUSY_REPLY: Duration = Duration::from_millis(300);

impl Serves for QueuingAccount {
    fn serve_in(&self, entities: u64) -> Option<Duration> {
        self.serve(entities)
    }
}

impl QueuingAccount {
    fn new() -> Self {
        QueuingAccount {
            free_at: Mutex::new(Instant::now()),
            served: AtomicU64::new(0),
        }
    }

    /// How long until `entities` asked for now are served; `None` if refused.
    fn serve(&self, entities: u64) -> Option<Duration> {
        let now = Instant::now();
        let mut free_at = lock(&self.free_at);
        let start = (*free_at).max(now);
        if start - now > THROTTLE_AFTER {
            return None;
        }
        *free_at = start + Duration::from_secs_f64(entities as f64 / ACCOUNT_RATE);
        self.served.fetch_add(entities, Ordering::Relaxed);
        Some(*free_at - now + LATENCY)
    }
}

/// One process of a default scan, named `name`: `steps` steps reading page after page from
/// `account` until `until`, and the process reading the scan row every few seconds (its learned
/// cap), as the handler's cancel check does. Named, not given a random name as the handler's
/// processes are: the name seeds the order in which it probes the cap's slices, so a run
/// repeats exactly.
async fn process_reading<A: Serves>(
    name: String,
    ledger: Ledger,
    scan: ScanRecord,
    account: Arc<A>,
    steps: usize,
    until: Instant,
) {
    let pacing = Arc::new(Pacing::named(tablescan_pace::TokioClock, name));
    let source = Arc::new(Governor::default());
    let record = Arc::new(Mutex::new(scan.clone()));
    for _ in 0..steps {
        let (pacing, ledger, record) = (pacing.clone(), ledger.clone(), record.clone());
        let (source, account) = (source.clone(), account.clone());
        tokio::spawn(async move {
            while Instant::now() < until {
                let scan = lock(&record).clone();
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
                    let asked = Instant::now();
                    if let Some(took) = account.serve_in(u64::from(top)) {
                        tokio::time::sleep(took).await;
                        source.answered_in(asked.elapsed(), u64::from(top));
                        step.after_read(ticket, u64::from(top), 0);
                    } else {
                        tokio::time::sleep(BUSY_REPLY).await;
                        source.throttled();
                        step.after_read(ticket, 0, u64::from(top));
                    }
                }
            }
        });
    }
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let row = ledger
            .table()
            .get_entity(&scan.id, tablescan_ledger::rows::SCAN_ROW)
            .await;
        let Some(row) = row.ok().flatten() else {
            continue;
        };
        let Some(row) = tablescan_ledger::rows::ScanRow::from_entity(&row) else {
            continue;
        };
        let fresh = ScanRecord {
            learned_cap: row.learned_cap,
            learn_round_ms: row.learn_round_ms,
            ..scan.clone()
        };
        pacing.read(&fresh, Instant::now()).await;
        *lock(&record) = fresh;
    }
}

/// A default scan run by several processes for many minutes against an account whose latency
/// rises before it refuses: its learned cap stays within a quarter over what the account
/// takes (raised only while the scan as a whole uses most of it; before, each process that
/// used its own share in full raised it every quiet while, and it reached 12,821 here on an
/// account taking 8,000), and the scan still moves most of what the account takes.
#[tokio::test(start_paused = true)]
async fn a_default_scans_learned_cap_stays_near_what_its_account_takes() {
    learned_cap_stays_near_what_the_account_takes("p").await;
}

/// The same with other names, so other probes of the slices: the one set of 121 tried that
/// raised the cap to 10,132 on an account taking 8,000 when a single read of the slices' noisy
/// reports over 90% of the cap raised it (reads of 7,500-8,300, one over 8,685 at a cap of
/// 9,650); raises now take two binding reads (`tablescan_ledger::learning::LOOK_AGAIN`).
#[tokio::test(start_paused = true)]
async fn a_default_scans_learned_cap_stays_near_what_its_account_takes_named_otherwise() {
    learned_cap_stays_near_what_the_account_takes("n79p").await;
}

/// Seven processes named `prefix` and a number run a default scan for ten minutes; see
/// [`a_default_scans_learned_cap_stays_near_what_its_account_takes`].
async fn learned_cap_stays_near_what_the_account_takes(prefix: &str) {
    let scan = record("scan-settles", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let account = Arc::new(QueuingAccount::new());
    let run = Duration::from_secs(600);
    let until = Instant::now() + run;
    // Three processes with many work items, four with one each: those hold a slice more than
    // they use (`tablescan_pace`'s surplus rule), so the busy ones use their own shares in
    // full while the scan moves well under its cap.
    let processes: Vec<_> = (0..7)
        .map(|i| {
            let steps = if i < 4 { 1 } else { 24 };
            let (ledger, scan, account) = (ledger.clone(), scan.clone(), account.clone());
            tokio::spawn(process_reading(
                format!("{prefix}{i}"),
                ledger,
                scan,
                account,
                steps,
                until,
            ))
        })
        .collect();
    // The last 200 s: what the scan moved, and the highest cap it had.
    tokio::time::sleep(run - Duration::from_secs(200)).await;
    let served_before = account.served.load(Ordering::Relaxed);
    let mut highest: f64 = 0.0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let learning = ledger.learning(&scan.id).await.unwrap();
        highest = highest.max(learning.and_then(|l| l.cap).unwrap_or(0.0));
    }
    let moved = (account.served.load(Ordering::Relaxed) - served_before) as f64 / 200.0;
    for process in processes {
        process.abort();
    }
    assert!(
        highest > 0.0 && highest <= 1.25 * ACCOUNT_RATE,
        "learned cap up to {highest:.0}, the account takes {ACCOUNT_RATE}"
    );
    assert!(
        moved >= 0.8 * ACCOUNT_RATE,
        "the scan moved {moved:.0} entities/s, the account takes {ACCOUNT_RATE}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_process_that_joins_a_scan_learning_its_cap_waits_for_the_cap() {
    use tablescan_pace::Clock;
    let mut scan = record("scan-joined-while-learning", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    scan.learn_round_ms = tablescan_pace::TokioClock.now_ms();
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    // The round is open and the scan has no cap: nothing here limits a step but a back-off
    // that has heard nothing, so none runs; its item comes back when the cap may have come.
    let started = Instant::now();
    let Err(why) = pacing
        .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
        .await
    else {
        panic!("admitted while the scan learns its cap");
    };
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "waited in the invocation"
    );
    let learning = tablescan_ledger::learning::ROUND + round_hold::HOLD_PAST_ROUND;
    assert_eq!(why.learning_for, Some(learning));
    // The cap comes with the scan's next read: steps run, paced by their share of it.
    scan.learned_cap = Some(2_000.0);
    pacing.read(&scan, Instant::now()).await;
    let step = pacing
        .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
        .await;
    assert!(step.is_ok());
    drop(step);

    // A round nobody closed: the steps of a process that joined it run once it is long over.
    let mut stale = record("scan-round-never-closed", None);
    let ledger = ledger_with_scan_row(&stale.id).await;
    stale.learn_round_ms = tablescan_pace::TokioClock.now_ms();
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    assert!(pacing
        .admit(&ledger, &stale, source.clone(), ADMIT_WAIT)
        .await
        .is_err());
    tokio::time::advance(learning).await;
    assert!(pacing
        .admit(&ledger, &stale, source, ADMIT_WAIT)
        .await
        .is_ok());
}

/// Another process's own figure, refused at `counted_to_ms`, for a round its report opens.
fn refused_at(counted_to_ms: u64) -> Option<tablescan_ledger::learning::OwnFigure> {
    Some(tablescan_ledger::learning::OwnFigure {
        rate: 3_000.0,
        counted_to_ms,
    })
}

/// A scan with no cap of its own, its ledger holding its scan row, and one process of it with a
/// step admitted: the scan, the ledger, the process's pacing and back-off, and the step.
async fn one_step_uncapped(id: &str) -> (ScanRecord, Ledger, Pacing, Arc<Governor>, StepPace) {
    let scan = record(id, None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    let step = pacing
        .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
        .await
        .unwrap();
    (scan, ledger, pacing, source, step)
}

/// Makes scan `id`'s open round as a process of an earlier version wrote it: with no cap (a
/// round set none before it closed), so that its processes learn with their back-offs held.
async fn as_opened_without_a_cap(ledger: &Ledger, id: &str) {
    use tablescan_ledger::rows::{LEARN_ROW, SCAN_ROW};
    use tablescan_storage::table::WriteMode;
    for row in [LEARN_ROW, SCAN_ROW] {
        let mut entity = ledger.table().get_entity(id, row).await.unwrap().unwrap();
        for name in ["cap", "provisional", "learnedCap"] {
            entity.properties.remove(name);
        }
        ledger
            .table()
            .upsert(&entity, WriteMode::Replace)
            .await
            .unwrap();
    }
}

/// A round opened with no cap (by a process of an earlier version, while the scan was
/// upgraded) leaves the processes learning on their back-offs, held at their ceilings until
/// the round's close sets the cap.
#[tokio::test(start_paused = true)]
async fn a_process_in_a_scan_learning_its_cap_holds_its_back_off() {
    use tablescan_pace::Clock;
    let (scan, ledger, pacing, source, step) = one_step_uncapped("scan-holds-while-learning").await;
    // Refused while busy (10,000 entities in the second before).
    for _ in 0..10 {
        let ticket = step.before_read(1_000).await;
        step.after_read(ticket, 1_000, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    source.throttled();
    let ceiling = source.estimate().unwrap() * 0.9;
    let cut = Instant::now();
    let cut_ms = tablescan_pace::TokioClock.now_ms();
    // Busy past the back-off's quiet whiles (a creep 8 s after the cut, a lift at 12), until
    // the round sets the cap: held at its ceiling all along. The round is opened by another
    // process refused at the same time, a moment before this one's own report was due (4 s
    // after the cut), and read here then.
    let open_at = refresher::REPORT_DELAY - Duration::from_millis(100);
    let mut held_for = Duration::ZERO;
    let mut opened = None;
    while Instant::now() < cut + Duration::from_secs(30) {
        if opened.is_none() && cut.elapsed() >= open_at {
            let now_ms = tablescan_pace::TokioClock.now_ms();
            ledger
                .report_into_round(&scan.id, "p1", refused_at(cut_ms), |_| 3_000.0, now_ms)
                .await
                .unwrap();
            as_opened_without_a_cap(&ledger, &scan.id).await;
            let mut learning = scan.clone();
            learning.learn_round_ms = now_ms;
            pacing.read(&learning, Instant::now()).await;
            opened = Some(now_ms);
        }
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
        if let Some(cap) = ledger.learning(&scan.id).await.unwrap().and_then(|l| l.cap) {
            // The cap takes over (as the scan is read with it): the hold ends with the lift.
            let mut learned = scan.clone();
            learned.learned_cap = Some(cap);
            pacing.read(&learned, Instant::now()).await;
            assert_eq!(source.rate(), None);
            break;
        }
        let rate = source.rate().expect("held");
        assert!(rate <= ceiling + 1.0, "{rate} over the ceiling {ceiling}");
        held_for = cut.elapsed();
    }
    assert!(
        held_for >= Duration::from_secs(11),
        "held only {held_for:?}"
    );
    // This process's report counted what it moved in the seconds before the round's refusal
    // (5,000 entities/s: the 10,000 it moved from its start to the refusal, a second, over
    // that second and one more for the burst an account serves at first; `MovedHistory`).
    let learning = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert_eq!(learning.reporters, 2);
    assert!(
        (7_500.0..=8_500.0).contains(&learning.sum),
        "the round summed {}",
        learning.sum
    );
    drop(step);
}

/// A process the account refused opens the scan's round with its report, and the round's cap
/// paces it from then on: taken here at once (its back-off lifted), and on the scan row for
/// every other process with the round. No process waits the round out on back-offs that,
/// summed over processes, may be far over the account (devhost, beside an application: the
/// round's eight seconds were where most of its refused requests came).
#[tokio::test(start_paused = true)]
async fn a_round_paces_the_scan_from_the_report_that_opens_it() {
    let (scan, ledger, _pacing, source, step) = one_step_uncapped("scan-round-paces").await;
    for _ in 0..10 {
        let ticket = step.before_read(1_000).await;
        step.after_read(ticket, 1_000, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    source.throttled();
    let cut = Instant::now();
    // Busy until its report is due, 4 s after the cut, and a few ticks more.
    let mut capped_at = None;
    while cut.elapsed() < refresher::REPORT_DELAY + Duration::from_millis(300) {
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
        if capped_at.is_none() && lock(&step.pace.cap).is_some() {
            capped_at = Some(cut.elapsed());
        }
    }
    let capped_at = capped_at.expect("no cap after the report");
    assert!(
        capped_at >= refresher::REPORT_DELAY,
        "a cap {capped_at:?} after the cut, before the report"
    );
    let learning = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert!(!learning.closed && learning.provisional);
    let cap = learning.cap.expect("the round's cap");
    assert_eq!(*lock(&step.pace.cap), Some(cap));
    assert_eq!(source.rate(), None, "the back-off still paces the process");
    let row = ledger
        .table()
        .get_entity(&scan.id, tablescan_ledger::rows::SCAN_ROW)
        .await
        .unwrap()
        .unwrap();
    let row = tablescan_ledger::rows::ScanRow::from_entity(&row).unwrap();
    assert_eq!(
        (row.learn_round_ms, row.learned_cap),
        (learning.round_at_ms, Some(cap))
    );
    // The round's close, by this process, makes it final.
    while Instant::now() < cut + refresher::REPORT_DELAY + tablescan_ledger::learning::ROUND * 2 {
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
        if ledger.learning(&scan.id).await.unwrap().unwrap().closed {
            break;
        }
    }
    let closed = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert!(closed.closed && !closed.provisional, "{closed:?}");
    assert_eq!(closed.cap, Some(cap));
    drop(step);
}

/// A process that reads the scan with a round that sets its cap runs under that cap, reports
/// its part of the round's seconds into the round (which raises the cap, applied here at once),
/// and closes the round once it is over: the round's opener may be gone.
#[tokio::test(start_paused = true)]
async fn a_process_under_a_rounds_cap_reports_its_part_and_closes_the_round() {
    use tablescan_pace::Clock;
    let (scan, ledger, pacing, _source, step) = one_step_uncapped("scan-joins-under-cap").await;
    // 2,000 entities a second for three seconds.
    for _ in 0..30 {
        let ticket = step.before_read(200).await;
        step.after_read(ticket, 200, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Another process, refused, opens the round: 3,000 entities a second in the two seconds
    // to now.
    let opened = tablescan_pace::TokioClock.now_ms();
    ledger
        .report_into_round(&scan.id, "p1", refused_at(opened), |_| 3_000.0, opened)
        .await
        .unwrap();
    read_scan_row(&ledger, &pacing, &scan).await;
    // A few ticks of the refresher, the step still reading.
    let joined_by = Instant::now() + Duration::from_secs(1);
    while Instant::now() < joined_by {
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
    }
    let learning = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert_eq!(learning.reporters, 2, "{learning:?}");
    assert!(
        (4_800.0..=5_200.0).contains(&learning.sum),
        "the round summed {}",
        learning.sum
    );
    assert_eq!(*lock(&step.pace.cap), learning.cap);
    // Closed here once over.
    let over = Instant::now() + tablescan_ledger::learning::ROUND;
    while Instant::now() < over {
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
    }
    let closed = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert!(closed.closed && !closed.provisional, "{closed:?}");
    drop(step);
}

/// Reads `scan`'s row as a process's cancel check does, into `pacing`: its learned cap and
/// its round.
async fn read_scan_row(ledger: &Ledger, pacing: &Pacing, scan: &ScanRecord) {
    let row = ledger
        .table()
        .get_entity(&scan.id, tablescan_ledger::rows::SCAN_ROW)
        .await
        .unwrap()
        .unwrap();
    let row = tablescan_ledger::rows::ScanRow::from_entity(&row).unwrap();
    let read = ScanRecord {
        learned_cap: row.learned_cap,
        learn_round_ms: row.learn_round_ms,
        ..scan.clone()
    };
    pacing.read(&read, Instant::now()).await;
}

/// A process under the scan's learned cap does not report into a round that sets no cap (one
/// a process that had not read the cap opened): its part would set the cap from the whole
/// scan, over the raises' rules.
#[tokio::test(start_paused = true)]
async fn a_process_under_the_cap_stays_out_of_a_round_that_sets_none() {
    use tablescan_pace::Clock;
    let (scan, ledger, pacing, _source, step) = one_step_uncapped("scan-round-without-cap").await;
    // The scan learned its cap in a round long closed.
    let first = tablescan_pace::TokioClock.now_ms();
    ledger
        .report_refusal(&scan.id, "p0", 3_000.0, first)
        .await
        .unwrap();
    ledger
        .close_round(
            &scan.id,
            first + tablescan_ledger::learning::ROUND.as_millis() as u64,
        )
        .await
        .unwrap();
    for _ in 0..30 {
        let ticket = step.before_read(200).await;
        step.after_read(ticket, 200, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Later, a process that had not read the cap opens a round: it sets none.
    let opened = first + tablescan_ledger::learning::BETWEEN_ROUNDS.as_millis() as u64 + 1_000;
    let opened = opened.max(tablescan_pace::TokioClock.now_ms());
    ledger
        .report_into_round(&scan.id, "p1", refused_at(opened), |_| 1_000.0, opened)
        .await
        .unwrap();
    read_scan_row(&ledger, &pacing, &scan).await;
    let by = Instant::now() + Duration::from_secs(1);
    while Instant::now() < by {
        let ticket = step.before_read(100).await;
        step.after_read(ticket, 100, 0);
    }
    let learning = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert!(!learning.provisional);
    assert_eq!(learning.reporters, 1, "{learning:?}");
    drop(step);
}

/// A process refused after another opened a round, before it read that round with the scan,
/// reports into it what it moved over the round's seconds, not its own figure: the ledger
/// decides on the round's row as the report reads it. Here it moved nothing in the round's
/// seconds (it stood idle after its refusal), so it adds nothing; its own figure (5,000
/// entities/s before its refusal) would have been counted over seconds the round does not
/// count.
#[tokio::test(start_paused = true)]
async fn a_report_joins_the_round_the_ledger_holds_not_the_one_last_read() {
    use tablescan_pace::Clock;
    let (scan, ledger, _pacing, source, step) = one_step_uncapped("scan-joins-unread").await;
    for _ in 0..10 {
        let ticket = step.before_read(1_000).await;
        step.after_read(ticket, 1_000, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    source.throttled();
    let cut_ms = tablescan_pace::TokioClock.now_ms();
    // Another process opens a round 3.5 s later, its figure counting the two seconds to 3 s
    // after this refusal; this process never reads the scan meanwhile.
    let opened_after = Duration::from_millis(3_500);
    tokio::time::sleep(opened_after).await;
    let now_ms = tablescan_pace::TokioClock.now_ms();
    ledger
        .report_into_round(&scan.id, "p1", refused_at(cut_ms + 3_000), |_| 0.0, now_ms)
        .await
        .unwrap();
    // This process's own report comes 4 s after its refusal, into the round.
    tokio::time::sleep(refresher::REPORT_DELAY - opened_after + Duration::from_millis(500)).await;
    let learning = ledger.learning(&scan.id).await.unwrap().unwrap();
    assert_eq!(
        (learning.reporters, learning.sum),
        (1, 3_000.0),
        "its own figure was counted in the round"
    );
    drop(step);
}

#[tokio::test(start_paused = true)]
async fn a_round_whose_reporters_left_is_closed_by_a_process_that_joined_it() {
    use tablescan_pace::Clock;
    let mut scan = record("scan-reporters-gone", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    // A process reported a refusal and left: the round is open, and nobody will close it.
    let opened = tablescan_pace::TokioClock.now_ms();
    ledger
        .report_refusal(&scan.id, "p1", 3_000.0, opened)
        .await
        .unwrap();
    scan.learn_round_ms = opened;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    assert!(pacing
        .admit(&ledger, &scan, source.clone(), ADMIT_WAIT)
        .await
        .is_err());
    // This process closes it once it is over (it stays in the scan meanwhile), and runs its
    // steps at the cap it set once it reads the scan with it.
    tokio::time::sleep(tablescan_ledger::learning::ROUND + Duration::from_secs(1)).await;
    let cap = ledger.learning(&scan.id).await.unwrap().and_then(|l| l.cap);
    assert_eq!(
        cap,
        Some(3_000.0 * tablescan_ledger::learning::LEARNED_SHARE)
    );
    scan.learned_cap = cap;
    if let Err(why) = pacing.admit(&ledger, &scan, source, ADMIT_WAIT).await {
        panic!("not admitted with the cap: {why}");
    }
}

/// A read of the scan begun before this process changed its learned cap (a lowering it made)
/// does not put the cap before back, nor does a step admitted by a record read before it; a
/// read begun after the change brings what the ledger says.
#[tokio::test(start_paused = true)]
async fn a_read_older_than_a_change_made_here_does_not_undo_it() {
    let ledger = ledger_with_scan_row("scan-reads").await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    let old = ScanRecord {
        learned_cap: Some(3_000.0),
        ..record("scan-reads", None)
    };
    let first = pacing
        .admit(&ledger, &old, source.clone(), ADMIT_WAIT)
        .await;
    let pace = pacing
        .scans
        .lock()
        .await
        .get("scan-reads")
        .cloned()
        .unwrap();
    assert_eq!(*lock(&pace.cap), Some(3_000.0));
    let read_began = Instant::now();
    tokio::time::advance(Duration::from_millis(10)).await;
    // Lowered here, as the refresher does with the ledger's answer.
    pace.learned(Some(2_400.0));
    pacing.read(&old, read_began).await;
    assert_eq!(*lock(&pace.cap), Some(2_400.0));
    let second = pacing
        .admit(&ledger, &old, source.clone(), ADMIT_WAIT)
        .await;
    assert_eq!(*lock(&pace.cap), Some(2_400.0));
    // Another process's raise, read after the change.
    tokio::time::advance(Duration::from_millis(10)).await;
    let raised = ScanRecord {
        learned_cap: Some(2_520.0),
        ..old.clone()
    };
    pacing.read(&raised, Instant::now()).await;
    assert_eq!(*lock(&pace.cap), Some(2_520.0));
    drop((first, second));
}

/// One process: a learned cap that takes over its steps counts, in its first second, what they
/// read in the second before with no rate: the handler records every read in its window, and
/// sets the window's rate as the cap takes over. Here the process moved twice the cap,
/// unrefused, before it came; with those reads counted nowhere (the window before f19c952),
/// the cap's first second let its share through on top of them: 1,400 entities before the
/// takeover and 50 after it in one second, under a cap of 1,000.
#[tokio::test(start_paused = true)]
async fn a_learned_caps_first_second_counts_what_the_steps_read_before_it() {
    const CAP: f64 = 1_000.0;
    let (scan, _ledger, pacing, _source, step) = one_step_uncapped("scan-first-second").await;
    let mut log: Vec<(Instant, u64)> = Vec::new();
    // Uncapped and never refused: 2,000 entities/s for 3 s.
    for _ in 0..30 {
        let ticket = step.before_read(200).await;
        log.push((Instant::now(), 200));
        step.after_read(ticket, 200, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The scan learns a cap (another process's round), read here; the step reads on as fast
    // as it is let.
    let learned = ScanRecord {
        learned_cap: Some(CAP),
        ..scan.clone()
    };
    pacing.read(&learned, Instant::now()).await;
    assert_eq!(
        *lock(&step.pace.cap),
        Some(CAP),
        "the cap did not take over"
    );
    let took_over = Instant::now();
    // Bounded: were the step let through at no cost of time, the paused clock would stand.
    for _ in 0..1_000 {
        if Instant::now() >= took_over + Duration::from_secs(2) {
            break;
        }
        let ticket = step.before_read(50).await;
        log.push((Instant::now(), 50));
        step.after_read(ticket, 50, 0);
    }
    drop(step);
    let straddling = assert_seconds_from_takeover_hold(&log, took_over, CAP);
    assert!(straddling > 0, "no second held reads from both sides");
    // And the cap is used: the second after the first holds most of it.
    let (_, next) = second_to(&log, took_over + Duration::from_secs(2), took_over);
    assert!(
        next as f64 >= 0.8 * CAP,
        "{next} entities in the second second"
    );
}

/// Two processes of a default scan, the second starting with the first or later: the round
/// counts what each moved in the same seconds (those its opener's figure counts), so its sum
/// stays near what the account takes. Counted each over seconds of its own (the second
/// process what it moved as it joined the round, once the first had backed off and left it the
/// room), the sum counted the room twice: a devhost run beside an application summed 5,671
/// entities/s where 2,500 were left (3,071 served the first before its refusal, 2,600 the
/// second four seconds later), learned a cap of 5,104, and the application saw 5.09% of its
/// requests refused while lowerings brought it down.
#[tokio::test(start_paused = true)]
async fn a_round_counts_each_process_over_the_same_seconds() {
    // The second process starting with the first, or after the account first refused the
    // first (within its first tenth of a second), before the round opens and as it opens.
    for late_by_ms in [0, 200, 500, 1_000, 1_500, 2_500, 3_500, 5_000] {
        round_with_a_late_process(Duration::from_millis(late_by_ms)).await;
    }
}

/// See [`a_round_counts_each_process_over_the_same_seconds`]: the second process starts
/// `late_by` after the first.
async fn round_with_a_late_process(late_by: Duration) {
    let scan = record("scan-late-joiner", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let account = Arc::new(Account::default());
    let until = Instant::now() + Duration::from_secs(40);
    let first = tokio::spawn(process_reading(
        "early".into(),
        ledger.clone(),
        scan.clone(),
        account.clone(),
        4,
        until,
    ));
    tokio::time::sleep(late_by).await;
    let second = tokio::spawn(process_reading(
        "late".into(),
        ledger.clone(),
        scan.clone(),
        account.clone(),
        4,
        until,
    ));
    let (learned, _) = cap_learned(&ledger, &scan.id, until).await;
    let learning = ledger.learning(&scan.id).await.unwrap().unwrap();
    first.abort();
    second.abort();
    let summed = format!(
        "second process {late_by:?} late: the round summed {:.0} from {} reports, learned \
         {learned:.0}; the account takes {ACCOUNT_RATE}",
        learning.sum, learning.reporters
    );
    assert!(learning.sum <= 1.1 * ACCOUNT_RATE, "{summed}");
    // Both moving from the start: both counted, near what the account takes.
    if late_by.is_zero() {
        assert_eq!(learning.reporters, 2, "{summed}");
        assert!(learning.sum >= 0.9 * ACCOUNT_RATE, "{summed}");
    }
}
