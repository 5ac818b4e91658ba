//! The custom handler against Azurite, called as the Functions host calls it: what scans do
//! to tables and queues (copy, count, delete, enqueue, partition keys) under redelivery, long
//! steps, cancels and retries.

mod common;

use std::time::Duration;

use common::host::TestHost;
use common::{fresh_table, queues, tables, unique_name};
use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::table::WriteMode;

/// Every EDM type, and keys that break naive clients.
fn difficult_entities() -> Vec<Entity> {
    let keys = [
        "",
        "a b",
        "it's",
        "50%",
        "x+y",
        "é中",
        "😀",
        "a😀b",
        "\u{FFFF}",
        "a\u{FFFF}b",
        "\u{E000}",
    ];
    let when = EdmDateTime::parse("2008-07-10T01:02:03.1234567Z").unwrap();
    let mut entities = Vec::new();
    for (i, pk) in keys.iter().enumerate() {
        for rk in keys.iter().take(1 + i % 4) {
            entities.push(
                Entity::new(*pk, *rk)
                    .with("s", Edm::String(format!("{pk}|{rk}")))
                    .with("i32", Edm::Int32(-(i as i32)))
                    .with("i64", Edm::Int64(i64::MAX - i as i64))
                    .with("d", Edm::Double(if i % 2 == 0 { 1.0 } else { f64::NAN }))
                    .with("inf", Edm::Double(f64::NEG_INFINITY))
                    .with("b", Edm::Boolean(i % 3 == 0))
                    .with("dt", Edm::DateTime(when))
                    .with("g", Edm::Guid(uuid::Uuid::from_u128(i as u128)))
                    .with("bin", Edm::Binary(vec![0, i as u8, 255])),
            );
        }
    }
    entities.push(
        Entity::new("k".repeat(512), "😀".repeat(256)).with("s", Edm::String("long keys".into())),
    );
    entities
}

fn comparable(entities: Vec<Entity>) -> Vec<(String, String, String)> {
    entities
        .into_iter()
        .map(|e| {
            (
                e.partition_key.clone(),
                e.row_key.clone(),
                Entity {
                    timestamp: None,
                    etag: None,
                    ..e
                }
                .to_json(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_copy_scan_leaves_the_target_identical_to_the_source() {
    let source = fresh_table("copysrc").await;
    let entities = difficult_entities();
    common::load(&source, &entities).await;
    let target_name = unique_name("copydst");
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "2")]).await;
    let id = host
        .run_scan(&json!({
            "table": source.name(),
            "pageSize": 3,
            "action": {"type": "copy", "table": target_name}
        }))
        .await;
    let target = tables().table(&target_name).unwrap();
    let want = comparable(source.query_all(&Query::default()).await.unwrap());
    let got = comparable(target.query_all(&Query::default()).await.unwrap());
    assert_eq!(got.len(), entities.len());
    assert_eq!(
        got, want,
        "the copy holds the same keys, properties and types"
    );

    let (status, body) = host.status(&id).await;
    assert_eq!(status, 200);
    assert_eq!(body["state"], "succeeded", "{body}");
    assert_eq!(body["progress"]["rowsRead"], entities.len() as u64);
    assert_eq!(body["progress"]["rowsActed"], entities.len() as u64);
    assert_eq!(body["progress"]["stepsPending"], 0);
    assert!(
        body["progress"]["stepsDone"].as_u64().unwrap() > 3,
        "several steps: {body}"
    );
    assert!(body["finishedAt"].is_string());
}

#[tokio::test]
async fn a_count_scan_reports_exact_rows_and_partitions() {
    let source = fresh_table("count").await;
    let entities = difficult_entities();
    common::load(&source, &entities).await;
    let partitions = entities
        .iter()
        .map(|e| e.partition_key.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "1")]).await;
    for strategy in ["prefix", "serial"] {
        let id = host.run_scan(&json!({"table": source.name(), "pageSize": 2, "strategy": strategy, "action": {"type": "count"}})).await;
        let (_, body) = host.status(&id).await;
        assert_eq!(body["state"], "succeeded", "{body}");
        assert_eq!(
            body["result"],
            json!({"rows": entities.len(), "partitions": partitions}),
            "{strategy}: {body}"
        );
        assert_eq!(body["spec"]["strategy"], strategy);
    }
}

