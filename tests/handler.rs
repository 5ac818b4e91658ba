//! The custom handler against Azurite, called as the Functions host calls it.

mod common;

use std::time::Duration;

use common::host::TestHost;
use common::{connection_string, fresh_table, queues, tables, unique_name};
use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::table::WriteMode;

/// The real host's captured queue-trigger request for the message `aaaaa` (Azure, 2022).
const CAPTURED_QUEUE_STRING: &str = r#"{"Data":{"inMsg":"\"aaaaa\""},"Metadata":{"DequeueCount":"1","ExpirationTime":"2022-06-20T06:00:06+00:00","Id":"\"a0004923-f050-417a-9742-6d7c7b984134\"","InsertionTime":"2022-06-13T06:00:06+00:00","NextVisibleTime":"2022-06-13T06:10:18+00:00","PopReceipt":"\"AgAAAAMAAAAAAAAA8d5gQex+2AE=\"","sys":{"MethodName":"queue","UtcNow":"2022-06-13T06:00:18.1974545Z","RandGuid":"d9ba2785-ee1a-4260-a83b-f57cb54b969e"}}}"#;

/// The real host's captured payload-mode HTTP request (trimmed identities), body
/// `{"name":"Anjana","age":12}` whose fields leak into Metadata.
const CAPTURED_HTTP_PAYLOAD: &str = r#"{"Data":{"req":{"Url":"https://bal-dev.azurewebsites.net/api/hello","Method":"POST","Query":{},"Headers":{"Content-Type":["application/json"],"Content-Length":["41"],"Host":["bal-dev.azurewebsites.net"]},"Params":{},"Identities":[{"AuthenticationType":null,"IsAuthenticated":false,"Actor":null,"BootstrapContext":null,"Claims":[],"Label":null,"Name":null,"NameClaimType":"http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name","RoleClaimType":"http://schemas.microsoft.com/ws/2008/06/identity/claims/role"}],"Body":"{\n    \"name\" : \"Anjana\",\n    \"age\" : 12\n}"}},"Metadata":{"name":"\"Anjana\"","age":"\"12\"","Query":{},"Headers":{"Content-Type":"application/json","Content-Length":"41","Host":"bal-dev.azurewebsites.net"},"sys":{"MethodName":"post-hello-payload-jsonToJson","UtcNow":"2022-06-20T07:50:50.4482488Z","RandGuid":"3e4ea15e-0000-0000-0000-000000000000"}}}"#;

#[tokio::test]
async fn the_root_path_answers_for_the_host_readiness_check() {
    let host = TestHost::start(&[]).await;
    let response = reqwest::get(format!("http://{}/", host.address))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn the_captured_http_payload_gets_an_exact_400_envelope() {
    let host = TestHost::start(&[]).await;
    let answer = host
        .post_raw("StartScan", CAPTURED_HTTP_PAYLOAD.to_string())
        .await;
    // The host is strict here: 200, JSON content type, an object with Outputs.res whose body is
    // a string and whose headers carry the content type.
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type, "application/json; charset=utf-8");
    assert_eq!(
        answer.text,
        r#"{"Logs":[],"Outputs":{"res":{"body":"{\"error\":{\"field\":\"table\",\"message\":\"is required\"}}","headers":{"Content-Type":"application/json; charset=utf-8"},"statusCode":400}},"ReturnValue":null}"#
    );
}

#[tokio::test]
async fn the_captured_queue_string_fails_alone_and_shows_in_the_scans_list() {
    let host = TestHost::start(&[]).await;
    // Bound under its real binding name the message is found but is not a work item.
    let body = CAPTURED_QUEUE_STRING.replace("\"inMsg\"", "\"item\"");
    let answer = host.post_raw("ScanRange", body).await;
    assert_eq!(answer.status, 422, "{}", answer.text);
    assert_eq!(answer.content_type, "application/json; charset=utf-8");
    assert!(
        answer.json["error"].as_str().unwrap().contains("not JSON"),
        "{}",
        answer.text
    );
    let list = host.http("ListScans", "GET", "/api/scans", &[], None).await;
    let (status, body) = list.res();
    assert_eq!(status, 200);
    let rejected = body["rejectedMessages"].as_array().unwrap();
    assert!(
        rejected
            .iter()
            .any(|r| r["messageId"] == "a0004923-f050-417a-9742-6d7c7b984134"
                && r["sample"] == "aaaaa"),
        "{body}"
    );

    // Under another binding name, the handler says what is missing.
    let missing = host
        .post_raw("ScanRange", CAPTURED_QUEUE_STRING.to_string())
        .await;
    assert_eq!(missing.status, 422);
    assert!(missing.text.contains("Data.item"), "{}", missing.text);
}

