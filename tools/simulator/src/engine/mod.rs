//! tablescan as it ships, on tokio's paused clock: every invocation is a task that begins its
//! item in the ledger, is admitted by its scan's pace, runs the real `run_step` with a reader
//! and a sink that wait for the real back-off (`storage::pacing::Governor`, one per account in
//! each instance) and for the scan's pace there (the handler's own `Pacing`, one per instance,
//! on a ledger they share: see `pace`), keeps its claim renewed, and records its finish with
//! the counter shard's conflicts. Storage answers on the same clock (`storage::Storage`), and
//! the platform adds instances as documented (`sim::Platform`).

pub mod action_writes;
pub mod io;
pub mod pace;
pub mod parking;
pub mod step;

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tablescan::scan::item::WorkItem;
use tablescan::scan::ScanOptions;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::ledger_costs::{self, Cost};
use crate::params::{Params, Plan};
use crate::sim::{Platform, World};
use crate::storage::{Partition, Purpose, Request, Role};
use crate::table::SyntheticTable;
use crate::tablescan::Action;

/// Locks plain simulation state (one thread; a panic ends the run).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A work item's message as the queue holds it.
#[derive(Debug, Clone)]
pub struct Message {
    pub item: WorkItem,
    /// Deliveries of this message so far.
    pub deliveries: u32,
    /// Since when (virtual seconds) the item has kept failing transiently.
    pub failing_since: Option<f64>,
}

struct Queued {
    visible: f64,
    seq: u64,
    message: Message,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        self.visible
            .total_cmp(&other.visible)
            .then(self.seq.cmp(&other.seq))
    }
}

struct Queues {
    waiting: Vec<BinaryHeap<Reverse<Queued>>>,
    in_flight: Vec<usize>,
    seq: u64,
}

/// The two queue-triggered functions: ScanRange and ScanPartition.
pub const QUEUES: usize = 2;

/// Everything a simulated scan shares.
pub struct Engine {
    pub world: Mutex<World>,
    pub table: Arc<SyntheticTable>,
    pub action: Action,
    /// A copy into the account it reads.
    pub within: bool,
    pub options: ScanOptions,
    /// Each counter shard's version: a finish whose shard changed since it read it conflicts.
    pub shards: Mutex<Vec<u64>>,
    pub params: Params,
    start: Instant,
    queues: Mutex<Queues>,
    platform: Mutex<Platform>,
    wake: Notify,
    pub pacing: pace::ScanPacing,
    /// Items parked in the ledger (`parking`), not in a queue.
    pub parked: parking::Parked,
    /// Invocations running now.
    running: Mutex<usize>,
    done: std::sync::atomic::AtomicBool,
}

impl Engine {
    /// Virtual seconds since the scan started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Waits until virtual second `t`.
    pub async fn until(&self, t: f64) {
        if t > self.now() {
            tokio::time::sleep_until(self.start + Duration::from_secs_f64(t)).await;
        }
    }

