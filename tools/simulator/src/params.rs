//! Every parameter of the model, parsed once from the command line into typed values, each with
//! its default and where the default comes from. A value out of range is refused with the flag's
//! name; no parameter silently overrides another.

use clap::{Args, ValueEnum};

/// Where the Functions app runs (azure-scale facts in docs/performance.md, "The model").
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Plan {
    /// Linux Consumption: at most 100 instances, one core each, one scale decision per interval.
    Consumption,
    /// Windows Consumption: as Linux, at most 200 instances.
    ConsumptionWindows,
    /// Flex Consumption: one instance group per queue-triggered function, 100 instances each by
    /// default (1 to 1,000), within a regional quota of cores.
    Flex,
}

impl Plan {
    /// The most instances the plan allows (per function group on Flex).
    pub fn instance_ceiling(self) -> usize {
        match self {
            Plan::Consumption => 100,
            Plan::ConsumptionWindows => 200,
            Plan::Flex => 1000,
        }
    }

    /// The instance cap when none is given.
    pub fn default_instances(self) -> usize {
        match self {
            Plan::Consumption => 100,
            Plan::ConsumptionWindows => 200,
            Plan::Flex => 100,
        }
    }
}

/// Where the scan's bookkeeping (ledger and work queues) lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AppAccount {
    /// In the account of the table being scanned (the default setup: one connection).
    Source,
    /// In an account of its own.
    Separate,
}

/// The synthetic NuGet-like table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// Package ids with about 3.4 versions each (most one or two, a few dozens).
    Catalog,
    /// Package ids with about 13.6 versions each: the catalog shape with four times the
    /// versions per id, which is what the published runs' execution counts imply (see
    /// docs/performance.md, "Calibration").
    Ids,
}

/// The model's parameters. Rates are per second; times in milliseconds unless named otherwise.
#[derive(Debug, Clone, Args)]
pub struct Params {
    // Storage: the Table service's scalability targets count entities (scanned, inserted,
    // updated or deleted), not requests; queues count messages.
    /// Entities per second one storage account serves (documented target: 20,000).
    #[arg(long, default_value_t = 20_000.0, value_parser = positive)]
    pub account_entities_per_second: f64,
    /// Entities per second one table partition serves (documented target: 2,000).
    #[arg(long, default_value_t = 2_000.0, value_parser = positive)]
    pub partition_entities_per_second: f64,
    /// Messages per second one queue accepts (documented target: 2,000).
    #[arg(long, default_value_t = 2_000.0, value_parser = positive)]
    pub queue_messages_per_second: f64,
    /// A request that would wait longer than this for capacity is answered 503 Server Busy
    /// instead. Not documented: assumed.
    #[arg(long, default_value_t = 2_000.0, value_parser = positive)]
    pub throttle_after_ms: f64,
    /// How long a refused request takes to come back with its 503. Not documented: assumed.
    #[arg(long, default_value_t = 300.0, value_parser = non_negative)]
    pub busy_reply_ms: f64,
    /// Fixed part of a query's latency; with the per-entity part a full page takes 137 ms, the
    /// published serial read (3.5M rows in about 8 minutes).
    #[arg(long, default_value_t = 30.0, value_parser = non_negative)]
    pub query_base_ms: f64,
    #[arg(long, default_value_t = 0.107, value_parser = non_negative)]
    pub query_ms_per_entity: f64,
    /// Latency of an entity group transaction, plus per entity.
    #[arg(long, default_value_t = 30.0, value_parser = non_negative)]
    pub batch_base_ms: f64,
    #[arg(long, default_value_t = 0.1, value_parser = non_negative)]
    pub batch_ms_per_entity: f64,
    /// Latency of a single-entity request (a ledger read or claim).
    #[arg(long, default_value_t = 15.0, value_parser = non_negative)]
    pub entity_ms: f64,
    /// Latency of a queue put.
    #[arg(long, default_value_t = 10.0, value_parser = non_negative)]
    pub queue_put_ms: f64,
    /// Latency varies uniformly by this fraction either way (seeded: runs repeat exactly).
    #[arg(long, default_value_t = 0.2, value_parser = fraction)]
    pub jitter: f64,
    /// Rows per partition-server range: a page never crosses one (it ends early with a
    /// continuation), as the service does at server boundaries.
    #[arg(long, default_value_t = 250_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub server_range_rows: u64,

