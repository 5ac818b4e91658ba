//! The list of scans in flight (`~active`) that the re-drive sweep works from: a scan must
//! never lose its entry while it has work, though the sweep decides to take it off from a
//! status it read a moment earlier. A retry that lists a failed scan again after the sweep read
//! it keeps its entry; so does a scan being created, whose entry is written before the scan.
//!
//! The ledger is in memory (`tests/common/memory.rs`).

mod common;

use common::memory::{children, fail_for_good, finish, memory_state, new_scan};
use tablescan::functions::redrive::sweep;
use tablescan::job::State;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::in_memory::InMemoryTable;
use tablescan::storage::table::WriteMode;
use time::{Duration, OffsetDateTime};

fn table_of(ledger: &tablescan::job::Ledger) -> InMemoryTable {
    match ledger.table() {
        tablescan::job::LedgerTable::Memory(table) => table.clone(),
        tablescan::job::LedgerTable::Storage(_) => unreachable!("the ledger is in memory"),
    }
}

/// The sweep read the list, then a status that said `failed`; a retry lists the scan again and
/// makes its failed item pending before the sweep takes the scan off: the entry stays.
#[tokio::test]
async fn a_retry_between_the_sweeps_read_and_its_settle_keeps_the_scan_listed() {
    let (_state, ledger) = memory_state(&[]).await;
    let root = new_scan(&ledger).await;
    let id = root.scan.clone();
    let kids = children(&root, 1);
    finish(&ledger, &root, &kids).await;
    fail_for_good(&ledger, &kids[0]).await;
    let now = OffsetDateTime::now_utc();
    assert_eq!(
        ledger.status(&id, now).await.unwrap().unwrap().state,
        State::Failed
    );

    // What the sweep read: the entry, and (from the status above) that the scan settled.
    let listed = ledger.listings().await.unwrap();
    assert_eq!(listed.len(), 1);
    // A retry meanwhile.
    let retried = ledger.retry_failed(&id, 500).await.unwrap();
    assert_eq!(retried.len(), 1);
    // The sweep takes off the entry it read: refused, the scan was listed again since.
    assert!(!ledger.settle(&listed[0]).await.unwrap());
    assert_eq!(ledger.active_scans().await.unwrap(), vec![id.clone()]);
    assert_eq!(
        ledger.status(&id, now).await.unwrap().unwrap().state,
        State::Running
    );
}

/// An entry whose scan does not exist is a scan being created (its entry is written first)
/// or one whose creation failed: the sweep takes it off only once it is old.
#[tokio::test]
async fn an_entry_written_just_before_its_scan_is_kept() {
    let (state, ledger) = memory_state(&[]).await;
    let table = table_of(&ledger);
    let now = OffsetDateTime::now_utc();
    let being_created = tablescan::job::ledger::new_scan_id();
    let never_created = tablescan::job::ledger::new_scan_id();
    table.set_now(now - Duration::hours(1));
    table
        .upsert(&Entity::new("~active", &never_created), WriteMode::Replace)
        .await
        .unwrap();
    table.set_now(now);
    table
        .upsert(&Entity::new("~active", &being_created), WriteMode::Replace)
        .await
        .unwrap();

    let swept = sweep(&state, &ledger).await.unwrap();
    assert_eq!(swept.settled, 1, "{swept:?}");
    assert_eq!(ledger.active_scans().await.unwrap(), vec![being_created]);
}
