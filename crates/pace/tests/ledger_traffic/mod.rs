//! What else each process running a scan asks of the scan's ledger partition beside its slices,
//! driven through the ledger's own code on its in-memory table (which counts requests and
//! entities as the Table service does), at the handler's cadence:
//! - the cancel check: [`Ledger::scan`] every [`CANCEL_CHECK_EVERY`];
//! - claim renewals: [`Ledger::renew`] of each running step's claim every third of
//!   [`DEFAULT_STEP_LEASE`] (`functions::step::run::run_claimed`), for steps that run as long as
//!   a step normally may ([`Budget::action_deadline`]);
//! - learning: a round the account's refusal opens, [`Ledger::report_refusal`] by every process
//!   into it, then [`Ledger::close_round`] and [`Ledger::learning`] by each reporter once it is
//!   over; then, the cap learned and used in full, [`Ledger::raise_learned_cap`] tried by every
//!   process each [`ASK_RAISE_EVERY`] (`functions::pacing::refresher`).
//!
//! Each kind runs on a table of its own so that its cost is counted apart.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tablescan_api::ScanSpec;
use tablescan_engine::{Budget, KeyRange};
use tablescan_ledger::learning::{Reported, ASK_RAISE_EVERY, ROUND};
use tablescan_ledger::ledger::new_scan_id;
use tablescan_ledger::{
    Begin, Claim, Ledger, ReadRange, StepCounts, WorkItem, CANCEL_CHECK_EVERY, DEFAULT_STEP_LEASE,
};
use tablescan_storage::table::in_memory::InMemoryTable;
use time::OffsetDateTime;
use tokio::time::Instant;

/// A step's claim is renewed this often while it runs (`run_claimed`: a third of the lease).
pub const RENEW_EVERY: Duration = Duration::from_secs(DEFAULT_STEP_LEASE.as_secs() / 3);

/// How long a step runs: to its budget's time (15 s), as a paced step does (it reads no faster
/// than its share, so its budget's queries last it longer); a `slow` one, whose action is slow,
/// to its action's deadline (22.5 s), the longest a step normally acts.
pub fn step_time(slow: bool) -> Duration {
    let budget = Budget::default();
    match slow {
        false => budget.max_duration,
        true => budget.action_deadline(),
    }
}

/// A ledger on an in-memory table of its own, holding one started scan.
pub struct Counted {
    pub ledger: Ledger,
    pub table: InMemoryTable,
}

/// Requests and entities a table was asked so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub requests: u64,
    pub entities: u64,
}

impl Tally {
    pub fn since(self, before: Tally) -> Tally {
        Tally {
            requests: self.requests - before.requests,
            entities: self.entities - before.entities,
        }
    }
}

impl Counted {
    pub fn tally(&self) -> Tally {
        Tally {
            requests: self.table.requests(),
            entities: self.table.entities(),
        }
    }
}

/// The scan's ledger as the processes' other traffic meets it.
pub struct Traffic {
    pub scan: String,
    pub checks: Counted,
    pub renewals: Counted,
    /// The renewals steps would cost were they all slow.
    pub slow_renewals: Counted,
    pub learning: Counted,
    /// Claims of the steps to come, taken one per step slot, in each of `renewals` and
    /// `slow_renewals`.
    claims: [Mutex<Vec<(WorkItem, Claim)>>; 2],
    /// The learning round open last (epoch ms): what each process sees on the scan row.
    round_ms: AtomicU64,
    /// Whether the scan has a learned cap (on its row: every process sees it with the scan).
    learned: AtomicBool,
    t0: OffsetDateTime,
    start: Instant,
}

fn spec() -> ScanSpec {
    ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into()),
    )
    .expect("a valid spec")
}

async fn counted(root: &WorkItem, t0: OffsetDateTime) -> Counted {
    let table = InMemoryTable::new("ledger");
    table.set_now(t0);
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    ledger.create_scan(&spec(), root, t0).await.unwrap();
    Counted { ledger, table }
}

/// `slots` work items of `root`'s scan, each claimed (the root finished with them as its
/// children): the claims, as the steps' begins and finishes, are the steps' work, not counted.
async fn claimed(
    ledger: &Ledger,
    root: &WorkItem,
    slots: usize,
    t0: OffsetDateTime,
) -> Vec<(WorkItem, Claim)> {
    let lease = time::Duration::try_from(DEFAULT_STEP_LEASE).unwrap();
    let Begin::Run(root_claim) = ledger.begin(root, t0, lease).await.unwrap() else {
        panic!("the root runs");
    };
    let children: Vec<WorkItem> = (0..slots)
        .map(|n| {
            root.follow_up(ReadRange::Partition {
                partition_key: format!("p{n:05}"),
                row_keys: KeyRange::all(),
                prefix: String::new(),
                cursor: None,
                unstarted: false,
            })
        })
        .collect();
    ledger
        .finish(root, &root_claim, StepCounts::default(), &children, t0)
        .await
        .unwrap();
    let mut claims = Vec::with_capacity(slots);
    for child in children {
        match ledger.begin(&child, t0, lease).await.unwrap() {
            Begin::Run(claim) => claims.push((child, *claim)),
            other => panic!("expected to run {}, got {other:?}", child.id()),
        }
    }
    claims
}

