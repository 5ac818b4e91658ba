//! tablescan as designed: the real scan engine steps through the synthetic table on virtual
//! time, the real copy planner groups the writes, and every step pays the ledger what the step
//! handler pays it (begin: the scan record, the pending row, the claim; finish: one transaction
//! with the children, the delete of its pending row and its done row).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tablescan::actions::{plan_transactions, COPY_CONCURRENCY, PROCESS_WRITES_IN_FLIGHT};
use tablescan::scan::item::{ReadRange, WorkItem};
use tablescan::scan::reader::{PageRequest, TableReader};
use tablescan::scan::step::StepError;
use tablescan::scan::{run_step, Budget, Clock, RowSink, ScanOptions, StepReport, Strategy};
use tablescan::storage::retry::RetryPolicy;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Page;
use tablescan::storage::StorageError;

use crate::sim::{batch_latency, query_latency, Design, Execution, FollowUp, World};
use crate::storage::{Limit, Partition, Purpose, Request, Role};
use crate::table::{partition_hash, SyntheticTable};

/// What a scan does with its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Count,
    /// Copy to a table (in another account or the same one: the case decides).
    Copy,
    /// Delete every row read (in the source account).
    Delete,
}

pub struct Tablescan<'a> {
    table: &'a SyntheticTable,
    action: Action,
    options: ScanOptions,
    /// Each instance's cap on writes in flight, as a rate (PROCESS_WRITES_IN_FLIGHT per batch
    /// latency).
    write_caps: std::collections::HashMap<usize, Limit>,
}

impl<'a> Tablescan<'a> {
    pub fn new(table: &'a SyntheticTable, action: Action, world: &World) -> Self {
        let p = &world.params;
        let options = ScanOptions {
            strategy: Strategy::Prefix,
            page_size: p.page_size,
            budget: Budget {
                max_queries: p.max_queries,
                max_duration: Duration::from_secs_f64(p.max_seconds),
            },
            columns: None,
            fan_out: p.fan_out as usize,
            first_step_queries: p.first_step_queries,
            ..ScanOptions::default()
        };
        Tablescan {
            table,
            action,
            options,
            write_caps: Default::default(),
        }
    }

    pub fn first() -> WorkItem {
        WorkItem::root("sim", tablescan::scan::keys::KeyRange::all(), "")
    }
}

/// The two queue-triggered functions: ScanRange and ScanPartition.
pub const QUEUES: usize = 2;

impl Design for Tablescan<'_> {
    type Message = WorkItem;

    fn queue(&self, item: &WorkItem) -> usize {
        match item.task {
            ReadRange::Range { .. } => 0,
            // The simulator scans tables; an import's items never arise in it.
            ReadRange::Partition { .. }
            | ReadRange::ExportPart { .. }
            | ReadRange::ExportBlob { .. } => 1,
        }
    }

    fn has_ledger(&self) -> bool {
        true
    }

    fn execute(
        &mut self,
        world: &mut World,
        item: &WorkItem,
        t: f64,
        instance: usize,
    ) -> Execution<WorkItem> {
        let start = t + world.params.invocation_ms / 1000.0;
        let failed = |end: f64| Execution {
            end,
            follow_ups: Vec::new(),
            failed: true,
        };
        let now = match begin(world, start) {
            Ok(now) => now,
            Err(gave_up) => {
                world.stats.failed_on_ledger += 1;
                return failed(gave_up);
            }
        };
        let clock = StepClock::new(now);
        let world_cell = Mutex::new(&mut *world);
        let caps = Mutex::new(&mut self.write_caps);
        let reader = Reader {
            world: &world_cell,
            table: self.table,
            clock: &clock,
        };
        let mut sink = Sink {
            world: &world_cell,
            caps: &caps,
            clock: &clock,
            action: self.action,
            instance,
        };
        let report = complete(run_step(&reader, item, &self.options, &clock, &mut sink));
        let step_end = clock.now();
        let world = world_cell.into_inner().expect("not poisoned");
        let report = match report {
            Ok(report) => report,
            Err(StepError::Action(_)) => {
                world.stats.failed_on_write += 1;
                return failed(step_end);
            }
            Err(_) => {
                world.stats.failed_on_read += 1;
                return failed(step_end);
            }
        };
        // finish: one transaction of the children, the pending row's delete and the done row.
        let children = report.follow_ups.len() as f64;
        let end = match ledger_request(
            world,
            step_end,
            children + 2.0,
            batch_latency(&world.params, children + 2.0),
        ) {
            Ok(done) => done,
            Err(gave_up) => {
                world.stats.failed_on_ledger += 1;
                return failed(gave_up);
            }
        };
        count_step(world, &report, end - t);
        Execution {
            end,
            follow_ups: report
                .follow_ups
                .into_iter()
                .map(|message| FollowUp {
                    message,
                    queued_at: None,
                })
                .collect(),
            failed: false,
        }
    }
}

