//! The storage model: latency of each request, and the service's throughput targets as rate
//! limits. A limit admits work in order: a request that finds the limit busy waits.

use std::collections::HashMap;

use tablescan::actions::PROCESS_WRITES_IN_FLIGHT;

use crate::params::Params;

/// A rate limit: `rate` units per second, kept as a sparse calendar of 10 ms slots. Work is
/// admitted into the first slots at or after its arrival that have room, so requests arriving in
/// any order (steps are simulated one after another, each on its own clock) share capacity the
/// way requests arriving at those times would.
#[derive(Debug, Clone)]
pub struct Limit {
    per_slot: f64,
    used: HashMap<u64, f64>,
    /// Seconds requests spent waiting on this limit.
    pub waited: f64,
}

const SLOT: f64 = 0.01;

impl Limit {
    pub fn new(rate: f64) -> Self {
        Limit {
            per_slot: rate * SLOT,
            used: HashMap::new(),
            waited: 0.0,
        }
    }

    /// When `units` arriving at `t` would be served, without booking them.
    pub fn peek(&self, t: f64, units: f64) -> f64 {
        let arrival = (t / SLOT) as u64;
        let mut slot = arrival;
        let mut left = units;
        let mut served = t;
        while left > 1e-9 {
            let room = self.per_slot - self.used.get(&slot).copied().unwrap_or(0.0);
            if room > 1e-9 {
                left -= room.min(left);
                served = served.max(if slot == arrival {
                    t
                } else {
                    slot as f64 * SLOT
                });
            }
            slot += 1;
        }
        served
    }

    /// Admits `units` arriving at time `t` (seconds); returns when the last of them is served.
    pub fn admit(&mut self, t: f64, units: f64) -> f64 {
        let arrival = (t / SLOT) as u64;
        let mut slot = arrival;
        let mut left = units;
        let mut served = t;
        while left > 1e-9 {
            let used = self.used.entry(slot).or_insert(0.0);
            let room = self.per_slot - *used;
            if room > 1e-9 {
                let take = room.min(left);
                *used += take;
                left -= take;
                // Served within its arrival slot: at once; in a later slot: when that slot opens.
                served = served.max(if slot == arrival {
                    t
                } else {
                    slot as f64 * SLOT
                });
            }
            slot += 1;
        }
        self.waited += served - t;
        served
    }
}

/// Everything the storage accounts and queues share across steps.
pub struct Storage {
    pub params: Params,
    pub source: Limit,
    pub target: Limit,
    pub queues: Limit,
    partitions: HashMap<(bool, usize), Limit>,
    /// Each instance's cap on writes in flight, as a rate.
    instances: HashMap<usize, Limit>,
    /// Entities seen per target partition until it is busy enough to need a limit.
    partition_load: HashMap<usize, u64>,
    pub partition_wait: f64,
    pub requests: u64,
    pub target_requests: u64,
    /// Queries refused with 503 ServerBusy.
    pub throttled: u64,
    random: u64,
}

impl Storage {
    pub fn new(params: Params) -> Self {
        Storage {
            source: Limit::new(params.account_requests_per_second),
            target: Limit::new(params.account_requests_per_second),
            queues: Limit::new(params.queue_messages_per_second),
            partitions: HashMap::new(),
            instances: HashMap::new(),
            partition_load: HashMap::new(),
            partition_wait: 0.0,
            requests: 0,
            target_requests: 0,
            throttled: 0,
            random: params.seed ^ 0xA076_1D64_78BD_642F,
            params,
        }
    }

    /// A seeded number in [0, 1), for retry jitter.
    pub fn unit(&mut self) -> f64 {
        (self.jitter() - 1.0 + self.params.jitter) / (2.0 * self.params.jitter).max(1e-9)
    }

    fn jitter(&mut self) -> f64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let unit = (self.random % 10_000) as f64 / 10_000.0;
        1.0 + self.params.jitter * (2.0 * unit - 1.0)
    }

    /// One partition's throughput limit (`target` for the copy's target account).
    fn partition(&mut self, target: bool, index: usize) -> &mut Limit {
        let rate = self.params.partition_entities_per_second;
        self.partitions
            .entry((target, index))
            .or_insert_with(|| Limit::new(rate))
    }

    /// A query page returning `partitions` (index, rows) at time `t`: when it completes, or
    /// `Err(when)` if a partition was too busy and the service answered 503 ServerBusy.
    pub fn query(&mut self, t: f64, partitions: &[(usize, u32)]) -> Result<f64, f64> {
        self.requests += 1;
        let mut start = self.source.admit(t, 1.0);
        let entities: u32 = partitions.iter().map(|p| p.1).sum();
        // Small slices of a partition never approach its target; only track the big ones.
        let busy: Vec<(usize, u32)> = partitions
            .iter()
            .copied()
            .filter(|(_, rows)| *rows >= 100)
            .collect();
        let max_wait = self.params.throttle_after_ms / 1000.0;
        for (index, rows) in &busy {
            if self.partition(false, *index).peek(start, f64::from(*rows)) - start > max_wait {
                // The service refuses rather than queueing: the answer comes back quickly.
                self.throttled += 1;
                return Err(start + self.params.query_base_ms / 1000.0 * self.jitter());
            }
        }
        for (index, rows) in &busy {
            let served = self.partition(false, *index).admit(start, f64::from(*rows));
            self.partition_wait += served - start;
            start = start.max(served);
        }
        let latency = (self.params.query_base_ms
            + self.params.query_ms_per_entity * f64::from(entities))
            / 1000.0;
        Ok(start + latency * self.jitter())
    }

    /// An entity group transaction of `entities` rows into target partition `index`, sent by a
    /// step on `instance`.
    pub fn batch(&mut self, t: f64, instance: usize, index: usize, entities: usize) -> f64 {
        self.target_requests += 1;
        // One process keeps at most PROCESS_WRITES_IN_FLIGHT writes in flight: at the base
        // latency, that many per latency period.
        let rate = PROCESS_WRITES_IN_FLIGHT as f64 / (self.params.batch_base_ms / 1000.0);
        let t = self
            .instances
            .entry(instance)
            .or_insert_with(|| Limit::new(rate))
            .admit(t, 1.0);
        let start = self.target.admit(t, 1.0);
        // Only a partition that receives more than a second's worth of its target can be slowed
        // by it; tracking every small one would cost memory for nothing.
        let load = self.partition_load.entry(index).or_insert(0);
        *load += entities as u64;
        let served = if *load as f64 > self.params.partition_entities_per_second {
            self.partition(true, index).admit(start, entities as f64)
        } else {
            start
        };
        self.partition_wait += served - start;
        let latency = (self.params.batch_base_ms
            + self.params.batch_ms_per_entity * entities as f64)
            / 1000.0;
        served.max(start) + latency * self.jitter()
    }

    /// A queue message put at `t`.
    pub fn put(&mut self, t: f64) -> f64 {
        let start = self.queues.admit(t, 1.0);
        start + self.params.queue_put_ms / 1000.0 * self.jitter()
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