#[tokio::test]
async fn a_json_message_with_leaking_fields_still_runs_its_step() {
    // A real work item is a JSON object, so its fields (v, scan, depth, task) leak into
    // Metadata exactly as the host does it; the handler must not be confused by them.
    let source = fresh_table("leaky").await;
    source.insert(&Entity::new("p", "r")).await.unwrap();
    let mut host = TestHost::start(&[]).await;
    let (start, id) = host
        .start_scan(&json!({"table": source.name(), "action": {"type": "count"}}))
        .await;
    let root = start.messages("rangeItems");
    assert_eq!(root.len(), 1);
    let answer = host.deliver("ScanRange", &root[0], 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.content_type, "application/json; charset=utf-8");
    let (_, status) = host.status(&id).await;
    assert_eq!(status["progress"]["rowsRead"], 1, "{status}");
    assert_eq!(status["state"], "succeeded", "{status}");
}

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
/// while the step runs): a second delivery of the same message meanwhile waits and never runs
/// the item again, so an enqueue sends each row once.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_longer_than_its_lease_is_not_run_twice() {
    let source = fresh_table("longstep").await;
    let rows: Vec<Entity> = (0..1500)
        .map(|r| Entity::new("p", format!("r{r:04}")))
        .collect();
    common::load(&source, &rows).await;
    let host = TestHost::start(&[
        ("TABLESCAN_STEP_MAX_QUERIES", "1000"),
        ("TABLESCAN_STEP_MAX_SECONDS", "120"),
        ("TABLESCAN_STEP_LEASE_SECONDS", "1"),
    ])
    .await;
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
    assert!(
        second.status == 409 || second.text.contains("already done"),
        "the duplicate waited and did not run: {} {}",
        second.status,
        second.text
    );
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

async fn start(host: &TestHost, body: String, key: String) -> common::host::Answer {
    host.http_with_headers(
        "StartScan",
        "POST",
        "/api/scans",
        &[],
        Some(&body),
        &[("Idempotency-Key", &key)],
        &[],
    )
    .await
}

/// A start retried with the same `Idempotency-Key` answers the same scan: its first work item
/// is sent again while no step has taken it (the first answer may have been lost), never once
/// a step has; the key with another request is a conflict; a bad key is a 400 naming it.
#[tokio::test]
async fn a_start_retried_with_the_same_key_makes_one_scan() {
    let source = fresh_table("idempotent").await;
    common::load(&source, &[Entity::new("p", "r")]).await;
    let mut host = TestHost::start(&[]).await;
    let request = json!({"table": source.name(), "action": {"type": "count"}}).to_string();
    let key = unique_name("key-");
    let first = start(&host, request.clone(), key.clone()).await;
    let (status, body) = first.res();
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    // The first answer's message is lost (the host failed to write it); the client retries.
    let retried = start(&host, request.clone(), key.clone()).await;
    assert_eq!(retried.res().1["id"], id.as_str());
    assert_eq!(
        retried.messages("rangeItems").len(),
        1,
        "the root is sent again"
    );
    host.enqueue_outputs(&retried);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"]["rows"], 1);

    let late = start(&host, request.clone(), key.clone()).await;
    assert_eq!(late.res(), (202, first.res().1.clone()));
    assert!(
        late.messages("rangeItems").is_empty(),
        "started already: nothing is sent"
    );

    let other = json!({"table": source.name(), "pageSize": 7, "action": {"type": "count"}});
    let conflict = start(&host, other.to_string(), key.clone()).await;
    let (status, body) = conflict.res();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["field"], "Idempotency-Key", "{body}");

    let bad = start(&host, request.clone(), "k".repeat(300)).await;
    let (status, body) = bad.res();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "Idempotency-Key", "{body}");
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

