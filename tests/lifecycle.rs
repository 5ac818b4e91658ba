//! The edges of a scan's life, through the handler on Azurite: what happens when a cancel, a
//! lost answer or a crash meets a step at its end.

mod common;

use common::host::TestHost;
use common::{fast_retry_options, fresh_table, unique_name};
use serde_json::json;
use tablescan::functions::manifest::{seal_record, Sealed};
use tablescan::functions::{AppState, Settings};
use tablescan::storage::blob::BlobServiceClient;
use tablescan::storage::table::entity::Entity;

/// The handler's state on the test storage, with steps of one query each (so that a scan of a
/// few dozen rows is spread over several work items).
fn state(extra: &[(&str, &str)]) -> std::sync::Arc<AppState> {
    let mut settings = vec![
        (
            "AzureWebJobsStorage".to_string(),
            common::connection_string(),
        ),
        ("TABLESCAN_LEDGER_TABLE".to_string(), unique_name("ledger")),
        ("TABLESCAN_STEP_MAX_QUERIES".to_string(), "1".to_string()),
    ];
    settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    AppState::new(Settings::from_pairs(settings))
}

/// A cancel written after the last step claimed its item, with the other items dropped by it:
/// the step's view of the scan (read at its claim) says "not cancelled", and the totals settle.
/// The manifest must not be written: it would describe part of the table as the whole export.
/// (Failed before the fix: the seal trusted the record read at the claim and wrote it.)
#[tokio::test]
async fn an_export_cancelled_after_its_last_step_claimed_gets_no_manifest() {
    let source = fresh_table("sealcancel").await;
    let rows: Vec<Entity> = (0..30)
        .map(|i| Entity::new(format!("p{}", i % 3), format!("r{i:02}")))
        .collect();
    common::load(&source, &rows).await;
    let state = state(&[]);
    let mut host = TestHost::serve(state.clone()).await;
    let container = unique_name("sealc").to_lowercase();
    let (start, id) = host
        .start_scan(
            &json!({"table": source.name(), "pageSize": 4, "maxRowsPerSecond": "unlimited",
            "action": {"type": "export", "container": container, "prefix": "b/"}}),
        )
        .await;
    let root = start.messages("rangeItems").remove(0);
    let first = host.deliver("ScanRange", &root, 1).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let children = first.messages("rangeItems").len() + first.messages("partitionItems").len();
    assert!(children > 0, "the root hands on work: {}", first.text);

    // The step that will seal read the scan before the cancel.
    let ledger = state.ledger().unwrap();
    let before_cancel = ledger.scan(&id).await.unwrap().unwrap();
    let (status, body) = host.cancel(&id).await;
    assert!(status == 200 || status == 202, "{status} {body}");
    host.enqueue_outputs(&first);
    host.drain().await;
    let (_, after) = host.status(&id).await;
    assert_eq!(after["state"], "cancelled", "{after}");

    let sealed = seal_record(&state, ledger, &before_cancel).await.unwrap();
    assert_eq!(sealed, Sealed::NotDone);
    let blobs = BlobServiceClient::new(&common::account(), fast_retry_options()).unwrap();
    let manifest = blobs
        .container(&container)
        .unwrap()
        .get("b/manifest.json")
        .await;
    assert!(
        manifest.as_ref().is_err_and(|e| e.is_not_found()),
        "no manifest for a cancelled export: {:?}",
        manifest.map(|b| String::from_utf8_lossy(&b).to_string())
    );
}

