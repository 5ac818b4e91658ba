//! The simulation loop: discrete events on virtual time. Messages wait on their queues, the
//! platform's scale controller adds instances as documented, each instance runs a fixed number
//! of invocations at once, and a design (tablescan's engine, or the published scanner) decides
//! what one invocation does to storage and which messages it hands on.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};

use crate::params::{Params, Plan};
use crate::stats::Stats;
use crate::storage::{Limit, Partition, Purpose, Request, Role, Storage};

/// A message one execution hands on, and whether the execution put it on its queue itself
/// (the published design enqueues from its own code) or the host puts it afterwards (output
/// bindings, as tablescan does).
pub struct FollowUp<M> {
    pub message: M,
    /// When the message is on its queue, if the execution put it there.
    pub queued_at: Option<f64>,
}

/// What one execution did.
pub struct Execution<M> {
    pub end: f64,
    pub follow_ups: Vec<FollowUp<M>>,
    /// It failed: the host makes the message visible again after the visibility timeout.
    pub failed: bool,
}

/// What the instances, the storage and the statistics look like to a design.
pub struct World {
    pub params: Params,
    pub storage: Storage,
    /// Each instance's CPU, in core-seconds per second.
    cpu: HashMap<usize, Limit>,
    /// Each instance's cap on writes in flight, as a rate.
    pub write_caps: HashMap<usize, Limit>,
    pub stats: Stats,
}

impl World {
    pub fn new(params: Params, storage: Storage) -> Self {
        World {
            params,
            storage,
            cpu: HashMap::new(),
            write_caps: HashMap::new(),
            stats: Stats::default(),
        }
    }

    /// `seconds` of one core's work on `instance`, ready at `t`: when it is done.
    pub fn compute(&mut self, instance: usize, t: f64, seconds: f64) -> f64 {
        let cores = self.params.cores();
        let limit = self
            .cpu
            .entry(instance)
            .or_insert_with(|| Limit::new(cores));
        limit.admit(t, seconds)
    }
}

/// A way of scanning a table: what one execution of each of its messages does.
pub trait Design {
    type Message;
    /// The queue (and queue-triggered function) a message goes to.
    fn queue(&self, message: &Self::Message) -> usize;
    /// Runs `message` from `t` on `instance`.
    fn execute(
        &mut self,
        world: &mut World,
        message: &Self::Message,
        t: f64,
        instance: usize,
    ) -> Execution<Self::Message>;
    /// Whether the design keeps a ledger that status reads and re-drive sweeps read whole.
    fn has_ledger(&self) -> bool;
}

struct Queued<M> {
    visible: f64,
    seq: u64,
    dequeues: u32,
    message: M,
}

impl<M> PartialEq for Queued<M> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl<M> Eq for Queued<M> {}
impl<M> PartialOrd for Queued<M> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<M> Ord for Queued<M> {
    /// Earliest visible first (a min-heap through `Reverse`), then first queued.
    fn cmp(&self, other: &Self) -> Ordering {
        self.visible
            .total_cmp(&other.visible)
            .then(self.seq.cmp(&other.seq))
    }
}

struct Running<M> {
    end: f64,
    seq: u64,
    instance: usize,
    queue: usize,
    dequeues: u32,
    message: M,
    execution: Execution<M>,
}

impl<M> PartialEq for Running<M> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl<M> Eq for Running<M> {}
impl<M> PartialOrd for Running<M> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<M> Ord for Running<M> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.end
            .total_cmp(&other.end)
            .then(self.seq.cmp(&other.seq))
    }
}

/// A group of instances that scales as one: the whole app on Consumption, one function's
/// group on Flex.
#[derive(Default)]
pub(crate) struct Group {
    pub(crate) instances: usize,
    /// Free invocation slots of ready instances, by instance (each instance appears once per
    /// free slot; first in, first out spreads work over instances).
    pub(crate) free: VecDeque<usize>,
    /// Instances still starting: (ready at, instance).
    starting: Vec<(f64, usize)>,
}

/// The platform: instance groups and the scale controller.
pub(crate) struct Platform {
    pub(crate) groups: Vec<Group>,
    next_instance: usize,
    max_instances: usize,
    quota: usize,
    per_instance: usize,
    step: usize,
    interval: f64,
    cold_start: f64,
    pub(crate) next_decision: f64,
}

