//! The end of `scripts/dev`: fills a demo table in Azurite, copies it with a tablescan scan
//! started over HTTP (the function app must be running on 127.0.0.1:7071), shows the scan's
//! progress from its status endpoint, prints a summary, and checks the copy row by row.
//!
//! Settings (environment): AzureWebJobsStorage (default: UseDevelopmentStorage=true),
//! TABLESCAN_DEMO_ROWS (default 100000), TABLESCAN_DEMO_URL (default http://127.0.0.1:7071).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tablescan::scan::model::nuget_like;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, StorageAccount, TableClient, TableServiceClient};

const SOURCE: &str = "demopackages";
const TARGET: &str = "demopackagescopy";

#[tokio::main]
async fn main() {
    if let Err(why) = run().await {
        eprintln!("demo: {why}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let storage = std::env::var("AzureWebJobsStorage")
        .unwrap_or_else(|_| "UseDevelopmentStorage=true".into());
    let rows: usize = std::env::var("TABLESCAN_DEMO_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let base =
        std::env::var("TABLESCAN_DEMO_URL").unwrap_or_else(|_| "http://127.0.0.1:7071".into());
    let account = StorageAccount::from_connection_string(&storage).map_err(|e| e.to_string())?;
    let tables =
        TableServiceClient::new(&account, ClientOptions::default()).map_err(|e| e.to_string())?;
    let source = tables.table(SOURCE).map_err(|e| e.to_string())?;

    let loaded = ensure_source(&tables, &source, rows).await?;
    if tables.delete_table(TARGET).await.is_ok() {
        // A just-deleted table may be briefly unavailable in Azure; the emulator has no delay.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let http = reqwest::Client::new();
    let request = json!({ "table": SOURCE, "action": { "type": "copy", "table": TARGET } });
    let started = Instant::now();
    let answer = http
        .post(format!("{base}/api/scans"))
        .json(&request)
        .send()
        .await
        .map_err(|e| format!("the function app does not answer at {base}: {e}"))?;
    let status = answer.status();
    let body: Value = answer
        .json()
        .await
        .map_err(|e| format!("the start answer is not JSON: {e}"))?;
    if status.as_u16() != 202 {
        return Err(format!("starting the scan answered {status}: {body}"));
    }
    let id = body["id"]
        .as_str()
        .ok_or("no scan id in the answer")?
        .to_string();
    eprintln!("demo: copy scan {id} started: {SOURCE} -> {TARGET}");

    let terminal = std::io::stderr().is_terminal();
    let mut last_line = Instant::now() - Duration::from_secs(10);
    let final_status = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status: Value = http
            .get(format!("{base}/api/scans/{id}"))
            .send()
            .await
            .map_err(|e| format!("status: {e}"))?
            .json()
            .await
            .map_err(|e| format!("status is not JSON: {e}"))?;
        let p = &status["progress"];
        let read = p["rowsRead"].as_u64().unwrap_or(0);
        let fraction = (read as f64 / loaded.max(1) as f64).min(1.0);
        let line = format!(
            "[{:<30}] {:>3.0}% {read}/{loaded} rows, {} steps done, {} pending, {:.0} rows/s",
            "#".repeat((fraction * 30.0) as usize),
            fraction * 100.0,
            p["stepsDone"],
            p["stepsPending"],
            p["rowsPerSecond"].as_f64().unwrap_or(0.0)
        );
        if terminal {
            eprint!("\r{line}");
            let _ = std::io::stderr().flush();
        } else if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!("{line}");
            last_line = Instant::now();
        }
        match status["state"].as_str() {
            Some("succeeded") | Some("failed") | Some("cancelled") => break status,
            _ => {}
        }
        if started.elapsed() > Duration::from_secs(3600) {
            return Err("the scan did not finish within an hour".into());
        }
    };
    if terminal {
        eprintln!();
    }
    let seconds = started.elapsed().as_secs_f64();
    let p = &final_status["progress"];
    println!(
        "scan {id}: {}",
        final_status["state"].as_str().unwrap_or("?")
    );
    println!("  rows copied     {}", p["rowsActed"]);
    println!("  partitions      {}", p["partitions"]);
    println!(
        "  steps           {} ({} failed)",
        p["stepsDone"], p["stepsFailed"]
    );
    println!("  queries         {}", p["queries"]);
    println!("  seconds         {seconds:.1}");
    println!(
        "  rows/s          {:.0}",
        p["rowsActed"].as_u64().unwrap_or(0) as f64 / seconds
    );
    println!(
        "  longest step    {:.2} s",
        p["longestStepSeconds"].as_f64().unwrap_or(0.0)
    );
    if final_status["state"] != "succeeded" {
        return Err(format!(
            "the scan did not succeed: {}",
            final_status["errors"]
        ));
    }
    verify(
        &source,
        &tables.table(TARGET).map_err(|e| e.to_string())?,
        loaded,
    )
    .await
}

/// Makes sure the source table holds exactly `rows` demo rows; returns the count.
async fn ensure_source(
    tables: &TableServiceClient,
    source: &TableClient,
    rows: usize,
) -> Result<usize, String> {
    if !tables
        .create_table(SOURCE, true)
        .await
        .map_err(|e| e.to_string())?
    {
        let existing = source
            .query_all(&Query::default().select(Vec::<String>::new()))
            .await
            .map_err(|e| e.to_string())?
            .len();
        if existing == rows {
            eprintln!("demo: reusing {SOURCE} with {rows} rows");
            return Ok(rows);
        }
        tables
            .delete_table(SOURCE)
            .await
            .map_err(|e| e.to_string())?;
        tables
            .create_table(SOURCE, false)
            .await
            .map_err(|e| e.to_string())?;
    }
    eprintln!("demo: loading {rows} NuGet-like rows into {SOURCE} ...");
    let started = Instant::now();
    let published = EdmDateTime::parse("2024-05-06T07:08:09.1234567Z").expect("a valid date");
    let entities: Vec<Entity> = nuget_like(rows, 42)
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            e.with("Downloads", Edm::Int64(i as i64 * 7919))
                .with("Listed", Edm::Boolean(i % 10 != 0))
                .with("Published", Edm::DateTime(published))
                .with("Score", Edm::Double(i as f64 / 7.0))
        })
        .collect();
    let mut batches: Vec<Vec<Operation>> = Vec::new();
    for entity in entities {
        match batches.last_mut() {
            Some(batch) if batch.len() < 100 && batch_partition(batch) == entity.partition_key => {
                batch.push(Operation::Insert(entity))
            }
            _ => batches.push(vec![Operation::Insert(entity)]),
        }
    }
    let mut pending = tokio::task::JoinSet::new();
    for batch in batches {
        while pending.len() >= 4 {
            pending
                .join_next()
                .await
                .expect("a task")
                .map_err(|e| e.to_string())??;
        }
        let table = source.clone();
        pending.spawn(async move {
            table
                .submit_transaction(&batch)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        });
    }
    while let Some(done) = pending.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    eprintln!("demo: loaded in {:.1} s", started.elapsed().as_secs_f64());
    Ok(rows)
}

fn batch_partition(batch: &[Operation]) -> &str {
    match &batch[0] {
        Operation::Insert(e) => &e.partition_key,
        _ => "",
    }
}

/// Reads both tables and compares every row: keys, properties and types.
async fn verify(source: &TableClient, target: &TableClient, rows: usize) -> Result<(), String> {
    let read = |table: &TableClient| {
        let table = table.clone();
        async move {
            let all = table
                .query_all(&Query::default())
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(
                all.into_iter()
                    .map(|e| {
                        Entity {
                            timestamp: None,
                            etag: None,
                            ..e
                        }
                        .to_json()
                    })
                    .collect::<Vec<_>>(),
            )
        }
    };
    let (want, got) = (read(source).await?, read(target).await?);
    if want.len() != rows || got != want {
        return Err(format!(
            "the copy differs: source {} rows, copy {} rows",
            want.len(),
            got.len()
        ));
    }
    println!("  verified        {rows} rows identical in {TARGET}");
    Ok(())
}