/// A finish the ledger refuses the same way every time fails its item for good, with the
/// cause in the status, instead of being answered 503 for ever: an import whose manifest part
/// lists a blob twice makes two children of one id, and a transaction cannot write an entity
/// twice. (Failed before the fix: the step answered 503 at every delivery.)
#[tokio::test]
async fn a_finish_refused_the_same_way_every_time_fails_its_item_with_the_cause() {
    let source = fresh_table("twicepart").await;
    let rows: Vec<Entity> = (0..12)
        .map(|i| Entity::new(format!("p{}", i % 3), format!("r{i:02}")))
        .collect();
    common::load(&source, &rows).await;
    let mut host = TestHost::serve(state(&[])).await;
    let container = unique_name("twicep").to_lowercase();
    let export = host
        .run_scan(
            &json!({"table": source.name(), "pageSize": 4, "maxRowsPerSecond": "unlimited",
            "action": {"type": "export", "container": container, "prefix": "b/"}}),
        )
        .await;
    let (_, done) = host.status(&export).await;
    assert_eq!(done["state"], "succeeded", "{done}");

    // The part lists its first blob a second time (and the manifest is rewritten to match, as
    // a hand-made or damaged backup could be: the import checks parts against the manifest).
    let blobs = BlobServiceClient::new(&common::account(), fast_retry_options()).unwrap();
    let container_client = blobs.container(&container).unwrap();
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&container_client.get("b/manifest.json").await.unwrap()).unwrap();
    let part_name = manifest["parts"][0]["name"].as_str().unwrap().to_string();
    let part = String::from_utf8(container_client.get(&part_name).await.unwrap()).unwrap();
    let first = part.lines().next().unwrap().to_string();
    let doubled = format!("{part}{first}\n").into_bytes();
    let digest = ring::digest::digest(&ring::digest::SHA256, &doubled);
    use base64::Engine;
    manifest["parts"][0]["sha256"] = base64::engine::general_purpose::STANDARD
        .encode(digest.as_ref())
        .into();
    container_client
        .put(&part_name, doubled, "application/x-ndjson")
        .await
        .unwrap();
    container_client
        .put(
            "b/manifest.json",
            manifest.to_string().into_bytes(),
            "application/json",
        )
        .await
        .unwrap();

    let target = unique_name("twicet");
    let (start, import) = host
        .start_scan(&json!({"import": {"container": container, "prefix": "b/"},
            "maxRowsPerSecond": "unlimited", "action": {"type": "copy", "table": target}}))
        .await;
    let root = start.messages("exportItems").remove(0);
    let answer = host.deliver("ScanExport", &root, 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.messages("exportItems").is_empty(), "{}", answer.text);
    let (_, status) = host.status(&import).await;
    assert_eq!(status["state"], "failed", "{status}");
    let error = status["errors"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("finish cannot be recorded") && error.contains("twice"),
        "{status}"
    );
}