impl Platform {
    pub(crate) fn new(params: &Params, groups: usize) -> Result<Self, String> {
        let mut platform = Platform {
            groups: (0..groups).map(|_| Group::default()).collect(),
            next_instance: 0,
            max_instances: params.max_instances()?,
            quota: params.quota_instances(),
            per_instance: params.per_instance as usize,
            step: params.scale_step as usize,
            interval: params.scale_interval(),
            cold_start: params.cold_start_s,
            next_decision: params.scale_interval(),
        };
        // The start request woke the app: one instance is ready.
        platform.add(0, 0.0);
        Ok(platform)
    }

    fn add(&mut self, group: usize, ready: f64) {
        let instance = self.next_instance;
        self.next_instance += 1;
        self.groups[group].instances += 1;
        self.groups[group].starting.push((ready, instance));
    }

    pub(crate) fn total(&self) -> usize {
        self.groups.iter().map(|g| g.instances).sum()
    }

    /// Instances whose cold start ended by `t` take work.
    pub(crate) fn wake(&mut self, t: f64) {
        let per_instance = self.per_instance;
        for group in &mut self.groups {
            group.starting.retain(|&(ready, instance)| {
                if ready <= t {
                    group
                        .free
                        .extend(std::iter::repeat_n(instance, per_instance));
                    false
                } else {
                    true
                }
            });
        }
    }

    /// One decision of target-based scaling: desired instances = messages (waiting and in
    /// flight, as the queue's length counts them) / target executions per instance; at most
    /// `step` more at a time, within the caps.
    pub(crate) fn decide(&mut self, t: f64, lengths: &[usize]) {
        for (group, &length) in lengths.iter().enumerate() {
            let desired = length.div_ceil(self.per_instance).min(self.max_instances);
            let room = self.quota.saturating_sub(self.total());
            let add = desired
                .saturating_sub(self.groups[group].instances)
                .min(self.step)
                .min(room);
            for _ in 0..add {
                self.add(group, t + self.cold_start);
            }
        }
        self.next_decision = t + self.interval;
    }

    pub(crate) fn next_ready(&self) -> Option<f64> {
        self.groups
            .iter()
            .flat_map(|g| g.starting.iter().map(|s| s.0))
            .min_by(f64::total_cmp)
    }
}

/// A client following the scan, and the re-drive timer: both read the whole ledger partition.
struct LedgerReaders {
    next_poll: Option<f64>,
    poll_interval: f64,
    next_sweep: f64,
    sweep_interval: f64,
}

impl LedgerReaders {
    fn next(&self) -> f64 {
        self.next_poll.unwrap_or(f64::INFINITY).min(self.next_sweep)
    }
}

/// Reads `entities` ledger rows in pages of 1,000, one after another, from `t`: when done.
fn read_ledger(world: &mut World, t: f64, entities: u64) -> f64 {
    let policy = tablescan::scan::budget::read_retry_policy();
    let mut now = t;
    let mut left = entities.max(1);
    while left > 0 {
        let page = left.min(1000);
        let request = Request {
            role: Role::App,
            purpose: Purpose::Bookkeeping,
            entities: page as f64,
            partition: Some(Partition::Ledger),
            latency: query_latency(&world.params, page as f64),
        };
        world.stats.status_entities += page;
        world.stats.ledger_requests += 1;
        match world.storage.send(now, &policy, &request) {
            Ok(done) => now = done,
            Err(gave_up) => {
                return gave_up;
            }
        }
        left -= page;
    }
    world.stats.status_reads += 1;
    now
}

/// A query's latency for `entities` rows, seconds.
pub fn query_latency(params: &Params, entities: f64) -> f64 {
    (params.query_base_ms + params.query_ms_per_entity * entities) / 1000.0
}

/// A transaction's latency for `entities` rows, seconds.
pub fn batch_latency(params: &Params, entities: f64) -> f64 {
    (params.batch_base_ms + params.batch_ms_per_entity * entities) / 1000.0
}