/// The app's own work queues (and their poison queues) and ledger are refused as targets, and a
/// copy onto its own source; nothing is written for a refused scan. A count of the ledger is
/// a read, and allowed.
#[tokio::test]
async fn the_apps_own_storage_and_a_copy_onto_itself_are_refused() {
    let source = fresh_table("guarded").await;
    let ledger = unique_name("guardledger");
    let host = TestHost::start(&[("TABLESCAN_LEDGER_TABLE", ledger.as_str())]).await;
    let table = source.name();
    let enqueue =
        |queue: &str| json!({"table": table, "action": {"type": "enqueue", "queue": queue}});
    let cases = vec![
        (enqueue("tablescan-range"), "action.queue"),
        (enqueue("tablescan-partition-poison"), "action.queue"),
        (
            json!({"table": table, "action": {"type": "enqueue", "queues": ["fine1", "tablescan-range-poison"]}}),
            "action.queues",
        ),
        (
            json!({"table": table, "action": {"type": "partition-keys", "queue": "tablescan-partition"}}),
            "action.queue",
        ),
        (
            json!({"table": table, "action": {"type": "copy", "table": ledger}}),
            "action.table",
        ),
        (
            json!({"table": table, "action": {"type": "copy", "table": table.to_uppercase()}}),
            "action.table",
        ),
        (
            json!({"table": ledger, "action": {"type": "delete"}}),
            "table",
        ),
    ];
    for (request, field) in cases {
        let body = request.to_string();
        let (status, error) = host
            .http("StartScan", "POST", "/api/scans", &[], Some(&body))
            .await
            .res();
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
    }
    assert!(host.queued.is_empty(), "{:?}", host.queued);
    let fine = json!({"table": table, "action": {"type": "enqueue", "queue": unique_name("fine")}});
    let (answer, _) = host.start_scan(&fine).await;
    assert_eq!(answer.res().0, 202);
    let count_ledger = json!({"table": ledger, "action": {"type": "count"}});
    let (answer, _) = host.start_scan(&count_ledger).await;
    assert_eq!(answer.res().0, 202);
}

