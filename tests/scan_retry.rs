//! `POST /api/scans/{id}/retry` of a scan with more failed items than one call retries: each
//! call retries the next ones while any item is failed, although the items retried by the
//! calls before make the scan `running`; `more` says whether another call has work.
//!
//! The ledger is in memory (`tests/common/memory.rs`): items fail through the ledger's own
//! calls, and the route is called as the host calls it.

mod common;

use common::host::TestHost;
use common::memory::{children, fail_for_good, finish, memory_state, new_scan};
use serde_json::Value;
use tablescan::functions::http::RETRY_PER_REQUEST;
use tablescan::job::WorkItem;
use tablescan::job::{Ledger, State};
use time::OffsetDateTime;

async fn retry(host: &TestHost, id: &str) -> (u16, Value, usize) {
    let answer = host
        .http("RetryScan", "POST", "/x", &[("id", id)], None)
        .await;
    let sent = answer.messages("partitionItems").len();
    let (status, body) = answer.res();
    (status, body, sent)
}

/// A scan whose root made `n` children, every one of them failed for good.
async fn failed_scan(ledger: &Ledger, n: usize) -> WorkItem {
    let root = new_scan(ledger).await;
    let kids = children(&root, n);
    finish(ledger, &root, &kids).await;
    for kid in &kids {
        fail_for_good(ledger, kid).await;
    }
    root
}

#[tokio::test]
async fn retry_goes_on_while_items_are_failed_though_the_scan_runs_again() {
    let (state, ledger) = memory_state(&[]).await;
    let host = TestHost::serve(state).await;
    let per_call = usize::from(RETRY_PER_REQUEST);
    let id = failed_scan(&ledger, per_call + 1).await.scan;
    let status = ledger
        .status(&id, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.state, State::Failed);

    let (code, body, sent) = retry(&host, &id).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["retried"], per_call, "{body}");
    assert_eq!(body["more"], true, "{body}");
    assert_eq!(sent, per_call);
    // The scan runs again; one item is still failed, and the next call retries it.
    let (code, body, sent) = retry(&host, &id).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["retried"], 1, "{body}");
    assert_eq!(body["more"], false, "{body}");
    assert_eq!(sent, 1);
    let status = ledger
        .status(&id, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.state, State::Running);
    assert_eq!(status.progress.steps_failed, 0);
    assert_eq!(status.progress.steps_retried, per_call as u64 + 1);
    assert_eq!(status.progress.steps_pending, per_call as u64 + 1);
    // Nothing is failed any more: a running scan has nothing to retry.
    let (code, body, _) = retry(&host, &id).await;
    assert_eq!(code, 409, "{body}");
}

#[tokio::test]
async fn a_call_that_retries_the_last_failed_items_says_no_more() {
    let (state, ledger) = memory_state(&[]).await;
    let host = TestHost::serve(state).await;
    let per_call = usize::from(RETRY_PER_REQUEST);
    let id = failed_scan(&ledger, per_call).await.scan;
    let (code, body, _) = retry(&host, &id).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["retried"], per_call, "{body}");
    assert_eq!(body["more"], false, "exactly one call's worth: {body}");
}

#[tokio::test]
async fn a_cancelled_scan_is_not_retried() {
    let (state, ledger) = memory_state(&[]).await;
    let host = TestHost::serve(state).await;
    let root = new_scan(&ledger).await;
    let kids = children(&root, 3);
    finish(&ledger, &root, &kids).await;
    fail_for_good(&ledger, &kids[0]).await;
    ledger
        .cancel(&root.scan, OffsetDateTime::now_utc())
        .await
        .unwrap();
    let (code, body, sent) = retry(&host, &root.scan).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(sent, 0);
}

/// An item given back by the pace a few times and then failed for good is retried as it was
/// first sent: the give-backs before its failure are over, and its message stays one that a
/// handler without the count can read.
#[tokio::test]
async fn a_failed_item_is_retried_without_the_give_backs_it_had() {
    let (_state, ledger) = memory_state(&[]).await;
    let root = new_scan(&ledger).await;
    let kids = children(&root, 1);
    finish(&ledger, &root, &kids).await;
    let given_back = WorkItem {
        given_back: 3,
        ..kids[0].clone()
    };
    fail_for_good(&ledger, &given_back).await;
    let retried = ledger.retry_failed(&root.scan, 10).await.unwrap();
    assert_eq!(retried.len(), 1);
    assert!(!retried[0].contains("back"), "{}", retried[0]);
    assert_eq!(WorkItem::decode(&retried[0]).unwrap(), kids[0]);
}
