//! How a cancelled scan's pending items are dropped: as their messages arrive (never under a
//! step's live claim: that step records what it did), and by the re-drive sweep for items whose
//! messages are gone, so that a cancelled scan always ends `cancelled` and can be removed.
//!
//! The ledger is in memory (`tests/common/memory.rs`).

mod common;

use common::memory::{children, claim, finish, memory_state, new_scan, LEASE};
use tablescan::job::{Begin, Finish, State, StepCounts};
use time::OffsetDateTime;

#[tokio::test]
async fn a_duplicate_of_a_running_item_of_a_cancelled_scan_leaves_its_claim_alone() {
    let (_state, ledger) = memory_state(&[]).await;
    let root = new_scan(&ledger).await;
    let kids = children(&root, 2);
    finish(&ledger, &root, &kids).await;
    let running = claim(&ledger, &kids[0]).await;
    let now = OffsetDateTime::now_utc();
    ledger.cancel(&root.scan, now).await.unwrap();

    // A second delivery of the running item: nothing to do, and its row stays the running
    // step's to settle.
    let duplicate = ledger.begin(&kids[0], now, LEASE).await.unwrap();
    assert!(matches!(duplicate, Begin::Cancelled), "{duplicate:?}");
    let counts = StepCounts {
        rows_read: 7,
        rows_acted: 7,
        ..StepCounts::default()
    };
    assert_eq!(
        ledger
            .finish(&kids[0], &running, counts, &[], now)
            .await
            .unwrap(),
        Finish::Recorded,
        "the running step's finish counts"
    );
    // The other item, unclaimed, is dropped when its message arrives.
    assert!(matches!(
        ledger.begin(&kids[1], now, LEASE).await.unwrap(),
        Begin::Cancelled
    ));
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.state, State::Cancelled);
    assert_eq!(status.progress.rows_read, 1 + 7, "{:?}", status.progress);
    assert_eq!(status.progress.steps_done, 2);
    assert_eq!(status.progress.steps_pending, 0);
}
