//! A start whose request is valid field by field but too large for the ledger to keep (the
//! request is stored whole in one string property of the scan's row, which holds 64 KiB) is
//! refused with a 400 that names the field making it large and the limit, before anything is
//! created: not a 503 carrying the ledger's own error.

mod common;

use common::fresh_table;
use common::host::TestHost;
use serde_json::json;
use tablescan::storage::table::entity::Entity;

#[tokio::test]
async fn a_request_too_large_for_the_ledger_is_a_400_naming_the_field() {
    let source = fresh_table("large").await;
    source.insert(&Entity::new("p", "r")).await.unwrap();
    let host = TestHost::start(&[]).await;
    // Two strings of 20,000 characters: each one a valid property value for the service.
    let request = json!({"table": source.name(), "action": {"type": "update",
        "set": {"A": "a".repeat(20_000), "B": "b".repeat(20_000)}}});
    let answer = host
        .http(
            "StartScan",
            "POST",
            "/api/scans",
            &[],
            Some(&request.to_string()),
        )
        .await;
    let (status, body) = answer.res();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "action.set", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("65,536"), "{message}");
    assert!(!message.contains("PropertyValueTooLarge"), "{message}");
    assert!(answer.messages("rangeItems").is_empty());

    // One string of 40,000 characters is named itself.
    let request = json!({"table": source.name(), "action": {"type": "update",
        "set": {"Big": "x".repeat(40_000), "Small": 1}}});
    let (status, body) = host
        .http(
            "StartScan",
            "POST",
            "/api/scans",
            &[],
            Some(&request.to_string()),
        )
        .await
        .res();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "action.set.Big", "{body}");

    // Just under the limit, the scan starts and runs.
    let request = json!({"table": source.name(), "action": {"type": "update",
        "set": {"A": "a".repeat(15_000), "B": "b".repeat(15_000)}}});
    let (status, body) = host
        .http(
            "StartScan",
            "POST",
            "/api/scans",
            &[],
            Some(&request.to_string()),
        )
        .await
        .res();
    assert_eq!(status, 202, "{body}");
}
