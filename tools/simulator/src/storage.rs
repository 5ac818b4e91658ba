//! The storage model: latency of each request, and the service's scalability targets as rate
//! limits counted the way the service counts them: every entity scanned, inserted, updated or
//! deleted counts against its account and its partition, every message against its queue.
//! A request that finds its limit briefly busy waits; one that would wait longer than
//! `throttle_after_ms` is answered 503 Server Busy instead, and the caller's retry code reacts.

use std::collections::HashMap;

use tablescan::storage::retry::RetryPolicy;

use crate::params::{AppAccount, Params};

/// A rate limit: `rate` units per second, kept as a sparse calendar of 10 ms slots. Work is
/// admitted into the first slots at or after its arrival that have room, so requests arriving in
/// any order (steps are simulated one after another, each on its own clock) share capacity the
/// way requests arriving at those times would.
#[derive(Debug, Clone)]
pub struct Limit {
    per_slot: f64,
    used: SlotMap<f64>,
    /// Shortcuts past full slots: from a full slot to a later slot, every slot between them
    /// full (a slot's room only shrinks). A limit backlogged by seconds otherwise walked
    /// hundreds of full slots for each message put; the walk admits into the same slots.
    skip: SlotMap<u64>,
    /// Seconds requests spent waiting on this limit.
    pub waited: f64,
}

/// A map keyed by slot number with a cheap hash (the slots are small integers; no output
/// depends on the map's order).
type SlotMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<SlotHasher>>;

/// Multiplies the slot number by an odd constant (Fibonacci hashing).
#[derive(Default)]
struct SlotHasher(u64);

impl std::hash::Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

const SLOT: f64 = 0.01;

/// Room below this is none: the slot is full.
const NO_ROOM: f64 = 1e-9;

impl Limit {
    pub fn new(rate: f64) -> Self {
        Limit {
            per_slot: rate * SLOT,
            used: SlotMap::default(),
            skip: SlotMap::default(),
            waited: 0.0,
        }
    }

    /// The slot after full slot `slot` to look at next: past the full slots a shortcut
    /// names.
    fn after_full(&self, slot: u64) -> u64 {
        match self.skip.get(&slot) {
            Some(&next) if next > slot => next,
            _ => slot + 1,
        }
    }

    /// When `units` arriving at `t` would be served, without booking them.
    pub fn peek(&self, t: f64, units: f64) -> f64 {
        let arrival = (t / SLOT) as u64;
        let mut slot = arrival;
        let mut left = units;
        let mut served = t;
        while left > NO_ROOM {
            let room = self.per_slot - self.used.get(&slot).copied().unwrap_or(0.0);
            if room > NO_ROOM {
                left -= room.min(left);
                served = served.max(if slot == arrival {
                    t
                } else {
                    slot as f64 * SLOT
                });
                slot += 1;
            } else {
                slot = self.after_full(slot);
            }
        }
        served
    }

    /// Admits `units` arriving at `t` (seconds); returns when the last of them is served.
    pub fn admit(&mut self, t: f64, units: f64) -> f64 {
        let arrival = (t / SLOT) as u64;
        let mut slot = arrival;
        let mut left = units;
        let mut served = t;
        // The last slot taken from, and whether it is full now.
        let mut last = (arrival, false);
        while left > NO_ROOM {
            let used = self.used.entry(slot).or_insert(0.0);
            let room = self.per_slot - *used;
            if room > NO_ROOM {
                let take = room.min(left);
                *used += take;
                left -= take;
                last = (slot, self.per_slot - *used <= NO_ROOM);
                // Served within its arrival slot: at once; in a later slot: when that slot opens.
                served = served.max(if slot == arrival {
                    t
                } else {
                    slot as f64 * SLOT
                });
                slot += 1;
            } else {
                slot = self.after_full(slot);
            }
        }
        // Every slot from the arrival's to the last taken from is full, but perhaps the last.
        let first_open = if last.1 { last.0 + 1 } else { last.0 };
        if first_open > arrival + 1 {
            self.skip.insert(arrival, first_open);
        }
        self.waited += served - t;
        served
    }

    /// Drops the slots before `t`.
    pub fn forget_before(&mut self, t: f64) {
        let first = (t / SLOT) as u64;
        if self.used.len() > 4096 {
            self.used.retain(|slot, _| *slot >= first);
        }
        if self.skip.len() > 4096 {
            self.skip.retain(|slot, _| *slot >= first);
        }
    }
}

/// The accounts a scan touches, by role. A case maps roles onto physical accounts: a copy
/// within the account writes where it reads, and the ledger and work queues live in the
/// source account unless `--app-account separate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Target,
    App,
}

