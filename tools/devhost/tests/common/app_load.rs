//! An application that shares a storage account with a scan: a steady load of single-entity
//! requests, for tests of how a scan's pacing treats the account's other users.
//!
//! The load sends `per_second` requests a second, evenly spaced, alternately a point read and an
//! upsert of a small entity, all to a table of its own. Each request touches one entity, as the
//! Table service counts them against the account's target (and as the test proxy's
//! `entities_touched` does: a point read answers one entity, an upsert answers no body). A
//! request the account refuses (503 Server Busy) is counted and never tried again: how many of
//! its requests an application loses while a scan runs is what a test measures.
//!
//! Its table is its marker: before starting it, tell the proxy to count the requests to that
//! table apart, so the proxy's `marked_throttled` is the application's refusals and
//! `throttled - marked_throttled` the scan's. In a test such as
//! `an_uncapped_count_backs_off_on_an_account_that_is_busy` (tools/devhost/tests/pacing.rs):
//!
//! ```ignore
//! let app = unique("app");
//! proxy.mark_table(Some(&app));
//! let load = AppLoad::start(&limited, &app, 300.0).await; // `limited`: through the proxy
//! let (status, samples) = observe(&host, &proxy, request).await;
//! let sent = load.stop().await;
//! let refused_after_10_s = sent.since(10).refused;
//! ```
//!
//! (The second index of [`Sent`] is seconds since the load started, not since the scan did.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tablescan::storage::retry::RetryPolicy;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::WriteMode;
use tablescan::storage::{ClientOptions, StorageAccount, TableClient, TableServiceClient};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// The rows the point reads ask for, and the upserts overwrite: one partition, so that reads
/// always find a row.
const ROWS: u64 = 100;
const PARTITION: &str = "app";

/// A sender that falls further behind than this drops the requests it missed rather than sending
/// them in a burst: a stall of the test's own process must not look like the application
/// pushing harder.
const MOST_BEHIND: Duration = Duration::from_millis(100);

/// What the load sent in one second (counted by when each request was sent), and how the
/// account answered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Second {
    pub sent: u64,
    /// Answered 503 Server Busy.
    pub refused: u64,
    /// Failed any other way (an error status, no answer): none in a healthy test.
    pub failed: u64,
}

impl std::ops::AddAssign for Second {
    fn add_assign(&mut self, other: Second) {
        self.sent += other.sent;
        self.refused += other.refused;
        self.failed += other.failed;
    }
}

/// Every second of a load, from its start.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    pub seconds: Vec<Second>,
}

impl Sent {
    /// The whole load.
    pub fn total(&self) -> Second {
        self.since(0)
    }

    /// The seconds from `second` (since the load started) on.
    pub fn since(&self, second: usize) -> Second {
        let mut sum = Second::default();
        for s in self.seconds.iter().skip(second) {
            sum += *s;
        }
        sum
    }
}

/// A running load. Stop it with [`AppLoad::stop`]; dropped, it stops sending.
pub struct AppLoad {
    table: String,
    stop: Option<oneshot::Sender<()>>,
    sender: tokio::task::JoinHandle<Sent>,
}

impl AppLoad {
    /// Creates `table` with the rows the reads ask for (directly in the test storage, so that
    /// neither a proxy nor its limit sees the set-up), then sends `per_second` requests a second
    /// to it through `connection` (a connection string, e.g. the test storage with its table
    /// endpoint replaced by a proxy's) until stopped.
    pub async fn start(connection: &str, table: &str, per_second: f64) -> AppLoad {
        assert!(per_second > 0.0, "a load of {per_second} requests a second");
        seed(table).await;
        let options = ClientOptions {
            retry: RetryPolicy::none(),
            ..ClientOptions::default()
        };
        let account = StorageAccount::from_connection_string(connection).unwrap();
        let client = TableServiceClient::new(&account, options)
            .unwrap()
            .table(table)
            .unwrap();
        let (stop, stopped) = oneshot::channel();
        let sender = tokio::spawn(send(client, per_second, stopped));
        AppLoad {
            table: table.to_string(),
            stop: Some(stop),
            sender,
        }
    }

    /// The load's table, the one to mark on the proxy.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Stops sending, waits for the answers to the requests in flight, and returns what every
    /// second sent and how each request was answered.
    pub async fn stop(mut self) -> Sent {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.sender).await.expect("the load's sender ends")
    }
}

impl Drop for AppLoad {
    fn drop(&mut self) {
        self.sender.abort();
    }
}

/// Creates the table (if missing) and writes the rows the reads ask for, in one transaction.
async fn seed(table: &str) {
    let service = super::tables();
    service.create_table(table, true).await.unwrap();
    let rows: Vec<Operation> = (0..ROWS)
        .map(|row| Operation::UpsertReplace(entity(row, 0)))
        .collect();
    service
        .table(table)
        .unwrap()
        .submit_transaction(&rows)
        .await
        .unwrap();
}

/// Row `row` of the load's table, with a small property.
fn entity(row: u64, value: u64) -> Entity {
    Entity::new(PARTITION, format!("r{row:03}")).with("v", Edm::Int64(value as i64))
}

/// Sends request `n` when its time comes (`n / per_second` seconds after the start) until told
/// to stop, then waits for the answers.
async fn send(client: TableClient, per_second: f64, mut stopped: oneshot::Receiver<()>) -> Sent {
    let started = Instant::now();
    let counts = Arc::new(Mutex::new(Sent::default()));
    let mut in_flight = JoinSet::new();
    let mut n: u64 = 0;
    loop {
        let due = started + Duration::from_secs_f64(n as f64 / per_second);
        tokio::select! {
            _ = &mut stopped => break,
            _ = tokio::time::sleep_until(due.into()) => {}
        }
        let elapsed = started.elapsed();
        let behind = elapsed.saturating_sub(MOST_BEHIND).as_secs_f64() * per_second;
        n = n.max(behind.ceil() as u64);
        while (n as f64) / per_second <= elapsed.as_secs_f64() {
            let second = elapsed.as_secs() as usize;
            record(&counts, second, |s| s.sent += 1);
            in_flight.spawn(one_request(client.clone(), n, second, counts.clone()));
            n += 1;
        }
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
    let sent = counts.lock().unwrap().clone();
    sent
}

/// Request `n`: a point read when even, an upsert when odd, of row `n / 2` modulo the rows.
async fn one_request(client: TableClient, n: u64, second: usize, counts: Arc<Mutex<Sent>>) {
    let row = (n / 2) % ROWS;
    let outcome = if n % 2 == 0 {
        client
            .get_entity(PARTITION, &format!("r{row:03}"))
            .await
            .map(drop)
    } else {
        client
            .upsert(&entity(row, n), WriteMode::Replace)
            .await
            .map(drop)
    };
    match outcome {
        Ok(()) => {}
        Err(e) if e.status() == Some(503) => record(&counts, second, |s| s.refused += 1),
        Err(_) => record(&counts, second, |s| s.failed += 1),
    }
}

fn record(counts: &Mutex<Sent>, second: usize, change: impl FnOnce(&mut Second)) {
    let mut counts = counts.lock().unwrap();
    if counts.seconds.len() <= second {
        counts.seconds.resize(second + 1, Second::default());
    }
    change(&mut counts.seconds[second]);
}
