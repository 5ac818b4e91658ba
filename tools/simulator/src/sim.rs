//! The simulation: the real scan engine steps through a synthetic table on virtual time, the
//! real copy planner decides the writes, and a model of the Functions platform decides when and
//! where each step runs.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tablescan::actions::{plan_transactions, COPY_CONCURRENCY};
use tablescan::scan::item::WorkItem;
use tablescan::scan::keys::KeyRange;
use tablescan::scan::reader::{PageRequest, TableReader};
use tablescan::scan::{run_step, Budget, Clock, RowSink, ScanOptions, Strategy};
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Page;
use tablescan::storage::StorageError;

use crate::params::Params;
use crate::storage::Storage;
use crate::table::SyntheticTable;

/// What a scan does with its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Count,
    /// Copy to a table in another storage account (its own request-rate target).
    Copy,
}

/// The outcome of one simulated scan.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seconds: f64,
    pub rows: u64,
    pub steps: u64,
    pub queries: u64,
    pub writes: u64,
    pub longest_step: f64,
    pub critical_path: u32,
    pub peak_instances: usize,
    /// Rows read in each 5-second window.
    pub rows_per_window: Vec<u64>,
    /// Batch writes completed in each 5-second window.
    pub writes_per_window: Vec<u64>,
    /// Seconds requests waited on each limit.
    pub waited_account: f64,
    pub waited_target: f64,
    pub waited_partition: f64,
    /// Seconds during which every invocation slot was busy while work waited.
    pub saturated_seconds: f64,
    pub bound_by: String,
    /// The shortest makespan the model's request-rate and partition targets allow, seconds:
    /// the fewest queries at the source account's rate, the fewest transactions at the target
    /// account's rate, and the largest partition at its entity rate, whichever is longest.
    pub bound: f64,
    pub failed_attempts: u64,
    pub throttled: u64,
}

pub const WINDOW: f64 = 5.0;

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

struct World<'a> {
    table: &'a SyntheticTable,
    storage: Mutex<Storage>,
    windows: Mutex<Vec<u64>>,
    /// Batch writes completed in each window.
    write_windows: Mutex<Vec<u64>>,
}

struct Reader<'a> {
    world: &'a World<'a>,
    clock: &'a StepClock,
}

impl TableReader for Reader<'_> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        let server_range = self.world.storage.lock().unwrap().params.server_range_rows;
        let raw = self
            .world
            .table
            .read(request.scope, request.top, request.cursor, server_range);
        // The handler's reader retries a refused read briefly (the same policy as the real
        // step reads), then gives up and the step hands its range on.
        let policy = tablescan::scan::budget::read_retry_policy();
        let mut retry = 0;
        let mut now = self.clock.read_start();
        let done = loop {
            let answered = self
                .world
                .storage
                .lock()
                .unwrap()
                .query(now, &raw.partitions);
            match answered {
                Ok(done) => break done,
                Err(refused) => {
                    now = refused;
                    if retry >= policy.max_retries {
                        self.clock.read_ended(now, false);
                        return Err(StorageError::from_service(
                            "query entities",
                            "simulated table",
                            tablescan::storage::ServiceError {
                                status: 503,
                                code: Some("ServerBusy".into()),
                                message: "partition over its target".into(),
                                request_id: None,
                            },
                        ));
                    }
                    retry += 1;
                    let unit = self.world.storage.lock().unwrap().unit();
                    now = refused + policy.delay(retry, unit, None).as_secs_f64();
                }
            }
        };
        self.clock.read_ended(done, !raw.rows.is_empty());
        let window = (done / WINDOW) as usize;
        let mut windows = self.world.windows.lock().unwrap();
        if windows.len() <= window {
            windows.resize(window + 1, 0);
        }
        windows[window] += raw.rows.len() as u64;
        Ok(Page {
            entities: raw.rows,
            continuation: raw.continuation,
        })
    }
}

struct Sink<'a> {
    world: &'a World<'a>,
    clock: &'a StepClock,
    action: Action,
    /// The instance the step runs on: its writes share that process's cap.
    instance: usize,
    writes: u64,
}

