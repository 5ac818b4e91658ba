//! One Markdown row per simulated scan, and the CSV of rows read over time.

use std::io::Write;
use std::path::Path;

use crate::cases::Outcome;
use crate::params::Plan;
use crate::stats::ROW_WINDOW;
use crate::{DesignName, ReportKind};

/// List prices used for the cost report (East US, LRS, pay as you go, as docs/deployment.md
/// gives them; check the Azure pricing pages before relying on them): table and queue
/// transactions per 10,000; executions per million and GB-seconds, Consumption (1.5 GB per
/// instance at most) and Flex Consumption on demand (the instance's memory).
const TABLE_PER_10K: f64 = 0.00036;
const QUEUE_PER_10K: f64 = 0.004;

/// (USD per million executions, USD per GB-second, GB per instance) of a plan.
fn compute_prices(plan: Plan, memory_mb: u32) -> (f64, f64, f64) {
    match plan {
        Plan::Flex => (0.40, 0.000026, f64::from(memory_mb) / 1024.0),
        _ => (0.20, 0.000016, 1.5),
    }
}

/// The published measurements of the blog's prefix-scan copies within one storage account
/// (Consumption plan, December 2020): duration, longest execution, most executions in 30 s.
fn published(case: &str) -> Option<&'static str> {
    match case {
        "copy-within-3.5m" => Some("5 min; 7.8 s; 58,471"),
        "copy-within-7m" => Some("6 min; 11.5 s; 94,134"),
        "copy-within-35m" => Some("28 min; 177 s; 110,857"),
        _ => None,
    }
}

/// Blob writes per 10,000 (hot tier, LRS), for exports.
const BLOB_WRITE_PER_10K: f64 = 0.055;

/// What the scan cost per million rows at list prices, USD.
pub fn price_per_million(o: &Outcome) -> f64 {
    let s = &o.stats;
    let per_million = |n: f64| n * 1_000_000.0 / o.table_rows.max(1) as f64;
    let (per_million_executions, gb_second, gb) =
        compute_prices(o.params.plan, o.params.instance_memory_mb);
    let instance_seconds = if s.instance_seconds > 0.0 {
        s.instance_seconds
    } else {
        s.peak_instances as f64 * s.seconds
    };
    (per_million(s.queries as f64)
        + per_million(s.writes as f64)
        + per_million(s.ledger_requests as f64))
        / 10_000.0
        * TABLE_PER_10K
        + per_million(s.queue_operations as f64) / 10_000.0 * QUEUE_PER_10K
        + per_million(s.blob_writes as f64) / 10_000.0 * BLOB_WRITE_PER_10K
        + per_million(s.executions as f64) / 1_000_000.0 * per_million_executions
        + per_million(instance_seconds) * gb * gb_second
}

pub fn print_header(kind: ReportKind) {
    if kind == ReportKind::Cost {
        println!(
            "| design | case | plan | per million rows: executions | queries | write transactions | \
             ledger requests | queue operations | instance-seconds | price (USD) |"
        );
        println!("|{}", " --- |".repeat(10));
        return;
    }
    println!(
        "| case | plan | capacity (entities/s) | cap | app load | minutes | bound (min) | bound by | \
         x bound | app refused | failed for good | longest step (s) | peak instances | \
         ledger partition, mean / busiest 10 s (entities/s) | USD per million rows | \
         steps given back | shard conflicts | learned cap |"
    );
    println!("|{}", " --- |".repeat(18));
}

pub fn print_row(kind: ReportKind, o: &Outcome) {
    if kind == ReportKind::Cost {
        print_cost_row(o);
    } else if o.design == DesignName::Published {
        print_published_row(o);
    } else {
        print_tablescan_row(o);
        print_diagnostics(o);
    }
}

fn plan_name(plan: Plan) -> &'static str {
    match plan {
        Plan::Consumption => "consumption",
        Plan::ConsumptionWindows => "consumption-windows",
        Plan::Flex => "flex",
    }
}

/// A row of the cost table: each kind of request per million rows, and the price.
fn print_cost_row(o: &Outcome) {
    let s = &o.stats;
    let plan = plan_name(o.params.plan);
    let design = match o.design {
        DesignName::Tablescan => "tablescan",
        DesignName::Published => "published",
    };
    let per_million = |n: f64| n * 1_000_000.0 / o.table_rows.max(1) as f64;
    let executions = per_million(s.executions as f64);
    let queries = per_million(s.queries as f64);
    let writes = per_million(s.writes as f64);
    let ledger = per_million(s.ledger_requests as f64);
    let queue = per_million(s.queue_operations as f64);
    let instance_seconds = per_million(if s.instance_seconds > 0.0 {
        s.instance_seconds
    } else {
        s.peak_instances as f64 * s.seconds
    });
    let price = price_per_million(o);
    println!(
        "| {design} | {} | {plan} | {executions:.0} | {queries:.0} | {writes:.0} | {ledger:.0} | \
         {queue:.0} | {instance_seconds:.0} | {price:.4} |",
        o.case
    );
}

