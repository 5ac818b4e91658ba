//! The end of `scripts/dev`: fills a demo table in Azurite, copies it with a tablescan scan
//! started and followed by the `tablescan` command (the function app must be running), which
//! shows the live line and the summary, then checks the copy row by row.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use tablescan::scan::model::nuget_like;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, StorageAccount, TableClient, TableServiceClient};

const SOURCE: &str = "demopackages";
const TARGET: &str = "demopackagescopy";

/// Fills a demo table, copies it with a tablescan scan through the `tablescan` command, and
/// checks the copy row by row.
#[derive(Parser)]
#[command(name = "demo")]
struct Args {
    /// Rows in the demo table (NuGet-like keys)
    #[arg(long, default_value_t = 100_000, env = "TABLESCAN_DEMO_ROWS")]
    rows: usize,
    /// The function app's base URL
    #[arg(
        long,
        default_value = "http://127.0.0.1:7071",
        env = "TABLESCAN_DEMO_URL"
    )]
    url: String,
    /// The storage the app uses (a connection string)
    #[arg(
        long,
        default_value = "UseDevelopmentStorage=true",
        env = "AzureWebJobsStorage",
        hide_env_values = true
    )]
    storage: String,
    /// The `tablescan` command (default: the one built beside this program)
    #[arg(long, value_name = "PATH")]
    tablescan: Option<PathBuf>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(why) = run(args).await {
        eprintln!("demo: {why}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let account = StorageAccount::from_connection_string(&args.storage)
        .map_err(|e| format!("--storage: {e}"))?;
    let tables =
        TableServiceClient::new(&account, ClientOptions::default()).map_err(|e| e.to_string())?;
    let source = tables.table(SOURCE).map_err(|e| e.to_string())?;

    let loaded = ensure_source(&tables, &source, args.rows).await?;
    if tables.delete_table(TARGET).await.is_ok() {
        // A just-deleted table may be briefly unavailable in Azure; the emulator has no delay.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let tablescan = match args.tablescan {
        Some(path) => path,
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("tablescan"),
    };
    eprintln!(
        "demo: $ tablescan --url {} start --table {SOURCE} --copy {TARGET} --wait",
        args.url
    );
    let status = tokio::process::Command::new(&tablescan)
        .args([
            "--url", &args.url, "start", "--table", SOURCE, "--copy", TARGET, "--wait",
        ])
        .status()
        .await
        .map_err(|e| {
            format!(
                "{} could not be run ({e}): build it with `cargo build -p tablescan-cli`",
                tablescan.display()
            )
        })?;
    if !status.success() {
        return Err(format!("the copy did not succeed ({status})"));
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
