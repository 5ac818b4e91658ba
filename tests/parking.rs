//! Parked work items against Azurite (`tablescan_ledger::parked`, `pacing::park`): a parked item
//! is taken back once by one of two racing unparkers; an item parked more than a minute ago is
//! sent by the `RedriveScans` sweep (deleted, then sent), and its scan finishes exactly; a
//! parked item is not taken for a stranded one meanwhile.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::host::TestHost;
use common::{fresh_table, load, queues};
use serde_json::json;
use tablescan::functions::app::ItemQueues;
use tablescan::functions::redrive::sweep;
use tablescan::functions::AppState;
use tablescan::job::{Ledger, WorkItem};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::Entity;
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
    let answer = host.deliver("ScanRange", &text, 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    host.enqueue_outputs(&answer);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"], json!({"rows": 30, "partitions": 5}));
}