/// A step's begin from `start`: the scan record, the pending row, the claim (one after
/// another). When it ends, or when a request gave up (`Err`).
fn begin(world: &mut World, start: f64) -> Result<f64, f64> {
    let mut now = start;
    for _ in 0..3 {
        now = ledger_request(world, now, 1.0, world.params.entity_ms / 1000.0)?;
    }
    Ok(now)
}

/// Counts a finished step that took `took` seconds in the statistics.
fn count_step(world: &mut World, report: &StepReport, took: f64) {
    world.stats.step_ledger_entities += 5 + report.follow_ups.len() as u64;
    world.stats.ledger_requests += 4;
    world.stats.rows_acted += report.rows_delivered;
    world.stats.queries += u64::from(report.queries);
    if took > world.params.lease_s {
        world.stats.lease_overruns += 1;
    }
}

/// One request to the scan's ledger partition, retried as the storage pipeline retries.
fn ledger_request(world: &mut World, t: f64, entities: f64, latency: f64) -> Result<f64, f64> {
    let request = Request {
        role: Role::App,
        purpose: Purpose::Bookkeeping,
        entities,
        partition: Some(Partition::Ledger),
        latency,
    };
    world.storage.send(t, &RetryPolicy::default(), &request)
}

/// A step's own clock, in virtual seconds. The engine reads page n+1 while the action works on
/// page n and waits for both (`run_step`), so both start when the later of read n and the
/// action on page n-1 ended. The simulation polls the two one after the other, so each works
/// out that start from the timeline rather than from whichever ran first.
struct StepClock(Mutex<Timeline>);

struct Timeline {
    started: f64,
    /// When each read ended, in order.
    reads: Vec<f64>,
    /// When each non-empty page arrived (the end of its read), not yet taken by the action.
    arrivals: VecDeque<f64>,
    /// When the action finished each page it took: (arrival of the page, end).
    accepts: Vec<(f64, f64)>,
}

impl StepClock {
    fn new(t: f64) -> Self {
        StepClock(Mutex::new(Timeline {
            started: t,
            reads: Vec::new(),
            arrivals: VecDeque::new(),
            accepts: Vec::new(),
        }))
    }

    /// When the next read starts: after the last read and after the action on every page that
    /// arrived before it (the action on the last page runs alongside).
    fn read_start(&self) -> f64 {
        let timeline = self.0.lock().unwrap();
        let last_read = timeline.reads.last().copied().unwrap_or(timeline.started);
        let action = timeline
            .accepts
            .iter()
            .rev()
            .find(|(arrival, _)| *arrival < last_read)
            .map_or(timeline.started, |(_, end)| *end);
        last_read.max(action)
    }

    fn read_ended(&self, end: f64, rows: bool) {
        let mut timeline = self.0.lock().unwrap();
        timeline.reads.push(end);
        if rows {
            timeline.arrivals.push_back(end);
        }
    }

    /// When the action on the next page starts: when the page arrived and the action on the
    /// page before is done. Returns the page's arrival too.
    fn accept_start(&self) -> (f64, f64) {
        let mut timeline = self.0.lock().unwrap();
        let arrival = timeline.arrivals.pop_front().unwrap_or(timeline.started);
        let previous = timeline.accepts.last().map_or(timeline.started, |a| a.1);
        (arrival, arrival.max(previous))
    }

    fn accept_ended(&self, arrival: f64, end: f64) {
        self.0.lock().unwrap().accepts.push((arrival, end));
    }

    /// The step's time: everything it started has ended.
    fn now(&self) -> f64 {
        let timeline = self.0.lock().unwrap();
        let read = timeline.reads.last().copied().unwrap_or(timeline.started);
        let action = timeline.accepts.last().map_or(timeline.started, |a| a.1);
        read.max(action)
    }
}

impl Clock for StepClock {
    fn now(&self) -> Duration {
        Duration::from_secs_f64(StepClock::now(self))
    }
}

struct Reader<'a, 'w> {
    world: &'a Mutex<&'w mut World>,
    table: &'a SyntheticTable,
    clock: &'a StepClock,
}