    pub fn world(&self) -> MutexGuard<'_, World> {
        lock(&self.world)
    }

    pub fn queue_of(item: &WorkItem) -> usize {
        use tablescan::scan::item::ReadRange;
        match item.task {
            ReadRange::Range { .. } => 0,
            _ => 1,
        }
    }

    /// Puts `message` on its queue, visible from `visible`.
    pub fn enqueue(&self, message: Message, visible: f64) {
        let queue = Self::queue_of(&message.item);
        let mut queues = lock(&self.queues);
        queues.seq += 1;
        let seq = queues.seq;
        queues.waiting[queue].push(Reverse(Queued {
            visible,
            seq,
            message,
        }));
        drop(queues);
        self.wake.notify_one();
    }

    /// An invocation on `instance` of a message of `queue` ended.
    pub fn invocation_ended(&self, instance: usize, queue: usize) {
        lock(&self.queues).in_flight[queue] -= 1;
        let group = self.group_of(queue);
        lock(&self.platform).groups[group].free.push_back(instance);
        *lock(&self.running) -= 1;
        self.wake.notify_one();
    }

    fn group_of(&self, queue: usize) -> usize {
        if self.params.plan == Plan::Flex {
            queue
        } else {
            0
        }
    }

    fn groups(&self) -> usize {
        if self.params.plan == Plan::Flex {
            QUEUES
        } else {
            1
        }
    }

    /// Charges `cost` to the ledger's partition now, without waiting: traffic whose latency
    /// no step waits on (status reads, cancel checks, the slices' rounds).
    pub fn charge_ledger(&self, cost: Cost, now: f64) {
        let mut world = self.world();
        let per_request = cost.entities as f64 / cost.requests.max(1) as f64;
        for _ in 0..cost.requests {
            let request = Request {
                role: Role::App,
                purpose: Purpose::Bookkeeping,
                entities: per_request,
                partition: Some(Partition::Ledger),
                latency: 0.0,
            };
            let _ = world.storage.attempt(now, &request);
        }
        world.stats.ledger_requests += cost.requests;
        world.stats.ledger_entities_other += cost.entities;
        world.stats.count_ledger(now, cost.entities);
    }

    /// Delivers visible messages to free invocation slots until the scan is done.
    async fn dispatch(self: Arc<Self>) {
        loop {
            let t = self.now();
            let outstanding = {
                let queues = lock(&self.queues);
                queues.waiting.iter().map(BinaryHeap::len).sum::<usize>()
                    + *lock(&self.running)
                    + self.parked.len()
            };
            if outstanding == 0 {
                break;
            }
            {
                let mut platform = lock(&self.platform);
                platform.wake(t);
                if t >= platform.next_decision {
                    let mut lengths = vec![0usize; self.groups()];
                    let queues = lock(&self.queues);
                    for queue in 0..QUEUES {
                        lengths[self.group_of(queue)] +=
                            queues.waiting[queue].len() + queues.in_flight[queue];
                    }
                    drop(queues);
                    platform.decide(t, &lengths);
                    let total = platform.total();
                    let mut world = self.world();
                    world.stats.peak_instances = world.stats.peak_instances.max(total);
                }
            }
            let mut next = f64::INFINITY;
            for queue in 0..QUEUES {
                loop {
                    let group = self.group_of(queue);
                    let mut queues = lock(&self.queues);
                    let Some(head) = queues.waiting[queue].peek() else {
                        break;
                    };
                    if head.0.visible > t {
                        next = next.min(head.0.visible);
                        break;
                    }
                    let Some(instance) = lock(&self.platform).groups[group].free.pop_front() else {
                        break;
                    };
                    let Reverse(queued) = queues.waiting[queue].pop().expect("peeked");
                    queues.in_flight[queue] += 1;
                    drop(queues);
                    *lock(&self.running) += 1;
                    {
                        let mut world = self.world();
                        world.storage.take_message(t);
                        world.stats.queue_operations += 2;
                        world.stats.executions += 1;
                        world.stats.count_execution(t);
                    }
                    let engine = self.clone();
                    tokio::task::spawn_local(step::invoke(engine, instance, queue, queued.message));
                }
            }
            {
                let platform = lock(&self.platform);
                next = next.min(platform.next_decision);
                if let Some(ready) = platform.next_ready() {
                    next = next.min(ready);
                }
            }
            let sleep = tokio::time::sleep_until(
                self.start + Duration::from_secs_f64(next.max(t + 0.001).min(t + 3600.0)),
            );
            // In this order when both are ready, run after run (`select!` picks at random
            // otherwise).
            tokio::select! {
                biased;
                _ = self.wake.notified() => {}
                _ = sleep => {}
            }
        }
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Once a second while the scan runs: the ledger traffic no step waits on, instance time,
    /// and the calendar's old slots.
    async fn bookkeeping(self: Arc<Self>) {
        let poll = self.params.status_poll_s;
        let mut next_poll = if poll > 0.0 { poll } else { f64::INFINITY };
        let mut next_look = ledger_costs::REDRIVE_LOOK_EVERY_S;
        let mut next_cancel_check = ledger_costs::CANCEL_CHECK_EVERY_S;
        let mut next_forget = 60.0;
        while !self.done.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let t = self.now();
            let instances = lock(&self.platform).total();
            self.world().stats.instance_seconds += instances as f64;
            while t >= next_poll {
                self.charge_ledger(ledger_costs::STATUS_READ, t);
                self.world().stats.status_reads += 1;
                next_poll += poll;
            }
            if t >= next_look {
                self.charge_ledger(ledger_costs::REDRIVE_LOOK, t);
                parking::sweep(&self, t);
                next_look += ledger_costs::REDRIVE_LOOK_EVERY_S;
            }
            if t >= next_cancel_check {
                // Each instance running steps of the scan reads the scan row, and takes its
                // learned cap and learning round into its pace.
                self.pacing.read_by_busy_instances(t).await;
                next_cancel_check += ledger_costs::CANCEL_CHECK_EVERY_S;
            }
            // The pacing's ledger traffic (the slices, the learning rounds, the scan-row
            // reads), as the ledger's table counted it.
            let delta = self.pacing.uncharged();
            if delta.requests > 0 {
                self.charge_ledger(delta, t);
                self.world().stats.slice_requests += delta.requests;
            }
            if t >= next_forget {
                self.world().storage.forget_before((t - 600.0).max(0.0));
                next_forget = t + 60.0;
            }
        }
    }

    /// The application sharing the scanned account: a steady load while the scan runs.
    async fn application(self: Arc<Self>) {
        let load = self.params.app_load;
        if load <= 0.0 {
            return;
        }
        // Requests of 100 entities, or one every 10 ms below 10,000 entities/s.
        let entities = (load * 0.01).clamp(1.0, 100.0);
        let every = entities / load;
        let mut t = 0.0;
        while !self.done.load(std::sync::atomic::Ordering::SeqCst) {
            t += every;
            self.until(t).await;
            let request = Request {
                role: Role::Source,
                purpose: Purpose::Application,
                entities,
                partition: None,
                latency: 0.0,
            };
            let _ = self.world().storage.attempt(t, &request);
        }
    }
}

