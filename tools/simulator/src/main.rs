//! The tablescan simulator: deterministic, virtual time. Runs a design (tablescan's real scan
//! engine and copy planner, or the published scanner) over synthetic tables of Azure size, with
//! a model of Azure Storage's scalability targets counted in entities and of the Functions
//! platform's scaling. Every parameter is a flag (`simulator --help`); docs/performance.md
//! says where each default comes from.

mod cases;
mod engine;
mod ledger_costs;
mod params;
mod published;
mod report;
mod sim;
mod stats;
mod storage;
mod table;
mod tablescan;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use cases::Case;
use params::Params;

/// See Cargo.toml: the simulator allocates and frees a page of rows per simulated request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What each simulated case prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportKind {
    /// Duration against the bound, instances, throttling, the ledger's share.
    Speed,
    /// Requests, executions and instance time per million rows, and their price.
    Cost,
}

/// Which scanner to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DesignName {
    /// tablescan: bounded steps of the real engine, a ledger, output bindings.
    Tablescan,
    /// The published prefix scanner with its copy work enqueued for other executions.
    Published,
}

#[derive(Debug, Parser)]
#[command(
    name = "simulator",
    about = "Simulates scans of huge Azure tables on virtual time and prints one Markdown row per case",
    after_help = "Cases: ACTION-SIZE with ACTION count, copy (to another account), copy-within \
                  (the same account), delete, export (to blobs), update (a property merged into \
                  every row, in place) or partition-keys (one message per distinct PartitionKey, \
                  found by seeking), and SIZE 3.5m, 7m, 35m, 350m or 5m-partition (one \
                  partition of 5 million rows). Example: simulator --case copy-35m --plan flex"
)]
struct Cli {
    #[arg(long, value_enum, default_value_t = DesignName::Tablescan)]
    design: DesignName,
    /// A case to run (repeatable).
    #[arg(long = "case", required_unless_present = "header_only", value_parser = Case::parse)]
    cases: Vec<Case>,
    /// Writes rows read per second over time to DIR/<case>-<design>-<plan>.csv.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Leaves out the table's header (for appending runs to one table).
    #[arg(long, value_enum, default_value_t = ReportKind::Speed)]
    report: ReportKind,
    #[arg(long, conflicts_with = "header_only")]
    no_header: bool,
    /// Prints the table's header and nothing else.
    #[arg(long)]
    header_only: bool,
    #[command(flatten)]
    params: Params,
}

fn main() {
    let cli = Cli::parse();
    if let Err(why) = run(&cli) {
        eprintln!("simulator: {why}");
        std::process::exit(2);
    }
}

fn run(cli: &Cli) -> Result<(), String> {
    cli.params.max_instances()?;
    for case in &cli.cases {
        case.check(cli.design)?;
    }
    if !cli.no_header {
        report::print_header(cli.report);
    }
    if cli.header_only {
        return Ok(());
    }
    for case in &cli.cases {
        let started = std::time::Instant::now();
        let outcome = cases::run(case, cli.design, &cli.params)?;
        eprintln!(
            "simulator: {} {:?} simulated in {:.1} s",
            case.name,
            cli.design,
            started.elapsed().as_secs_f64()
        );
        report::print_row(cli.report, &outcome);
        if let Some(dir) = &cli.csv {
            report::write_csv(dir, &outcome)
                .map_err(|e| format!("--csv {}: {e}", dir.display()))?;
        }
    }
    Ok(())
}