#[tokio::test]
async fn every_kind_of_bad_request_is_a_400_naming_the_field() {
    let source = fresh_table("badreq").await;
    let host = TestHost::start(&[
        ("Elsewhere", "UseDevelopmentStorage=true"),
        ("Broken", "AccountName=x"),
    ])
    .await;
    let table = source.name();
    let cases: Vec<(String, &str)> = vec![
        ("{".into(), "body"),
        ("[]".into(), "body"),
        (json!({"action": {"type": "count"}}).to_string(), "table"),
        (
            json!({"table": "bad-name", "action": {"type": "count"}}).to_string(),
            "table",
        ),
        (
            json!({"table": "missingtable1", "action": {"type": "count"}}).to_string(),
            "table",
        ),
        (json!({"table": table}).to_string(), "action"),
        (
            json!({"table": table, "action": {"type": "shred"}}).to_string(),
            "action.type",
        ),
        (
            json!({"table": table, "action": {"type": "copy"}}).to_string(),
            "action.table",
        ),
        (
            json!({"table": table, "action": {"type": "enqueue", "queue": "UPPER"}}).to_string(),
            "action.queue",
        ),
        (
            json!({"table": table, "connection": "Nope", "action": {"type": "count"}}).to_string(),
            "connection",
        ),
        (
            json!({"table": table, "connection": "Broken", "action": {"type": "count"}})
                .to_string(),
            "connection",
        ),
        (
            json!({"table": table, "connection": connection_string(), "action": {"type": "count"}})
                .to_string(),
            "connection",
        ),
        (
            json!({"table": table, "pageSize": 0, "action": {"type": "count"}}).to_string(),
            "pageSize",
        ),
        (
            json!({"table": table, "strategy": "random", "action": {"type": "count"}}).to_string(),
            "strategy",
        ),
        (
            json!({"table": table, "select": ["ok", "not ok"], "action": {"type": "count"}})
                .to_string(),
            "select[1]",
        ),
        (
            json!({"table": table, "scope": {"prefix": "a#b"}, "action": {"type": "count"}})
                .to_string(),
            "scope.prefix",
        ),
        (
            json!({"table": table, "action": {"type": "count"}, "priority": 1}).to_string(),
            "priority",
        ),
        (
            format!(r#"{{"table":"{table}","action":{{"type":"count","type":"delete"}}}}"#),
            "action.type",
        ),
        (
            json!({"table": table, "scope": {"after": "b", "before": "a"}, "action": {"type": "count"}})
                .to_string(),
            "scope.before",
        ),
        (
            json!({"table": table, "select": ["Name"], "action": {"type": "delete"}}).to_string(),
            "select",
        ),
    ];
    for (body, field) in cases {
        let answer = host
            .http("StartScan", "POST", "/api/scans", &[], Some(&body))
            .await;
        assert_eq!(answer.status, 200, "the host must get a normal answer");
        let (status, error) = answer.res();
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
        // A connection string pasted as a connection name is never echoed back.
        assert!(
            !error
                .to_string()
                .contains(tablescan::storage::connection_string::EMULATOR_KEY),
            "{error}"
        );
    }
    let no_body = host
        .http("StartScan", "POST", "/api/scans", &[], None)
        .await;
    assert_eq!(no_body.res().0, 400);
    let huge = format!(
        "{{\"table\":\"{}\",\"pad\":\"{}\"}}",
        table,
        "x".repeat(2 * 1024 * 1024)
    );
    assert_eq!(
        host.http("StartScan", "POST", "/api/scans", &[], Some(&huge))
            .await
            .res()
            .0,
        413
    );
    for id in ["0123456789abcdef0123456789abcdef", "../etc", "~index"] {
        assert_eq!(host.status(id).await.0, 404, "{id}");
        let cancel = host
            .http("CancelScan", "POST", "/x", &[("id", id)], None)
            .await;
        assert_eq!(cancel.res().0, 404);
    }
    // The handler keeps serving after all that.
    host.assert_serving().await;
}

#[tokio::test]
async fn wrong_types_out_of_range_values_huge_and_deep_bodies_are_refused_clearly() {
    let source = fresh_table("badtypes").await;
    let host = TestHost::start(&[]).await;
    let table = source.name();
    let count = json!({"type": "count"});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"table": 5, "action": count}), "table"),
        (json!({"table": "a".repeat(64), "action": count}), "table"),
        (json!({"table": table, "action": "count"}), "action"),
        (
            json!({"table": table, "action": {"type": 1}}),
            "action.type",
        ),
        (
            json!({"table": table, "action": {"type": "copy", "table": ["x"]}}),
            "action.table",
        ),
        (
            json!({"table": table, "pageSize": "10", "action": count}),
            "pageSize",
        ),
        (
            json!({"table": table, "pageSize": 1001, "action": count}),
            "pageSize",
        ),
        (
            json!({"table": table, "pageSize": -1, "action": count}),
            "pageSize",
        ),
        (
            json!({"table": table, "select": "a", "action": count}),
            "select",
        ),
        (
            json!({"table": table, "scope": [], "action": count}),
            "scope",
        ),
        (
            json!({"table": table, "scope": {"prefix": "x".repeat(1100)}, "action": count}),
            "scope.prefix",
        ),
        (
            json!({"table": table, "scope": {"after": 3}, "action": count}),
            "scope.after",
        ),
        (
            json!({"table": table, "connection": 7, "action": count}),
            "connection",
        ),
        (
            json!({"table": table, "action": {"type": "enqueue", "queue": "q".repeat(64)}}),
            "action.queue",
        ),
    ];
    for (body, field) in cases {
        let body = body.to_string();
        let (status, error) = host
            .http("StartScan", "POST", "/api/scans", &[], Some(&body))
            .await
            .res();
        assert_eq!(status, 400, "{body:.200}: {error}");
        assert_eq!(error["error"]["field"], field, "{body:.200}: {error}");
    }
    // Nested 100,000 deep: refused as a body, not a stack overflow.
    let deep = "[".repeat(100_000);
    let (status, error) = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&deep))
        .await
        .res();
    assert_eq!(
        (status, &error["error"]["field"]),
        (400, &json!("body")),
        "{error}"
    );
    // Ten megabytes.
    let huge = format!(
        "{{\"table\":\"{table}\",\"pad\":\"{}\"}}",
        "x".repeat(10 << 20)
    );
    let answer = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&huge))
        .await;
    assert!(
        matches!(answer.status, 413) || answer.res().0 == 413,
        "{} {}",
        answer.status,
        answer.text.chars().take(200).collect::<String>()
    );
    // An invocation that is not UTF-8 at all, straight to the handler.
    let raw = reqwest::Client::new()
        .post(format!("http://{}/StartScan", host.address))
        .header("content-type", "application/json")
        .body(vec![0xff, 0xfe, b'{', 0xc3])
        .send()
        .await
        .unwrap();
    assert!(raw.status().is_client_error(), "{}", raw.status());
    host.assert_serving().await;
}

