//! Safe scans, through devhost on Azurite: a row the action cannot act on fails alone and is
//! reported; copy modes keep or replace exactly what they say; a dry run writes nothing and
//! counts exactly. Results are checked by reading the tables and queues directly.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use fault_proxy::FaultProxy;
use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::TableClient;

/// 40 rows in 4 partitions, each with a name and a number.
fn small_rows() -> Vec<Entity> {
    (0..40)
        .map(|n| {
            Entity::new(format!("p{}", n % 4), format!("r{n:02}"))
                .with("Name", Edm::String(format!("row {n}")))
                .with("N", Edm::Int64(n))
        })
        .collect()
}

/// A row of about 210 KB: far more than a queue message holds.
fn oversized(partition: &str) -> Entity {
    let mut row = Entity::new(partition, "huge");
    for n in 0..7 {
        row = row.with(format!("Part{n}"), Edm::String("y".repeat(30_000)));
    }
    row
}

async fn rows_of(table: &TableClient) -> BTreeMap<(String, String), BTreeMap<String, Edm>> {
    table
        .query_all(&Query::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| ((e.partition_key, e.row_key), e.properties))
        .collect()
}

fn keys_of(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["PartitionKey"].as_str().unwrap().to_string(),
                m["RowKey"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_too_large_for_a_message_fails_alone_and_every_other_row_is_enqueued_once() {
    let mut rows = small_rows();
    rows.push(oversized("p1"));
    let source = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let queue = unique("rows-");
    let status = host
        .run(json!({"table": source.name(), "pageSize": 7,
            "action": {"type": "enqueue", "queue": queue}}))
        .await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsFailed"], 1, "{status}");
    assert_eq!(status["progress"]["rowsActed"], 40, "{status}");
    let failures = status["rowFailures"]
        .as_array()
        .expect("rowFailures listed");
    assert_eq!(failures.len(), 1, "{status}");
    assert_eq!(failures[0]["partitionKey"], "p1");
    assert_eq!(failures[0]["rowKey"], "huge");
    let reason = failures[0]["reason"].as_str().unwrap();
    assert!(reason.contains("too large for a queue message"), "{reason}");
    let sent = keys_of(&drain_queue(&queue, MessageEncoding::Base64).await);
    assert_eq!(sent.len(), 40, "every other row once, none twice");
    let expected: BTreeSet<_> = keys(&rows[..40]);
    assert_eq!(sent.into_iter().collect::<BTreeSet<_>>(), expected);
    let log = host.log();
    assert!(
        log.lines()
            .any(|l| l.contains("a row failed") && l.contains("huge")),
        "the log names the row:\n{log}"
    );

    // Strict: the same scan with no row failure allowed ends failed, and says why.
    let strict_queue = unique("strict-");
    let strict = host
        .run(
            json!({"table": source.name(), "pageSize": 7, "maxRowFailures": 0,
            "action": {"type": "enqueue", "queue": strict_queue}}),
        )
        .await;
    assert_eq!(strict["state"], "failed", "{strict}");
    let because = strict["failedBecause"].as_str().unwrap();
    assert!(because.contains("maxRowFailures (0)"), "{because}");
    assert_eq!(
        strict["progress"]["stepsFailed"], 0,
        "no step failed: {strict}"
    );
    // One allowed: succeeded.
    let lenient = host
        .run(
            json!({"table": source.name(), "pageSize": 7, "maxRowFailures": 1,
            "action": {"type": "enqueue", "queue": unique("lenient-")}}),
        )
        .await;
    assert_eq!(lenient["state"], "succeeded", "{lenient}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_the_target_refuses_fails_alone_and_the_rest_is_copied() {
    let mut rows = small_rows();
    // The proxy in front of the target makes these rows invalid on their way to it.
    for n in [3usize, 17, 18] {
        rows[n]
            .properties
            .insert("Note".into(), Edm::String("refuse-me".into()));
    }
    let source = table_with(&rows).await;
    let (origin, account) = endpoint("TableEndpoint");
    let proxy = FaultProxy::start(origin).await;
    proxy.refuse_rows_marked(Some("refuse-me"));
    let target_storage = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let host = Host::start(2, &[("TARGET", target_storage.as_str())]);
    let target_name = unique("refused");
    let status = host
        .run(json!({"table": source.name(), "pageSize": 10,
            "action": {"type": "copy", "table": target_name, "connection": "TARGET"}}))
        .await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsFailed"], 3, "{status}");
    assert_eq!(status["progress"]["rowsActed"], 37, "{status}");
    let refused: BTreeSet<(String, String)> = status["rowFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let reason = f["reason"].as_str().unwrap();
            assert!(reason.contains("PropertyValueTooLarge"), "{reason}");
            (
                f["partitionKey"].as_str().unwrap().to_string(),
                f["rowKey"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let marked = [3usize, 17, 18]
        .iter()
        .map(|&n| (rows[n].partition_key.clone(), rows[n].row_key.clone()))
        .collect::<BTreeSet<_>>();
    assert_eq!(refused, marked);
    let copied = rows_of(&tables().table(&target_name).unwrap()).await;
    let expected: BTreeSet<_> = keys(&rows)
        .into_iter()
        .filter(|k| !marked.contains(k))
        .collect();
    assert_eq!(copied.keys().cloned().collect::<BTreeSet<_>>(), expected);
}

/// The source's rows, and a target holding some of them already: rows 0-2 as in the source,
/// rows 3-9 different (another Name, and a property the source lacks).
async fn source_and_prefilled_target(
    rows: &[Entity],
) -> (TableClient, TableClient, BTreeSet<(String, String)>) {
    let source = table_with(rows).await;
    let mut held: Vec<Entity> = rows[..3].to_vec();
    for row in &rows[3..10] {
        held.push(
            Entity::new(row.partition_key.clone(), row.row_key.clone())
                .with("Name", Edm::String("kept".into()))
                .with("OnlyInTarget", Edm::Boolean(true)),
        );
    }
    let target = table_with(&held).await;
    let changed = keys(&rows[3..10]);
    (source, target, changed)
}

#[tokio::test(flavor = "multi_thread")]
async fn copy_modes_keep_or_replace_exactly_what_they_say() {
    let rows = small_rows();
    let host = Host::start(2, &[]);
    let source_rows: BTreeMap<_, _> = rows
        .iter()
        .map(|e| {
            (
                (e.partition_key.clone(), e.row_key.clone()),
                e.properties.clone(),
            )
        })
        .collect();

    // replace: the target ends up the source, row for row.
    let (source, target, _) = source_and_prefilled_target(&rows).await;
    let replace = host
        .run(json!({"table": source.name(), "pageSize": 9,
            "action": {"type": "copy", "table": target.name(), "mode": "replace"}}))
        .await;
    assert_eq!(replace["state"], "succeeded", "{replace}");
    assert_eq!(replace["progress"]["rowsActed"], 40);
    assert_eq!(rows_of(&target).await, source_rows);

    // merge: the source's properties win, the target's own are kept.
    let (source, target, changed) = source_and_prefilled_target(&rows).await;
    let merge = host
        .run(json!({"table": source.name(), "pageSize": 9,
            "action": {"type": "copy", "table": target.name(), "mode": "merge"}}))
        .await;
    assert_eq!(merge["state"], "succeeded", "{merge}");
    assert_eq!(merge["progress"]["rowsActed"], 40);
    let merged = rows_of(&target).await;
    for (key, properties) in &source_rows {
        let mut expected = properties.clone();
        if changed.contains(key) {
            expected.insert("OnlyInTarget".into(), Edm::Boolean(true));
        }
        assert_eq!(merged[key], expected, "{key:?}");
    }
    assert_eq!(merged.len(), 40);

    // merge with select: only the selected property is written.
    let (source, target, changed) = source_and_prefilled_target(&rows).await;
    let selected = host
        .run(
            json!({"table": source.name(), "pageSize": 9, "select": ["N"],
            "action": {"type": "copy", "table": target.name(), "mode": "merge"}}),
        )
        .await;
    assert_eq!(selected["state"], "succeeded", "{selected}");
    let merged = rows_of(&target).await;
    let held_alike = keys(&rows[..3]);
    for (key, properties) in &source_rows {
        let row = &merged[key];
        assert_eq!(row["N"], properties["N"], "{key:?}");
        if changed.contains(key) {
            assert_eq!(row["Name"], Edm::String("kept".into()), "{key:?}");
        } else if held_alike.contains(key) {
            assert_eq!(row["Name"], properties["Name"], "{key:?}");
        } else {
            assert!(!row.contains_key("Name"), "{key:?}: {row:?}");
        }
    }

    // insert: rows the target holds stay as they are; identical ones count as copied.
    let (source, target, changed) = source_and_prefilled_target(&rows).await;
    let before = rows_of(&target).await;
    let insert = host
        .run(json!({"table": source.name(), "pageSize": 9,
            "action": {"type": "copy", "table": target.name(), "mode": "insert"}}))
        .await;
    assert_eq!(insert["state"], "succeeded", "{insert}");
    assert_eq!(insert["progress"]["rowsSkipped"], 7, "{insert}");
    assert_eq!(insert["progress"]["rowsActed"], 33, "{insert}");
    let inserted = rows_of(&target).await;
    for (key, properties) in &source_rows {
        if changed.contains(key) {
            assert_eq!(inserted[key], before[key], "kept: {key:?}");
        } else {
            assert_eq!(&inserted[key], properties, "{key:?}");
        }
    }

    // replace with select would drop properties: refused, naming merge.
    let (status, body) = host
        .post_scan(&json!({"table": source.name(), "select": ["N"],
            "action": {"type": "copy", "table": target.name()}}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "select", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("merge"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_writes_nothing_and_counts_exactly() {
    let mut rows = small_rows();
    rows.push(oversized("p2"));
    let source = table_with(&rows).await;
    let before = rows_of(&source).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);

    let delete = host
        .run(
            json!({"table": source.name(), "pageSize": 7, "dryRun": true,
            "action": {"type": "delete"}}),
        )
        .await;
    assert_eq!(delete["state"], "succeeded", "{delete}");
    assert_eq!(delete["spec"]["dryRun"], true);
    assert_eq!(delete["progress"]["rowsActed"], 41, "{delete}");
    assert_eq!(rows_of(&source).await, before, "nothing deleted");
    let sample = delete["dryRunRows"].as_array().expect("a sample of rows");
    assert!(!sample.is_empty() && sample.len() <= 20, "{delete}");
    let all = keys(&rows);
    for row in sample {
        let key = (
            row["partitionKey"].as_str().unwrap().to_string(),
            row["rowKey"].as_str().unwrap().to_string(),
        );
        assert!(all.contains(&key), "{key:?}");
    }

    // A copy's dry run does not even create its target.
    let target_name = unique("never");
    let copy = host
        .run(
            json!({"table": source.name(), "pageSize": 7, "dryRun": true,
            "action": {"type": "copy", "table": target_name}}),
        )
        .await;
    assert_eq!(copy["state"], "succeeded", "{copy}");
    assert_eq!(copy["progress"]["rowsActed"], 41);
    let missing = tables()
        .table(&target_name)
        .unwrap()
        .query_page(&Query::default(), None)
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing}");

    // An enqueue's dry run tells which rows would not fit a message, and sends nothing.
    let queue = unique("dry-");
    let enqueue = host
        .run(
            json!({"table": source.name(), "pageSize": 7, "dryRun": true,
            "action": {"type": "enqueue", "queue": queue}}),
        )
        .await;
    assert_eq!(enqueue["state"], "succeeded", "{enqueue}");
    assert_eq!(enqueue["progress"]["rowsActed"], 40, "{enqueue}");
    assert_eq!(enqueue["progress"]["rowsFailed"], 1, "{enqueue}");
    assert_eq!(enqueue["rowFailures"][0]["rowKey"], "huge", "{enqueue}");
    let absent = queues()
        .queue(&queue)
        .unwrap()
        .receive(1, std::time::Duration::from_secs(1))
        .await;
    assert!(
        absent.as_ref().is_err_and(|e| e.is_not_found()),
        "no queue created: {absent:?}"
    );
}

/// The queue the app's ScanRange function listens on (devhost tests rename it per host).
fn range_queue_of(host: &Host) -> String {
    let file = host._dir.0.join("ScanRange").join("function.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    json["bindings"][0]["queueName"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_apps_own_storage_a_self_copy_and_nonsense_are_refused_naming_the_field() {
    let source = table_with(&small_rows()).await;
    let before = rows_of(&source).await;
    let host = Host::start(1, &[]);
    let work_queue = range_queue_of(&host);
    let refused = [
        (
            json!({"table": source.name(), "action": {"type": "enqueue", "queue": work_queue}}),
            "action.queue",
        ),
        (
            json!({"table": source.name(), "action": {"type": "enqueue", "queue": format!("{work_queue}-poison")}}),
            "action.queue",
        ),
        (
            json!({"table": source.name(), "action": {"type": "copy", "table": host.ledger}}),
            "action.table",
        ),
        (
            json!({"table": host.ledger, "action": {"type": "delete"}}),
            "table",
        ),
        (
            json!({"table": source.name(), "action": {"type": "copy", "table": source.name().to_uppercase()}}),
            "action.table",
        ),
        (
            json!({"table": source.name(), "scope": {"after": "B", "before": "A"}, "action": {"type": "count"}}),
            "scope.before",
        ),
        (
            json!({"table": source.name(), "scope": {"prefix": "z", "before": "m"}, "action": {"type": "count"}}),
            "scope.prefix",
        ),
        (
            json!({"table": source.name(), "select": ["Name"], "action": {"type": "delete"}}),
            "select",
        ),
        (
            json!({"table": source.name(), "action": {"type": "count"}, "colour": "blue"}),
            "colour",
        ),
    ];
    for (request, field) in refused {
        let (status, body) = host.post_scan(&request).await;
        assert_eq!(status, 400, "{request}");
        assert_eq!(body["error"]["field"], field, "{request}: {body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    }
    // A duplicate key, which JSON parsers would silently take the last of.
    let answer = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/api/scans", host.port))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"table":"{}","action":{{"type":"count","type":"delete"}}}}"#,
            source.name()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["field"], "action.type", "{body}");
    // Nothing was started, nothing touched.
    assert_eq!(rows_of(&source).await, before);
    let list: Value = reqwest::get(format!("http://127.0.0.1:{}/api/scans", host.port))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["scans"], json!([]), "{list}");
    let log = host.log();
    assert!(
        log.contains("a scan start was refused"),
        "refusals are logged:\n{log}"
    );
}