#[tokio::test]
async fn the_same_step_delivered_twice_changes_no_count_and_writes_nothing_twice() {
    let source = fresh_table("twice").await;
    let rows: Vec<Entity> = (0..30)
        .map(|i| Entity::new(format!("p{}", i % 4), format!("r{i:02}")))
        .collect();
    common::load(&source, &rows).await;
    let queue = unique_name("out-");
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "1")]).await;
    let (start, id) = host.start_scan(&json!({"table": source.name(), "pageSize": 4, "action": {"type": "enqueue", "queue": queue}})).await;
    let root = start.messages("rangeItems").remove(0);

    let first = host.deliver("ScanRange", &root, 1).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let second = host.deliver("ScanRange", &root, 2).await;
    assert_eq!(second.status, 200, "{}", second.text);
    // The redelivery re-sends the same children and does nothing else.
    assert_eq!(second.messages("rangeItems"), first.messages("rangeItems"));
    assert_eq!(
        second.messages("partitionItems"),
        first.messages("partitionItems")
    );
    let (_, after_two) = host.status(&id).await;
    assert_eq!(after_two["progress"]["rowsRead"], 4, "{after_two}");
    assert_eq!(after_two["progress"]["stepsDone"], 1);

    // Deliver every message twice from here on, including the duplicates' outputs.
    host.enqueue_outputs(&first);
    host.enqueue_outputs(&second);
    host.drain().await;
    let (_, done) = host.status(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["progress"]["rowsRead"], 30);
    assert_eq!(done["progress"]["rowsActed"], 30);
    let messages = queues().queue(&queue).unwrap();
    assert_eq!(
        messages.approximate_count().await.unwrap(),
        30,
        "one message per row, none twice"
    );
    let one = messages
        .receive(1, Duration::from_secs(5))
        .await
        .unwrap()
        .remove(0);
    let text = String::from_utf8(MessageEncoding::Base64.decode(&one.text).unwrap()).unwrap();
    let message: Value = serde_json::from_str(&text).unwrap();
    assert!(
        message["PartitionKey"].as_str().unwrap().starts_with('p'),
        "{message}"
    );
}

/// A cancel during a delete: the running step stops acting at its next page, the status says
/// `cancelling` until it has, then `cancelled` with final counts that match the table.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_stops_a_running_delete_within_a_page() {
    let source = fresh_table("canceldelete").await;
    // One partition, so that the first step does not split the scan into children.
    let rows: Vec<Entity> = (0..2000)
        .map(|r| Entity::new("p", format!("r{r:04}")))
        .collect();
    common::load(&source, &rows).await;
    let host = TestHost::start(&[
        ("TABLESCAN_STEP_MAX_QUERIES", "1000"),
        ("TABLESCAN_STEP_MAX_SECONDS", "120"),
    ])
    .await;
    let page = 5;
    let (start, id) = host
        .start_scan(
            &json!({"table": source.name(), "pageSize": page, "strategy": "serial", "action": {"type": "delete"}}),
        )
        .await;
    // A serial scan: the first step reads the whole table, page after page.
    let long = host.delivery("ScanRange", &start.messages("rangeItems")[0], 1, 1);
    let remaining = || async { source.query_all(&Default::default()).await.unwrap().len() };
    let started = remaining().await;
    let (answer, (cancel, left_at_cancel)) =
        tokio::join!(host.post_raw("ScanRange", long), async {
            while remaining().await == started {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let cancel = host.cancel(&id).await;
            (cancel, remaining().await)
        });
    // `cancelling` if the step had not stopped yet when the cancel read the status (it stops
    // at its next page, here at once: the cancel came through its own process).
    assert_eq!(cancel.0, 200);
    assert!(
        cancel.1["state"] == "cancelling" || cancel.1["state"] == "cancelled",
        "{cancel:?}"
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(
        answer.messages("rangeItems").is_empty() && answer.messages("partitionItems").is_empty()
    );
    let left = remaining().await;
    assert!(left > 0, "the delete stopped before the end");
    assert!(
        left_at_cancel - left <= 2 * page,
        "at most the page being deleted and one more after the cancel: {left_at_cancel} then {left}"
    );
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "cancelled", "{status}");
    assert_eq!(
        status["progress"]["rowsActed"],
        (rows.len() - left) as u64,
        "{status}"
    );
    assert_eq!(status["progress"]["stepsPending"], 0, "{status}");
}

