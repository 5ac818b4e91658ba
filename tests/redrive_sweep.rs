//! The timer function `RedriveScans` against Azurite: a scan whose only message was lost, with
//! nobody reading its status, is found by the sweep and finishes exactly; scans that settled
//! leave the list of scans in flight; a cancelled scan is not re-driven (its items whose
//! messages are gone are dropped).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::host::TestHost;
use common::{fresh_table, load, queues};
use serde_json::json;
use tablescan::functions::app::ItemQueues;
use tablescan::functions::redrive::{redrive_stranded, sweep, Sweep};
use tablescan::functions::AppState;
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::Entity;

/// A handler state with its own ledger and queues (`common::own_queues`); items are stranded
/// after a second.
async fn state() -> (Arc<AppState>, ItemQueues) {
    common::own_queues::state("sweep", 1).await
}

/// The invocation the host sends at a timer occurrence.
fn timer_invocation() -> String {
    json!({
        "Data": { "timer": { "Schedule": { "AdjustForDST": true }, "ScheduleStatus": null, "IsPastDue": false } },
        "Metadata": { "sys": { "MethodName": "RedriveScans", "UtcNow": "2026-11-22T10:00:00.0000000Z", "RandGuid": "0" } }
    })
    .to_string()
}

async fn table_of(rows: usize) -> tablescan::storage::TableClient {
    let table = fresh_table("sweep").await;
    let entities: Vec<Entity> = (0..rows)
        .map(|i| Entity::new(format!("p{:02}", i % 7), format!("r{i:03}")))
        .collect();
    load(&table, &entities).await;
    table
}

/// A handler over its own ledger and queues, with one count scan of `rows` rows started whose
/// first message was lost (the answer's output is never written).
struct LostScan {
    state: Arc<AppState>,
    item_queues: ItemQueues,
    ledger: tablescan::job::Ledger,
    host: TestHost,
    id: String,
}

impl LostScan {
    async fn start(rows: usize, page_size: u32) -> LostScan {
        let (state, item_queues) = state().await;
        let ledger = state.ledger().unwrap().clone();
        let host = TestHost::serve(state.clone()).await;
        let table = table_of(rows).await;
        let (_lost, id) = host
            .start_scan(&json!({ "table": table.name(), "pageSize": page_size, "action": {"type": "count"} }))
            .await;
        LostScan {
            state,
            item_queues,
            ledger,
            host,
            id,
        }
    }
}

#[tokio::test]
async fn a_scan_whose_message_was_lost_is_re_driven_by_the_timer_and_then_settles() {
    let LostScan {
        state,
        item_queues,
        ledger,
        mut host,
        id,
    } = LostScan::start(40, 5).await;

    let fresh = sweep(&state, &ledger).await.unwrap();
    assert_eq!(
        fresh,
        Sweep {
            scans: 1,
            ..Sweep::default()
        },
        "a work item written just now is not stranded"
    );

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let answer = host.post_raw("RedriveScans", timer_invocation()).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    // The sweep logs its line through the handler's own log (not the answer's Logs, which
    // the host would write a second time); what it did shows in the queue, checked below.
    assert_eq!(answer.json["Logs"], json!([]), "{}", answer.text);
    assert_eq!(
        sweep(&state, &ledger).await.unwrap().sent,
        0,
        "an item just sent again waits another second"
    );

    // The message sent again is the scan's root item; delivering it runs the scan to the end.
    let queue = queues().queue(&item_queues.range).unwrap();
    let received = queue.receive(32, Duration::from_secs(60)).await.unwrap();
    assert_eq!(received.len(), 1, "exactly one message was sent again");
    let text =
        String::from_utf8(MessageEncoding::Base64.decode(&received[0].text).unwrap()).unwrap();
    assert!(text.contains(&id), "{text}");
    host.deliver_and_drain("ScanRange", &text).await;

    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"], json!({"rows": 40, "partitions": 7}));
    assert_eq!(status["progress"]["stepsRedriven"], 1);

    let settled = sweep(&state, &ledger).await.unwrap();
    assert_eq!(
        settled,
        Sweep {
            scans: 1,
            settled: 1,
            ..Sweep::default()
        }
    );
    assert!(ledger.active_scans().await.unwrap().is_empty());
    assert_eq!(sweep(&state, &ledger).await.unwrap(), Sweep::default());
}