impl RowSink for Sink<'_> {
    type Error = String;

    async fn accept(&mut self, rows: Vec<Entity>, deadline: Duration) -> Result<usize, String> {
        let (arrival, start) = self.clock.accept_start();
        if self.action == Action::Count {
            self.clock.accept_ended(arrival, start);
            return Ok(rows.len());
        }
        // The copy action keeps up to COPY_CONCURRENCY transactions in flight: each lane takes
        // the next transaction as soon as its last one is answered, and none is started after
        // the deadline (but the first).
        let deadline = deadline.as_secs_f64();
        let transactions = plan_transactions(rows);
        let mut storage = self.world.storage.lock().unwrap();
        let mut lanes = vec![start; COPY_CONCURRENCY];
        let mut finished = 0;
        for (started, ops) in transactions.iter().enumerate() {
            let lane = lanes
                .iter_mut()
                .min_by(|a, b| a.total_cmp(b))
                .expect("at least one lane");
            if started > 0 && *lane >= deadline {
                break;
            }
            finished += ops.len();
            let pk = match &ops[0] {
                Operation::UpsertReplace(e) => e.partition_key.as_str(),
                _ => "",
            };
            let done = storage.batch(*lane, self.instance, partition_hash(pk), ops.len());
            *lane = done;
            self.writes += 1;
            let window = (done / WINDOW) as usize;
            let mut windows = self.world.write_windows.lock().unwrap();
            if windows.len() <= window {
                windows.resize(window + 1, 0);
            }
            windows[window] += 1;
        }
        let end = lanes.into_iter().fold(start, f64::max);
        self.clock.accept_ended(arrival, end);
        Ok(finished)
    }
}

fn partition_hash(key: &str) -> usize {
    key.bytes().fold(1469598103934665603u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(1099511628211)
    }) as usize
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

struct Running {
    end: f64,
    instance: usize,
    follow_ups: Vec<WorkItem>,
}

