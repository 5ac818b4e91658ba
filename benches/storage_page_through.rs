//! Pages through the same 100,000-row Azurite table with our client and with the official Python
//! SDK (azure-data-tables), alternating, in one run, and reports rows/s of each and the ratio.
//!
//! Run through `scripts/bench`, which starts Azurite, prepares the Python venv, and passes
//! `TABLESCAN_BENCH_STORAGE` (connection string) and `TABLESCAN_BENCH_PYTHON` (interpreter).
//! Both sides time only the page-through itself. Azurite dominates both (every page is a full
//! scan of the table), so the ratio shows what each client adds on top of the same server.

use std::process::Command;
use std::time::Instant;

use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value};
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, StorageAccount, TableClient, TableServiceClient};

const ROWS: usize = 100_000;
const ROWS_PER_PARTITION: usize = 100;
const ROUNDS: usize = 3;
const TABLE: &str = "benchpagethrough";

mod common;

/// Pages through one table with this client and with the Python SDK, side by side.
#[derive(clap::Parser)]
#[command(name = "storage_page_through")]
struct Args {
    #[command(flatten)]
    cargo: common::CargoBench,
    /// A connection string to the Azurite to use (scripts/bench starts one)
    #[arg(long, env = "TABLESCAN_BENCH_STORAGE", hide_env_values = true)]
    storage: String,
    /// The Python interpreter with azure-data-tables (scripts/bench prepares a venv)
    #[arg(long, env = "TABLESCAN_BENCH_PYTHON")]
    python: String,
}

#[tokio::main]
async fn main() {
    let Args {
        storage: connection_string,
        python,
        ..
    } = clap::Parser::parse();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/python/page_through.py"
    );

    let account = StorageAccount::from_connection_string(&connection_string).unwrap();
    let service = TableServiceClient::new(&account, ClientOptions::default()).unwrap();
    let table = service.table(TABLE).unwrap();
    load(&service, &table).await;

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 1..=ROUNDS {
        let (rows, pages, seconds) = page_through(&table).await;
        assert_eq!(rows, ROWS);
        eprintln!("round {round}: tablescan {rows} rows, {pages} pages, {seconds:.3} s");
        ours.push(seconds);

        let output = Command::new(&python)
            .args([script, &connection_string, TABLE])
            .output()
            .expect("the Python interpreter runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("the script prints JSON");
        assert_eq!(result["rows"].as_u64(), Some(ROWS as u64));
        let seconds = result["seconds"].as_f64().unwrap();
        eprintln!(
            "round {round}: azure-data-tables {} rows, {} pages, {seconds:.3} s",
            result["rows"], result["pages"]
        );
        theirs.push(seconds);
    }

    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, theirs) = (median(&mut ours), median(&mut theirs));
    let report = format!(
        "| client | median seconds | rows/s |\n| --- | --- | --- |\n\
         | tablescan (Rust) | {ours:.3} | {:.0} |\n\
         | azure-data-tables 12.7.0 (Python) | {theirs:.3} | {:.0} |\n\n\
         Ratio (tablescan rows/s ÷ azure-data-tables rows/s): **{:.2}**. \
         {ROWS} rows, {} per partition, pages of 1,000, median of {ROUNDS} alternating rounds.\n",
        ROWS as f64 / ours,
        ROWS as f64 / theirs,
        theirs / ours,
        ROWS_PER_PARTITION,
    );
    println!("{report}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/storage_page_through.md"), report).unwrap();
}

async fn page_through(table: &TableClient) -> (usize, usize, f64) {
    let query = Query::default().top(1000);
    let started = Instant::now();
    let (mut rows, mut pages, mut continuation) = (0, 0, None);
    loop {
        let page = table
            .query_page(&query, continuation.as_ref())
            .await
            .unwrap();
        rows += page.entities.len();
        pages += 1;
        match page.continuation {
            Some(next) => continuation = Some(next),
            None => break,
        }
    }
    (rows, pages, started.elapsed().as_secs_f64())
}

/// Fills the table once (a second run against the same Azurite reuses it).
async fn load(service: &TableServiceClient, table: &TableClient) {
    if !service.create_table(TABLE, true).await.unwrap() {
        let (rows, _, _) = page_through(table).await;
        if rows == ROWS {
            return;
        }
        panic!("table {TABLE} exists with {rows} rows; start from an empty Azurite");
    }
    let started = Instant::now();
    let when = EdmDateTime::parse("2024-01-02T03:04:05.1234567Z").unwrap();
    let partitions = ROWS / ROWS_PER_PARTITION;
    let mut pending = Vec::new();
    for p in 0..partitions {
        let operations: Vec<Operation> = (0..ROWS_PER_PARTITION)
            .map(|r| {
                Operation::Insert(
                    Entity::new(
                        format!("package.{p:05}"),
                        format!("{}.{}.{r}", p % 7, r % 13),
                    )
                    .with("n", Value::Int32(r as i32))
                    .with("size", Value::Int64((p * r) as i64))
                    .with("published", Value::DateTime(when))
                    .with(
                        "title",
                        Value::String(format!("A package description of some length {p}")),
                    ),
                )
            })
            .collect();
        let table = table.clone();
        pending.push(tokio::spawn(async move {
            table.submit_transaction(&operations).await.map(drop)
        }));
        if pending.len() == 4 {
            for task in pending.drain(..) {
                task.await.unwrap().unwrap();
            }
        }
    }
    for task in pending {
        task.await.unwrap().unwrap();
    }
    eprintln!(
        "loaded {ROWS} rows in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
