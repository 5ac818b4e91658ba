//! Parked work items against Azurite (`tablescan_ledger::parked`, `pacing::park`): a parked item
//! is taken back once by one of two racing unparkers; an item parked more than a minute ago is
//! sent by the `RedriveScans` sweep (deleted, then sent), and its scan finishes exactly; a
//! parked item is not taken for a stranded one meanwhile; and through the handler's own step, an
//! item given back twice parks, and runs once when taken back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::host::TestHost;
use common::{fresh_table, load, queues};
use serde_json::{json, Value};
use tablescan::functions::app::ItemQueues;
use tablescan::functions::redrive::sweep;
use tablescan::functions::AppState;
use tablescan::job::rows::pending_key;
use tablescan::job::{Ledger, WorkItem};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::batch::{IfMatch, Operation};
use tablescan::storage::table::entity::{Entity, Value as Edm};
use time::OffsetDateTime;

/// A handler state with its own ledger and queues (`common::own_queues`); items are stranded
/// after an hour (so that only parking sends anything here).
async fn state() -> (Arc<AppState>, ItemQueues) {
    common::own_queues::state("park", 3600).await
}

/// A count scan of 30 rows started, its first message kept back: the host, the ledger, the
/// scan's id and its root item's message.
async fn started(state: &Arc<AppState>) -> (TestHost, Ledger, String, String) {
    let ledger = state.ledger().unwrap().clone();
    let host = TestHost::serve(state.clone()).await;
    let table = fresh_table("park").await;
    let entities: Vec<Entity> = (0..30)
        .map(|i| Entity::new(format!("p{:02}", i % 5), format!("r{i:03}")))
        .collect();
    load(&table, &entities).await;
    let (answer, id) = host
        .start_scan(&json!({ "table": table.name(), "pageSize": 4, "action": {"type": "count"} }))
        .await;
    let root = answer
        .messages(tablescan::functions::names::RANGE_OUTPUT)
        .into_iter()
        .next()
        .expect("the root's message");
    (host, ledger, id, root)
}