/// Runs a scan of `table` with `action` to its end on a paused clock; the statistics are in
/// the returned world.
pub fn simulate(
    table: Arc<SyntheticTable>,
    action: Action,
    within: bool,
    world: World,
    options: ScanOptions,
) -> Result<World, String> {
    let params = world.params.clone();
    let groups = if params.plan == Plan::Flex { QUEUES } else { 1 };
    let platform = Platform::new(&params, groups)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("a runtime: {e}"))?;
    let world = runtime.block_on(async move {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let pacing = pace::ScanPacing::new(&params).await?;
                let engine = Arc::new(Engine {
                    world: Mutex::new(world),
                    table,
                    action,
                    within,
                    options,
                    shards: Mutex::new(vec![0; ledger_costs::SHARDS]),
                    pacing,
                    params,
                    start: Instant::now(),
                    queues: Mutex::new(Queues {
                        waiting: (0..QUEUES).map(|_| BinaryHeap::new()).collect(),
                        in_flight: vec![0; QUEUES],
                        seq: 0,
                    }),
                    platform: Mutex::new(platform),
                    wake: Notify::new(),
                    parked: Default::default(),
                    running: Mutex::new(0),
                    done: Default::default(),
                });
                engine.enqueue(
                    Message {
                        item: crate::tablescan::Tablescan::first(),
                        deliveries: 0,
                        failing_since: None,
                    },
                    0.0,
                );
                let books = tokio::task::spawn_local(engine.clone().bookkeeping());
                let app = tokio::task::spawn_local(engine.clone().application());
                engine.clone().dispatch().await;
                let _ = books.await;
                let _ = app.await;
                let seconds = engine.now();
                // Tickers that still hold the engine stop at their next tick (the scan is done).
                let empty = World::new(
                    engine.params.clone(),
                    crate::storage::Storage::new(engine.params.clone(), false),
                );
                let mut world = std::mem::replace(&mut *engine.world(), empty);
                world.stats.seconds = seconds;
                world.stats.learned_cap = engine.pacing.learned();
                world.stats.caps_learned = engine.pacing.caps_learned();
                Ok::<World, String>(world)
            })
            .await
    })?;
    Ok(world)
}