/// A step that runs several times longer than its claim's lease keeps the claim (it is renewed
/// while the step runs): a second delivery of the same message meanwhile never runs the item
/// again, so an enqueue sends each row once. The duplicate either waits for the claim and is
/// refused (409), finds the step done, or is given back to its queue for want of room in the
/// scan's pace (200 with no outputs); a message given back, delivered after the step finished,
/// runs nothing either.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_longer_than_its_lease_is_not_run_twice() {
    let source = fresh_table("longstep").await;
    let rows: Vec<Entity> = (0..1500)
        .map(|r| Entity::new("p", format!("r{r:04}")))
        .collect();
    common::load(&source, &rows).await;
    let (state, item_queues) = common::own_queues::state_with(
        "longstep",
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1000"),
            ("TABLESCAN_STEP_MAX_SECONDS", "120"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "1"),
        ],
    )
    .await;
    let host = TestHost::serve(state).await;
    let queue = unique_name("longstep-");
    let (start, id) = host
        .start_scan(
            // 1,500 rows read at 300 a second: five seconds, however fast the machine.
            &json!({"table": source.name(), "pageSize": 5, "strategy": "serial",
            "maxRowsPerSecond": 300,
            "action": {"type": "enqueue", "queue": queue, "encoding": "none"}}),
        )
        .await;
    let message = &start.messages("rangeItems")[0];
    let begun = std::time::Instant::now();
    let (first, second) = tokio::join!(
        host.post_raw("ScanRange", host.delivery("ScanRange", message, 1, 1)),
        async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            host.post_raw("ScanRange", host.delivery("ScanRange", message, 2, 2))
                .await
        }
    );
    assert!(
        begun.elapsed() > Duration::from_secs(3),
        "the step outlived its lease several times"
    );
    assert_eq!(first.status, 200, "{}", first.text);
    let ran_nothing = |answer: &common::host::Answer| {
        answer.status == 200
            && answer.json["Outputs"]
                .as_object()
                .is_some_and(|o| o.is_empty())
    };
    assert!(
        second.status == 409 || ran_nothing(&second),
        "the duplicate did not run: {} {}",
        second.status,
        second.text
    );
    let range_queue = queues().queue(&item_queues.range).unwrap();
    if range_queue.approximate_count().await.unwrap() > 0 {
        // Given back: delivered once visible, after the step finished.
        let text = common::own_queues::given_back(&item_queues.range).await;
        let again = host
            .post_raw("ScanRange", host.delivery("ScanRange", &text, 1, 3))
            .await;
        assert!(ran_nothing(&again), "{} {}", again.status, again.text);
    }
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsActed"], rows.len() as u64);
    let sent = queues()
        .queue(&queue)
        .unwrap()
        .approximate_count()
        .await
        .unwrap();
    assert_eq!(sent, rows.len() as u64, "each row enqueued once");
}

/// A copy whose target table vanished fails for good (a permanent cause, at once); once the
/// table is back, `retry` runs the failed items again and the scan ends succeeded with exact
/// counts and an identical copy. Only a failed scan can be retried.
#[tokio::test]
async fn failed_items_retried_finish_the_scan_exactly() {
    let source = fresh_table("retrysource").await;
    let rows: Vec<Entity> = (0..30)
        .map(|i| Entity::new(format!("p{}", i % 3), format!("r{i:02}")))
        .collect();
    common::load(&source, &rows).await;
    let target_name = unique_name("retrytarget");
    let mut host = TestHost::start(&[]).await;
    let (start, id) = host
        .start_scan(
            &json!({"table": source.name(), "action": {"type": "copy", "table": target_name}}),
        )
        .await;
    tables().delete_table(&target_name).await.unwrap();
    host.enqueue_outputs(&start);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(status["progress"]["stepsFailed"], 1, "{status}");
    assert_eq!(
        status["errors"][0]["attempts"], 1,
        "a missing table is permanent: {status}"
    );

    tables().create_table(&target_name, true).await.unwrap();
    let retry = host
        .http("RetryScan", "POST", "/x", &[("id", &id)], None)
        .await;
    let (code, body) = retry.res();
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["retried"], 1, "{body}");
    host.enqueue_outputs(&retry);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(
        status["progress"]["rowsActed"],
        rows.len() as u64,
        "{status}"
    );
    assert_eq!(status["progress"]["stepsFailed"], 0, "{status}");
    assert_eq!(status["progress"]["stepsRetried"], 1, "{status}");
    let target = tables().table(&target_name).unwrap();
    let copied = target.query_all(&Query::default()).await.unwrap();
    assert_eq!(copied.len(), rows.len());

    let again = host
        .http("RetryScan", "POST", "/x", &[("id", &id)], None)
        .await;
    assert_eq!(again.res().0, 409, "{}", again.text);
}

