//! What `GET /api/scans/{id}` of a scan in flight costs the ledger's account, counted by proxies
//! in front of Azurite's table and queue endpoints: at most 5 requests and 60 table entities
//! however many items are pending and processes run the scan, and the re-drive look (a window
//! of 200 pending rows) at most once a minute per scan (docs/functions.md, "Costs").
//! And the read of a scan's record that steps share: 16 steps starting together read it once.
//!
//! `cargo nextest run -p tablescan --test status_cost --no-capture` prints each read's cost.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::fault_proxy::FaultProxy;
use common::host::TestHost;
use common::{fresh_table, queues, tables, unique_name};
use serde_json::{json, Value};
use tablescan::functions::names::{EXPORT_QUEUE, PARTITION_QUEUE, RANGE_QUEUE};
use tablescan::functions::{AppState, Settings};
use tablescan::job::rows::{PendingRow, Tallies, SHARDS};
use tablescan::storage::connection_string::{EMULATOR_ACCOUNT, EMULATOR_KEY};
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::table::{TableClient, WriteMode};
use time::OffsetDateTime;

/// Pending items of each scan: more than the old windows held (100 claims, 200 stranded).
const PENDING: usize = 300;

/// The handler, reaching its storage through counting proxies (tables, queues).
struct Counted {
    host: TestHost,
    state: std::sync::Arc<AppState>,
    tables: FaultProxy,
    queues: FaultProxy,
    ledger: TableClient,
}

/// Requests (tables and queues) and table entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cost {
    requests: u64,
    entities: u64,
}

impl Counted {
    async fn start() -> Counted {
        let direct = common::account();
        let origin = |endpoint: String| {
            endpoint
                .trim_end_matches(&format!("/{EMULATOR_ACCOUNT}"))
                .to_string()
        };
        let tables_proxy =
            FaultProxy::start(origin(direct.table_endpoint().unwrap().to_string())).await;
        let queues_proxy =
            FaultProxy::start(origin(direct.queue_endpoint().unwrap().to_string())).await;
        let connection = format!(
            "AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};\
             TableEndpoint=http://{}/{EMULATOR_ACCOUNT};QueueEndpoint=http://{}/{EMULATOR_ACCOUNT}",
            tables_proxy.address, queues_proxy.address
        );
        let ledger_name = unique_name("ledger");
        let settings = Settings::from_pairs([
            ("AzureWebJobsStorage".to_string(), connection),
            ("TABLESCAN_LEDGER_TABLE".to_string(), ledger_name.clone()),
        ]);
        for queue in [RANGE_QUEUE, PARTITION_QUEUE, EXPORT_QUEUE] {
            queues().queue(queue).unwrap().create().await.unwrap();
        }
        let state = AppState::new(settings);
        Counted {
            host: TestHost::serve(state.clone()).await,
            state,
            tables: tables_proxy,
            queues: queues_proxy,
            ledger: tables().table(&ledger_name).unwrap(),
        }
    }

    fn counts(&self) -> Cost {
        let forwarded = |p: &FaultProxy| p.injected.forwarded.load(Ordering::SeqCst);
        Cost {
            requests: forwarded(&self.tables) + forwarded(&self.queues),
            entities: self.tables.injected.entities.load(Ordering::SeqCst),
        }
    }

    /// One status read and what it cost.
    async fn status(&self, id: &str) -> (Value, Cost) {
        let before = self.counts();
        let (code, status) = self.host.status(id).await;
        assert_eq!(code, 200, "{status}");
        let after = self.counts();
        let cost = Cost {
            requests: after.requests - before.requests,
            entities: after.entities - before.entities,
        };
        println!("{id}: {cost:?}");
        (status, cost)
    }

    /// Starts a copy of a one-row table (its root item stays undelivered), then makes it a
    /// scan in flight of `PENDING` items, `running` of them claimed now, capped scans' slices
    /// leased by `processes` processes; created `age` ago.
    async fn scan(
        &self,
        cap: Option<u32>,
        running: usize,
        processes: usize,
        age: time::Duration,
    ) -> String {
        let source = fresh_table("costsource").await;
        source.insert(&Entity::new("p", "r")).await.unwrap();
        let cap_field = cap.map_or(json!("unlimited"), |n| json!(n));
        let (_, id) = self
            .host
            .start_scan(&json!({
                "table": source.name(), "maxRowsPerSecond": cap_field,
                "action": {"type": "copy", "table": unique_name("costcopy")}
            }))
            .await;
        let now = OffsetDateTime::now_utc();
        let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as u64;
        let rows: Vec<Operation> = (0..PENDING)
            .map(|n| {
                let mut row = PendingRow::new(format!("m{n}"), 1);
                if n < running {
                    row.lease_until = now_ms + 10 * 60 * 1000;
                    row.attempts = 1;
                }
                Operation::Insert(row.to_entity(&id, &uuid::Uuid::new_v4().simple().to_string()))
            })
            .collect();
        for chunk in rows.chunks(100) {
            self.ledger.submit_transaction(chunk).await.unwrap();
        }
        // The shards count the items created: the root and these.
        let created = Tallies {
            created: PENDING as u64 + 1,
            ..Tallies::default()
        };
        let mut shards = vec![Operation::UpsertReplace(created.to_entity(&id, 0))];
        for shard in 1..SHARDS {
            let empty = Tallies::default().to_entity(&id, shard);
            shards.push(Operation::UpsertReplace(empty));
        }
        self.ledger.submit_transaction(&shards).await.unwrap();
        // A capped scan's 16 slices, leased by `processes` processes (all 16 rows whatever
        // their number: the pace's cost does not grow with processes).
        let until = Edm::Int64(now_ms as i64 + 60_000);
        let slices: Vec<Operation> = (0..16)
            .filter(|_| cap.is_some())
            .map(|n| {
                let row = Entity::new(&id, format!("pace:{n:02}"))
                    .with(
                        "holder",
                        Edm::String(format!("process{}", n % processes.max(1))),
                    )
                    .with("until", until.clone())
                    .with("used", Edm::Double(100.0));
                Operation::Insert(row)
            })
            .collect();
        if !slices.is_empty() {
            self.ledger.submit_transaction(&slices).await.unwrap();
        }
        // Created (and its first step started) `age` ago.
        let dates = Entity::new(&id, "scan")
            .with("createdAt", Edm::DateTime(EdmDateTime::new(now - age)))
            .with("startedAt", Edm::DateTime(EdmDateTime::new(now - age)));
        self.ledger.upsert(&dates, WriteMode::Merge).await.unwrap();
        id
    }
}

