//! End to end: the real handler run by devhost against Azurite. Results are checked by reading
//! the tables and queues directly, not by trusting the handler's own counts.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;
use common::*;

async fn every_action(instances: usize) {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(instances, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let small_pages =
        |action: Value| json!({ "table": source.name(), "pageSize": 25, "action": action });
    let distinct: BTreeSet<&str> = rows.iter().map(|e| e.partition_key.as_str()).collect();

    let count = host.run(small_pages(json!({"type": "count"}))).await;
    assert_eq!(count["state"], "succeeded", "{count}");
    assert_eq!(
        count["result"],
        json!({"rows": rows.len(), "partitions": distinct.len()})
    );
    assert!(
        count["progress"]["stepsDone"].as_u64().unwrap() > 10,
        "many steps: {count}"
    );

    let copy_name = unique("copy");
    let copy = host
        .run(small_pages(json!({"type": "copy", "table": copy_name})))
        .await;
    assert_eq!(copy["state"], "succeeded", "{copy}");
    let target = tables().table(&copy_name).unwrap();
    assert_same_rows(&target, &source, "the copy is identical").await;

    let row_queue = unique("rows-");
    let enqueue = host
        .run(small_pages(json!({"type": "enqueue", "queue": row_queue})))
        .await;
    assert_eq!(enqueue["state"], "succeeded", "{enqueue}");
    let messages = drain_queue(&row_queue, MessageEncoding::Base64).await;
    let enqueued: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["PartitionKey"].as_str().unwrap().to_string(),
                m["RowKey"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        enqueued.len(),
        rows.len(),
        "one message per row, none twice"
    );
    assert_eq!(enqueued.into_iter().collect::<BTreeSet<_>>(), keys(&rows));

    let key_queue = unique("keys-");
    let partitions = host
        .run(small_pages(
            json!({"type": "partition-keys", "queue": key_queue, "encoding": "none"}),
        ))
        .await;
    assert_eq!(partitions["state"], "succeeded", "{partitions}");
    let sent: Vec<String> = drain_queue(&key_queue, MessageEncoding::Text)
        .await
        .iter()
        .map(|m| m["PartitionKey"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent.len(), distinct.len(), "one message per partition");
    assert_eq!(
        sent.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        distinct
    );

    let delete = host
        .run(json!({ "table": copy_name, "pageSize": 25, "action": {"type": "delete"} }))
        .await;
    assert_eq!(delete["state"], "succeeded", "{delete}");
    assert_eq!(delete["progress"]["rowsActed"], rows.len() as u64);
    assert!(
        target
            .query_all(&Query::default())
            .await
            .unwrap()
            .is_empty(),
        "every row deleted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_through_devhost_with_one_instance() {
    every_action(1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_through_devhost_with_three_instances() {
    every_action(3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_handler_loses_and_doubles_nothing() {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(
        2,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "2"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "2"),
        ],
    );
    // A copy: its upserts make a step that runs again after the kill harmless, so the target
    // must end up exactly the source. (The enqueue action is at-least-once under crashes: a queue
    // put cannot share a transaction with the ledger; see docs/functions.md.)
    let target_name = unique("killcopy");
    let id = host
        .start_scan(json!({"table": source.name(), "pageSize": 10, "action": {"type": "copy", "table": target_name}}))
        .await;
    // Kill one handler as soon as the scan is under way, with work still pending.
    host.wait_for_steps(&id, 3).await;
    let victim = host.handler_pids()[0];
    Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    let status = host.wait(&id, Duration::from_secs(240)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert!(
        host.handler_pids().len() >= 3,
        "devhost restarted the killed handler:\n{}",
        host.log()
    );
    assert_eq!(
        status["progress"]["rowsRead"],
        rows.len() as u64,
        "{status}"
    );
    assert_eq!(
        status["progress"]["rowsActed"],
        rows.len() as u64,
        "counted once: {status}"
    );
    let target = tables().table(&target_name).unwrap();
    let copied = target.query_all(&Query::default()).await.unwrap();
    assert_eq!(copied.len(), rows.len(), "nothing lost, nothing doubled");
    assert_eq!(keys(&copied), keys(&rows));
}

/// A step that fails for a reason another attempt would meet again fails its item for good at
/// once, with the cause in the status, instead of spending the message's five deliveries; the
/// rest of the scan completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_that_fails_for_good_fails_at_once_and_shows_in_the_status() {
    let mut rows: Vec<Entity> = (0..200)
        .map(|i| Entity::new(format!("p{:03}", i), "r"))
        .collect();
    // The proxy in front of the target answers the transaction holding this row 400 as a
    // whole (a request the service cannot take at all, not one invalid row): every attempt
    // would meet it again.
    rows.push(Entity::new("p100x", "broken").with("Note", Edm::String("break-me".into())));
    let source = table_with(&rows).await;
    let (origin, account) = endpoint("TableEndpoint");
    let proxy = fault_proxy::FaultProxy::start(origin).await;
    proxy.refuse_transactions_marked(Some("break-me"));
    let target = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let host = Host::start(
        1,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("TARGET", target.as_str()),
        ],
    );
    let status = host
        .run(json!({"table": source.name(), "pageSize": 10,
            "action": {"type": "copy", "table": unique("broken"), "connection": "TARGET"}}))
        .await;
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(status["progress"]["stepsFailed"], 1, "{status}");
    assert_eq!(status["progress"]["stepsPending"], 0, "{status}");
    assert!(
        status["progress"]["stepsDone"].as_u64().unwrap() > 5,
        "the rest completed: {status}"
    );
    let error = status["errors"][0]["error"].as_str().unwrap();
    assert!(error.contains("400 InvalidInput"), "{error}");
    assert_eq!(
        status["errors"][0]["attempts"], 1,
        "failed at once: {status}"
    );
    let poison = queues()
        .queue(&format!("{}-poison", poison_queue_of(&host)))
        .unwrap();
    assert_eq!(
        poison.approximate_count().await.unwrap_or(0),
        0,
        "the message was consumed, not poisoned: {}",
        host.log()
    );
}

/// The range queue of this host's app (its name carries the test's suffix).
fn poison_queue_of(host: &Host) -> String {
    trigger_queue_of(host, "ScanRange")
}

/// The queue a queue-triggered function of this host's app listens on.
fn trigger_queue_of(host: &Host, function: &str) -> String {
    let file = host._dir.0.join(function).join("function.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    json["bindings"][0]["queueName"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A count scan that loses every message waiting in both queues once it has spread, as when
/// messages expire or someone clears a queue: their work items stay pending in the ledger.
/// Items untouched for 3 s count as stranded.
async fn scan_that_loses_its_queued_messages(
) -> (Host, Vec<tablescan::storage::table::entity::Entity>, String) {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(
        1,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("TABLESCAN_REDRIVE_AFTER_SECONDS", "3"),
        ],
    );
    let id = host
        .start_scan(json!({ "table": source.name(), "pageSize": 5, "action": {"type": "count"} }))
        .await;
    host.wait_for_steps(&id, 3).await;
    // Take waiting messages away until at least one is surely lost: clearing alone may find
    // every message already in devhost's hands (a batch is taken at once).
    let mut lost = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while lost == 0 {
        assert!(std::time::Instant::now() < deadline, "no message to lose");
        for function in ["ScanRange", "ScanPartition"] {
            let queue = queues().queue(&trigger_queue_of(&host, function)).unwrap();
            for message in queue.receive(32, Duration::from_secs(600)).await.unwrap() {
                queue
                    .delete_message(&message.id, &message.pop_receipt)
                    .await
                    .unwrap();
                lost += 1;
            }
            queue.clear().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (host, rows, id)
}

/// The scan ended exact, with messages sent again.
fn assert_exact_after_redrive(
    host: &Host,
    rows: &[tablescan::storage::table::entity::Entity],
    done: &Value,
) {
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    let distinct: BTreeSet<&str> = rows.iter().map(|e| e.partition_key.as_str()).collect();
    assert_eq!(
        done["result"],
        json!({"rows": rows.len(), "partitions": distinct.len()}),
        "exact counts after the re-drive"
    );
    assert!(
        done["progress"]["stepsRedriven"].as_u64().unwrap() > 0,
        "messages were lost and sent again: {done}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn work_items_whose_messages_were_lost_are_sent_again_from_the_ledger() {
    let (host, rows, id) = scan_that_loses_its_queued_messages().await;
    // Reading the status (and the timer) notices the items nobody touched for 3 s.
    let done = host.wait(&id, Duration::from_secs(240)).await;
    assert_exact_after_redrive(&host, &rows, &done);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_re_drive_timer_finishes_a_scan_that_lost_its_messages_and_that_nobody_watches() {
    let (host, rows, id) = scan_that_loses_its_queued_messages().await;
    // From here on nobody calls GET /api/scans/{id}: only the timer function can notice.
    let done = host.wait_unobserved(&id, Duration::from_secs(240)).await;
    assert_exact_after_redrive(&host, &rows, &done);
    let log = host.log();
    assert!(
        log.contains("RedriveScans (timer): succeeded") && log.contains("work items sent again"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_devhost_restarted_mid_copy_loses_and_doubles_nothing() {
    let rows = rows();
    let source = table_with(&rows).await;
    // Short claims and a quick re-drive: the messages the dead host held stay invisible for
    // its 10-minute lease, so the restarted one gets their items through the ledger.
    let mut host = Host::start(
        3,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "3"),
            ("TABLESCAN_REDRIVE_AFTER_SECONDS", "2"),
        ],
    );
    let copy_name = unique("crashcopy");
    let id = host
        .start_scan(json!({
            "table": source.name(), "pageSize": 10,
            "action": {"type": "copy", "table": copy_name}
        }))
        .await;
    for crash in 0..2 {
        host.wait_for_steps(&id, 5 + 20 * crash).await;
        host.crash_and_restart();
    }
    let done = host.wait(&id, Duration::from_secs(240)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    assert_eq!(done["progress"]["rowsActed"], rows.len() as u64, "{done}");
    let target = tables().table(&copy_name).unwrap();
    assert_same_rows(&target, &source, "the copy is identical").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn foreign_truncated_and_unknown_messages_fail_alone_and_end_in_poison() {
    use tablescan::job::WorkItem;
    use tablescan::scan::KeyRange;
    use tablescan::storage::queue::PutOptions;

    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let range_queue = trigger_queue_of(&host, "ScanRange");
    let valid = WorkItem::root("0123456789abcdef0123456789abcdef", KeyRange::all(), "").encode();
    let foreign = [
        "hello".to_string(),
        json!({"some": "json"}).to_string(),
        valid[..valid.len() / 2].to_string(),
        valid.replacen("\"v\":1", "\"v\":99", 1),
        // A well-formed work item of a scan that does not exist.
        valid.clone(),
    ];
    assert_ne!(foreign[3], valid, "the version was changed");
    let queue = queues().queue(&range_queue).unwrap();
    queue.create().await.unwrap();
    let options = PutOptions {
        encoding: MessageEncoding::Base64,
        ..PutOptions::default()
    };
    for text in &foreign {
        queue.put_message(text.as_bytes(), &options).await.unwrap();
    }
    // A real scan runs beside them, unaffected.
    let count = host
        .run(json!({ "table": source.name(), "pageSize": 25, "action": {"type": "count"} }))
        .await;
    let distinct: BTreeSet<&str> = rows.iter().map(|e| e.partition_key.as_str()).collect();
    assert_eq!(
        count["result"],
        json!({"rows": rows.len(), "partitions": distinct.len()}),
        "{count}"
    );
    // Each foreign message is refused on every attempt and ends in poison.
    let poison = queues().queue(&format!("{range_queue}-poison")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while poison.approximate_count().await.unwrap_or(0) < foreign.len() as u64 {
        assert!(Instant::now() < deadline, "{}", host.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut poisoned = Vec::new();
    for message in poison.peek(32).await.unwrap() {
        poisoned.push(
            String::from_utf8(
                MessageEncoding::Base64
                    .decode(&message.text)
                    .unwrap_or_default(),
            )
            .unwrap_or(message.text),
        );
    }
    poisoned.sort();
    let mut expected = foreign.to_vec();
    expected.sort();
    assert_eq!(
        poisoned, expected,
        "every foreign message, unchanged, in poison"
    );
    let list = reqwest::get(format!("http://127.0.0.1:{}/api/scans", host.port))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let rejected = list["rejectedMessages"].as_array().unwrap();
    for why in ["not JSON", "does not exist", "version"] {
        assert!(
            rejected
                .iter()
                .any(|r| r["error"].as_str().unwrap_or("").contains(why)),
            "no rejection mentions {why:?}: {list}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_route_runs_the_re_drive_timer_by_hand() {
    // The timer's own schedule is pushed to once a year, so only the hand run can fire it.
    let suffix = unique("").replace('x', "-");
    let dir = std::env::temp_dir().join(format!("devhost-admin-{suffix}"));
    assemble(&dir, &suffix);
    let timer = dir.join("RedriveScans/function.json");
    let text = std::fs::read_to_string(&timer)
        .unwrap()
        .replace("*/2 * * * * *", "0 0 0 1 1 *");
    std::fs::write(&timer, text).unwrap();
    let host = Host::start_app(dir, 1, &[]);
    let admin = |name: &str| {
        reqwest::Client::new()
            .post(format!(
                "http://127.0.0.1:{}/admin/functions/{name}",
                host.port
            ))
            .json(&json!({ "input": "" }))
            .send()
    };
    assert!(!host.log().contains("RedriveScans (timer): succeeded"));
    assert_eq!(admin("RedriveScans").await.unwrap().status(), 202);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // The handler's line and devhost's come through two pipes: either may be read first.
    while !(host.log().contains("RedriveScans (timer): succeeded")
        && host.log().contains("re-drive sweep: 0 scans in flight"))
    {
        assert!(std::time::Instant::now() < deadline, "{}", host.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(admin("StartScan").await.unwrap().status(), 400);
    assert_eq!(admin("NoSuchFunction").await.unwrap().status(), 404);
}