/// Simulates one scan of `table` from start to end.
pub fn simulate(
    table: &SyntheticTable,
    action: Action,
    strategy: Strategy,
    params: &Params,
) -> Outcome {
    let options = ScanOptions {
        strategy,
        page_size: params.page_size,
        budget: Budget {
            max_queries: params.max_queries,
            max_duration: Duration::from_secs_f64(params.max_seconds),
        },
        columns: None,
        fan_out: params.fan_out,
        first_step_queries: params.first_step_queries,
        ..ScanOptions::default()
    };
    let world = World {
        table,
        storage: Mutex::new(Storage::new(params.clone())),
        windows: Mutex::new(Vec::new()),
        write_windows: Mutex::new(Vec::new()),
    };
    let mut outcome = Outcome::default();
    let tick = params.tick_ms / 1000.0;
    let mut t = 0.0;
    // (visible at, item)
    let mut queue: VecDeque<(f64, WorkItem)> =
        VecDeque::from([(0.0, WorkItem::root("sim", KeyRange::all(), ""))]);
    let mut running: Vec<Running> = Vec::new();
    // Per instance: when it is ready, and invocations in flight.
    let mut instances: Vec<(f64, usize)> = vec![(0.0, 0); params.first_instances.max(1)];
    let mut next_scale = params.scale_interval_ms / 1000.0;
    while !queue.is_empty() || !running.is_empty() {
        // Finished steps hand their follow-ups to the queue.
        let mut finished = Vec::new();
        running.retain_mut(|r| {
            if r.end <= t {
                finished.push((r.end, r.instance, std::mem::take(&mut r.follow_ups)));
                false
            } else {
                true
            }
        });
        for (end, instance, follow_ups) in finished {
            instances[instance].1 -= 1;
            let mut storage = world.storage.lock().unwrap();
            for item in follow_ups {
                let written = storage.put(end);
                queue.push_back((written + params.poll_ms / 1000.0, item));
            }
        }
        // The scale controller (target-based scaling): queue length / per-instance concurrency.
        if t >= next_scale {
            // The queue's approximate count includes messages being processed (invisible), so
            // the target is work waiting plus work running, per instance's concurrency.
            let want = (queue.len() + running.len())
                .div_ceil(params.per_instance)
                .min(params.max_instances);
            let add = want.saturating_sub(instances.len()).min(params.scale_step);
            instances.extend(std::iter::repeat_n(
                (t + params.cold_start_ms / 1000.0, 0),
                add,
            ));
            next_scale += params.scale_interval_ms / 1000.0;
        }
        outcome.peak_instances = outcome.peak_instances.max(instances.len());
        // Hand visible messages to free invocation slots.
        let mut waiting_visible = false;
        // The first message that is visible now (a retried one waits out its delay without
        // holding up those behind it).
        while let Some(position) = queue.iter().position(|(visible, _)| *visible <= t) {
            let Some(slot) = instances
                .iter()
                .enumerate()
                .filter(|(_, (ready, busy))| *ready <= t && *busy < params.per_instance)
                .min_by_key(|(_, (_, busy))| *busy)
                .map(|(i, _)| i)
            else {
                waiting_visible = true;
                break;
            };
            let (_, item) = queue.remove(position).expect("a visible item");
            let clock = StepClock::new(t);
            let reader = Reader {
                world: &world,
                clock: &clock,
            };
            let mut sink = Sink {
                world: &world,
                clock: &clock,
                action,
                instance: slot,
                writes: 0,
            };
            let report = match complete(run_step(&reader, &item, &options, &clock, &mut sink)) {
                Ok(report) => report,
                Err(_) => {
                    // The invocation failed; the host makes the message visible again later.
                    outcome.failed_attempts += 1;
                    queue.push_back((clock.now() + params.retry_after_ms / 1000.0, item));
                    continue;
                }
            };
            let end = clock.now();
            outcome.steps += 1;
            outcome.queries += u64::from(report.queries);
            outcome.writes += sink.writes;
            outcome.rows += report.rows_read;
            outcome.longest_step = outcome.longest_step.max(end - t);
            outcome.critical_path = outcome.critical_path.max(item.depth + 1);
            instances[slot].1 += 1;
            running.push(Running {
                end,
                instance: slot,
                follow_ups: report.follow_ups,
            });
        }
        if waiting_visible {
            outcome.saturated_seconds += tick;
        }
        t += tick;
    }
    let storage = world.storage.into_inner().unwrap();
    outcome.seconds = t;
    outcome.rows_per_window = world.windows.into_inner().unwrap();
    outcome.writes_per_window = world.write_windows.into_inner().unwrap();
    outcome.waited_account = storage.source.waited;
    outcome.waited_target = storage.target.waited;
    outcome.waited_partition = storage.partition_wait;
    outcome.throttled = storage.throttled;
    outcome.bound_by = bound_by(&outcome, params);
    outcome.bound = bound(table, action, params);
    outcome
}

/// The shortest makespan the request-rate and partition targets allow (see [`Outcome::bound`]).
pub fn bound(table: &SyntheticTable, action: Action, params: &Params) -> f64 {
    let reads = table.rows().div_ceil(1000) as f64 / params.account_requests_per_second;
    let writes = match action {
        Action::Count => 0.0,
        Action::Copy => table.fewest_transactions() as f64 / params.account_requests_per_second,
    };
    let partition = table.largest_partition() as f64 / params.partition_entities_per_second;
    reads.max(writes).max(partition)
}

/// Which limit shaped the run: the one requests waited on most, or the platform, or the chain
/// of dependent steps when nothing waited.
fn bound_by(o: &Outcome, params: &Params) -> String {
    let candidates = [
        ("source account request rate", o.waited_account),
        ("target account request rate", o.waited_target),
        ("partition throughput", o.waited_partition),
    ];
    let (name, waited) = candidates
        .iter()
        .cloned()
        .fold(("", 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let total_step_seconds = o.seconds.max(1e-9);
    if waited > total_step_seconds {
        name.to_string()
    } else if o.saturated_seconds > 0.25 * o.seconds && o.peak_instances >= params.max_instances {
        format!("instances ({} at most)", params.max_instances)
    } else if o.saturated_seconds > 0.25 * o.seconds {
        "scale-out speed".to_string()
    } else {
        "chain of dependent steps (fan-out)".to_string()
    }
}