/// A row of the published design, beside its published figures.
fn print_published_row(o: &Outcome) {
    let s = &o.stats;
    let plan = plan_name(o.params.plan);
    println!(
        "| {} (published design) | {plan} | {:.0} | - | - | {:.1} | {:.1} | {} | {:.2} | - | {} | {:.1} | {} | none | {:.4} | - | - | {} executions in the busiest 30 s; published: {} |",
        o.case,
        o.params.account_entities_per_second,
        s.seconds / 60.0,
        o.bound.seconds / 60.0,
        o.bound.by,
        s.seconds / o.bound.seconds.max(1e-9),
        s.failed_for_good,
        s.longest_execution,
        s.peak_instances,
        price_per_million(o),
        s.most_executions_per_window(),
        published(&o.case).unwrap_or("-"),
    );
}

/// A run's time over its bound, or "-" for a bound under a second (a partition-keys scan of one
/// partition is bound by two rows' reads: the ratio would only say how long a step's fixed
/// costs are against a millisecond).
fn times_bound(seconds: f64, bound: f64) -> String {
    if bound < 1.0 {
        "-".to_string()
    } else {
        format!("{:.2}", seconds / bound)
    }
}

/// A row of tablescan's time table.
fn print_tablescan_row(o: &Outcome) {
    let s = &o.stats;
    let plan = plan_name(o.params.plan);
    let cap = if o.params.cap > 0.0 {
        format!("{:.0}", o.params.cap)
    } else {
        "default".to_string()
    };
    let learned = s.learned_cap.map_or("-".to_string(), |c| format!("{c:.0}"));
    let times_bound = times_bound(s.seconds, o.bound.seconds);
    println!(
        "| {} | {plan} | {:.0} | {cap} | {:.0} | {:.1} | {:.1} | {} | {times_bound} | {:.2}% | {} | {:.1} | {} | {:.0} / {:.0} | {:.4} | {} | {} | {learned} |",
        o.case,
        o.params.account_entities_per_second,
        o.params.app_load,
        s.seconds / 60.0,
        o.bound.seconds / 60.0,
        o.bound.by,
        100.0 * o.app_refused_share,
        s.failed_for_good,
        s.longest_execution,
        s.peak_instances,
        s.ledger_mean(),
        s.ledger_peak(),
        price_per_million(o),
        s.given_back,
        s.shard_conflicts,
    );
}

/// What the table has no column for, on stderr: where the ledger's load came from, and rows
/// not acted on when nothing failed (which would be a defect of the model).
fn print_diagnostics(o: &Outcome) {
    let s = &o.stats;
    eprintln!(
        "simulator: {}: ledger entities {} by steps, {} besides (status, cancel checks, re-drive, \
         {} slice and learning requests); {} renewals, {} handed on, {} re-driven, {} rounds set a cap",
        o.case,
        s.step_ledger_entities,
        s.ledger_entities_other,
        s.slice_requests,
        s.renewals,
        s.handed_on,
        s.redriven,
        s.caps_learned,
    );
    let (expected, what) = o.acted_expected();
    let read: u64 = s.rows_per_window.iter().sum();
    eprintln!(
        "simulator: {}: {:.1} s, {} queries, {} entities read ({:.3} per {}), {} rows written, \
         {} {what} acted on; steps failed on the ledger {}, on a read {}, on a write {}",
        o.case,
        s.seconds,
        s.queries,
        read,
        read as f64 / expected.max(1) as f64,
        what.trim_end_matches('s'),
        s.rows_written,
        s.rows_acted,
        s.failed_on_ledger,
        s.failed_on_read,
        s.failed_on_write,
    );
    eprintln!(
        "simulator: {}: {} parked, {} unparked by steps with room, {} sent by the sweep",
        o.case, s.parked, s.unparked, s.swept,
    );
    if s.rows_acted != expected && s.failed_for_good == 0 {
        eprintln!(
            "simulator: {}: {} {what} acted of {}",
            o.case, s.rows_acted, expected
        );
    }
}

/// Rows read per second, per window, into DIR/<case>-<design>-<plan>.csv.
pub fn write_csv(dir: &Path, o: &Outcome) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let name = format!(
        "{}-{}-{}.csv",
        o.case,
        format!("{:?}", o.design).to_lowercase(),
        format!("{:?}", o.params.plan).to_lowercase()
    );
    let mut file = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
    writeln!(file, "seconds,rows_per_second")?;
    for (i, rows) in o.stats.rows_per_window.iter().enumerate() {
        writeln!(
            file,
            "{},{:.1}",
            i as f64 * ROW_WINDOW,
            *rows as f64 / ROW_WINDOW
        )?;
    }
    file.flush()
}

#[cfg(test)]
mod tests {
    use super::times_bound;

    #[test]
    fn a_bound_under_a_second_has_no_ratio() {
        assert_eq!(times_bound(0.2, 0.001), "-");
        assert_eq!(times_bound(66.0, 60.0), "1.10");
        assert_eq!(times_bound(1.0, 1.0), "1.00");
    }
}
