//! A step's requests on virtual time: the reader `run_step` pages through, the sink that acts
//! on the pages, and single requests with the pipeline's retries. Every read and write waits
//! for its account's back-off (the real `Governor` of its instance) and, for a capped scan, for
//! the instance's share of the cap, as the handler's `PacedReader` and `ActionSink` do.

use std::sync::Arc;
use std::time::Duration;

use tablescan::actions::PROCESS_WRITES_IN_FLIGHT;
use tablescan::scan::reader::{PageRequest, TableReader};
use tablescan::scan::{Clock, RowSink};
use tablescan::storage::pacing::Governor;
use tablescan::storage::retry::RetryPolicy;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Page;
use tablescan::storage::StorageError;

use super::action_writes;
use super::pace::InstancePace;
use super::Engine;
use crate::sim::{batch_latency, query_latency};
use crate::storage::{Limit, Partition, Purpose, Request, Role};
use crate::table::partition_hash;
use crate::tablescan::Action;

/// `request` sent at once and again after refusals as `policy` says; every refusal is told to
/// `governor`, every answer's time too. `Err` when the retries ran out.
pub async fn send(
    engine: &Engine,
    policy: &RetryPolicy,
    request: &Request,
    governor: Option<&Governor>,
) -> Result<(), ()> {
    let mut retry = 0;
    loop {
        let t = engine.now();
        let answer = engine.world().storage.attempt(t, request);
        match answer {
            Ok(done) => {
                engine.until(done).await;
                if let Some(governor) = governor {
                    governor.answered_in(
                        Duration::from_secs_f64((done - t).max(0.0)),
                        request.entities.max(1.0) as u64,
                    );
                }
                return Ok(());
            }
            Err(refused) => {
                engine.until(refused).await;
                if let Some(governor) = governor {
                    governor.throttled();
                }
                if retry >= policy.max_retries {
                    return Err(());
                }
                retry += 1;
                let unit = engine.world().storage.unit();
                tokio::time::sleep(policy.delay(retry, unit, None)).await;
            }
        }
    }
}

/// One request to the scan's ledger partition with the storage pipeline's retries.
pub async fn ledger_request(engine: &Engine, entities: f64, latency: f64) -> Result<(), ()> {
    let request = Request {
        role: Role::App,
        purpose: Purpose::Bookkeeping,
        entities,
        partition: Some(Partition::Ledger),
        latency,
    };
    {
        let now = engine.now();
        let mut world = engine.world();
        world.stats.ledger_requests += 1;
        world.stats.step_ledger_entities += entities as u64;
        world.stats.count_ledger(now, entities as u64);
    }
    send(engine, &RetryPolicy::default(), &request, None).await
}

/// The step's clock: virtual time.
pub struct StepClock<'a>(pub &'a Engine);

impl Clock for StepClock<'_> {
    fn now(&self) -> Duration {
        Duration::from_secs_f64(self.0.now())
    }
}

pub struct Reader {
    pub engine: Arc<Engine>,
    pub pace: Arc<InstancePace>,
}

impl TableReader for Reader {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        let engine = &self.engine;
        let top = self.pace.page_size(request.top);
        let ticket = self.pace.before_read(u64::from(top)).await?;
        let raw = engine.table.read_reusing(
            request.scope,
            top,
            request.cursor,
            engine.params.server_range_rows,
            spare_page(),
        );
        let rows = raw.rows.len() as u64;
        let storage_request = Request {
            role: Role::Source,
            purpose: Purpose::Rows,
            entities: rows as f64,
            partition: raw.hottest_partition(&engine.table).map(Partition::Source),
            latency: query_latency(&engine.params, rows as f64),
        };
        let policy = tablescan::scan::budget::read_retry_policy();
        let sent = send(engine, &policy, &storage_request, Some(&self.pace.source)).await;
        let used = if sent.is_ok() { rows } else { 0 };
        self.pace
            .after_read(ticket, used, u64::from(top).saturating_sub(used));
        match sent {
            Ok(()) => {
                let now = engine.now();
                engine.world().stats.count_rows(now, rows);
                Ok(Page {
                    entities: raw.rows,
                    continuation: raw.continuation,
                })
            }
            Err(()) => {
                recycle_page(raw.rows);
                Err(server_busy())
            }
        }
    }
}

thread_local! {
    /// Pages of rows the sinks are done with, for the reader to write the next pages over: the
    /// simulation runs on one thread, and allocating two keys for every row read was much of
    /// its time. What a page holds is written whole by `SyntheticTable::read_reusing`, so
    /// which spare a read gets changes nothing.
    static SPARE_PAGES: std::cell::RefCell<Vec<Vec<Entity>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare pages kept at most: more than the steps that read at once in any simulated case.
const SPARE_PAGES_KEPT: usize = 256;

/// A page's rows done with, for a read to write over.
fn spare_page() -> Vec<Entity> {
    SPARE_PAGES.with(|spare| spare.borrow_mut().pop().unwrap_or_default())
}

/// Keeps `rows`, done with, for a later read.
fn recycle_page(rows: Vec<Entity>) {
    SPARE_PAGES.with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < SPARE_PAGES_KEPT {
            spare.push(rows);
        }
    });
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

