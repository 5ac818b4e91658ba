//! What the end-to-end benchmarks share: a devhost of their own, a scan followed to its end,
//! and the NuGet-like benchmark table. (Included by path from the bench binaries.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tablescan::scan::model::nuget_like;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::{TableClient, TableServiceClient};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

#[path = "stop.rs"]
mod stop;

pub struct Devhost {
    child: Child,
    pub port: u16,
}

impl Drop for Devhost {
    fn drop(&mut self) {
        stop::stop_devhost(&mut self.child);
    }
}

pub fn start_devhost(app: &str, storage: &str, instances: usize, ledger: &str) -> Devhost {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let devhost = std::env::current_exe().unwrap().with_file_name("devhost");
    let child = Command::new(devhost)
        .args([
            "--script-root",
            app,
            "--port",
            &port.to_string(),
            "--instances",
            &instances.to_string(),
        ])
        .env("AzureWebJobsStorage", storage)
        .env("TABLESCAN_LEDGER_TABLE", ledger)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("devhost starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "devhost did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Devhost { child, port }
}

/// How often a followed scan's status is read. A run is timed to the time its last step's
/// finish stamped (`finishedAt`, taken just before that finish's ledger transaction, so the
/// transaction's own round trip is not in it), not to the read that saw it, so reading more
/// often would not time it better; and a status read costs the emulator requests of its own
/// (the ledger's rows), which at four a second took about a fifth of a count's requests to the
/// ledger and queues (Azurite's access log, e2e_bench --only count, 0b75f30).
pub const POLL: Duration = Duration::from_secs(1);

/// How often an export's status is read: its last step writes the manifest after its finish,
/// so an export is timed to the read that saw it succeed, within this.
pub const POLL_EXPORT: Duration = Duration::from_millis(250);

/// Starts a scan and follows it to its end: the seconds from the start request to its last
/// step's finish (as the status's `finishedAt` says; for an export, or a status without it, to
/// the read saying succeeded), and that status. Panics if the scan fails or is cancelled.
pub async fn scan(host: &Devhost, request: Value) -> (f64, Value) {
    scan_observed(host, request, |_, _| {}).await
}

/// Like [`scan`], and hands every status read, with the seconds since the start request, to
/// `observe` (the last one, saying succeeded, included, with the run's seconds).
pub async fn scan_observed(
    host: &Devhost,
    request: Value,
    mut observe: impl FnMut(f64, &Value),
) -> (f64, Value) {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let asked = OffsetDateTime::now_utc();
    let answer: Value = http
        .post(format!("http://127.0.0.1:{}/api/scans", host.port))
        .json(&request)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = answer["id"].as_str().expect("a scan id").to_string();
    let export = request["action"]["type"] == "export";
    loop {
        tokio::time::sleep(if export { POLL_EXPORT } else { POLL }).await;
        let status: Value = http
            .get(format!("http://127.0.0.1:{}/api/scans/{id}", host.port))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let read_at = started.elapsed().as_secs_f64();
        match status["state"].as_str() {
            Some("succeeded") => {
                // An export's last step writes the manifest after its finish: timed to the
                // read that saw it succeed, so that writing is counted.
                let finished = status["finishedAt"]
                    .as_str()
                    .filter(|_| !export)
                    .and_then(|at| OffsetDateTime::parse(at, &Rfc3339).ok());
                let seconds = finished.map_or(read_at, |at| (at - asked).as_seconds_f64());
                observe(seconds, &status);
                return (seconds, status);
            }
            Some("failed") | Some("cancelled") => panic!("the scan did not succeed: {status}"),
            _ => observe(read_at, &status),
        }
    }
}

pub async fn load(tables: &TableServiceClient, name: &str, rows: usize) -> TableClient {
    let table = tables.table(name).unwrap();
    if !tables.create_table(name, true).await.unwrap() {
        let existing = table
            .query_all(&Query::default().select(Vec::<String>::new()))
            .await
            .unwrap()
            .len();
        if existing == rows {
            return table;
        }
        panic!("{name} exists with {existing} rows; use a fresh Azurite");
    }
    let entities: Vec<Entity> = nuget_like(rows, 5)
        .into_iter()
        .enumerate()
        .map(|(i, e)| e.with("n", Edm::Int32((i % 1000) as i32)))
        .collect();
    let mut batches: Vec<Vec<Operation>> = Vec::new();
    for e in entities {
        match batches.last_mut() {
            Some(b)
                if b.len() < 100
                    && matches!(&b[0], Operation::Insert(f) if f.partition_key == e.partition_key) =>
            {
                b.push(Operation::Insert(e))
            }
            _ => batches.push(vec![Operation::Insert(e)]),
        }
    }
    for chunk in batches.chunks(4) {
        let futures: Vec<_> = chunk.iter().map(|b| table.submit_transaction(b)).collect();
        for f in futures {
            f.await.unwrap();
        }
    }
    table
}
