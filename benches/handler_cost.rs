//! What the handler itself costs per row, on in-memory pages (no storage): decoding a page of
//! the service's JSON, then each action's own work. One thread, so rows/s is per core. The
//! targets: 200,000 rows/s for count and 100,000 rows/s for copy serialisation, so that the
//! handler is never what limits a scan.

use std::time::Instant;

use base64::Engine;
use tablescan::actions::plan_transactions;
use tablescan::scan::model::nuget_like;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value};

const ROWS: usize = 200_000;

/// A page body as the service sends it with minimal metadata.
fn page_json(rows: &[Entity]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|e| {
            let json = e.to_json();
            format!("{{\"odata.etag\":\"W/\\\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\\\"\",\"Timestamp\":\"2024-01-01T00:00:00.1234567Z\",{}", &json[1..])
        })
        .collect();
    format!(
        "{{\"odata.metadata\":\"x\",\"value\":[{}]}}",
        values.join(",")
    )
}

/// The handler's own page decoder.
fn decode(body: &str) -> Vec<Entity> {
    tablescan::storage::table::entity::decode_page(body.as_bytes()).expect("a valid page")
}

fn peak_memory_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

mod common;

/// What the handler costs per row on in-memory pages, one thread.
#[derive(clap::Parser)]
#[command(name = "handler_cost")]
struct Args {
    #[command(flatten)]
    cargo: common::CargoBench,
}

fn main() {
    let _: Args = clap::Parser::parse();
    let when = EdmDateTime::parse("2024-05-06T07:08:09.1234567Z").unwrap();
    let rows: Vec<Entity> = nuget_like(ROWS, 9)
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            e.with("Downloads", Value::Int64(i as i64 * 7919))
                .with("Listed", Value::Boolean(i % 10 != 0))
                .with("Published", Value::DateTime(when))
                .with("Score", Value::Double(i as f64 / 7.0))
                .with(
                    "Title",
                    Value::String(format!("A package description of some length {i}")),
                )
        })
        .collect();
    let pages: Vec<String> = rows.chunks(1000).map(page_json).collect();

    let mut results = Vec::new();
    let mut measure = |name: &str, work: &mut dyn FnMut() -> usize| {
        let started = Instant::now();
        let processed = work();
        let seconds = started.elapsed().as_secs_f64();
        results.push(format!(
            "| {name} | {:.0} | {:.2} |",
            processed as f64 / seconds,
            seconds / processed as f64 * 1000.0 * 1000.0
        ));
    };
    measure("decode pages (JSON to typed entities)", &mut || {
        pages.iter().map(|p| decode(p).len()).sum()
    });
    measure("count (decode + count)", &mut || {
        pages.iter().map(|p| decode(p).len()).sum()
    });
    // What a step's page bookkeeping adds (`scan::pending`): it keeps each delivered row's
    // PartitionKey and RowKey, so that a page the action cuts short can be handed on from any row.
    measure(
        "count + the step's key copies (two strings a row)",
        &mut || {
            pages
                .iter()
                .map(|p| {
                    let page = decode(p);
                    let keys: Vec<(String, String)> = page
                        .iter()
                        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
                        .collect();
                    keys.len()
                })
                .sum()
        },
    );
    measure(
        "copy (decode + plan transactions + entity JSON)",
        &mut || {
            pages
                .iter()
                .map(|p| {
                    let transactions = plan_transactions(decode(p));
                    transactions
                        .iter()
                        .flatten()
                        .map(|op| match op {
                            tablescan::storage::table::batch::Operation::UpsertReplace(e) => {
                                e.to_json().len().min(1)
                            }
                            _ => 0,
                        })
                        .sum::<usize>()
                })
                .sum()
        },
    );
    measure("enqueue (decode + JSON + base64 per row)", &mut || {
        pages
            .iter()
            .map(|p| {
                decode(p)
                    .iter()
                    .map(|e| {
                        base64::engine::general_purpose::STANDARD
                            .encode(tablescan::actions::xml_safe_json(&e.to_json()))
                            .len()
                            .min(1)
                    })
                    .sum::<usize>()
            })
            .sum()
    });
    let report = format!(
        "| work on {ROWS} rows in pages of 1,000 | rows/s (one core) | ms per 1,000 rows |\n| --- | --- | --- |\n{}\n\nPeak resident memory of the benchmark (all {ROWS} rows and their pages held at once): {} MiB.\n",
        results.join("\n"),
        peak_memory_kib() / 1024
    );
    println!("{report}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/handler_cost.md"), report).unwrap();
}