/// Settings for a handler whose export connection `ExportTo` reaches the test storage with
/// `key` (a wrong key is refused with 403 at once, not retried).
fn export_state(key: &str, outage_window_seconds: &str) -> std::sync::Arc<AppState> {
    let good = common::connection_string();
    let export_to = good
        .split(';')
        .map(|part| match part.split_once('=') {
            Some(("AccountKey", _)) => format!("AccountKey={key}"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(";");
    state(&[
        ("ExportTo", &export_to),
        ("TABLESCAN_OUTAGE_WINDOW_SECONDS", outage_window_seconds),
    ])
}

/// A manifest that cannot be written shows in the status with its cause while the scan waits,
/// and ends the scan failed once attempts have failed for the outage window. (Before: the
/// status said "running" with no cause, for ever, and every sweep tried again.)
#[tokio::test]
async fn a_manifest_that_cannot_be_written_is_reported_and_fails_the_scan_in_bounded_time() {
    let source = fresh_table("sealfail").await;
    let rows: Vec<Entity> = (0..5).map(|i| Entity::new("p", format!("r{i}"))).collect();
    common::load(&source, &rows).await;
    let good_key = common::connection_string()
        .split(';')
        .find_map(|part| part.strip_prefix("AccountKey="))
        .expect("the test storage is reached by key")
        .to_string();
    let working = export_state(&good_key, "3600");
    let mut host = TestHost::serve(working.clone()).await;
    let container = unique_name("sealf").to_lowercase();
    let id = host
        .run_scan(&json!({"table": source.name(), "maxRowsPerSecond": "unlimited",
            "action": {"type": "export", "connection": "ExportTo", "container": container, "prefix": "b/"}}))
        .await;
    let ledger = working.ledger().unwrap();
    // As if the last step had stopped before its manifest: the scan row without the mark.
    let table = ledger.table();
    let mut row = table.get_entity(&id, "scan").await.unwrap().unwrap();
    row.properties.remove("manifestWrittenAt");
    table
        .upsert(&row, tablescan::storage::table::WriteMode::Replace)
        .await
        .unwrap();

    // The export's account now refuses the app's key (rotated, say).
    let wrong_key = base64_of_zeros();
    let refused = export_state(&wrong_key, "3600");
    let record = ledger.scan(&id).await.unwrap().unwrap();
    assert!(seal_record(&refused, ledger, &record).await.is_err());
    let (_, waiting) = host.status(&id).await;
    assert_eq!(waiting["state"], "running", "{waiting}");
    let error = waiting["export"]["manifestError"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("403"), "{waiting}");
    let note = waiting["activity"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("could not be written yet"), "{waiting}");

    // Past the outage window the scan gives up, failed with the cause.
    let impatient = export_state(&wrong_key, "1");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let record = ledger.scan(&id).await.unwrap().unwrap();
    assert!(seal_record(&impatient, ledger, &record).await.is_err());
    let (_, failed) = host.status(&id).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let because = failed["failedBecause"].as_str().unwrap_or_default();
    assert!(
        because.contains("manifest could not be written"),
        "{failed}"
    );
    // Given up: no further attempt writes anything.
    let record = ledger.scan(&id).await.unwrap().unwrap();
    assert_eq!(
        seal_record(&working, ledger, &record).await,
        Ok(Sealed::NotWaiting)
    );
    // Once the cause is fixed, a retry writes it, and the scan succeeds.
    let fixed = TestHost::serve(working.clone()).await;
    let retried = fixed
        .http(
            "RetryScan",
            "POST",
            &format!("/api/scans/{id}/retry"),
            &[("id", &id)],
            None,
        )
        .await;
    let (code, body) = retried.res();
    assert_eq!(code, 202, "{body}");
    let (_, after) = fixed.status(&id).await;
    assert_eq!(after["state"], "succeeded", "{after}");
    assert!(after["export"]["manifest"].is_string(), "{after}");
}

fn base64_of_zeros() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([0u8; 64])
}

/// The case only the seal's second read of the scan catches: a step that sees the cancel
/// mid-scan ends with no follow-ups, so nothing is dropped and the totals settle as if the
/// export were whole (4 rows of 6 here); the step's own record (read at its claim) says "not
/// cancelled". (Failed with the second read removed: Written.)
#[tokio::test]
async fn an_export_cancelled_with_nothing_dropped_gets_no_manifest_from_a_stale_record() {
    let source = fresh_table("sealstale").await;
    let rows: Vec<Entity> = (0..6).map(|i| Entity::new("p", format!("r{i}"))).collect();
    common::load(&source, &rows).await;
    let state = AppState::new(Settings::from_pairs([
        (
            "AzureWebJobsStorage".to_string(),
            common::connection_string(),
        ),
        ("TABLESCAN_LEDGER_TABLE".to_string(), unique_name("ledger")),
    ]));
    let host = TestHost::serve(state.clone()).await;
    let container = unique_name("seals").to_lowercase();
    let (start, id) = host
        .start_scan(
            &json!({"table": source.name(), "maxRowsPerSecond": "unlimited",
            "action": {"type": "export", "container": container, "prefix": "b/"}}),
        )
        .await;
    let ledger = state.ledger().unwrap();
    let root = start.messages("rangeItems").remove(0);
    let item = tablescan::job::WorkItem::decode(&root).unwrap();
    let lease = time::Duration::MINUTE;
    // The step claims its item (and reads the scan: not cancelled)...
    let tablescan::job::Begin::Run(claim) = ledger
        .begin(&item, time::OffsetDateTime::now_utc(), lease)
        .await
        .unwrap()
    else {
        panic!("the root runs");
    };
    // ...the cancel lands while it runs; it sees the cancel at its next page and finishes
    // with no follow-ups: nothing is dropped.
    let (status, body) = host.cancel(&id).await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let counts = tablescan::job::StepCounts {
        rows_read: 4,
        rows_acted: 4,
        ..Default::default()
    };
    let finish = ledger
        .finish(&item, &claim, counts, &[], time::OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert_eq!(finish, tablescan::job::Finish::Recorded);
    let (totals, settled) = ledger.consistent_totals(&id).await.unwrap();
    assert!(settled && totals.dropped == 0, "{totals:?}");
    // The seal from the step's record, read at its claim.
    assert_eq!(
        seal_record(&state, ledger, &claim.scan).await.unwrap(),
        Sealed::NotDone
    );
}
