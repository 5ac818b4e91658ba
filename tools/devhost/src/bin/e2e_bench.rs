//! End-to-end benchmark on Azurite, everything in one run on the same 100,000-row table:
//! a serial page-through with the official Python SDK, then count scans through devhost with
//! our serial strategy, and with the prefix strategy on 1 and 3 instances; then, side by side
//! on 3 instances, a count of every row and a count through a filter that matches 0.1% of
//! them (`n eq 7`; each row's `n` is its place in the load, modulo 1,000). Then the handler's
//! peak resident memory while it runs 24 step invocations at once (24 copy scans started
//! together on one instance, 10,000 rows each: the host's default concurrency per function).
//!
//! Every scan runs with `"maxRowsPerSecond": "unlimited"`: this measures the engine, not the
//! default cap of 5,000 entities per second (which would hold a count to about 4,500 rows/s).
//!
//! Run by `scripts/bench`, which passes TABLESCAN_BENCH_STORAGE, TABLESCAN_BENCH_PYTHON and
//! TABLESCAN_BENCH_APP (an assembled function app folder).

#[path = "../bench.rs"]
mod bench;

use std::process::Command;
use std::time::{Duration, Instant};

use bench::{load, scan, start_devhost};
use serde_json::{json, Value};
use tablescan::storage::{ClientOptions, StorageAccount, TableServiceClient};

const ROWS: usize = 100_000;
const TABLE: &str = "benche2e";

fn handler_peak_kib() -> u64 {
    // The handler processes devhost started are children of this benchmark's devhost.
    let mut peak = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default();
        if cmdline
            .split('\0')
            .next()
            .is_some_and(|exe| exe.ends_with("/handler"))
        {
            let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
            if let Some(kib) = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            {
                peak = peak.max(kib);
            }
        }
    }
    peak
}

/// End to end: the Python SDK's serial page-through against tablescan through devhost.
#[derive(clap::Parser)]
#[command(name = "e2e_bench")]
struct Args {
    /// A connection string to the Azurite to use (scripts/bench starts one)
    #[arg(long, env = "TABLESCAN_BENCH_STORAGE", hide_env_values = true)]
    storage: String,
    /// The Python interpreter with azure-data-tables (scripts/bench prepares a venv)
    #[arg(long, env = "TABLESCAN_BENCH_PYTHON")]
    python: String,
    /// The assembled function app to run with devhost
    #[arg(long, env = "TABLESCAN_BENCH_APP", value_name = "DIR")]
    app: String,
}