fn within_budget(cost: Cost, status: &Value) {
    assert!(
        cost.requests <= 5 && cost.entities <= 60,
        "a status read costs at most 5 requests and 60 entities: {cost:?}\n{status}"
    );
}

/// A scan with steps running, uncapped, and more processes than any fixed window: the scan row,
/// one read of the shards, one claims window (the pace is not read: no cap to share out).
#[tokio::test(flavor = "multi_thread")]
async fn a_running_scans_status_costs_at_most_5_requests_and_60_entities() {
    let counted = Counted::start().await;
    let id = counted.scan(None, 60, 40, time::Duration::ZERO).await;
    let (status, cost) = counted.status(&id).await;
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["progress"]["stepsPending"], PENDING + 1, "{status}");
    let activity = &status["activity"];
    assert_eq!(activity["estimated"], true, "{status}");
    assert!(activity["stepsRunning"].as_u64().unwrap() > 0, "{status}");
    within_budget(cost, &status);

    // Capped, its 16 slices held by 16 processes: the pace is read too.
    let capped = counted.scan(Some(2000), 60, 16, time::Duration::ZERO).await;
    let (status, cost) = counted.status(&capped).await;
    assert_eq!(status["pace"]["instances"], 16, "{status}");
    assert!(status["activity"].is_object(), "{status}");
    within_budget(cost, &status);
}

/// A capped scan with items parked (`docs/scan.md`, Parking): the status says how long the
/// oldest has waited, read with the request the budget has left, and still within it.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_scans_status_shows_its_oldest_parked_item_within_the_budget() {
    let counted = Counted::start().await;
    let id = counted.scan(Some(2000), 60, 16, time::Duration::ZERO).await;
    let (status, _) = counted.status(&id).await;
    assert!(
        status["activity"].get("oldestParkedSeconds").is_none(),
        "nothing parked: {status}"
    );
    let now_ms = (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as u64;
    for (n, ago_ms) in [(1, 5_000), (2, 90_000)] {
        let key = tablescan::job::parked::parked_key(now_ms - ago_ms, &format!("m{n}"));
        let row = Entity::new(&id, key).with("message", Edm::String("{}".into()));
        counted.ledger.insert(&row).await.unwrap();
    }
    let (status, cost) = counted.status(&id).await;
    let parked = status["activity"]["oldestParkedSeconds"].as_u64();
    assert!(parked.is_some_and(|s| (90..120).contains(&s)), "{status}");
    within_budget(cost, &status);
}

/// No step running and none finished for two minutes: the read counts the scan's queues
/// (the figures a stall note rests on) and still stays within the budget. (The first read of
/// a scan older than a lease takes the minute's re-drive look: a stalled scan may have
/// abandoned claims. The read after it is the one every poll pays.)
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_scans_status_counts_its_queues_within_the_budget() {
    let counted = Counted::start().await;
    let id = counted
        .scan(Some(2000), 0, 16, time::Duration::minutes(2))
        .await;
    let (_, looked) = counted.status(&id).await;
    assert!(looked.entities >= 200, "the re-drive look: {looked:?}");
    let (status, cost) = counted.status(&id).await;
    let activity = &status["activity"];
    assert_eq!(activity["stepsRunning"], 0, "{status}");
    assert!(activity["queuedMessages"].is_u64(), "{status}");
    assert!(activity["note"].is_string(), "{status}");
    within_budget(cost, &status);
}

/// The re-drive look (a window of 200 pending rows) runs at most once a minute per scan: a
/// scan old enough to have stranded items gets it on one read, not on the next a second later.
#[tokio::test(flavor = "multi_thread")]
async fn status_reads_a_second_apart_take_the_re_drive_look_once() {
    let counted = Counted::start().await;
    let id = counted.scan(None, 60, 4, time::Duration::minutes(20)).await;
    let (_, first) = counted.status(&id).await;
    assert!(
        first.entities >= 200,
        "the first read looks for stranded items: {first:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, second) = counted.status(&id).await;
    within_budget(second, &status);
}

/// The steps that start together in one process (a batch of messages, when a scan starts or
/// its record has aged) read the scan's row once between them, not once each: 16 at once cost
/// one request, and all 16 see the record.
#[tokio::test(flavor = "multi_thread")]
async fn steps_starting_together_read_their_scans_row_once() {
    let counted = Counted::start().await;
    let id = counted.scan(None, 0, 1, time::Duration::ZERO).await;
    let before = counted.counts();
    let mut steps = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (state, id) = (counted.state.clone(), id.clone());
        steps.spawn(async move { state.scan_record(&id).await.is_some() });
    }
    while let Some(seen) = steps.join_next().await {
        assert!(seen.unwrap(), "every step sees the scan's record");
    }
    let requests = counted.counts().requests - before.requests;
    assert_eq!(
        requests, 1,
        "16 steps starting together read the scan row once"
    );
}