/// The partition a request lands on, when that partition may come near its target: slices of
/// at least 100 entities and the scan's ledger partition. Smaller slices of a partition are
/// never tracked (a table of 25 million partitions would need a calendar each for nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partition {
    /// Partition `index` of the scanned table.
    Source(usize),
    /// Partition `index` of the copy's target table.
    Target(usize),
    /// The scan's ledger partition.
    Ledger,
}

/// What one physical account served.
#[derive(Debug, Clone)]
pub struct Account {
    limit: Limit,
    /// Entities (and queue messages) it served.
    pub entities: f64,
    /// Of those, the scan's bookkeeping: ledger entities and work-queue messages.
    pub bookkeeping: f64,
    /// Requests it answered 503 Server Busy.
    pub throttled: u64,
    /// The application's requests and entities it served or refused.
    pub app_served: f64,
    pub app_refused: f64,
}

/// Whether a request is the scan's own bookkeeping (ledger, queues) or its work on rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Rows,
    Bookkeeping,
    /// Not the scan's: the application that shares the scanned account.
    Application,
}

/// One request to the table service.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub role: Role,
    pub purpose: Purpose,
    /// Entities it scans or writes (at least 1: an empty page still costs a request).
    pub entities: f64,
    pub partition: Option<Partition>,
    /// Its latency once admitted, seconds, before jitter.
    pub latency: f64,
}

/// Everything the storage accounts and queues share across steps.
pub struct Storage {
    pub params: Params,
    pub accounts: Vec<Account>,
    roles: [usize; 3],
    partitions: HashMap<(usize, Partition), Limit>,
    queues: HashMap<usize, Limit>,
    random: u64,
}

impl Storage {
    /// `copy_within` puts the copy's target table in the source account.
    pub fn new(params: Params, copy_within: bool) -> Self {
        let target = if copy_within { 0 } else { 1 };
        let app = match params.app_account {
            AppAccount::Source => 0,
            AppAccount::Separate => 2,
        };
        let account = Account {
            limit: Limit::new(params.account_entities_per_second),
            entities: 0.0,
            bookkeeping: 0.0,
            throttled: 0,
            app_served: 0.0,
            app_refused: 0.0,
        };
        Storage {
            accounts: vec![account; 3],
            roles: [0, target, app],
            partitions: HashMap::new(),
            queues: HashMap::new(),
            random: params.seed ^ 0xA076_1D64_78BD_642F,
            params,
        }
    }

    /// The physical account that plays `role`.
    pub fn account_of(&self, role: Role) -> usize {
        self.roles[role as usize]
    }