#[tokio::main]
async fn main() {
    let Args {
        storage,
        python,
        app,
    } = clap::Parser::parse();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../benches/python/page_through.py"
    );
    let account = StorageAccount::from_connection_string(&storage).unwrap();
    let tables = TableServiceClient::new(&account, ClientOptions::default()).unwrap();
    load(&tables, TABLE, ROWS).await;

    let mut lines = Vec::new();
    let started = Instant::now();
    let output = Command::new(&python)
        .args([script, &storage, TABLE])
        .output()
        .expect("python runs");
    let sdk: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
    let sdk_seconds = sdk["seconds"].as_f64().unwrap();
    eprintln!(
        "python SDK: {sdk_seconds:.1} s ({:.1} s with start-up)",
        started.elapsed().as_secs_f64()
    );
    lines.push(format!(
        "| azure-data-tables, serial page-through | {sdk_seconds:.1} | {:.0} | {} | {:.1} | | 1.00 |",
        ROWS as f64 / sdk_seconds,
        sdk["pages"],
        sdk["pages"].as_f64().unwrap() / (ROWS as f64 / 1000.0)
    ));
    for (name, strategy, instances) in [
        ("tablescan serial, devhost, 1 instance", "serial", 1),
        ("tablescan prefix, devhost, 1 instance", "prefix", 1),
        ("tablescan prefix, devhost, 3 instances", "prefix", 3),
    ] {
        let host = start_devhost(
            &app,
            &storage,
            instances,
            &format!("ledger{strategy}{instances}"),
        );
        let (seconds, status) = scan(
            &host,
            json!({ "table": TABLE, "strategy": strategy, "maxRowsPerSecond": "unlimited",
                "action": { "type": "count" } }),
        )
        .await;
        let p = &status["progress"];
        assert_eq!(p["rowsRead"].as_u64(), Some(ROWS as u64), "{status}");
        eprintln!("{name}: {seconds:.1} s");
        lines.push(format!(
            "| {name} | {seconds:.1} | {:.0} | {} | {:.1} | {:.2} | {:.2} |",
            ROWS as f64 / seconds,
            p["queries"],
            p["queries"].as_f64().unwrap() / (ROWS as f64 / 1000.0),
            p["longestStepSeconds"].as_f64().unwrap_or(0.0),
            sdk_seconds / seconds
        ));
    }

    // A selective filter beside the unfiltered count, same instances, same table.
    let mut filtered = Vec::new();
    for (name, filter) in [
        ("every row", None),
        ("filter n eq 7 (0.1%)", Some("n eq 7")),
    ] {
        let host = start_devhost(
            &app,
            &storage,
            3,
            &format!("ledgerfilter{}", filter.is_some() as u8),
        );
        let mut request = json!({ "table": TABLE, "maxRowsPerSecond": "unlimited",
            "action": { "type": "count" } });
        if let Some(filter) = filter {
            request["filter"] = json!(filter);
        }
        let (seconds, status) = scan(&host, request).await;
        let p = &status["progress"];
        let expected = if filter.is_some() { ROWS / 1000 } else { ROWS };
        assert_eq!(p["rowsRead"].as_u64(), Some(expected as u64), "{status}");
        eprintln!("{name}: {seconds:.1} s");
        filtered.push(format!(
            "| {name} | {} | {seconds:.1} | {} | {:.2} | {} |",
            p["rowsRead"],
            p["stepsDone"],
            p["longestStepSeconds"].as_f64().unwrap_or(0.0),
            p["queries"]
        ));
    }

    // Memory: 24 scans at once on one instance, each over its own 10,000-row table.
    let host = start_devhost(&app, &storage, 1, "ledgermemory");
    let mut names = Vec::new();
    for i in 0..24 {
        let name = format!("benchmem{i}");
        load(&tables, &name, 10_000).await;
        names.push(name);
    }
    let scans: Vec<_> = names
        .iter()
        .map(|name| {
            scan(
                &host,
                json!({ "table": name, "maxRowsPerSecond": "unlimited",
            "action": { "type": "copy", "table": format!("{name}copy") } }),
            )
        })
        .collect();
    let sampler = tokio::spawn(async {
        let mut peak = 0;
        for _ in 0..1200 {
            peak = peak.max(handler_peak_kib());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak
    });
    for s in scans {
        s.await;
    }
    let peak = handler_peak_kib();
    sampler.abort();
    let report = format!(
        "| run | seconds | rows/s | queries | queries per 1,000 rows | longest step (s) | speed vs the Python SDK |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n{}\n\n\
         {ROWS} NuGet-like rows; count scans, pages of 1,000, default step budget. Seconds for the scans run\n\
         from the start request to the status saying succeeded (status polled every 100 ms).\n\n\
         A selective filter, side by side with the unfiltered count (3 instances, the same table; \n\
         Azurite looks at every row of a query's range and never returns an empty page, so the \n\
         model's table in docs/scan.md, Filters, is the one that shows how filtered scans split):\n\n\
         | count | rows matched | seconds | steps | longest step (s) | queries |\n\
         | --- | --- | --- | --- | --- | --- |\n{}\n\n\
         Handler memory: peak resident set {:.1} MiB while one handler ran 24 copy scans at once\n\
         (24 tables of 10,000 rows, pages of 1,000).\n",
        lines.join("\n"),
        filtered.join("\n"),
        peak as f64 / 1024.0
    );
    println!("{report}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/end_to_end.md"), report).unwrap();
}
