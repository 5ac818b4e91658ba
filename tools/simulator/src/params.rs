//! Every parameter of the model, with its default and where the default comes from. Each is a
//! command-line flag (`--name value`).

use tablescan::scan::ScanOptions;

/// The model's parameters.
#[derive(Debug, Clone)]
pub struct Params {
    // Storage (Azure Table and Queue scalability targets, docs "Scalability and performance
    // targets for Table storage / Queue storage").
    /// Requests per second one storage account serves (a query page or a batch is one request).
    pub account_requests_per_second: f64,
    /// Entities per second one partition serves.
    pub partition_entities_per_second: f64,
    /// Messages per second one queue accepts.
    pub queue_messages_per_second: f64,
    /// Fixed part of a query's latency, ms. With `query_ms_per_entity` this gives 137 ms for a
    /// full page: the published serial read of 3.5M rows took 8 minutes (3,500 pages).
    pub query_base_ms: f64,
    pub query_ms_per_entity: f64,
    /// Latency of an entity group transaction, ms, plus per entity.
    pub batch_base_ms: f64,
    pub batch_ms_per_entity: f64,
    /// Latency of a queue put, ms.
    pub queue_put_ms: f64,
    /// Latency varies uniformly by this fraction either way (seeded, so runs repeat exactly).
    pub jitter: f64,
    /// Rows per partition server range: a page never crosses one (it ends early, with a
    /// continuation), as the service does at partition-server boundaries.
    pub server_range_rows: u64,
    /// A query that would wait longer than this on a busy partition is refused with 503
    /// ServerBusy instead (the service throttles rather than queue), ms. Not documented by
    /// Azure: assumed 3 s, below the 5 s a query may run on the server.
    pub throttle_after_ms: f64,
    /// How long a failed message stays invisible before it is retried (host.json), ms.
    pub retry_after_ms: f64,
    // Functions (target-based scaling docs; the Queues extension's defaults).
    /// Most instances: 100 on Consumption, 1,000 on Flex Consumption.
    pub max_instances: usize,
    pub first_instances: usize,
    /// Concurrent invocations per instance: batchSize 16 + newBatchThreshold 8.
    pub per_instance: usize,
    /// How often the scale controller decides, ms, and how many instances it may add at once.
    pub scale_interval_ms: f64,
    pub scale_step: usize,
    /// Seconds before a new instance takes work.
    pub cold_start_ms: f64,
    /// Delay before a queued message is picked up, ms (polling; the local host polls at most
    /// every 2 s, a busy one almost at once).
    pub poll_ms: f64,
    // The scan.
    pub page_size: u16,
    pub max_queries: u32,
    pub max_seconds: f64,
    /// Pieces a step's remainder is handed on in (ScanOptions::fan_out).
    pub fan_out: usize,
    /// Queries of the first step; each level below may make twice as many
    /// (ScanOptions::first_step_queries).
    pub first_step_queries: u32,
    /// Simulation tick, ms.
    pub tick_ms: f64,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            account_requests_per_second: 20_000.0,
            partition_entities_per_second: 2_000.0,
            queue_messages_per_second: 2_000.0,
            query_base_ms: 30.0,
            query_ms_per_entity: 0.107,
            batch_base_ms: 30.0,
            batch_ms_per_entity: 0.1,
            queue_put_ms: 10.0,
            jitter: 0.2,
            server_range_rows: 250_000,
            throttle_after_ms: 3_000.0,
            retry_after_ms: 30_000.0,
            max_instances: 100,
            first_instances: 1,
            per_instance: 24,
            scale_interval_ms: 1_000.0,
            scale_step: 4,
            cold_start_ms: 1_000.0,
            poll_ms: 200.0,
            page_size: 1000,
            max_queries: 20,
            max_seconds: 15.0,
            fan_out: 4,
            first_step_queries: ScanOptions::default().first_step_queries,
            tick_ms: 5.0,
            seed: 1,
        }
    }
}

impl Params {
    /// Applies `--name value` flags; returns the arguments that are not parameters.
    pub fn apply_flags(&mut self, args: &[String]) -> Result<Vec<String>, String> {
        let mut rest = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let name = args[i].trim_start_matches("--").replace('-', "_");
            let Some(value) = args.get(i + 1) else {
                rest.push(args[i].clone());
                i += 1;
                continue;
            };
            let number = || {
                value
                    .parse::<f64>()
                    .map_err(|_| format!("--{name} takes a number"))
            };
            match name.as_str() {
                "account_requests_per_second" => self.account_requests_per_second = number()?,
                "partition_entities_per_second" => self.partition_entities_per_second = number()?,
                "queue_messages_per_second" => self.queue_messages_per_second = number()?,
                "query_base_ms" => self.query_base_ms = number()?,
                "query_ms_per_entity" => self.query_ms_per_entity = number()?,
                "batch_base_ms" => self.batch_base_ms = number()?,
                "batch_ms_per_entity" => self.batch_ms_per_entity = number()?,
                "queue_put_ms" => self.queue_put_ms = number()?,
                "jitter" => self.jitter = number()?,
                "server_range_rows" => self.server_range_rows = number()? as u64,
                "throttle_after_ms" => self.throttle_after_ms = number()?,
                "retry_after_ms" => self.retry_after_ms = number()?,
                "max_instances" => self.max_instances = number()? as usize,
                "first_instances" => self.first_instances = number()? as usize,
                "per_instance" => self.per_instance = number()? as usize,
                "scale_interval_ms" => self.scale_interval_ms = number()?,
                "scale_step" => self.scale_step = number()? as usize,
                "cold_start_ms" => self.cold_start_ms = number()?,
                "poll_ms" => self.poll_ms = number()?,
                "page_size" => self.page_size = number()? as u16,
                "max_queries" => self.max_queries = number()? as u32,
                "max_seconds" => self.max_seconds = number()?,
                "fan_out" => self.fan_out = number()? as usize,
                "first_step_queries" => self.first_step_queries = number()? as u32,
                "tick_ms" => self.tick_ms = number()?,
                "seed" => self.seed = number()? as u64,
                _ => {
                    rest.push(args[i].clone());
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        Ok(rest)
    }
}
