//! Backup and restore on Azurite, side by side in one run on the same 100,000-row table: the
//! table-to-table copy, the export to blobs (gzip, and plain JSON lines), and the import of
//! the gzip export into a new table, each through devhost with 3 instances, alternating over
//! two rounds. Every scan runs with `"maxRowsPerSecond": "unlimited"` (this measures the
//! engine and the emulator, not the default cap), and every import is checked row for row.
//!
//! Run by `scripts/bench`, which passes TABLESCAN_BENCH_STORAGE and TABLESCAN_BENCH_APP (an
//! assembled function app folder); writes target/bench/backup.md.

#[path = "../bench.rs"]
mod bench;

use bench::{load, scan, start_devhost, Devhost};
use serde_json::{json, Value};
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, StorageAccount, TableServiceClient};

const ROWS: usize = 100_000;
const TABLE: &str = "benchbackup";
const CONTAINER: &str = "benchbackups";
const ROUNDS: usize = 2;

#[derive(clap::Parser)]
#[command(name = "backup_bench")]
struct Args {
    /// A connection string to the Azurite to use (scripts/bench starts one)
    #[arg(long, env = "TABLESCAN_BENCH_STORAGE", hide_env_values = true)]
    storage: String,
    /// The assembled function app to run with devhost
    #[arg(long, env = "TABLESCAN_BENCH_APP", value_name = "DIR")]
    app: String,
    /// Handler instances devhost runs
    #[arg(long, default_value_t = 3)]
    instances: usize,
}

/// One measured scan: what it was, how long it took, and its status.
struct Run {
    name: String,
    seconds: f64,
    status: Value,
}

#[tokio::main]
async fn main() {
    let Args {
        storage,
        app,
        instances,
    } = clap::Parser::parse();
    let account = StorageAccount::from_connection_string(&storage).unwrap();
    let tables = TableServiceClient::new(&account, ClientOptions::default()).unwrap();
    load(&tables, TABLE, ROWS).await;
    let host = start_devhost(&app, &storage, instances, "ledgerbackup");
    let mut runs: Vec<Run> = Vec::new();
    for round in 1..=ROUNDS {
        runs.extend(run_round(&host, &tables, round).await);
    }
    let lines = table_lines(&runs);
    let report = format!(
        "| round | scan | seconds | rows/s | steps | queries | blobs | MiB | bytes per row | time vs copy |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n{}\n\n\
         {ROWS} NuGet-like rows (five typed properties each), devhost with {instances} instances, \
         no cap, one run, in this order in each round; seconds from the start request to the \
         finish its last step stamped (the status's finishedAt), for an export to the status \
         saying succeeded, read every 250 ms (it includes writing the manifest). Time vs copy is \
         against the mean of the copies. Every copy and import was checked to hold all {ROWS} rows.\n",
        lines.join("\n")
    );
    println!("{report}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/backup.md"), report).unwrap();
}

/// One round: the copy, the two exports and the import, each checked to act on every row,
/// and the copy's and the import's tables checked to hold every row.
async fn run_round(host: &Devhost, tables: &TableServiceClient, round: usize) -> Vec<Run> {
    let copy = format!("{TABLE}copy{round}");
    let restored = format!("{TABLE}restored{round}");
    let gzip = format!("round{round}/gzip/");
    let plain = format!("round{round}/plain/");
    let scans = [
        (
            "copy table to table",
            json!({"table": TABLE, "action": {"type": "copy", "table": copy}}),
        ),
        (
            "export, gzip",
            json!({"table": TABLE, "action": {"type": "export", "container": CONTAINER,
                    "prefix": gzip}}),
        ),
        (
            "export, plain JSON lines",
            json!({"table": TABLE, "action": {"type": "export", "container": CONTAINER,
                    "prefix": plain, "compression": "none"}}),
        ),
        (
            "import of the gzip export",
            json!({"import": {"container": CONTAINER, "prefix": gzip},
                   "action": {"type": "copy", "table": restored}}),
        ),
    ];
    let mut runs = Vec::new();
    for (name, mut request) in scans {
        request["maxRowsPerSecond"] = json!("unlimited");
        let (seconds, status) = scan(host, request).await;
        eprintln!("round {round}, {name}: {seconds:.1} s");
        assert_eq!(
            status["progress"]["rowsActed"].as_u64(),
            Some(ROWS as u64),
            "{status}"
        );
        runs.push(Run {
            name: name.to_string(),
            seconds,
            status,
        });
    }
    for target in [&copy, &restored] {
        let written = tables
            .table(target)
            .unwrap()
            .query_all(&Query::default().select(Vec::<String>::new()))
            .await
            .unwrap()
            .len();
        assert_eq!(written, ROWS, "{target} holds every row");
    }
    runs
}

/// The report's table rows, one per run.
fn table_lines(runs: &[Run]) -> Vec<String> {
    let copy_seconds: f64 = mean(runs, "copy table to table");
    let mut lines = Vec::new();
    for (index, run) in runs.iter().enumerate() {
        let p = &run.status["progress"];
        let export = &run.status["export"];
        let (blobs, bytes) = match export.as_object() {
            Some(_) => (
                export["blobs"].as_u64().unwrap_or(0),
                export["bytes"].as_u64().unwrap_or(0),
            ),
            None => (0, 0),
        };
        let blob_cells = if blobs > 0 {
            format!(
                "{blobs} | {:.1} | {:.0}",
                bytes as f64 / 1_048_576.0,
                bytes as f64 / ROWS as f64
            )
        } else {
            " | | ".to_string()
        };
        lines.push(format!(
            "| {} | {} | {:.1} | {:.0} | {} | {} | {blob_cells} | {:.2} |",
            index / 4 + 1,
            run.name,
            run.seconds,
            ROWS as f64 / run.seconds,
            p["stepsDone"],
            p["queries"],
            run.seconds / copy_seconds
        ));
    }
    lines
}

fn mean(runs: &[Run], name: &str) -> f64 {
    let times: Vec<f64> = runs
        .iter()
        .filter(|r| r.name == name)
        .map(|r| r.seconds)
        .collect();
    times.iter().sum::<f64>() / times.len().max(1) as f64
}