#[tokio::test]
async fn quotes_in_a_scope_cannot_change_the_meaning_of_the_query() {
    let source = fresh_table("inject").await;
    let rows = vec![
        Entity::new("a", "1"),
        Entity::new("b", "1"),
        Entity::new("x' or PartitionKey ne 'x", "1"),
        Entity::new("x' or PartitionKey ne 'x", "2"),
        Entity::new("x'", "1"),
    ];
    common::load(&source, &rows).await;
    let mut host = TestHost::start(&[]).await;
    for (scope, rows, partitions) in [
        // Each would select every row if the quote closed the literal.
        (json!({"prefix": "x' or PartitionKey ne 'x"}), 2, 1),
        (json!({"prefix": "' or 1 eq 1 or '"}), 0, 0),
        (
            json!({"after": "x'", "before": "y' or PartitionKey ne '"}),
            2,
            1,
        ),
        (json!({"before": "b' or PartitionKey gt '"}), 2, 2),
    ] {
        let id = host
            .run_scan(&json!({"table": source.name(), "scope": scope, "action": {"type": "count"}}))
            .await;
        let (_, body) = host.status(&id).await;
        assert_eq!(body["state"], "succeeded", "{body}");
        assert_eq!(
            body["result"],
            json!({"rows": rows, "partitions": partitions}),
            "{scope}: {body}"
        );
    }
}

#[tokio::test]
async fn keys_in_a_scope_are_checked_against_the_services_rules() {
    let source = fresh_table("keyrules").await;
    let host = TestHost::start(&[]).await;
    let table = source.name();
    let start = |scope: Value| {
        json!({"table": table, "scope": scope, "action": {"type": "count"}}).to_string()
    };
    // 1 KiB (512 UTF-16 units) is the limit; a supplementary character counts twice.
    for (prefix, accepted) in [
        ("a".repeat(512), true),
        ("a".repeat(513), false),
        ("\u{1F600}".repeat(256), true),
        (format!("{}a", "\u{1F600}".repeat(256)), false),
    ] {
        let (status, body) = host
            .http(
                "StartScan",
                "POST",
                "/api/scans",
                &[],
                Some(&start(json!({"prefix": prefix}))),
            )
            .await
            .res();
        if accepted {
            assert_eq!(status, 202, "{body}");
        } else {
            assert_eq!(
                (status, &body["error"]["field"]),
                (400, &json!("scope.prefix")),
                "{body}"
            );
        }
    }
    // Every character the service refuses in keys, in each place a key can be given.
    for c in ['/', '\\', '#', '?', '\u{0}', '\u{1F}', '\u{7F}', '\u{9F}'] {
        for field in ["prefix", "after", "before"] {
            let (status, body) = host
                .http(
                    "StartScan",
                    "POST",
                    "/api/scans",
                    &[],
                    Some(&start(json!({ field: format!("a{c}b") }))),
                )
                .await
                .res();
            assert_eq!(status, 400, "{c:?} in {field}: {body}");
            assert_eq!(body["error"]["field"], format!("scope.{field}"), "{body}");
        }
    }
    // A lone surrogate cannot be a key (JSON allows the escape; a Rust string cannot hold it).
    let lone = format!(
        "{{\"table\":\"{table}\",\"scope\":{{\"prefix\":\"a\\ud800b\"}},\"action\":{{\"type\":\"count\"}}}}"
    );
    let (status, body) = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&lone))
        .await
        .res();
    assert_eq!(status, 400, "{body}");
    host.assert_serving().await;
}

async fn list(host: &TestHost, query: &[(&str, &str)]) -> (u16, Value) {
    host.http_with_headers("ListScans", "GET", "/api/scans", &[], None, &[], query)
        .await
        .res()
}

