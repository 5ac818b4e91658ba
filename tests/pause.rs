//! Pause and resume through the handler's real path (Azurite, the handler called as the host
//! calls it): a scan paused through the API while its steps run side by side, each message
//! delivered twice at once, stops acting (every message delivered while it is paused is
//! dropped, nothing more is written), then resumes and ends with every row acted on exactly
//! once: a copy identical to its source row by row, an export whose manifest is written only
//! once it is whole and whose import (paused in the middle of its blobs too) restores the
//! source exactly. Also the API's answers for scans in the wrong state.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use common::host::{Answer, TestHost};
use common::{fast_retry_options, fresh_table, load, tables, unique_name};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tablescan::functions::names::{
    EXPORT_OUTPUT, PARTITION_OUTPUT, RANGE_OUTPUT, SCAN_EXPORT, SCAN_PARTITION, SCAN_RANGE,
};
use tablescan::functions::{AppState, Settings};
use tablescan::storage::blob::BlobServiceClient;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::TableClient;

/// 240 rows over 4 partitions (so that a step reads many pages of one: a pause lands inside
/// it), each with properties to compare.
fn source_rows() -> Vec<Entity> {
    (0..240)
        .map(|i| {
            Entity::new(format!("p{}", i % 4), format!("r{i:03}"))
                .with("n", Edm::Int64(i))
                .with("s", Edm::String(format!("row {i}")))
        })
        .collect()
}

/// A table's rows as keys and properties, in key order.
async fn rows_of(table: &TableClient) -> Vec<(String, String, String)> {
    table
        .query_all(&Query::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let keys = (e.partition_key.clone(), e.row_key.clone());
            let properties = Entity {
                timestamp: None,
                etag: None,
                ..e
            }
            .to_json();
            (keys.0, keys.1, properties)
        })
        .collect()
}

async fn count_rows(table: &str) -> usize {
    match tables()
        .table(table)
        .unwrap()
        .query_all(&Query::default())
        .await
    {
        Ok(rows) => rows.len(),
        Err(e) if e.is_not_found() => 0,
        Err(e) => panic!("{e}"),
    }
}

/// Calls `PauseScan` or `ResumeScan`: the answer's status and body.
async fn call(host: &TestHost, function: &str, id: &str) -> (u16, Value, Answer) {
    let verb = if function == "PauseScan" {
        "pause"
    } else {
        "resume"
    };
    let answer = host
        .http(
            function,
            "POST",
            &format!("/api/scans/{id}/{verb}"),
            &[("id", id)],
            None,
        )
        .await;
    let (status, body) = answer.res();
    (status, body, answer)
}

/// Work-item messages waiting for delivery: (function, text).
type Queue = VecDeque<(String, String)>;

/// The work-item messages an answer sends, as the host would queue them.
fn outputs(answer: &Answer) -> Vec<(String, String)> {
    [
        (RANGE_OUTPUT, SCAN_RANGE),
        (PARTITION_OUTPUT, SCAN_PARTITION),
        (EXPORT_OUTPUT, SCAN_EXPORT),
    ]
    .iter()
    .flat_map(|(binding, function)| {
        answer
            .messages(binding)
            .into_iter()
            .map(|m| (function.to_string(), m))
    })
    .collect()
}

/// Delivers up to `batches` batches of `side_by_side` queued messages, each message twice at
/// once, queueing what they send; `beside` runs beside the first batch (a pause called while
/// steps run). Every delivery must be answered 200. How many deliveries ran.
async fn deliver_twice(
    host: &TestHost,
    queue: &mut Queue,
    side_by_side: usize,
    batches: usize,
    beside: impl std::future::Future<Output = ()>,
) -> usize {
    let mut beside = Some(beside);
    let mut ran = 0;
    for _ in 0..batches {
        if queue.is_empty() {
            break;
        }
        let batch: Vec<(String, String)> = (0..side_by_side)
            .filter_map(|_| queue.pop_front())
            .collect();
        let copies: Vec<&(String, String)> = batch.iter().flat_map(|m| [m, m]).collect();
        // Put in the queue now, as a message the resume sent is: one with an old insertion
        // time would read as a leftover of an item sent again since (`Begin::Superseded`).
        let inserted = time::OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let deliveries = join_all(copies.iter().map(|(function, text)| {
            let message = u64::from(uuid::Uuid::new_v4().as_u128() as u32);
            host.post_raw(
                function,
                host.delivery_at(function, text, 1, message, &inserted),
            )
        }));
        let answers = match beside.take() {
            Some(beside) => tokio::join!(deliveries, beside).0,
            None => deliveries.await,
        };
        ran += answers.len();
        for (answer, message) in answers.iter().zip(copies) {
            match answer.status {
                200 => queue.extend(outputs(answer)),
                // Waited two leases for the other delivery's claim, or not admitted by the
                // scan's pace and not given back (these tests create no queues): the host
                // delivers the message again later.
                409 | 503 => queue.push_back(message.clone()),
                _ => panic!("{}", answer.text),
            }
        }
    }
    if let Some(beside) = beside {
        beside.await;
    }
    ran
}