#[tokio::test]
async fn a_cancelled_scan_stops_issuing_work() {
    let source = fresh_table("cancel").await;
    let rows: Vec<Entity> = (0..40)
        .map(|i| Entity::new(format!("p{i:02}"), "r"))
        .collect();
    common::load(&source, &rows).await;
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "1")]).await;
    let (start, id) = host
        .start_scan(&json!({"table": source.name(), "pageSize": 2, "action": {"type": "count"}}))
        .await;
    let first = host
        .deliver("ScanRange", &start.messages("rangeItems")[0], 1)
        .await;
    host.enqueue_outputs(&first);
    assert!(!host.queued.is_empty());

    assert_eq!(
        host.cancel(&id).await,
        (200, json!({"id": id, "state": "cancelled"}))
    );
    while let Some((function, text)) = host.queued.pop_front() {
        let answer = host.deliver(&function, &text, 1).await;
        assert_eq!(answer.status, 200);
        assert!(
            answer.messages("rangeItems").is_empty()
                && answer.messages("partitionItems").is_empty()
        );
    }
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "cancelled", "{status}");
    assert_eq!(status["progress"]["rowsRead"], 2, "only the first step ran");
    assert_eq!(status["progress"]["stepsPending"], 0);
}

#[tokio::test]
async fn delete_skips_rows_changed_since_they_were_read() {
    let source = fresh_table("delete").await;
    let rows: Vec<Entity> = (0..10).map(|i| Entity::new("p", format!("r{i}"))).collect();
    common::load(&source, &rows).await;
    let mut host = TestHost::start(&[]).await;
    let (start, id) = host
        .start_scan(&json!({"table": source.name(), "action": {"type": "delete"}}))
        .await;
    host.enqueue_outputs(&start);
    host.drain().await;
    assert!(source
        .query_all(&Query::default())
        .await
        .unwrap()
        .is_empty());
    let (_, status) = host.status(&id).await;
    assert_eq!(status["progress"]["rowsActed"], 10, "{status}");

    // A row that changes between the read and the delete is kept. Simulate it with an actions
    // test: read, change, then delete through the action.
    common::load(&source, &rows).await;
    let read = source.query_all(&Query::default()).await.unwrap();
    source
        .upsert(
            &Entity::new("p", "r3").with("changed", Edm::Boolean(true)),
            WriteMode::Replace,
        )
        .await
        .unwrap();
    let applied =
        tablescan::actions::Action::Delete(tablescan::actions::DeleteRows::new(source.clone()))
            .apply(read, &|| true)
            .await
            .unwrap();
    assert_eq!(applied.finished, 10);
    assert_eq!((applied.counts.acted, applied.counts.skipped), (9, 1));
    let left = source.query_all(&Query::default()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].row_key, "r3");
}

#[tokio::test]
async fn partition_keys_sends_one_message_per_partition() {
    let source = fresh_table("pkeys").await;
    let rows: Vec<Entity> = (0..60)
        .map(|i| Entity::new(format!("p{}", i % 7), format!("r{i:02}")))
        .collect();
    common::load(&source, &rows).await;
    let queue = unique_name("keys-");
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "1")]).await;
    let id = host
        .run_scan(&json!({"table": source.name(), "pageSize": 3, "action": {"type": "partition-keys", "queue": queue, "encoding": "none"}}))
        .await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["progress"]["partitions"], 7, "{status}");
    let messages = queues()
        .queue(&queue)
        .unwrap()
        .receive(32, Duration::from_secs(30))
        .await
        .unwrap();
    let mut keys: Vec<String> = messages
        .iter()
        .map(|m| {
            serde_json::from_str::<Value>(&m.text).unwrap()["PartitionKey"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, (0..7).map(|i| format!("p{i}")).collect::<Vec<_>>());
}

/// The root of a finished scan of some 150 work items, delivered again through the handler,
/// sends nothing: its children are done, and a done child's subtree is never walked again.
/// (Before, one duplicate of the root re-sent every child, each child its own: the whole tree
/// again.) The same at 1,000 items, on the in-memory ledger: `job::races`.
#[tokio::test(flavor = "multi_thread")]
async fn a_redelivered_root_of_a_finished_scan_sends_nothing() {
    let source = fresh_table("cascade").await;
    let rows: Vec<Entity> = (0..150)
        .map(|i| Entity::new(format!("p{i:04}"), "r"))
        .collect();
    common::load(&source, &rows).await;
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "1")]).await;
    let (start, id) = host
        .start_scan(&json!({"table": source.name(), "pageSize": 1, "action": {"type": "count"}}))
        .await;
    host.enqueue_outputs(&start);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert!(
        status["progress"]["stepsDone"].as_u64().unwrap() >= 150,
        "{status}"
    );
    let again = host
        .deliver("ScanRange", &start.messages("rangeItems")[0], 2)
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert!(
        again.messages("rangeItems").is_empty() && again.messages("partitionItems").is_empty(),
        "{}",
        again.text
    );
    let (_, after) = host.status(&id).await;
    assert_eq!(after["progress"], status["progress"], "nothing changed");
}

