//! A scan's pace in each simulated instance: the handler's own pacing
//! (`tablescan::functions::pacing::Pacing`, one per instance) on tokio's paused clock, against
//! one ledger that the instances share (the ledger's code on its in-memory table). Admission,
//! the step pace, page sizing and crowding, the refresher's slices of a cap, its learning
//! rounds, reports and the raising and lowering of a learned cap, and the scan-row reads every
//! `CANCEL_CHECK_EVERY` all run as the handler runs them; the requests they make of the ledger
//! are counted by its table and charged to the scan's ledger partition (without their latency:
//! the in-memory table answers at once).
//!
//! What is left here: the account's back-off is one `Governor` per account per instance, as
//! `Governors` keeps it in a process; and the steps of the engine (`step.rs`, `io.rs`) hold
//! the instance's pace rather than their own [`StepPace`], so their reads and writes go through
//! any step of the scan admitted in the instance (alike but for `crowded`, which `admit`
//! returns), and a page's share is not reserved ahead as `PacedReader` does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tablescan::functions::pacing::{no_share, Pacing, StepPace, ADMIT_WAIT, SHARE_WAIT};
use tablescan::job::{Ledger, ScanRecord, ScanSpec, WorkItem};
use tablescan::scan::keys::KeyRange;
use tablescan::storage::pacing::{Governor, Ticket};
use tablescan::storage::table::in_memory::InMemoryTable;
use tablescan::storage::StorageError;
use tablescan_pace::Clock;

use super::{lock, Engine};
use crate::ledger_costs::{Cost, CANCEL_CHECK};
use crate::params::Params;

/// How long an instance counts as running steps of the scan after its last one ended
/// (`functions::pacing::refresher::GRACE`): it reads the scan row meanwhile.
const GRACE: f64 = 5.0;

/// The scan's pace across instances: its ledger, and each instance's pacing.
pub struct ScanPacing {
    ledger: Ledger,
    table: InMemoryTable,
    scan: String,
    /// The case's own clock, for every instance's leases and learning rounds.
    clock: CaseClock,
    /// By instance number: the busy ones read the scan row in that order, run after run.
    instances: Mutex<BTreeMap<usize, Arc<InstancePace>>>,
    /// What of the table's counts was charged already, or is charged elsewhere (the scan row
    /// each step's begin reads, in `ledger_costs::BEGIN`).
    charged: Mutex<Cost>,
    /// The learned cap as last read, and how often it changed.
    learned: Mutex<(Option<f64>, u64)>,
}

/// Milliseconds since the case's first reading of the clock, on tokio's (paused) clock, from a
/// fixed start. `tablescan_pace::TokioClock` anchors once per process to the wall clock: a
/// second case in the same process began at an offset that included real time, and its leases
/// ran out at other moments from one run to the next.
#[derive(Clone, Default)]
struct CaseClock(Arc<std::sync::OnceLock<tokio::time::Instant>>);

/// Where a case's clock starts: 2023-11-14, any fixed epoch time would do.
const CASE_EPOCH_MS: u64 = 1_700_000_000_000;

impl Clock for CaseClock {
    fn now_ms(&self) -> u64 {
        let start = *self.0.get_or_init(tokio::time::Instant::now);
        CASE_EPOCH_MS + start.elapsed().as_millis() as u64
    }
}

/// Whether an instance runs steps of the scan, and since when it has not.
#[derive(Default)]
struct Activity {
    running: usize,
    waiting: usize,
    last_step_end: f64,
}

/// One instance's pace of the scan: its `Pacing`, and the steps it admitted.
pub struct InstancePace {
    pub source: Arc<Governor>,
    pub target: Arc<Governor>,
    /// The output queue's back-off in this process (the handler's `QueueClient::governor`).
    pub queue: Arc<Governor>,
    pacing: Pacing,
    steps: Mutex<Vec<Arc<StepPace>>>,
    activity: Mutex<Activity>,
}