/// Runs a scan that starts with `first` until no message is left; the statistics are in the
/// returned world.
pub fn simulate<D: Design>(
    design: &mut D,
    first: D::Message,
    queues: usize,
    world: World,
) -> Result<World, String> {
    let mut sim = Sim::new(design, queues, world)?;
    sim.enqueue_first(first);
    let mut readers = sim.ledger_readers();
    let mut t: f64 = 0.0;
    let mut next_forget = 60.0;
    loop {
        // Executions that ended hand their follow-ups on, or go back to their queue.
        sim.end_executions(t);
        let outstanding = sim.outstanding();
        if outstanding == 0 {
            break;
        }
        sim.scale(t);
        // Visible messages go to free invocation slots of their group.
        sim.dispatch(t);
        // The ledger's readers: they read every entity of the scan's partition.
        if t >= readers.next() {
            let world = &mut sim.world;
            let rows = 1
                + world.stats.executions_done_ok
                + outstanding as u64
                + world.stats.failed_for_good;
            if readers.next_poll.is_some_and(|p| t >= p) {
                let done = read_ledger(world, t, rows);
                readers.next_poll = Some(done + readers.poll_interval);
            }
            if t >= readers.next_sweep {
                read_ledger(world, t, rows);
                readers.next_sweep = t + readers.sweep_interval;
            }
        }
        if t >= next_forget {
            // Every request still to come arrives at t or later (running steps booked theirs
            // when they started); a margin keeps the slots a late retry might look at.
            sim.world.storage.forget_before((t - 600.0).max(0.0));
            next_forget = t + 60.0;
        }
        t = sim.next_moment(t, &readers);
    }
    let mut world = sim.world;
    world.stats.seconds = t;
    Ok(world)
}

/// The state of one simulated scan: the queues, the executions running, the platform.
struct Sim<'d, D: Design> {
    design: &'d mut D,
    params: Params,
    /// Instance groups: one per queue on Flex, one for the app otherwise.
    groups: usize,
    platform: Platform,
    /// Per queue, its messages by when they become visible.
    waiting: Vec<BinaryHeap<Reverse<Queued<D::Message>>>>,
    /// Per queue, its messages being executed.
    in_flight: Vec<usize>,
    running: BinaryHeap<Reverse<Running<D::Message>>>,
    seq: u64,
    /// How long after a message is put a listener sees it, seconds.
    poll: f64,
    world: World,
}

impl<'d, D: Design> Sim<'d, D> {
    fn new(design: &'d mut D, queues: usize, world: World) -> Result<Self, String> {
        let params = world.params.clone();
        let groups = if params.plan == Plan::Flex { queues } else { 1 };
        Ok(Sim {
            platform: Platform::new(&params, groups)?,
            waiting: (0..queues).map(|_| BinaryHeap::new()).collect(),
            in_flight: vec![0usize; queues],
            running: BinaryHeap::new(),
            seq: 0,
            poll: params.poll_ms / 1000.0,
            design,
            params,
            groups,
            world,
        })
    }

    fn group_of(&self, queue: usize) -> usize {
        if self.groups == 1 {
            0
        } else {
            queue
        }
    }

    fn enqueue_first(&mut self, first: D::Message) {
        let first_queue = self.design.queue(&first);
        self.waiting[first_queue].push(Reverse(Queued {
            visible: 0.0,
            seq: self.seq,
            dequeues: 0,
            message: first,
        }));
    }

    fn ledger_readers(&self) -> LedgerReaders {
        let params = &self.params;
        LedgerReaders {
            next_poll: (self.design.has_ledger() && params.status_poll_s > 0.0)
                .then_some(params.status_poll_s),
            poll_interval: params.status_poll_s,
            next_sweep: if self.design.has_ledger() {
                params.sweep_s
            } else {
                f64::INFINITY
            },
            sweep_interval: params.sweep_s,
        }
    }

    /// Messages waiting or running.
    fn outstanding(&self) -> usize {
        self.waiting.iter().map(BinaryHeap::len).sum::<usize>() + self.running.len()
    }

    /// Ends the executions due by `t`: their slots free, their follow-ups queued, or a failed
    /// message back in its queue after its visibility timeout (or failed for good).
    fn end_executions(&mut self, t: f64) {
        while self.running.peek().is_some_and(|r| r.0.end <= t) {
            let Reverse(done) = self.running.pop().expect("peeked");
            self.in_flight[done.queue] -= 1;
            let group = self.group_of(done.queue);
            self.platform.groups[group].free.push_back(done.instance);
            if done.execution.failed {
                let dequeues = done.dequeues + 1;
                if dequeues >= self.params.max_dequeue_count {
                    self.world.stats.failed_for_good += 1;
                } else {
                    self.seq += 1;
                    self.waiting[done.queue].push(Reverse(Queued {
                        visible: done.end + self.params.visibility_timeout_s,
                        seq: self.seq,
                        dequeues,
                        message: done.message,
                    }));
                }
                continue;
            }
            self.world.stats.executions_done_ok += 1;
            for follow_up in done.execution.follow_ups {
                let queue = self.design.queue(&follow_up.message);
                self.world.stats.queue_operations += 1;
                let queued = follow_up
                    .queued_at
                    .unwrap_or_else(|| self.world.storage.put_message(done.end, queue));
                self.seq += 1;
                self.waiting[queue].push(Reverse(Queued {
                    visible: queued + self.poll,
                    seq: self.seq,
                    dequeues: 0,
                    message: follow_up.message,
                }));
            }
        }
    }

