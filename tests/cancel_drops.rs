//! How a cancelled scan's pending items are dropped: as their messages arrive (never under a
//! step's live claim: that step records what it did), and by the re-drive sweep for items whose
//! messages are gone, so that a cancelled scan always ends `cancelled` and can be removed.
//!
//! The ledger is in memory (`tests/common/memory.rs`).

mod common;

use common::memory::{children, claim, finish, memory_state, new_scan, LEASE};
use tablescan::functions::redrive::sweep;
use tablescan::job::cancel_drop::DROP_LOOKS_PER_SWEEP;
use tablescan::job::{Begin, Finish, State, StepCounts};
use tablescan::storage::table::filter::{Comparison, Filter};
use tablescan::storage::table::query::Query;
use time::{Duration, OffsetDateTime};

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

/// A cancelled scan whose items' messages are gone (nothing will ever deliver them) stays
/// `cancelling` while more of them are pending than a status read looks at. The sweep drops
/// those no step holds, a bounded number per run, keeps the scan listed until none is left,
/// and leaves an item under a live claim to its step; then the scan is `cancelled` and can be
/// removed.
#[tokio::test]
async fn the_sweep_drops_a_cancelled_scans_unclaimed_items_and_then_settles_it() {
    let (state, ledger) = memory_state(&[]).await;
    let host = common::host::TestHost::serve(state.clone()).await;
    let root = new_scan(&ledger).await;
    let id = root.scan.clone();
    let n = DROP_LOOKS_PER_SWEEP + 50;
    let kids = children(&root, n);
    finish(&ledger, &root, &kids).await;
    let now = OffsetDateTime::now_utc();
    // A step runs one item; the step of another died a minute ago (its claim has lapsed).
    let running = claim(&ledger, &kids[0]).await;
    assert!(matches!(
        ledger
            .begin(&kids[1], now - Duration::minutes(2), LEASE)
            .await
            .unwrap(),
        Begin::Run(_)
    ));
    ledger.cancel(&id, now).await.unwrap();
    let pending = |ledger: tablescan::job::Ledger, id: String| async move {
        let status = ledger
            .status(&id, OffsetDateTime::now_utc())
            .await
            .unwrap()
            .unwrap();
        (status.state, status.progress.steps_pending)
    };
    assert_eq!(
        pending(ledger.clone(), id.clone()).await,
        (State::Cancelling, n as u64)
    );

    // The first run drops what it may look at, and keeps the scan listed.
    sweep(&state, &ledger).await.unwrap();
    let (state_now, left) = pending(ledger.clone(), id.clone()).await;
    assert_eq!(state_now, State::Cancelling);
    assert!(
        (50..n as u64).contains(&left),
        "{left} of {n} left after one run"
    );
    assert_eq!(ledger.active_scans().await.unwrap(), vec![id.clone()]);
    // The next drops the rest, but for the item a step holds.
    sweep(&state, &ledger).await.unwrap();
    assert_eq!(
        pending(ledger.clone(), id.clone()).await,
        (State::Cancelling, 1)
    );
    assert_eq!(ledger.active_scans().await.unwrap(), vec![id.clone()]);
    // That step records what it did; the scan is cancelled, and the next run settles it.
    assert_eq!(
        ledger
            .finish(
                &kids[0],
                &running,
                StepCounts::default(),
                &[],
                OffsetDateTime::now_utc()
            )
            .await
            .unwrap(),
        Finish::Recorded
    );
    assert_eq!(
        pending(ledger.clone(), id.clone()).await,
        (State::Cancelled, 0)
    );
    sweep(&state, &ledger).await.unwrap();
    assert!(ledger.active_scans().await.unwrap().is_empty());
    // A message that arrives after its item was dropped finds the scan cancelled.
    assert!(matches!(
        ledger
            .begin(&kids[5], OffsetDateTime::now_utc(), LEASE)
            .await
            .unwrap(),
        Begin::Cancelled
    ));
    let (code, body) = host
        .http("DeleteScan", "DELETE", "/x", &[("id", &id)], None)
        .await
        .res();
    assert_eq!(code, 200, "{body}");
}

/// Children written ahead of a finish that never completed (the step died between its
/// transactions) were never counted: the sweep deletes them without counting them once their
/// parent is gone, and counts only the items the scan counted.
#[tokio::test]
async fn children_written_ahead_by_a_dead_step_are_deleted_uncounted() {
    let (state, ledger) = memory_state(&[]).await;
    let root = new_scan(&ledger).await;
    let id = root.scan.clone();
    let kids = children(&root, 2);
    finish(&ledger, &root, &kids).await;
    // The step of kids[0] claimed it two minutes ago, and died in its finish: its children
    // beyond one transaction were written, the transaction that counts them was not.
    let past = OffsetDateTime::now_utc() - Duration::minutes(2);
    let dead = match ledger.begin(&kids[0], past, LEASE).await.unwrap() {
        Begin::Run(claim) => claim,
        other => panic!("{other:?}"),
    };
    let grandchildren = children(&kids[0], 150);
    table_of(&ledger).fail_request(3);
    assert!(ledger
        .finish(&kids[0], &dead, StepCounts::default(), &grandchildren, past)
        .await
        .is_err());
    ledger.cancel(&id, OffsetDateTime::now_utc()).await.unwrap();

    let mut dropped = 0;
    for _ in 0..3 {
        dropped += sweep(&state, &ledger).await.unwrap().dropped;
    }
    assert_eq!(dropped, 2, "the two items the scan counted");
    let status = ledger
        .status(&id, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (status.state, status.progress.steps_pending),
        (State::Cancelled, 0)
    );
    let left = ledger
        .table()
        .query_all(&Query::filtered(Filter::partition_key(Comparison::Eq, &id)))
        .await
        .unwrap();
    assert!(
        left.iter().all(|row| !row.row_key.starts_with("pending:")),
        "pending rows left"
    );
    assert!(ledger.active_scans().await.unwrap().is_empty());
}

fn table_of(
    ledger: &tablescan::job::Ledger,
) -> tablescan::storage::table::in_memory::InMemoryTable {
    match ledger.table() {
        tablescan::job::LedgerTable::Memory(table) => table.clone(),
        tablescan::job::LedgerTable::Storage(_) => unreachable!("the ledger is in memory"),
    }
}