impl ScanPacing {
    /// The scan in a ledger of its own, its cap the one `params` sets.
    pub async fn new(params: &Params) -> Result<Self, String> {
        let clock = CaseClock::default();
        let table = InMemoryTable::new("ledger");
        let now = time::OffsetDateTime::from_unix_timestamp((clock.now_ms() / 1000) as i64)
            .map_err(|e| format!("the case's clock: {e}"))?;
        table.set_now(now);
        let ledger = Ledger::in_memory(table.clone());
        let spec = scan_spec(params)?;
        // Named from the seed, as each instance's process is from its number (`instance`):
        // the names seed the order in which a process probes the slices of a cap, and a
        // random one made two runs of the same case differ.
        let root = WorkItem::root(format!("{:032x}", params.seed), KeyRange::all(), "");
        ledger.ensure().await.map_err(|e| e.to_string())?;
        ledger
            .create_scan(&spec, &root, now)
            .await
            .map_err(|e| e.to_string())?;
        let charged = Cost {
            requests: table.requests(),
            entities: table.entities(),
        };
        Ok(ScanPacing {
            ledger,
            table,
            scan: root.scan,
            clock,
            instances: Mutex::default(),
            charged: Mutex::new(charged),
            learned: Mutex::default(),
        })
    }

    /// The learned cap as last read.
    pub fn learned(&self) -> Option<f64> {
        lock(&self.learned).0
    }

    /// How often the learned cap was seen to change.
    pub fn caps_learned(&self) -> u64 {
        lock(&self.learned).1
    }

    /// What the pacing asked of the ledger since the last call, not charged elsewhere.
    pub fn uncharged(&self) -> Cost {
        let mut charged = lock(&self.charged);
        let delta = Cost {
            requests: self.table.requests().saturating_sub(charged.requests),
            entities: self.table.entities().saturating_sub(charged.entities),
        };
        charged.requests += delta.requests;
        charged.entities += delta.entities;
        delta
    }

    /// The scan row, read as a step's begin reads it (charged in `BEGIN`), or as an instance's
    /// cancel check does (charged through the table's counts) when `charged_here`.
    async fn read_scan(&self, charged_here: bool) -> Option<ScanRecord> {
        let record = self.ledger.scan(&self.scan).await.ok().flatten()?;
        if !charged_here {
            // One read of the scan row, as `ledger_costs` counts it.
            let mut charged = lock(&self.charged);
            charged.requests += CANCEL_CHECK.requests;
            charged.entities += CANCEL_CHECK.entities;
        }
        let mut learned = lock(&self.learned);
        if record.learned_cap != learned.0 {
            *learned = (record.learned_cap, learned.1 + 1);
        }
        Some(record)
    }

    /// Each instance that ran a step of the scan lately reads the scan row, and takes it into
    /// its pace (`AppState`'s cancel check, `Pacing::read`).
    pub async fn read_by_busy_instances(&self, now: f64) {
        let busy: Vec<Arc<InstancePace>> = lock(&self.instances)
            .values()
            .filter(|p| {
                let a = lock(&p.activity);
                a.running + a.waiting > 0 || now - a.last_step_end < GRACE
            })
            .cloned()
            .collect();
        for instance in busy {
            let started = tokio::time::Instant::now();
            if let Some(record) = self.read_scan(true).await {
                instance.pacing.read(&record, started).await;
            }
        }
    }

    /// `instance`'s pace, made when it first runs a step of the scan.
    pub fn instance(&self, _engine: &Arc<Engine>, instance: usize) -> Arc<InstancePace> {
        lock(&self.instances)
            .entry(instance)
            .or_insert_with(|| {
                Arc::new(InstancePace {
                    source: Arc::new(Governor::default()),
                    target: Arc::new(Governor::default()),
                    queue: Arc::new(Governor::default()),
                    pacing: Pacing::named(self.clock.clone(), format!("instance-{instance}")),
                    steps: Mutex::default(),
                    activity: Mutex::default(),
                })
            })
            .clone()
    }
}

