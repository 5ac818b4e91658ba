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
    run_with(table, options, Quirks::default()).await
}

async fn run_with(table: &MemoryTable, options: &ScanOptions, quirks: Quirks) -> RunReport {
    let reader = MemoryReader::new(table, quirks);
    let root = WorkItem::root("bench", KeyRange::all(), "");
    run_to_completion(&reader, root, options, &Frozen, 10_000_000)
        .await
        .expect("the scan finishes")
}

mod common;

/// Queries and steps a scan needs, against the serial page count, on the in-memory model.
#[derive(clap::Parser)]
#[command(name = "scan_efficiency")]
struct Args {
    #[command(flatten)]
    cargo: common::CargoBench,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _: Args = clap::Parser::parse();
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
    report.push_str(&partition_keys().await);
    report.push_str(&selective_filters().await);
    println!("{report}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/scan_efficiency.md"), report).unwrap();
}

/// Partition keys of 1,000,000 rows in partitions of 1, 100 and 10,000 rows: entities scanned
/// and queries per partition found, with the engine that reads pages (old) beside the one that
/// sizes its queries to what the pages show and seeks where partitions are large (new).
async fn partition_keys() -> String {
    let mut out = String::from(
        "### Partition keys: entities scanned per partition found\n\n\
         1,000,000 rows each; partition-keys scans, pages of 1,000, the default step budget. Old: \
         pages of 1,000 one after the other, skipping the rest of each page's last partition. \
         New: pages sized to what they show, seeks (`$top=1`, a probe of 2 every 8th) where \
         partitions hold 2 rows or more, four pieces of each fresh range side by side.\n\n\
         | rows per partition | engine | partitions found | entities scanned | per partition | queries | per partition | steps | most queries in a step |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for rows_per_partition in [1u64, 100, 10_000] {
        let partitions = 1_000_000 / rows_per_partition;
        let table = MemoryTable::new((0..1_000_000u64).map(|i| {
            let partition = (i / rows_per_partition).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            Entity::new(
                format!("{partition:016x}"),
                format!("{:08}", i % rows_per_partition),
            )
        }));
        for (engine, seek_partitions) in [("old", false), ("new", true)] {
            let options = ScanOptions {
                mode: ReadMode::PartitionKeys,
                seek_partitions,
                ..ScanOptions::default()
            };
            let reader = MemoryReader::new(&table, Quirks::default());
            let root = WorkItem::root("bench", KeyRange::all(), "");
            let run = run_to_completion(&reader, root, &options, &Frozen, 10_000_000)
                .await
                .expect("the scan finishes");
            assert_eq!(run.partitions, partitions, "every partition found once");
            let scanned = reader.scanned();
            out.push_str(&format!(
                "| {rows_per_partition} | {engine} | {} | {scanned} | {:.2} | {} | {:.3} | {} | {} |\n",
                run.partitions,
                scanned as f64 / partitions as f64,
                run.queries,
                run.queries as f64 / partitions as f64,
                run.steps,
                run.most_queries_in_a_step
            ));
            eprintln!(
                "partition keys, {rows_per_partition}-row partitions, {engine}: {scanned} scanned, {} queries",
                run.queries
            );
        }
    }
    out.push('\n');
    out
}

/// A filter matching 0.1% of 200,000 NuGet-like rows, on a model whose requests each look at
/// 5,000 rows at most (standing for the service's 5 seconds of scanning per request; the real
/// number depends on the service): pages come back empty with a continuation. Steps that cut at
/// the continuation's position, side by side with steps that keep the cursor.
async fn selective_filters() -> String {
    let rows: Vec<Entity> = nuget_like(200_000, 7)
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            e.with(
                "N",
                tablescan::storage::table::entity::Value::Int64(((i * 7919) % 1000) as i64),
            )
        })
        .collect();
    let table = MemoryTable::new(rows);
    let mut report = String::from(
        "### 200,000 NuGet-like rows, filters matching 0.1% (N lt 1L) and nothing (N lt 0L)\n\n\
         Each request looks at a bounded number of rows (standing for the service's 5 seconds \
         of scanning; the real number is not published), so pages come back empty with a \
         continuation.\n\n\
         | filter | rows looked at per request | steps after an empty page | rows delivered | queries | steps | longest chain of steps | most queries in a step |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut variants = Vec::new();
    for filter in ["N lt 1L", "N lt 0L"] {
        for looked_at in [5_000, 500] {
            for (variant, split_at_positions) in [
                ("cut at the continuation's position", true),
                ("keep the cursor (before)", false),
            ] {
                variants.push((filter, looked_at, variant, split_at_positions));
            }
        }
    }
    for (filter, looked_at, variant, split_at_positions) in variants {
        let quirks = Quirks {
            max_scanned: Some(looked_at),
            ..Quirks::default()
        };
        let options = ScanOptions {
            filter: Some(
                tablescan::storage::table::filter_text::parse_filter(filter)
                    .expect("a valid filter"),
            ),
            split_at_positions,
            ..ScanOptions::default()
        };
        let run = run_with(&table, &options, quirks).await;
        report.push_str(&format!(
            "| {filter} | {looked_at} | {variant} | {} | {} | {} | {} | {} |\n",
            run.rows.len(),
            run.queries,
            run.steps,
            run.longest_chain,
            run.most_queries_in_a_step
        ));
    }
    report.push('\n');
    report
}
