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