impl TableReader for Reader<'_, '_> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        let mut world = self.world.lock().unwrap();
        let raw = self.table.read(
            request.scope,
            request.top,
            request.cursor,
            world.params.server_range_rows,
        );
        let entities = raw.rows.len() as f64;
        let partition = raw.hottest_partition(self.table).map(Partition::Source);
        let storage_request = Request {
            role: Role::Source,
            purpose: Purpose::Rows,
            entities,
            partition,
            latency: query_latency(&world.params, entities),
        };
        // The engine's own read policy: brief retries, then the step hands its range on.
        let policy = tablescan::scan::budget::read_retry_policy();
        match world
            .storage
            .send(self.clock.read_start(), &policy, &storage_request)
        {
            Ok(done) => {
                self.clock.read_ended(done, !raw.rows.is_empty());
                world.stats.count_rows(done, raw.rows.len() as u64);
                Ok(Page {
                    entities: raw.rows,
                    continuation: raw.continuation,
                })
            }
            Err(gave_up) => {
                self.clock.read_ended(gave_up, false);
                Err(server_busy())
            }
        }
    }
}

fn server_busy() -> StorageError {
    StorageError::from_service(
        "query entities",
        "simulated table",
        tablescan::storage::ServiceError {
            status: 503,
            code: Some("ServerBusy".into()),
            message: "over the account's or the partition's target".into(),
            request_id: None,
        },
    )
}

struct Sink<'a, 'w> {
    world: &'a Mutex<&'w mut World>,
    caps: &'a Mutex<&'w mut std::collections::HashMap<usize, Limit>>,
    clock: &'a StepClock,
    action: Action,
    /// The instance the step runs on: its CPU and its writes in flight.
    instance: usize,
}

impl RowSink for Sink<'_, '_> {
    type Error = String;

    async fn accept(&mut self, rows: Vec<Entity>, deadline: Duration) -> Result<usize, String> {
        let mut world = self.world.lock().unwrap();
        let (arrival, start) = self.clock.accept_start();
        let cpu_per_1000 = match self.action {
            Action::Count => world.params.count_cpu_ms_per_1000,
            Action::Copy | Action::Delete => world.params.copy_cpu_ms_per_1000,
        };
        let cpu = rows.len() as f64 * cpu_per_1000 / 1_000_000.0;
        let start = world.compute(self.instance, start, cpu);
        if self.action == Action::Count {
            self.clock.accept_ended(arrival, start);
            return Ok(rows.len());
        }
        // The action keeps up to COPY_CONCURRENCY transactions in flight: each lane takes the
        // next transaction as soon as its last one is answered, and none is started after the
        // deadline (but the first). A transaction still refused after the pipeline's retries
        // fails the step.
        let deadline = deadline.as_secs_f64();
        let (role, purpose) = match self.action {
            Action::Delete => (Role::Source, Purpose::Rows),
            _ => (Role::Target, Purpose::Rows),
        };
        let cap_rate = PROCESS_WRITES_IN_FLIGHT as f64 / (world.params.batch_base_ms / 1000.0);
        let transactions = plan_transactions(rows);
        let mut lanes = vec![start; COPY_CONCURRENCY];
        let mut finished = 0;
        let policy = RetryPolicy::default();
        for (started, ops) in transactions.iter().enumerate() {
            let lane = lanes
                .iter_mut()
                .min_by(|a, b| a.total_cmp(b))
                .expect("at least one lane");
            if started > 0 && *lane >= deadline {
                break;
            }
            let key = match &ops[0] {
                Operation::UpsertReplace(e) => e.partition_key.as_str(),
                _ => "",
            };
            let hash = partition_hash(key);
            let entities = ops.len() as f64;
            let request = Request {
                role,
                purpose,
                entities,
                partition: (ops.len() >= 100).then_some(match self.action {
                    Action::Delete => Partition::Source(hash),
                    _ => Partition::Target(hash),
                }),
                latency: batch_latency(&world.params, entities),
            };
            let admitted = self
                .caps
                .lock()
                .unwrap()
                .entry(self.instance)
                .or_insert_with(|| Limit::new(cap_rate))
                .admit(*lane, 1.0);
            match world.storage.send(admitted, &policy, &request) {
                Ok(done) => *lane = done,
                Err(gave_up) => {
                    self.clock.accept_ended(arrival, gave_up);
                    return Err("a transaction was refused after every retry".into());
                }
            }
            finished += ops.len();
            world.stats.writes += 1;
        }
        let end = lanes.into_iter().fold(start, f64::max);
        self.clock.accept_ended(arrival, end);
        Ok(finished)
    }
}

/// Polls a future that never waits (everything here completes at once) to its end.
fn complete<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => unreachable!("simulated I/O completes immediately"),
    }
}
