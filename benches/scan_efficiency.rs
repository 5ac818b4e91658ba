//! How many queries a scan issues, against the serial page count, on the in-memory model.
//!
//! Counts, not timings: the model answers instantly, so what is measured is the algorithm's
//! query count and the shape of its work tree (steps, longest chain of dependent steps), which
//! are deterministic for a given table.

use std::time::Duration;

use tablescan::scan::driver::{run_to_completion, RunReport};
use tablescan::scan::keys::KeyRange;
use tablescan::scan::model::{nuget_like, MemoryReader, MemoryTable, Quirks};
use tablescan::scan::{Budget, Clock, ReadMode, ScanOptions, SplitPolicy, Strategy, WorkItem};
use tablescan::storage::table::entity::Entity;

/// Virtual time that never advances: only the query budget ends a step.
struct Frozen;

impl Clock for Frozen {
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

async fn run(table: &MemoryTable, options: &ScanOptions) -> RunReport {
    let reader = MemoryReader::new(table, Quirks::default());
    let root = WorkItem::root("bench", KeyRange::all(), "");
    run_to_completion(&reader, root, options, &Frozen, 10_000_000)
        .await
        .expect("the scan finishes")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cases: Vec<(&str, MemoryTable)> = vec![
        (
            "1,000,000 NuGet-like rows (1-50 versions per package id)",
            MemoryTable::new(nuget_like(1_000_000, 1)),
        ),
        (
            "1,000,000 rows in one partition",
            MemoryTable::new((0..1_000_000u64).map(|i| {
                Entity::new(
                    "one",
                    format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                )
            })),
        ),
    ];
    let variants: Vec<(&str, ScanOptions)> = vec![
        ("prefix, split at budget (default)", ScanOptions::default()),
        (
            "prefix, split every page (published)",
            ScanOptions {
                split: SplitPolicy::EveryPage,
                ..ScanOptions::default()
            },
        ),
        (
            "prefix, split at budget and dense pages",
            ScanOptions {
                split: SplitPolicy::Dense,
                ..ScanOptions::default()
            },
        ),
        (
            "serial",
            ScanOptions {
                strategy: Strategy::Serial,
                ..ScanOptions::default()
            },
        ),
        (
            "partition keys only",
            ScanOptions {
                mode: ReadMode::PartitionKeys,
                ..ScanOptions::default()
            },
        ),
    ];
    let mut report = String::new();
    for (name, table) in &cases {
        let serial_pages = table.len().div_ceil(1000);
        report.push_str(&format!(
            "### {name}\n\nSerial page count ceil(rows / 1000) = {serial_pages}. Budget {} queries per step.\n\n\
             | strategy | queries | ÷ serial pages | steps | longest chain of steps | most queries in a step |\n\
             | --- | --- | --- | --- | --- | --- |\n",
            Budget::default().max_queries
        ));
        for (variant, options) in &variants {
            let run = run(table, options).await;
            report.push_str(&format!(
                "| {variant} | {} | {:.3} | {} | {} | {} |\n",
                run.queries,
                run.queries as f64 / serial_pages as f64,
                run.steps,
                run.longest_chain,
                run.most_queries_in_a_step
            ));
            eprintln!(
                "{name} / {variant}: {} queries, chain {}",
                run.queries, run.longest_chain
            );
        }
        report.push('\n');
    }
    println!("{report}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/scan_efficiency.md"), report).unwrap();
}