/// The spec the scan's ledger row holds: what pacing reads of it is the cap.
fn scan_spec(params: &Params) -> Result<ScanSpec, String> {
    let cap = if params.cap > 0.0 {
        format!(r#","maxRowsPerSecond":{}"#, params.cap.round() as u64)
    } else {
        String::new()
    };
    let json = format!(r#"{{"table":"source","action":{{"type":"count"}}{cap}}}"#);
    ScanSpec::parse(&json, &|name: &str| {
        (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into())
    })
    .map_err(|e| format!("the scan's spec: {e:?}"))
}

impl InstancePace {
    /// Waits up to `ADMIT_WAIT` for the handler's pacing to admit a step (with the scan row as
    /// the step's begin read it): whether it was admitted crowded, or `None`: the item is
    /// given back.
    pub async fn admit(&self, engine: &Engine) -> Option<bool> {
        lock(&self.activity).waiting += 1;
        let admitted = match engine.pacing.read_scan(false).await {
            Some(record) => self
                .pacing
                .admit(
                    &engine.pacing.ledger,
                    &record,
                    self.source.clone(),
                    ADMIT_WAIT,
                )
                .await
                .ok(),
            None => None,
        };
        let mut activity = lock(&self.activity);
        activity.waiting -= 1;
        let Some(step) = admitted else {
            activity.last_step_end = engine.now();
            return None;
        };
        activity.running += 1;
        let crowded = step.crowded();
        lock(&self.steps).push(Arc::new(step));
        Some(crowded)
    }

    /// The scan's steps here: how many may run at once, run and wait, as the latest admitted
    /// step's `StepPace::occupancy` reads them (what `park::unpark_room` decides from).
    pub fn occupancy(&self) -> (usize, usize, usize) {
        self.step().map_or((0, 0, 0), |step| step.occupancy())
    }

    /// A step admitted by [`admit`](Self::admit) ended: its place in the pace is given up.
    pub fn step_ended(&self, now: f64) {
        let step = lock(&self.steps).pop();
        drop(step);
        let mut activity = lock(&self.activity);
        activity.running -= 1;
        activity.last_step_end = now;
    }

    /// A finish here lost its counter shard to another, or the ledger refused a step here:
    /// told to the scan's pace as `Ledger::commit_counted` counts it (`StepPace::ledger_strained`).
    pub fn ledger_strained(&self) {
        if let Some(step) = self.step() {
            step.ledger_strained();
        }
    }

    fn step(&self) -> Option<Arc<StepPace>> {
        lock(&self.steps).last().cloned()
    }

    /// Rows the next page asks for (`StepPace::page_size`).
    pub fn page_size(&self, top: u16) -> u16 {
        self.step().map_or(top, |step| step.page_size(top))
    }

    /// Waits for `entities` of the account's back-off and the scan's share, at most
    /// `SHARE_WAIT` (as `PacedReader::read_page` does).
    pub async fn before_read(&self, entities: u64) -> Result<Option<Ticket>, StorageError> {
        let Some(step) = self.step() else {
            return Ok(None);
        };
        tokio::time::timeout(SHARE_WAIT, step.before_read(entities))
            .await
            .map(Some)
            .map_err(|_| no_share("query entities", step.scan()))
    }

    /// Gives back what a read paid for and did not use; counts `used` as moved.
    pub fn after_read(&self, ticket: Option<Ticket>, used: u64, unused: u64) {
        if let (Some(step), Some(ticket)) = (self.step(), ticket) {
            step.after_read(ticket, used, unused);
        }
    }

    /// Waits for `messages` of the output queue's back-off and the scan's share, and holds
    /// the scan's slots and pages to the queue's rate (`StepPace::before_put`).
    pub async fn before_put(&self, messages: u64) -> Result<(), StorageError> {
        match self.step() {
            Some(step) => step.before_put(messages, &self.queue).await,
            None => Ok(()),
        }
    }

    /// Waits for `entities` of `target`'s back-off and the scan's share (`StepPace::before_write`).
    pub async fn before_write(&self, entities: u64, target: &Governor) -> Result<(), StorageError> {
        match self.step() {
            Some(step) => step.before_write(entities, target).await,
            None => Ok(()),
        }
    }
}