impl Traffic {
    /// The scan started in each table, and `slots` claimed work items ready for the steps.
    pub async fn new(slots: usize) -> Traffic {
        let t0 = time::macros::datetime!(2026-11-26 00:00 UTC);
        let root = WorkItem::root(new_scan_id(), KeyRange::all(), "");
        let (checks, learning) = (counted(&root, t0).await, counted(&root, t0).await);
        let (renewals, slow_renewals) = (counted(&root, t0).await, counted(&root, t0).await);
        let claims = [
            Mutex::new(claimed(&renewals.ledger, &root, slots, t0).await),
            Mutex::new(claimed(&slow_renewals.ledger, &root, slots, t0).await),
        ];
        Traffic {
            scan: root.scan.clone(),
            checks,
            renewals,
            slow_renewals,
            learning,
            claims,
            round_ms: AtomicU64::new(0),
            learned: AtomicBool::new(false),
            t0,
            start: Instant::now(),
        }
    }

    /// The wall clock on the test's paused one.
    fn now(&self) -> OffsetDateTime {
        self.t0 + Instant::now().duration_since(self.start)
    }

    fn now_ms(&self) -> u64 {
        (self.now().unix_timestamp_nanos() / 1_000_000) as u64
    }

    /// Renews one step slot's claims as `run_claimed` does, step after step of [`step_time`],
    /// until `stop`.
    pub async fn renew_steps(&self, stop: &AtomicBool, slow: bool) {
        let claims = &self.claims[usize::from(slow)];
        let (item, mut claim) = claims.lock().unwrap().pop().expect("a claim per slot");
        let ledger = match slow {
            false => &self.renewals.ledger,
            true => &self.slow_renewals.ledger,
        };
        let lease = time::Duration::try_from(DEFAULT_STEP_LEASE).unwrap();
        let mut step_start = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let step_end = step_start + step_time(slow);
            let mut renewal = step_start + RENEW_EVERY;
            while renewal < step_end {
                tokio::time::sleep_until(renewal).await;
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let renewed = ledger.renew(&item, &mut claim, self.now(), lease);
                assert!(renewed.await.unwrap(), "the claim holds");
                renewal += RENEW_EVERY;
            }
            tokio::time::sleep_until(step_end).await;
            step_start = step_end;
        }
    }

    /// One process's cancel checks and learning, until `stop`: the scan row read every
    /// [`CANCEL_CHECK_EVERY`]; at the first read past `refused_at` (the account refuses the
    /// scan then), a report that opens the scan's learning round or joins it, and at each
    /// read while a round this process has not reported into is open, a report into it (the
    /// round is seen with the scan); once the round it reported into is over, its close and a
    /// read of the cap it set; once a cap is learned, a try to raise it every [`ASK_RAISE_EVERY`],
    /// as a process that uses all of its share and would use more does. `rate` is
    /// what the process moves.
    pub async fn checks_and_learning(
        &self,
        stop: &AtomicBool,
        refused_at: Duration,
        rate: impl Fn() -> f64,
    ) {
        // Each process reports under a name of its own, as a pace's holder does.
        static PROCESSES: AtomicU64 = AtomicU64::new(0);
        let name = format!("process-{}", PROCESSES.fetch_add(1, Ordering::Relaxed));
        let mut reported = 0u64;
        let mut close_at: Option<u64> = None;
        let mut raise_at: Option<Instant> = None;
        let mut next_check = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_check {
                next_check += CANCEL_CHECK_EVERY;
                let record = self.checks.ledger.scan(&self.scan).await.unwrap();
                assert!(record.is_some(), "the scan is there");
                let now_ms = self.now_ms();
                let round = self.round_ms.load(Ordering::Relaxed);
                let open = round > reported && now_ms < round + ROUND.as_millis() as u64;
                let refused = round == 0 && now.duration_since(self.start) >= refused_at;
                if open || refused {
                    let answer =
                        self.learning
                            .ledger
                            .report_refusal(&self.scan, &name, rate(), now_ms);
                    if let Reported::In(round_at) = answer.await.unwrap() {
                        reported = round_at;
                        self.round_ms.fetch_max(round_at, Ordering::Relaxed);
                        close_at = Some(round_at + ROUND.as_millis() as u64);
                    }
                }
                if raise_at.is_none() && self.learned.load(Ordering::Relaxed) {
                    // The learned cap comes with the scan.
                    raise_at = Some(now);
                }
            }
            let now_ms = self.now_ms();
            if close_at.is_some_and(|at| now_ms >= at) {
                close_at = None;
                self.learning
                    .ledger
                    .close_round(&self.scan, now_ms)
                    .await
                    .unwrap();
                let learning = self.learning.ledger.learning(&self.scan).await.unwrap();
                if learning.is_some_and(|l| l.cap.is_some()) {
                    self.learned.store(true, Ordering::Relaxed);
                }
            }
            if raise_at.is_some_and(|at| now >= at) {
                raise_at = Some(now + ASK_RAISE_EVERY);
                let raised = self.learning.ledger.raise_learned_cap(&self.scan, now_ms);
                raised.await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