/// Runs an enqueue scan of `rows` (pages of 10, two queries a step) to the end and checks its
/// counts; its final status.
async fn enqueued(name: &str, rows: &[Entity], action: Value) -> Value {
    let source = fresh_table(name).await;
    common::load(&source, rows).await;
    let mut host = TestHost::start(&[("TABLESCAN_STEP_MAX_QUERIES", "2")]).await;
    let (start, id) = host
        .start_scan(&json!({"table": source.name(), "pageSize": 10, "action": action}))
        .await;
    host.enqueue_outputs(&start);
    host.drain().await;
    let (_, done) = host.status(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["progress"]["rowsActed"], rows.len(), "{done}");
    done
}

/// Every message left on `queue` (unencoded JSON arrays of rows), as the keys of each array.
async fn arrays_on(queue: &str) -> Vec<Vec<(String, String)>> {
    let target = queues().queue(queue).unwrap();
    let mut arrays = Vec::new();
    loop {
        let batch = target.receive(32, Duration::from_secs(60)).await.unwrap();
        if batch.is_empty() {
            return arrays;
        }
        for message in batch {
            let text =
                String::from_utf8(MessageEncoding::Text.decode(&message.text).unwrap()).unwrap();
            let array: Vec<Value> = serde_json::from_str(&text).unwrap();
            arrays.push(
                array
                    .iter()
                    .map(|row| {
                        (
                            row["PartitionKey"].as_str().unwrap().to_string(),
                            row["RowKey"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
            );
        }
    }
}

/// The keys of `rows`, sorted.
fn sorted_keys(rows: &[Entity]) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r.partition_key.clone(), r.row_key.clone()))
        .collect();
    keys.sort();
    keys
}

/// `rowsPerMessage`: each message is a JSON array of at most that many rows, every row is in
/// exactly one message, and the counts are of rows, not messages.
#[tokio::test]
async fn rows_per_message_groups_rows_into_arrays_each_row_once() {
    let rows: Vec<Entity> = (0..95)
        .map(|i| Entity::new(format!("p{}", i % 3), format!("r{i:02}")).with("n", Edm::Int64(i)))
        .collect();
    let queue = unique_name("grouped-");
    let done = enqueued(
        "grouped",
        &rows,
        json!({"type": "enqueue", "queue": queue, "encoding": "none", "rowsPerMessage": 8}),
    )
    .await;
    assert_eq!(done["spec"]["action"]["rowsPerMessage"], 8, "{done}");
    let arrays = arrays_on(&queue).await;
    assert!(arrays.iter().all(|a| (1..=8).contains(&a.len())));
    assert!(
        (12..95).contains(&arrays.len()),
        "{} messages",
        arrays.len()
    );
    let mut seen: Vec<_> = arrays.into_iter().flatten().collect();
    seen.sort();
    assert_eq!(seen, sorted_keys(&rows), "every row in exactly one message");
}

/// `queues`: rows spread over several queues by PartitionKey, each row in exactly one message,
/// a partition's rows all in one queue, and every queue used.
#[tokio::test]
async fn an_enqueue_spreads_rows_over_several_queues_by_partition() {
    let rows: Vec<Entity> = (0..120)
        .map(|i| Entity::new(format!("p{:02}", i % 24), format!("r{i:03}")))
        .collect();
    let names: Vec<String> = (0..3).map(|_| unique_name("spread-")).collect();
    let done = enqueued(
        "spread",
        &rows,
        json!({"type": "enqueue", "queues": names, "encoding": "none", "rowsPerMessage": 4}),
    )
    .await;
    assert_eq!(done["spec"]["action"]["queues"], json!(names), "{done}");
    let mut seen = Vec::new();
    let mut queue_of_partition = std::collections::HashMap::new();
    for (index, name) in names.iter().enumerate() {
        let arrays = arrays_on(name).await;
        assert!(!arrays.is_empty(), "queue {name} got no row");
        assert!(arrays.iter().all(|a| (1..=4).contains(&a.len())));
        for (partition, row) in arrays.into_iter().flatten() {
            let earlier = queue_of_partition.insert(partition.clone(), index);
            assert!(
                earlier.is_none_or(|q| q == index),
                "{partition} in two queues"
            );
            seen.push((partition, row));
        }
    }
    seen.sort();
    assert_eq!(seen, sorted_keys(&rows), "every row in exactly one message");
}
