//! A queue message delivered again after its work item failed for good (the host delivered it
//! twice, or a re-drive sent it again before the failure was recorded) is answered 200 with
//! nothing to do: the failure is in the status already, and the message must not be refused as
//! foreign, listed among the rejected messages and poisoned.
//!
//! The ledger is in memory (`tests/common/memory.rs`); the message is delivered as the host
//! delivers it.

mod common;

use common::host::TestHost;
use common::memory::{children, fail_for_good, finish, memory_state, new_scan};

#[tokio::test]
async fn a_duplicate_of_an_item_that_failed_for_good_is_answered_and_not_rejected() {
    let (state, ledger) = memory_state(&[]).await;
    let mut host = TestHost::serve(state).await;
    let root = new_scan(&ledger).await;
    let kids = children(&root, 2);
    finish(&ledger, &root, &kids).await;
    fail_for_good(&ledger, &kids[0]).await;

    let answer = host.deliver("ScanPartition", &kids[0].encode(), 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(
        answer.messages("partitionItems").is_empty(),
        "{}",
        answer.text
    );
    assert!(
        ledger.rejected(50,).await.unwrap().is_empty(),
        "the message is not listed as rejected"
    );
    let status = ledger
        .status(&root.scan, time::OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.progress.steps_failed, 1);
    assert_eq!(status.errors[0].attempts, 1, "no attempt more was counted");

    // An item the scan never recorded is still refused.
    let stranger = children(&kids[1], 1).remove(0);
    let answer = host.deliver("ScanPartition", &stranger.encode(), 1).await;
    assert_eq!(answer.status, 422, "{}", answer.text);
}