pub struct Sink {
    pub engine: Arc<Engine>,
    pub pace: Arc<InstancePace>,
    pub instance: usize,
    /// The copy writes into the account it reads.
    pub within: bool,
}

impl RowSink for Sink {
    type Error = String;

    async fn accept(&mut self, rows: Vec<Entity>, deadline: Duration) -> Result<usize, String> {
        let engine = self.engine.clone();
        let action = engine.action;
        let cpu_per_1000 = match action {
            Action::Count => engine.params.count_cpu_ms_per_1000,
            _ => engine.params.copy_cpu_ms_per_1000,
        };
        let cpu = rows.len() as f64 * cpu_per_1000 / 1_000_000.0;
        let now = engine.now();
        let done = engine.world().compute(self.instance, now, cpu);
        engine.until(done).await;
        if matches!(action, Action::Count | Action::Export) {
            let delivered = rows.len();
            recycle_page(rows);
            return Ok(delivered);
        }
        if action == Action::PartitionKeys {
            let deadline = deadline.as_secs_f64();
            let instance = self.instance;
            return action_writes::put_partition_keys(
                &engine, &self.pace, instance, rows, deadline,
            )
            .await;
        }
        // The writes wait for their account's back-off and the scan's share, all of the page
        // at once (`ActionSink::accept` through `StepPace::before_write`).
        let same_account = self.within || action.writes_source();
        let governor = if same_account {
            self.pace.source.clone()
        } else {
            self.pace.target.clone()
        };
        self.pace
            .before_write(rows.len() as u64, &governor)
            .await
            .map_err(|e| e.to_string())?;
        // The action keeps up to COPY_CONCURRENCY transactions in flight, within the
        // process's PROCESS_WRITES_IN_FLIGHT; the transactions of one page are booked at once,
        // each lane taking the next as soon as its last is answered, none started after the
        // deadline (but the first).
        let deadline = deadline.as_secs_f64();
        let role = if action.writes_source() {
            Role::Source
        } else {
            Role::Target
        };
        let start = engine.now();
        let (end, finished, failed, refused) = self.book(rows, start, deadline, role);
        if refused {
            governor.throttled();
        }
        if let Some(gave_up) = failed {
            engine.until(gave_up.max(end)).await;
            return Err("a transaction was refused after every retry".into());
        }
        engine.until(end).await;
        Ok(finished)
    }
}

impl Sink {
    /// Books a page's transactions on their lanes from `start`: when the last is answered, the
    /// rows finished, when a transaction was given up on, and whether any was refused.
    fn book(
        &self,
        rows: Vec<Entity>,
        start: f64,
        deadline: f64,
        role: Role,
    ) -> (f64, usize, Option<f64>, bool) {
        let engine = &self.engine;
        let action = engine.action;
        let (transactions, lanes) = action_writes::transactions(action, rows);
        let mut lanes = vec![start; lanes];
        let mut finished = 0;
        let policy = RetryPolicy::default();
        let mut world = engine.world();
        let refused_before: u64 = world.storage.accounts.iter().map(|a| a.throttled).sum();
        let cap_rate = PROCESS_WRITES_IN_FLIGHT as f64 / (engine.params.batch_base_ms / 1000.0);
        let mut failed = None;
        for (started, ops) in transactions.iter().enumerate() {
            let lane = lanes
                .iter_mut()
                .min_by(|a, b| a.total_cmp(b))
                .expect("at least one lane");
            if started > 0 && *lane >= deadline {
                break;
            }
            let hash = partition_hash(ops[0].keys().0);
            let entities = ops.len() as f64;
            let request = Request {
                role,
                purpose: Purpose::Rows,
                entities,
                partition: (ops.len() >= 100).then_some(if action.writes_source() {
                    Partition::Source(hash)
                } else {
                    Partition::Target(hash)
                }),
                latency: batch_latency(&engine.params, entities),
            };
            let instance = self.instance;
            let admitted = world
                .write_caps
                .entry(instance)
                .or_insert_with(|| Limit::new(cap_rate))
                .admit(*lane, 1.0);
            match world.storage.send(admitted, &policy, &request) {
                Ok(done) => *lane = done,
                Err(gave_up) => {
                    failed = Some(gave_up);
                    break;
                }
            }
            finished += ops.len();
            world.stats.writes += 1;
            world.stats.rows_written += ops.len() as u64;
        }
        let refused_after: u64 = world.storage.accounts.iter().map(|a| a.throttled).sum();
        drop(world);
        recycle_page(
            transactions
                .into_iter()
                .flatten()
                .filter_map(|op| match op {
                    Operation::UpsertReplace(entity) => Some(entity),
                    _ => None,
                })
                .collect(),
        );
        let end = lanes.into_iter().fold(start, f64::max);
        (end, finished, failed, refused_after > refused_before)
    }
}