    /// A seeded number in [0, 1), for retry jitter.
    pub fn unit(&mut self) -> f64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        (self.random % 1_000_000) as f64 / 1_000_000.0
    }

    /// A latency factor around 1.
    fn jitter(&mut self) -> f64 {
        1.0 + self.params.jitter * (2.0 * self.unit() - 1.0)
    }

    fn partition_limit(&mut self, account: usize, partition: Partition) -> &mut Limit {
        let rate = self.params.partition_entities_per_second;
        self.partitions
            .entry((account, partition))
            .or_insert_with(|| Limit::new(rate))
    }

    /// One attempt at `request` arriving at `t`: when it completes, or `Err(when)` the 503
    /// comes back if its account or partition would make it wait too long. A refused request
    /// takes no capacity.
    pub fn attempt(&mut self, t: f64, request: &Request) -> Result<f64, f64> {
        let account = self.account_of(request.role);
        let entities = request.entities.max(1.0);
        let max_wait = self.params.throttle_after_ms / 1000.0;
        if account == 0 && self.in_outage(t) {
            // Unreachable: the request fails after the time a refusal takes.
            self.accounts[account].throttled += 1;
            return Err(t + self.params.busy_reply_ms / 1000.0 * self.jitter());
        }
        let mut start = self.accounts[account].limit.peek(t, entities);
        if let Some(partition) = request.partition {
            start = start.max(self.partition_limit(account, partition).peek(t, entities));
        }
        if start - t > max_wait {
            self.accounts[account].throttled += 1;
            if request.purpose == Purpose::Application {
                self.accounts[account].app_refused += entities;
            }
            return Err(t + self.params.busy_reply_ms / 1000.0 * self.jitter());
        }
        let mut served = self.accounts[account].limit.admit(t, entities);
        if let Some(partition) = request.partition {
            served = served.max(self.partition_limit(account, partition).admit(t, entities));
        }
        let charged = &mut self.accounts[account];
        charged.entities += entities;
        match request.purpose {
            Purpose::Bookkeeping => charged.bookkeeping += entities,
            Purpose::Application => charged.app_served += entities,
            Purpose::Rows => {}
        }
        Ok(served + request.latency * self.jitter())
    }

    /// Whether the scanned account is unreachable at `t` (`--outage-at-s`, `--outage-s`).
    pub fn in_outage(&self, t: f64) -> bool {
        let p = &self.params;
        p.outage_s > 0.0 && t >= p.outage_at_s && t < p.outage_at_s + p.outage_s
    }

    /// `request` with retries after 503s as `policy` says: when it completes, or `Err(when)`
    /// the caller gives up.
    pub fn send(&mut self, t: f64, policy: &RetryPolicy, request: &Request) -> Result<f64, f64> {
        let mut now = t;
        let mut retry = 0;
        loop {
            match self.attempt(now, request) {
                Ok(done) => return Ok(done),
                Err(refused) if retry < policy.max_retries => {
                    retry += 1;
                    let unit = self.unit();
                    now = refused + policy.delay(retry, unit, None).as_secs_f64();
                }
                Err(refused) => return Err(refused),
            }
        }
    }

    /// A message put on queue `queue` at `t` by the host's output binding (which retries on its
    /// own: a put waits rather than fails): when it is on the queue.
    pub fn put_message(&mut self, t: f64, queue: usize) -> f64 {
        let rate = self.params.queue_messages_per_second;
        let start = self
            .queues
            .entry(queue)
            .or_insert_with(|| Limit::new(rate))
            .admit(t, 1.0);
        let account = self.account_of(Role::App);
        let start = start.max(self.accounts[account].limit.admit(t, 1.0));
        self.charge_messages(1.0);
        start + self.params.queue_put_ms / 1000.0 * self.jitter()
    }

    /// One attempt at a message the scan's action puts on its output queue `queue` (an index
    /// apart from the work queues') in the scanned account, arriving at `t`: when it is on the
    /// queue, or `Err(when)` the 503 comes back if the queue's target or the account's would make
    /// it wait too long (as `attempt`). It counts as the scan's work, not its bookkeeping.
    pub fn put_output_message(&mut self, t: f64, queue: usize) -> Result<f64, f64> {
        let rate = self.params.queue_messages_per_second;
        let account = self.account_of(Role::Source);
        let queue = self.queues.entry(queue).or_insert_with(|| Limit::new(rate));
        let start = queue
            .peek(t, 1.0)
            .max(self.accounts[account].limit.peek(t, 1.0));
        if start - t > self.params.throttle_after_ms / 1000.0 {
            self.accounts[account].throttled += 1;
            return Err(t + self.params.busy_reply_ms / 1000.0 * self.jitter());
        }
        let served = queue
            .admit(t, 1.0)
            .max(self.accounts[account].limit.admit(t, 1.0));
        self.accounts[account].entities += 1.0;
        Ok(served + self.params.queue_put_ms / 1000.0 * self.jitter())
    }

    /// The host's get and delete of one delivered message: two messages' worth of the app
    /// account's target (they are never what a step waits on, so they take capacity at once).
    pub fn take_message(&mut self, t: f64) {
        let account = self.account_of(Role::App);
        self.accounts[account].limit.admit(t, 2.0);
        self.charge_messages(2.0);
    }

    fn charge_messages(&mut self, messages: f64) {
        let account = self.account_of(Role::App);
        self.accounts[account].entities += messages;
        self.accounts[account].bookkeeping += messages;
    }

    /// Drops calendar slots before `t` (no request arrives before the earliest running step's
    /// start), so that hours of virtual time keep a bounded memory.
    pub fn forget_before(&mut self, t: f64) {
        for account in &mut self.accounts {
            account.limit.forget_before(t);
        }
        for limit in self.partitions.values_mut() {
            limit.forget_before(t);
        }
        for limit in self.queues.values_mut() {
            limit.forget_before(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_serves_its_rate_and_no_more() {
        let mut limit = Limit::new(1000.0);
        let mut last = 0.0;
        for _ in 0..2000 {
            last = limit.admit(0.0, 1.0);
        }
        assert!((last - 1.99).abs() < 1e-6, "{last}");
        assert!(limit.waited > 900.0);
    }

    #[test]
    fn arrivals_out_of_order_use_the_capacity_of_their_own_time() {
        let mut limit = Limit::new(1000.0);
        // A step simulated first books capacity far in the future ...
        for i in 0..100 {
            limit.admit(10.0 + i as f64 * 0.001, 1.0);
        }
        // ... which does not delay a request arriving earlier.
        assert_eq!(limit.admit(1.0, 1.0), 1.0);
        assert!(limit.waited < 1e-9, "{}", limit.waited);
        // A big request spreads over consecutive slots.
        let mut partition = Limit::new(2000.0);
        assert!((partition.admit(0.0, 1000.0) - 0.49).abs() < 1e-6);
    }
}