/// The scans list pages newest first with a continuation, filters by state and shows each
/// scan's state and counts; a finished scan's ledger rows can be removed, and the record of
/// refused messages cleared; bad parameters are 400s naming them.
#[tokio::test]
async fn scans_are_listed_in_pages_filtered_by_state_and_removed_when_finished() {
    let source = fresh_table("listing").await;
    common::load(&source, &[Entity::new("p", "r")]).await;
    let mut host = TestHost::start(&[]).await;
    let count = json!({"table": source.name(), "action": {"type": "count"}});
    let mut finished = Vec::new();
    for _ in 0..3 {
        finished.push(host.run_scan(&count).await);
    }
    let (_, waiting) = host.start_scan(&count).await;

    let (status, first) = list(&host, &[("limit", "2")]).await;
    assert_eq!(status, 200, "{first}");
    let ids = |page: &Value| -> Vec<String> {
        page["scans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        ids(&first),
        vec![waiting.clone(), finished[2].clone()],
        "newest first"
    );
    assert_eq!(first["scans"][0]["state"], "pending");
    assert_eq!(first["scans"][1]["state"], "succeeded");
    assert_eq!(first["scans"][1]["progress"]["rowsActed"], 1);
    let next = first["next"].as_str().unwrap().to_string();
    let (_, second) = list(&host, &[("limit", "2"), ("after", &next)]).await;
    assert_eq!(ids(&second), vec![finished[1].clone(), finished[0].clone()]);
    let (_, pending) = list(&host, &[("state", "pending")]).await;
    assert_eq!(ids(&pending), vec![waiting.clone()]);
    let (_, status) = host.status(&waiting).await;
    assert_eq!(status["activity"]["stepsRunning"], 0, "{status}");
    assert_eq!(status["activity"]["stepsAbandoned"], 0, "{status}");
    assert!(
        status["activity"]["secondsSinceLastStep"].as_u64().unwrap() < 60,
        "{status}"
    );
    // Its root item waits, written moments ago; nothing was abandoned.
    assert!(
        status["activity"]["oldestPendingSeconds"].as_u64().unwrap() < 60,
        "{status}"
    );
    assert!(
        status["activity"].get("abandonedReturnBy").is_none(),
        "{status}"
    );
    let (_, done) = host.status(&finished[0]).await;
    assert!(
        done.get("activity").is_none(),
        "only scans in flight: {done}"
    );

    for (query, field) in [
        (("limit", "0"), "limit"),
        (("limit", "many"), "limit"),
        (("state", "asleep"), "state"),
        (("after", "x' or 'a"), "after"),
    ] {
        let (status, body) = list(&host, &[query]).await;
        assert_eq!(status, 400, "{query:?}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }

    let delete = |id: String| {
        let host = &host;
        async move {
            host.http("DeleteScan", "DELETE", "/x", &[("id", &id)], None)
                .await
                .res()
        }
    };
    let (status, body) = delete(waiting.clone()).await;
    assert_eq!(status, 409, "a scan not finished stays: {body}");
    let (status, body) = delete(finished[1].clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["more"], false);
    assert!(
        body["removedRows"].as_u64().unwrap() >= 18,
        "scan, shards, done row: {body}"
    );
    assert_eq!(host.status(&finished[1]).await.0, 404);
    let (_, all) = list(&host, &[]).await;
    assert_eq!(
        ids(&all),
        vec![waiting, finished[2].clone(), finished[0].clone()]
    );

    let refused = host
        .post_raw(
            "ScanRange",
            host.delivery("ScanRange", "not a work item", 1, 9),
        )
        .await;
    assert_eq!(refused.status, 422);
    let (_, with_rejected) = list(&host, &[]).await;
    assert_eq!(
        with_rejected["rejectedMessages"].as_array().unwrap().len(),
        1
    );
    let cleared = host
        .http("ClearRejected", "DELETE", "/api/rejected", &[], None)
        .await;
    assert_eq!(cleared.res().0, 200, "{}", cleared.text);
    let (_, after) = list(&host, &[]).await;
    assert_eq!(after["rejectedMessages"], json!([]), "{after}");
}

/// The ledger lives in the account `TABLESCAN_LEDGER_CONNECTION` names: a scan runs with it
/// set to a connection of its own, and a start fails clearly when that setting names nothing.
#[tokio::test]
async fn the_ledger_can_live_in_an_account_of_its_own() {
    let source = fresh_table("ledgeraccount").await;
    common::load(&source, &[Entity::new("p", "r")]).await;
    let count = json!({"table": source.name(), "action": {"type": "count"}});
    let connection = connection_string();
    let mut host = TestHost::start(&[
        ("TABLESCAN_LEDGER_CONNECTION", "LEDGER_STORAGE"),
        ("LEDGER_STORAGE", connection.as_str()),
    ])
    .await;
    let id = host.run_scan(&count).await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");

    let host = TestHost::start(&[("TABLESCAN_LEDGER_CONNECTION", "NO_SUCH_SETTING")]).await;
    let answer = host
        .http(
            "StartScan",
            "POST",
            "/api/scans",
            &[],
            Some(&count.to_string()),
        )
        .await;
    let (code, body) = answer.res();
    assert_eq!(code, 503, "{body}");
    assert!(body.to_string().contains("NO_SUCH_SETTING"), "{body}");
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