#[tokio::test]
async fn two_unparkers_take_a_parked_item_once() {
    let (state, _) = state().await;
    let (_host, ledger, id, root) = started(&state).await;
    let item = WorkItem::decode(&root).unwrap();
    let now = OffsetDateTime::now_utc();
    assert!(ledger.park(&id, &item.id(), &root, now).await.unwrap());
    let (a, b) = tokio::join!(ledger.unpark(&id, 4, None), ledger.unpark(&id, 4, None));
    let mut taken = a.unwrap();
    taken.extend(b.unwrap());
    assert_eq!(taken, vec![root.clone()], "exactly one unparker sends it");
    assert!(ledger.unpark(&id, 4, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_sweep_sends_an_item_parked_a_minute_ago_and_its_scan_finishes() {
    let (state, item_queues) = state().await;
    let (mut host, ledger, id, root) = started(&state).await;
    let item = WorkItem::decode(&root).unwrap();
    let now = OffsetDateTime::now_utc();
    // Parked just now: not the sweep's yet, nor stranded.
    assert!(ledger.park(&id, &item.id(), &root, now).await.unwrap());
    let early = sweep(&state, &ledger).await.unwrap();
    assert_eq!(early.sent, 0, "{early:?}");
    // Taken back by a step, then parked again two minutes "ago": the sweep's.
    assert_eq!(
        ledger.unpark(&id, 4, None).await.unwrap(),
        vec![root.clone()]
    );
    let long_ago = now - time::Duration::minutes(2);
    assert!(ledger.park(&id, &item.id(), &root, long_ago).await.unwrap());
    let swept = sweep(&state, &ledger).await.unwrap();
    assert_eq!(swept.sent, 1, "{swept:?}");
    assert!(
        ledger.unpark(&id, 4, None).await.unwrap().is_empty(),
        "deleted"
    );
    assert_eq!(sweep(&state, &ledger).await.unwrap().sent, 0, "sent once");

    let queue = queues().queue(&item_queues.range).unwrap();
    let received = queue.receive(32, Duration::from_secs(60)).await.unwrap();
    assert_eq!(received.len(), 1, "exactly one message was sent");
    let text =
        String::from_utf8(MessageEncoding::Base64.decode(&received[0].text).unwrap()).unwrap();
    assert_eq!(text, root);
    host.deliver_and_drain("ScanRange", &text).await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"], json!({"rows": 30, "partitions": 5}));
}

/// The scan's 16 pace slices, leased now by another process for a minute (as
/// `tablescan_pace` writes them): this process can hold none, so no step of the scan is
/// admitted here.
async fn slices_held_elsewhere(ledger: &Ledger, scan: &str) {
    let until = OffsetDateTime::now_utc().unix_timestamp() * 1000 + 60_000;
    let slices: Vec<Operation> = (0..16)
        .map(|n| {
            let row = Entity::new(scan, format!("pace:{n:02}"))
                .with("holder", Edm::String("elsewhere".into()))
                .with("until", Edm::Int64(until))
                .with("used", Edm::Double(100.0));
            Operation::UpsertReplace(row)
        })
        .collect();
    ledger.table().submit_transaction(&slices).await.unwrap();
}

/// The slices of [`slices_held_elsewhere`] given up: the rows gone.
async fn slices_freed(ledger: &Ledger, scan: &str) {
    let slices: Vec<Operation> = (0..16)
        .map(|n| Operation::Delete {
            partition_key: scan.to_string(),
            row_key: format!("pace:{n:02}"),
            if_match: IfMatch::Any,
        })
        .collect();
    ledger.table().submit_transaction(&slices).await.unwrap();
}

/// Delivers `first` and whatever follows from it, the steps' answers and the messages they give
/// back to the state's own range queue, until the scan is over (at most 2 minutes).
async fn run_to_end(host: &mut TestHost, range_queue: &str, id: &str, first: &str) -> Value {
    let answer = host.deliver("ScanRange", first, 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    host.enqueue_outputs(&answer);
    let queue = queues().queue(range_queue).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        host.drain().await;
        let (_, status) = host.status(id).await;
        if status["state"] != "running" {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "not over: {status}");
        for message in queue.receive(32, Duration::from_secs(60)).await.unwrap() {
            let text = MessageEncoding::Base64.decode(&message.text).unwrap();
            let answer = host
                .deliver("ScanRange", &String::from_utf8(text).unwrap(), 1)
                .await;
            assert_eq!(answer.status, 200, "{}", answer.text);
            host.enqueue_outputs(&answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Through the handler's own step: a capped scan whose pace has no room in this process gives
/// its root back twice (each time with the count of give-backs in the message), then parks it:
/// the delivery is answered done with nothing sent, the ledger holds the message as first sent
/// and the item's pending row is touched. Taken back once room is made, it runs once, and the
/// scan counts every row exactly.
#[tokio::test]
async fn a_step_without_room_is_given_back_twice_then_parked_and_runs_once_when_taken() {
    let (state, item_queues) = state().await;
    let ledger = state.ledger().unwrap().clone();
    let mut host = TestHost::serve(state.clone()).await;
    let table = fresh_table("parkstep").await;
    let entities: Vec<Entity> = (0..30)
        .map(|i| Entity::new(format!("p{:02}", i % 5), format!("r{i:03}")))
        .collect();
    load(&table, &entities).await;
    let request = json!({
        "table": table.name(), "pageSize": 4, "maxRowsPerSecond": 1000,
        "action": {"type": "count"}
    });
    let (answer, id) = host.start_scan(&request).await;
    let root = answer
        .messages(tablescan::functions::names::RANGE_OUTPUT)
        .into_iter()
        .next()
        .expect("the root's message");
    slices_held_elsewhere(&ledger, &id).await;

    let mut message = root.clone();
    for back in 1..=2 {
        let answer = host.deliver("ScanRange", &message, 1).await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert!(answer
            .messages(tablescan::functions::names::RANGE_OUTPUT)
            .is_empty());
        message = common::own_queues::given_back(&item_queues.range).await;
        assert_eq!(WorkItem::decode(&message).unwrap().given_back, back);
    }
    assert_eq!(ledger.oldest_parked_ms(&id).await.unwrap(), None);

    let answer = host.deliver("ScanRange", &message, 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer
        .messages(tablescan::functions::names::RANGE_OUTPUT)
        .is_empty());
    let queue = queues().queue(&item_queues.range).unwrap();
    assert!(
        queue
            .receive(32, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty(),
        "parked, not given back"
    );
    assert!(ledger.oldest_parked_ms(&id).await.unwrap().is_some());
    let item = WorkItem::decode(&root).unwrap();
    let pending = ledger
        .table()
        .get_entity(&id, &pending_key(&item.id()))
        .await
        .unwrap()
        .expect("the root is still pending");
    assert!(
        pending.properties.contains_key("redrivenAt"),
        "parking touches the pending row: {pending:?}"
    );

    slices_freed(&ledger, &id).await;
    let taken = ledger.unpark(&id, 4, None).await.unwrap();
    assert_eq!(taken, vec![root.clone()], "the message as first sent");
    assert!(ledger.unpark(&id, 4, None).await.unwrap().is_empty());
    let status = run_to_end(&mut host, &item_queues.range, &id, &taken[0]).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"], json!({"rows": 30, "partitions": 5}));
    assert_eq!(ledger.oldest_parked_ms(&id).await.unwrap(), None);
}
