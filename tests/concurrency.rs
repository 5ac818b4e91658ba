//! Scans that meet each other or themselves: two scans of one table at once, a copy onto its
//! own source, and one message delivered a thousand times, two hundred of them at once.

mod common;

use std::collections::BTreeSet;

use common::host::TestHost;
use common::{fresh_table, load, queues, unique_name};
use serde_json::json;
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;

fn rows(n: usize) -> Vec<Entity> {
    (0..n)
        .map(|i| {
            Entity::new(format!("p{:02}", i % 17), format!("r{i:04}"))
                .with("n", Edm::Int64(i as i64))
        })
        .collect()
}

/// Every row of a table as JSON, without the service's timestamp and etag.
async fn contents(table: &tablescan::storage::TableClient) -> Vec<String> {
    table
        .query_all(&Query::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            Entity {
                etag: None,
                timestamp: None,
                ..e
            }
            .to_json()
        })
        .collect()
}

#[tokio::test]
async fn two_scans_of_one_table_at_once_are_both_exact() {
    let source = fresh_table("twice").await;
    let rows = rows(300);
    load(&source, &rows).await;
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "1")]).await;
    let request = json!({"table": source.name(), "pageSize": 7, "action": {"type": "count"}});
    let (first, a) = host.start_scan(&request).await;
    let (second, b) = host.start_scan(&request).await;
    // Both scans' work items share the queue and run interleaved.
    host.enqueue_outputs(&first);
    host.enqueue_outputs(&second);
    host.drain().await;
    for id in [a, b] {
        let (_, status) = host.status(&id).await;
        assert_eq!(status["state"], "succeeded", "{status}");
        assert_eq!(
            status["result"],
            json!({"rows": 300, "partitions": 17}),
            "{status}"
        );
    }
}

#[tokio::test]
async fn a_copy_onto_its_own_source_is_refused_and_changes_nothing() {
    let source = fresh_table("self").await;
    let rows = rows(250);
    load(&source, &rows).await;
    let before = contents(&source).await;
    let host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "2")]).await;
    let body = json!({
        "table": source.name(), "pageSize": 9,
        "action": {"type": "copy", "table": source.name()}
    })
    .to_string();
    let (status, error) = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&body))
        .await
        .res();
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["field"], "action.table", "{error}");
    assert!(host.queued.is_empty(), "{:?}", host.queued);
    let after = contents(&source).await;
    assert_eq!(after, before);
}

#[tokio::test]
async fn a_thousand_deliveries_of_one_message_act_once() {
    let source = fresh_table("dupes").await;
    let rows = rows(60);
    load(&source, &rows).await;
    let queue = unique_name("dupes-");
    let mut host = TestHost::start(&[]).await;
    let (start, id) = host
        .start_scan(&json!({
            "table": source.name(), "pageSize": 10,
            "action": {"type": "enqueue", "queue": queue}
        }))
        .await;
    let root = start.messages("rangeItems").remove(0);
    // Two hundred at once, then eight hundred one after another.
    let at_once: Vec<_> = (0..200u64)
        .map(|n| host.post_raw("ScanRange", host.delivery("ScanRange", &root, 1, n)))
        .collect();
    let mut answers = futures_util::future::join_all(at_once).await;
    for _ in 200..1000 {
        answers.push(host.deliver("ScanRange", &root, 1).await);
    }
    let children: BTreeSet<Vec<String>> = answers
        .iter()
        .map(|a| {
            assert_eq!(a.status, 200, "{}", a.text);
            let mut c = a.messages("rangeItems");
            c.extend(a.messages("partitionItems"));
            c
        })
        .collect();
    assert_eq!(
        children.len(),
        1,
        "every delivery answers the same follow-ups"
    );
    assert!(
        !children.first().unwrap().is_empty(),
        "the root has follow-ups"
    );
    let (_, status) = host.status(&id).await;
    assert_eq!(status["progress"]["stepsDone"], 1, "{status}");
    // The rest of the scan, delivered once.
    host.enqueue_outputs(&answers[0]);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsActed"], 60, "{status}");
    let queue = queues().queue(&queue).unwrap();
    let mut seen = Vec::new();
    loop {
        let batch = queue
            .receive(32, std::time::Duration::from_secs(60))
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        for m in batch {
            let text = MessageEncoding::Base64.decode(&m.text).unwrap();
            let row: serde_json::Value = serde_json::from_slice(&text).unwrap();
            seen.push((
                row["PartitionKey"].as_str().unwrap().to_string(),
                row["RowKey"].as_str().unwrap().to_string(),
            ));
        }
    }
    assert_eq!(seen.len(), 60, "each row enqueued once");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>().len(), 60);
}