#[tokio::test]
async fn a_cancelled_scan_is_not_re_driven_and_leaves_the_list() {
    let LostScan {
        state,
        item_queues,
        ledger,
        host,
        id,
    } = LostScan::start(10, 1000).await;
    let (status, body) = host.cancel(&id).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(1200)).await;

    // Neither the status read nor the sweep sends the cancelled scan's item again: the sweep
    // drops it (its message is gone), and takes the scan off the list at its next run.
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "cancelled");
    assert_eq!(status["progress"]["stepsPending"], 1, "{status}");
    assert_eq!(
        sweep(&state, &ledger).await.unwrap(),
        Sweep {
            scans: 1,
            dropped: 1,
            ..Sweep::default()
        }
    );
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "cancelled");
    assert_eq!(status["progress"]["stepsPending"], 0, "{status}");
    assert_eq!(
        sweep(&state, &ledger).await.unwrap(),
        Sweep {
            scans: 1,
            settled: 1,
            ..Sweep::default()
        }
    );
    let queue = queues().queue(&item_queues.range).unwrap();
    assert_eq!(queue.approximate_count().await.unwrap(), 0);
}

#[tokio::test]
async fn a_timer_invocation_that_is_not_json_fails_alone() {
    let (state, _) = state().await;
    let host = TestHost::serve(state).await;
    let answer = host.post_raw("RedriveScans", "{not json".to_string()).await;
    assert_eq!(answer.status, 400, "{}", answer.text);
    let answer = host.post_raw("RedriveScans", timer_invocation()).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["Outputs"], json!({}), "{}", answer.text);
    host.assert_serving().await;
}

#[tokio::test]
async fn a_re_drive_starts_nothing_after_its_deadline_and_leaves_the_rest_stranded() {
    let LostScan {
        state,
        item_queues,
        ledger,
        host: _,
        id,
    } = LostScan::start(10, 1000).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stranded = |ledger: tablescan::job::Ledger, id: String| async move {
        ledger
            .status_and_stranded(
                &id,
                time::OffsetDateTime::now_utc(),
                time::Duration::seconds(1),
                time::Duration::MINUTE,
            )
            .await
            .unwrap()
            .unwrap()
            .1
    };
    let items = stranded(ledger.clone(), id.clone()).await;
    assert_eq!(items.len(), 1);
    let past = std::time::Instant::now();
    let sent = redrive_stranded(&state, &ledger, &id, items, past)
        .await
        .unwrap();
    assert_eq!(sent, 0, "nothing starts after the deadline");
    let items = stranded(ledger.clone(), id.clone()).await;
    assert_eq!(
        items.len(),
        1,
        "the item is still stranded for the next sweep"
    );
    let later = std::time::Instant::now() + Duration::from_secs(30);
    assert_eq!(
        redrive_stranded(&state, &ledger, &id, items, later)
            .await
            .unwrap(),
        1
    );
    let queue = queues().queue(&item_queues.range).unwrap();
    assert_eq!(queue.approximate_count().await.unwrap(), 1);
}

/// An item untouched for longer than the re-drive delay whose queue still holds an older
/// message is waiting in a backlog, not lost: it is not sent again until the queue has worked
/// through everything older than it.
#[tokio::test]
async fn a_backlog_older_than_the_item_is_not_taken_for_a_lost_message() {
    let (state, item_queues) = state().await;
    let ledger = state.ledger().unwrap().clone();
    let host = TestHost::serve(state.clone()).await;
    let queue = queues().queue(&item_queues.range).unwrap();
    let backlog = tablescan::storage::queue::PutOptions::default();
    queue.put_message(b"older work", &backlog).await.unwrap();
    // Insertion times have a resolution of a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let table = table_of(10).await;
    let (_lost, _id) = host
        .start_scan(&json!({ "table": table.name(), "action": {"type": "count"} }))
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        sweep(&state, &ledger).await.unwrap().sent,
        0,
        "the queue has not reached the item's message yet"
    );
    queue.clear().await.unwrap();
    assert_eq!(
        sweep(&state, &ledger).await.unwrap().sent,
        1,
        "nothing older waits: the message was lost"
    );
}