    // Functions.
    #[arg(long, value_enum, default_value_t = Plan::Consumption)]
    pub plan: Plan,
    /// Most instances (per function group on Flex); defaults to the plan's default.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub max_instances: Option<u64>,
    /// Flex instance memory: 512, 2048 or 4096 MB (0.25, 1 or 2 cores).
    #[arg(long, default_value_t = 2048, value_parser = instance_memory)]
    pub instance_memory_mb: u32,
    /// Flex regional quota of cores across all instances of the subscription.
    #[arg(long, default_value_t = 250.0, value_parser = positive)]
    pub region_cores: f64,
    /// Invocations one instance runs at once, and the target-based scaler's target per
    /// instance: the Queues extension's batchSize 16 + newBatchThreshold 8.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub per_instance: u64,
    /// Seconds between two scale decisions. Consumption documents "at most once every 30
    /// seconds" for non-HTTP triggers; Flex documents none (defaults to 5 s, assumed).
    #[arg(long, value_parser = positive)]
    pub scale_interval_s: Option<f64>,
    /// Instances one decision may add (target-based scaling adds up to four at a time).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub scale_step: u64,
    /// Seconds before a new instance takes work. Not documented: assumed.
    #[arg(long, default_value_t = 5.0, value_parser = non_negative)]
    pub cold_start_s: f64,
    /// Delay between a message becoming visible and an invocation picking it up.
    #[arg(long, default_value_t = 200.0, value_parser = non_negative)]
    pub poll_ms: f64,
    /// The host's work per invocation (dispatch, bindings) before the handler starts.
    #[arg(long, default_value_t = 5.0, value_parser = non_negative)]
    pub invocation_ms: f64,
    /// How long a failed message stays invisible before it is delivered again (host.json
    /// visibilityTimeout).
    #[arg(long, default_value_t = 30.0, value_parser = non_negative)]
    pub visibility_timeout_s: f64,
    /// Deliveries before a message goes to the poison queue (host.json maxDequeueCount).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max_dequeue_count: u32,
    /// Handler CPU per 1,000 rows on one core, ms (benches/handler_cost: count 3.19, copy
    /// 8.16, enqueue 8.09); copy's figure is used for copy and delete.
    #[arg(long, default_value_t = 3.19, value_parser = non_negative)]
    pub count_cpu_ms_per_1000: f64,
    #[arg(long, default_value_t = 8.16, value_parser = non_negative)]
    pub copy_cpu_ms_per_1000: f64,

    // The scan's bookkeeping.
    #[arg(long, value_enum, default_value_t = AppAccount::Source)]
    pub app_account: AppAccount,
    /// Seconds between status reads of a client following the scan (0: nobody polls). The
    /// README's client polls twice a second.
    #[arg(long, default_value_t = 5.0, value_parser = non_negative)]
    pub status_poll_s: f64,
    /// Seconds between two re-drive sweeps (the RedriveScans timer: 5 minutes).
    #[arg(long, default_value_t = 300.0, value_parser = positive)]
    pub sweep_s: f64,
    /// The claim's lease; steps longer than this can run twice.
    #[arg(long, default_value_t = 60.0, value_parser = positive)]
    pub lease_s: f64,

    // What else the account serves, and what goes wrong.
    /// Entities per second an application sends to the scanned account while the scan runs, in
    /// requests of 100 entities every 10 ms's share (0: none). The account serves it beside the
    /// scan; the report gives the share of it the account refused.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub app_load: f64,
    /// The scan's cap in entities per second (the request's `maxRowsPerSecond`), paced across
    /// every instance by the slices protocol (crates/pace); 0: no cap set (the default
    /// behaviour: the account's back-off, and a cap learned from its refusals).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub cap: f64,
    /// An outage: from this second of the scan every request to the scanned account fails
    /// (0 with --outage-s 0: none).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub outage_at_s: f64,
    /// How long the outage lasts, seconds.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub outage_s: f64,
    /// How long an item may keep failing transiently before it fails for good (the handler's
    /// outage window, `TABLESCAN_OUTAGE_WINDOW_SECONDS`: 30 minutes).
    #[arg(long, default_value_t = 1800.0, value_parser = positive)]
    pub outage_window_s: f64,

    // The scan engine.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub page_size: u16,
    /// Queries one step may make.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_queries: u32,
    /// Seconds one step may read for.
    #[arg(long, default_value_t = 15.0, value_parser = positive)]
    pub max_seconds: f64,
    /// Pieces a step's remainder is handed on in (the engine's default).
    #[arg(long, default_value_t = tablescan::scan::ScanOptions::default().fan_out as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub fan_out: u64,
    /// Queries of the first step; each level below may make twice as many.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub first_step_queries: u32,