    /// Starts the instances that became ready, and lets the scale controller decide when due.
    fn scale(&mut self, t: f64) {
        self.platform.wake(t);
        if t >= self.platform.next_decision {
            let mut lengths = vec![0usize; self.groups];
            for queue in 0..self.waiting.len() {
                lengths[self.group_of(queue)] += self.waiting[queue].len() + self.in_flight[queue];
            }
            self.platform.decide(t, &lengths);
            self.world.stats.peak_instances =
                self.world.stats.peak_instances.max(self.platform.total());
        }
    }

    /// Gives the messages visible at `t` to free invocation slots of their group.
    fn dispatch(&mut self, t: f64) {
        for queue in 0..self.waiting.len() {
            let group = self.group_of(queue);
            while self.waiting[queue].peek().is_some_and(|m| m.0.visible <= t) {
                let Some(instance) = self.platform.groups[group].free.pop_front() else {
                    break;
                };
                let Reverse(message) = self.waiting[queue].pop().expect("peeked");
                let world = &mut self.world;
                world.storage.take_message(t);
                world.stats.queue_operations += 2;
                world.stats.executions += 1;
                world.stats.count_execution(t);
                let execution = self.design.execute(world, &message.message, t, instance);
                world.stats.longest_execution =
                    world.stats.longest_execution.max(execution.end - t);
                self.in_flight[queue] += 1;
                self.seq += 1;
                self.running.push(Reverse(Running {
                    end: execution.end.max(t),
                    seq: self.seq,
                    instance,
                    queue,
                    dequeues: message.dequeues,
                    message: message.message,
                    execution,
                }));
            }
        }
    }

    /// The next moment anything can happen after `t`.
    fn next_moment(&self, t: f64, readers: &LedgerReaders) -> f64 {
        let mut next = self.platform.next_decision.min(readers.next());
        if let Some(r) = self.running.peek() {
            next = next.min(r.0.end);
        }
        if let Some(ready) = self.platform.next_ready() {
            next = next.min(ready);
        }
        for (queue, heap) in self.waiting.iter().enumerate() {
            if let Some(m) = heap.peek() {
                let free = !self.platform.groups[self.group_of(queue)].free.is_empty();
                if m.0.visible > t || free {
                    next = next.min(m.0.visible.max(t));
                }
            }
        }
        if next <= t {
            // Something is due now but could not proceed: move on by the smallest step.
            next = t + 1e-6;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(args: &[&str]) -> Params {
        crate::params::parse(args).expect("valid parameters")
    }

    #[test]
    fn consumption_adds_at_most_four_instances_a_decision_up_to_its_cap() {
        let mut platform = Platform::new(&params(&[]), 1).unwrap();
        let mut t = 0.0;
        for decision in 1..=40 {
            t += 30.0;
            platform.decide(t, &[1_000_000]);
            assert_eq!(platform.total(), (1 + 4 * decision).min(100));
        }
        // New instances take work only after their cold start.
        platform.wake(t);
        assert!(platform.groups[0].starting.is_empty());
        let mut quiet = Platform::new(&params(&[]), 1).unwrap();
        quiet.decide(30.0, &[24]);
        assert_eq!(quiet.total(), 1, "24 messages want one instance");
    }

    #[test]
    fn flex_groups_scale_apart_within_the_core_quota() {
        let p = params(&[
            "--plan",
            "flex",
            "--max-instances",
            "1000",
            "--scale-step",
            "1000",
        ]);
        let mut platform = Platform::new(&p, 2).unwrap();
        platform.decide(5.0, &[1_000_000, 1_000_000]);
        assert_eq!(platform.total(), 250, "250 cores of one-core instances");
        assert_eq!(platform.groups[0].instances, 250);
        let small = params(&["--plan", "flex", "--instance-memory-mb", "512"]);
        let mut platform = Platform::new(&small, 2).unwrap();
        platform.decide(5.0, &[0, 48]);
        assert_eq!(
            (platform.groups[0].instances, platform.groups[1].instances),
            (1, 2)
        );
    }
}
