//! Removing a scan's ledger rows takes several calls when the scan is large (each call works
//! for a bounded time): between the calls the scan must still read whole, the list must still
//! answer, and the next call must go on where the last one stopped. A scan the list cannot
//! read is skipped and reported, never a reason to refuse the whole list.
//!
//! The ledger is in memory (`tests/common/memory.rs`); each removal call is held to a single
//! transaction of 100 rows, so a scan of a few hundred rows takes several rounds.

mod common;

use common::host::TestHost;
use common::memory::{finished_scan, memory_state};
use serde_json::Value;
use tablescan::storage::table::batch::IfMatch;
use tablescan::storage::table::filter::{Comparison, Filter};
use tablescan::storage::table::query::Query;

async fn delete(host: &TestHost, id: &str) -> (u16, Value) {
    host.http("DeleteScan", "DELETE", "/x", &[("id", id)], None)
        .await
        .res()
}

async fn list(host: &TestHost) -> (u16, Value) {
    host.http("ListScans", "GET", "/api/scans", &[], None)
        .await
        .res()
}

fn listed(page: &Value) -> Vec<String> {
    page["scans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_large_scan_is_removed_over_several_calls_and_reads_whole_between_them() {
    let (mut state, ledger) = memory_state(&[]).await;
    std::sync::Arc::get_mut(&mut state).unwrap().removal_time = std::time::Duration::ZERO;
    let host = TestHost::serve(state).await;
    // 250 done rows, 16 shards and the scan row; a second scan beside it.
    let large = finished_scan(&ledger, 249).await.scan;
    let other = finished_scan(&ledger, 2).await.scan;

    let mut rounds = 0;
    loop {
        let (status, body) = delete(&host, &large).await;
        rounds += 1;
        assert!(rounds < 20, "the removal does not end: {body}");
        if status == 200 {
            assert_eq!(body["more"], false, "{body}");
            break;
        }
        assert_eq!(status, 202, "round {rounds}: {body}");
        assert_eq!(body["more"], true, "{body}");
        // Half removed, the scan still reads whole: its counts are those it finished with.
        let (status, read) = host.status(&large).await;
        assert_eq!(status, 200, "round {rounds}: {read}");
        assert_eq!(read["state"], "succeeded", "{read}");
        assert_eq!(read["progress"]["rowsRead"], 250, "{read}");
        let (status, page) = list(&host).await;
        assert_eq!(status, 200, "round {rounds}: {page}");
        assert_eq!(listed(&page), vec![other.clone(), large.clone()]);
    }
    assert!(rounds >= 3, "{rounds} rounds: the test wants several");
    assert_eq!(host.status(&large).await.0, 404);
    let (status, page) = list(&host).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(listed(&page), vec![other.clone()]);
    // Nothing of it is left in the ledger; the scan beside it is whole.
    let rows = ledger
        .table()
        .query_all(&Query::filtered(Filter::partition_key(
            Comparison::Eq,
            &large,
        )))
        .await
        .unwrap();
    assert!(rows.is_empty(), "{} rows left", rows.len());
    let (_, other_read) = host.status(&other).await;
    assert_eq!(other_read["progress"]["rowsRead"], 3, "{other_read}");
    assert_eq!(delete(&host, &large).await.0, 404);
}

#[tokio::test]
async fn the_list_skips_and_reports_a_scan_it_cannot_read() {
    let (state, ledger) = memory_state(&[]).await;
    let host = TestHost::serve(state).await;
    let whole = finished_scan(&ledger, 1).await.scan;
    let broken = finished_scan(&ledger, 1).await.scan;
    // A scan whose counter shard went missing (removed by hand, or half removed by an
    // earlier version that deleted the shards first).
    ledger
        .table()
        .delete(&broken, "counter:03", &IfMatch::Any)
        .await
        .unwrap();

    let (status, page) = list(&host).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(listed(&page), vec![whole.clone()]);
    let unreadable = page["unreadableScans"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1, "{page}");
    assert_eq!(unreadable[0]["id"], broken.as_str(), "{page}");
    assert!(
        unreadable[0]["error"]
            .as_str()
            .unwrap()
            .contains("counter shards"),
        "{page}"
    );
    // It can still be removed, and then the list is whole again.
    let (status, body) = delete(&host, &broken).await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = list(&host).await;
    assert_eq!(listed(&page), vec![whole]);
    assert_eq!(page["unreadableScans"], serde_json::json!([]), "{page}");
}