    // The table.
    #[arg(long, value_enum, default_value_t = Shape::Ids)]
    pub shape: Shape,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Params {
    /// The instance cap, checked against the plan's ceiling.
    pub fn max_instances(&self) -> Result<usize, String> {
        let cap = self
            .max_instances
            .map_or(self.plan.default_instances(), |n| n as usize);
        if cap > self.plan.instance_ceiling() {
            return Err(format!(
                "--max-instances {cap} is more than the {:?} plan allows ({})",
                self.plan,
                self.plan.instance_ceiling()
            ));
        }
        Ok(cap)
    }

    /// Seconds between scale decisions.
    pub fn scale_interval(&self) -> f64 {
        self.scale_interval_s.unwrap_or(match self.plan {
            Plan::Flex => 5.0,
            _ => 30.0,
        })
    }

    /// Cores of one instance.
    pub fn cores(&self) -> f64 {
        match self.plan {
            Plan::Flex => f64::from(self.instance_memory_mb) / 2048.0,
            _ => 1.0,
        }
    }

    /// Instances the Flex regional quota allows across all groups (no limit elsewhere).
    pub fn quota_instances(&self) -> usize {
        match self.plan {
            Plan::Flex => (self.region_cores / self.cores()).floor().max(1.0) as usize,
            _ => usize::MAX,
        }
    }
}

fn number(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!("{text} is not a finite number"))
    }
}

fn positive(text: &str) -> Result<f64, String> {
    let value = number(text)?;
    if value > 0.0 {
        Ok(value)
    } else {
        Err(format!("{text} must be more than 0"))
    }
}

fn non_negative(text: &str) -> Result<f64, String> {
    let value = number(text)?;
    if value >= 0.0 {
        Ok(value)
    } else {
        Err(format!("{text} must be 0 or more"))
    }
}

fn fraction(text: &str) -> Result<f64, String> {
    let value = number(text)?;
    if (0.0..1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{text} must be at least 0 and below 1"))
    }
}

fn instance_memory(text: &str) -> Result<u32, String> {
    match text {
        "512" => Ok(512),
        "2048" => Ok(2048),
        "4096" => Ok(4096),
        _ => Err(format!(
            "{text} is not a Flex instance size (512, 2048 or 4096)"
        )),
    }
}

/// Parses `args` as the command line's parameters (for tests).
#[cfg(test)]
pub fn parse(args: &[&str]) -> Result<Params, String> {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        params: Params,
    }

    Cli::try_parse_from(std::iter::once("simulator").chain(args.iter().copied()))
        .map(|c| c.params)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_their_flag() {
        for (args, flag) in [
            (&["--per-instance", "0"][..], "--per-instance"),
            (&["--max-seconds=0"][..], "--max-seconds"),
            (&["--jitter", "1.5"][..], "--jitter"),
            (&["--page-size", "70000"][..], "--page-size"),
            (
                &["--instance-memory-mb", "1000"][..],
                "--instance-memory-mb",
            ),
            (
                &["--account-entities-per-second=-5"][..],
                "--account-entities-per-second",
            ),
        ] {
            let error = parse(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} accepted"));
            assert!(error.contains(flag), "{args:?}: {error}");
        }
    }

    #[test]
    fn the_plan_sets_defaults_without_overriding_explicit_values() {
        let flex = parse(&["--plan", "flex"]).unwrap();
        assert_eq!(flex.max_instances().unwrap(), 100);
        assert_eq!(flex.scale_interval(), 5.0);
        let capped = parse(&["--max-instances", "40", "--plan", "flex"]).unwrap();
        assert_eq!(capped.max_instances().unwrap(), 40);
        let over = parse(&["--plan", "consumption", "--max-instances", "300"]).unwrap();
        assert!(over
            .max_instances()
            .unwrap_err()
            .contains("--max-instances"));
        assert_eq!(parse(&[]).unwrap().scale_interval(), 30.0);
    }

    #[test]
    fn flex_instances_follow_their_size_and_the_quota() {
        let small = parse(&["--plan", "flex", "--instance-memory-mb", "512"]).unwrap();
        assert_eq!(small.cores(), 0.25);
        assert_eq!(small.quota_instances(), 1000);
        let default = parse(&["--plan", "flex"]).unwrap();
        assert_eq!(default.quota_instances(), 250);
    }
}