/// Resumes scan `id` until no round is left, queueing the messages sent; how many.
async fn resume(host: &TestHost, queue: &mut Queue, id: &str) -> u64 {
    let mut sent = 0;
    for _ in 0..100 {
        let (status, body, answer) = call(host, "ResumeScan", id).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["id"], id, "{body}");
        let round = outputs(&answer);
        assert_eq!(Some(round.len() as u64), body["sent"].as_u64(), "{body}");
        sent += round.len() as u64;
        queue.extend(round);
        if body["more"] == false {
            return sent;
        }
    }
    panic!("the resume's rounds did not end");
}

/// Runs scan `id` (its first messages in `queue`), each message delivered twice at once, pauses
/// it while its steps run, checks that nothing moves while it is paused (every message then
/// delivered is dropped, sending nothing; `while_paused` checks more), resumes it and runs it
/// to the end, each message delivered twice. The final status.
async fn pause_run_resume(
    host: &TestHost,
    queue: &mut Queue,
    id: &str,
    target: Option<&str>,
    while_paused: impl std::future::Future<Output = ()>,
) -> Value {
    let written = match target {
        Some(target) => count_rows(target).await,
        None => 0,
    };
    let paused = std::sync::atomic::AtomicBool::new(false);
    let pause = async {
        // Into the steps delivered beside it (each several pages long: the scan is capped):
        // as soon as one of them writes a page to the target (not the first step's: the
        // scan has spread by then), or, for an export (whose blobs are written at the end of
        // its steps), once two steps are done.
        match target {
            Some(target) => {
                for _ in 0..3000 {
                    if count_rows(target).await > written + 20 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            None => {
                for _ in 0..3000 {
                    let (_, status) = host.status(id).await;
                    if status["progress"]["stepsDone"].as_u64().unwrap_or(0) >= 2 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        let (status, body, _) = call(host, "PauseScan", id).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body["state"] == "pausing" || body["state"] == "paused",
            "{body}"
        );
        paused.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let run = async {
        while !paused.load(std::sync::atomic::Ordering::SeqCst) {
            if deliver_twice(host, queue, 2, 1, async {}).await == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    tokio::join!(pause, run);

    let (_, status) = host.status(id).await;
    assert_eq!(status["state"], "paused", "no step runs any more: {status}");
    assert!(status["pausedAt"].is_string(), "{status}");
    let acted = status["progress"]["rowsActed"].clone();
    let in_target = match target {
        Some(target) => count_rows(target).await,
        None => 0,
    };
    // Every message delivered while paused is dropped: nothing sent, nothing acted on.
    let waiting = queue.len();
    assert!(waiting > 0, "work is left at the pause: {status}");
    let dropped = deliver_twice(host, queue, 4, usize::MAX, async {}).await;
    assert_eq!(dropped, waiting * 2);
    assert!(queue.is_empty(), "a paused delivery sends nothing");
    let (_, still) = host.status(id).await;
    assert_eq!(still["state"], "paused", "{still}");
    assert_eq!(still["progress"]["rowsActed"], acted, "{still}");
    if let Some(target) = target {
        assert_eq!(
            count_rows(target).await,
            in_target,
            "rows written while paused"
        );
    }
    while_paused.await;
    // A second pause changes nothing.
    let (again, body, _) = call(host, "PauseScan", id).await;
    assert_eq!(
        (again, body["state"].as_str()),
        (200, Some("paused")),
        "{body}"
    );

    let sent = resume(host, queue, id).await;
    assert!(sent > 0, "the paused items are sent again");
    let (_, resumed) = host.status(id).await;
    assert!(resumed["resumedAt"].is_string(), "{resumed}");
    assert!(resumed["pausedAt"].is_null(), "{resumed}");
    deliver_twice(host, queue, 4, usize::MAX, async {}).await;
    let (_, done) = host.status(id).await;
    done
}

/// The handler's state for these tests: its own ledger, leases of a second (a duplicate
/// delivery waits for the other's claim at most that long), `max_queries` queries a step, and
/// work-item queues of its own that do not exist: a step the scan's pace does not admit is
/// given back to its queue, and that must fail (503, delivered again by this test's host) for
/// the message to stay with the test rather than go to queues other tests create.
fn state(max_queries: &str) -> std::sync::Arc<AppState> {
    let mut state = AppState::new(Settings::from_pairs([
        (
            "AzureWebJobsStorage".to_string(),
            common::connection_string(),
        ),
        ("TABLESCAN_LEDGER_TABLE".to_string(), unique_name("ledger")),
        ("TABLESCAN_STEP_LEASE_SECONDS".to_string(), "1".to_string()),
        (
            "TABLESCAN_STEP_MAX_QUERIES".to_string(),
            max_queries.to_string(),
        ),
    ]));
    let queues = &mut std::sync::Arc::get_mut(&mut state).unwrap().item_queues;
    queues.range = unique_name("nosuchrange");
    queues.partition = unique_name("nosuchpartition");
    queues.export = unique_name("nosuchexport");
    state
}

/// Starts a scan; its first messages.
async fn start(host: &TestHost, request: Value) -> (String, Queue) {
    let (answer, id) = host.start_scan(&request).await;
    (id, outputs(&answer).into_iter().collect())
}

#[tokio::test]
async fn a_copy_paused_while_its_steps_run_resumes_to_an_identical_target() {
    let rows = source_rows();
    let source = fresh_table("pausesrc").await;
    load(&source, &rows).await;
    let target = unique_name("pausedst");
    let host = TestHost::serve(state("6")).await;
    let (id, mut queue) = start(
        &host,
        json!({"table": source.name(), "pageSize": 5, "maxRowsPerSecond": 30,
            "action": {"type": "copy", "table": target}}),
    )
    .await;
    let done = pause_run_resume(&host, &mut queue, &id, Some(&target), async {}).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let n = rows.len() as u64;
    assert_eq!(done["progress"]["rowsRead"], n, "{done}");
    assert_eq!(done["progress"]["rowsActed"], n, "{done}");
    assert_eq!(done["progress"]["stepsPending"], 0, "{done}");
    let copied = rows_of(&tables().table(&target).unwrap()).await;
    assert_eq!(copied, rows_of(&source).await, "the copy, row by row");

    // Ended: neither paused nor resumed again; a remove works.
    let (status, body, _) = call(&host, "PauseScan", &id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "only a pending or running scan can be paused; this one is succeeded",
        "{body}"
    );
    let (status, body, _) = call(&host, "ResumeScan", &id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"], "only a paused scan can be resumed; this one is succeeded",
        "{body}"
    );
}

#[tokio::test]
async fn an_export_paused_gets_its_manifest_once_whole_and_its_import_paused_restores_it() {
    let rows = source_rows();
    let source = fresh_table("pauseexp").await;
    load(&source, &rows).await;
    let container = unique_name("pausexp").to_lowercase();
    let host = TestHost::serve(state("6")).await;
    let (export, mut queue) = start(
        &host,
        json!({"table": source.name(), "pageSize": 5, "maxRowsPerSecond": 30,
            "action": {"type": "export", "container": container, "prefix": "b/"}}),
    )
    .await;
    let blobs = BlobServiceClient::new(&common::account(), fast_retry_options()).unwrap();
    let container_client = blobs.container(&container).unwrap();
    let manifest = || async {
        match container_client.get("b/manifest.json").await {
            Ok(bytes) => Some(serde_json::from_slice::<Value>(&bytes).unwrap()),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("{e}"),
        }
    };
    let no_manifest_yet =
        async { assert_eq!(manifest().await, None, "a paused export's manifest") };
    let done = pause_run_resume(&host, &mut queue, &export, None, no_manifest_yet).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let n = rows.len() as u64;
    assert_eq!(done["progress"]["rowsRead"], n, "{done}");
    assert_eq!(done["progress"]["rowsActed"], n, "{done}");
    let written = manifest().await.expect("the manifest of the whole export");
    assert_eq!(written["rows"], n, "{written}");

    // The import, paused in the middle of its blobs.
    let restored = unique_name("pauserest");
    let (import, mut queue) = start(
        &host,
        json!({"import": {"container": container, "prefix": "b/"}, "maxRowsPerSecond": 30,
            "action": {"type": "copy", "table": restored}}),
    )
    .await;
    let done = pause_run_resume(&host, &mut queue, &import, Some(&restored), async {}).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["progress"]["rowsRead"], n, "{done}");
    assert_eq!(done["progress"]["rowsActed"], n, "{done}");
    let copied = rows_of(&tables().table(&restored).unwrap()).await;
    assert_eq!(copied, rows_of(&source).await, "the import, row by row");
}

/// A cancel of a paused scan ends it `cancelled` (its pending items dropped as their messages
/// arrive, or by the sweep), after which it can be removed; pause and resume of unknown or
/// malformed ids are refused.
#[tokio::test]
async fn a_paused_scan_cancelled_ends_cancelled_and_can_be_removed() {
    let rows = source_rows();
    let source = fresh_table("pausecan").await;
    load(&source, &rows).await;
    let host = TestHost::serve(state("1")).await;
    let (id, mut queue) = start(
        &host,
        json!({"table": source.name(), "pageSize": 5, "action": {"type": "count"}}),
    )
    .await;
    deliver_twice(&host, &mut queue, 2, 2, async {}).await;
    let (status, body, _) = call(&host, "PauseScan", &id).await;
    assert_eq!(status, 200, "{body}");
    let (_, paused) = host.status(&id).await;
    assert_eq!(paused["state"], "paused", "{paused}");
    let (status, body) = host.cancel(&id).await;
    assert_eq!(status, 200, "{body}");
    // Its messages, delivered now, drop their items; the sweep drops those whose messages
    // are gone (here: half of them).
    let half = queue.len() / 2;
    queue.truncate(half);
    deliver_twice(&host, &mut queue, 4, usize::MAX, async {}).await;
    let sweep = host
        .post_raw(
            "RedriveScans",
            json!({
                "Data": { "timer": { "Schedule": { "AdjustForDST": true }, "IsPastDue": false } },
                "Metadata": { "sys": { "MethodName": "RedriveScans", "UtcNow": "2026-11-22T10:00:00.0000000Z", "RandGuid": "0" } }
            })
            .to_string(),
        )
        .await;
    assert_eq!(sweep.status, 200, "{}", sweep.text);
    let (_, cancelled) = host.status(&id).await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["progress"]["stepsPending"], 0, "{cancelled}");
    let (status, body, _) = call(&host, "ResumeScan", &id).await;
    assert_eq!(status, 409, "{body}");
    let removed = host
        .http(
            "DeleteScan",
            "DELETE",
            &format!("/api/scans/{id}"),
            &[("id", &id)],
            None,
        )
        .await;
    let (status, body) = removed.res();
    assert_eq!(status, 200, "{body}");
    let (status, _) = host.status(&id).await;
    assert_eq!(status, 404);

    let unknown = "0123456789abcdef0123456789abcdef";
    for function in ["PauseScan", "ResumeScan"] {
        let (status, body, _) = call(&host, function, unknown).await;
        assert_eq!(status, 404, "{function}: {body}");
        let (status, body, _) = call(&host, function, "not-an-id").await;
        assert!(
            status == 400 || status == 404,
            "{function}: {status} {body}"
        );
    }
}

/// A paused scan whose running steps fail for good reads `failed` (nothing is left to run but
/// the failed items). A retry, which the user is told to run, makes them pending and sends
/// them: it resumes the scan too, or every message it sent would be dropped as paused and the
/// scan would turn `paused` instead of running them. (Failed before the fix: after the retry
/// the scan read `paused`, its retried item never run.)
#[tokio::test]
async fn a_retry_of_a_paused_scan_that_failed_runs_its_failed_items() {
    use tablescan::job::WorkItem;
    use tablescan::job::{Begin, FailureRecord};
    let source = fresh_table("pausefail").await;
    load(&source, &source_rows()[..20]).await;
    let state = state("100");
    let host = TestHost::serve(state.clone()).await;
    let (id, queue) = start(
        &host,
        json!({"table": source.name(), "action": {"type": "count"}}),
    )
    .await;
    // The root step runs when the pause comes, and fails for good.
    let ledger = state.ledger().unwrap();
    let root = WorkItem::decode(&queue[0].1).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let Begin::Run(claim) = ledger
        .begin(&root, now, time::Duration::MINUTE)
        .await
        .unwrap()
    else {
        panic!("the root runs");
    };
    let (status, body, _) = call(&host, "PauseScan", &id).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("pausing")),
        "{body}"
    );
    ledger
        .fail(
            &root,
            &claim,
            "the source refused",
            FailureRecord::Final,
            0,
            now,
        )
        .await
        .unwrap();
    let (_, failed) = host.status(&id).await;
    assert_eq!(failed["state"], "failed", "{failed}");

    let retried = host
        .http(
            "RetryScan",
            "POST",
            &format!("/api/scans/{id}/retry"),
            &[("id", &id)],
            None,
        )
        .await;
    let (status, body) = retried.res();
    assert_eq!(status, 202, "{body}");
    let mut queue: Queue = outputs(&retried).into_iter().collect();
    assert_eq!(queue.len(), 1, "{body}");
    deliver_twice(&host, &mut queue, 4, usize::MAX, async {}).await;
    let (_, done) = host.status(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["progress"]["rowsRead"], 20, "{done}");
}
