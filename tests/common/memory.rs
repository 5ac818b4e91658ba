//! A handler whose ledger lives in memory (`InMemoryTable`, the service's semantics without
//! storage), and scans built in it through the ledger's own calls: for tests of what the HTTP
//! functions and the sweep do with a scan's rows, which need no table to scan.

use std::sync::Arc;

use tablescan::functions::{AppState, Settings};
use tablescan::job::spec::ScanSpec;
use tablescan::job::{Begin, Claim, FailureRecord, Finish, Ledger, StepCounts};
use tablescan::job::{ReadRange, Task, WorkItem};
use tablescan::scan::keys::KeyRange;
use tablescan::storage::table::in_memory::InMemoryTable;
use time::{Duration, OffsetDateTime};

/// A handler state over a ledger in memory, with these app settings; and that ledger.
pub async fn memory_state(settings: &[(&str, &str)]) -> (Arc<AppState>, Ledger) {
    let mut state = AppState::new(Settings::from_pairs(
        settings.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    ));
    let ledger = Ledger::in_memory(InMemoryTable::new("ledger"));
    ledger.ensure().await.unwrap();
    Arc::get_mut(&mut state).unwrap().ledger = Ok(ledger.clone());
    (state, ledger)
}

/// A count scan's request.
pub fn count_spec() -> ScanSpec {
    ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| {
            (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".to_string())
        },
    )
    .unwrap()
}

/// Records a new count scan; its root item.
pub async fn new_scan(ledger: &Ledger) -> WorkItem {
    let root = WorkItem::root(tablescan::job::ledger::new_scan_id(), KeyRange::all(), "");
    ledger
        .create_scan(&count_spec(), &root, OffsetDateTime::now_utc())
        .await
        .unwrap();
    root
}

/// `n` distinct children of `parent` (distinct from every other item of the scan too: an
/// item's id is its range, whatever its depth).
pub fn children(parent: &WorkItem, n: usize) -> Vec<WorkItem> {
    let under = match &parent.task {
        Task::Table(ReadRange::Partition { partition_key, .. }) => format!("{partition_key}/"),
        _ => String::new(),
    };
    (0..n)
        .map(|i| {
            parent.follow_up(ReadRange::Partition {
                partition_key: format!("{under}p{i:05}"),
                row_keys: KeyRange::all(),
                prefix: String::new(),
                cursor: None,
                unstarted: false,
            })
        })
        .collect()
}

pub const LEASE: Duration = Duration::seconds(60);

/// Claims `item`, which must be free.
pub async fn claim(ledger: &Ledger, item: &WorkItem) -> Claim {
    match ledger
        .begin(item, OffsetDateTime::now_utc(), LEASE)
        .await
        .unwrap()
    {
        Begin::Run(claim) => *claim,
        other => panic!("expected a claim of {}, got {other:?}", item.id()),
    }
}

/// Runs `item` as a step that read one row and made `children`.
pub async fn finish(ledger: &Ledger, item: &WorkItem, children: &[WorkItem]) {
    let claim = claim(ledger, item).await;
    let counts = StepCounts {
        rows_read: 1,
        rows_acted: 1,
        ..StepCounts::default()
    };
    assert_eq!(
        ledger
            .finish(item, &claim, counts, children, OffsetDateTime::now_utc())
            .await
            .unwrap(),
        Finish::Recorded
    );
}

/// Fails `item` for good.
pub async fn fail_for_good(ledger: &Ledger, item: &WorkItem) {
    let claim = claim(ledger, item).await;
    ledger
        .fail(
            item,
            &claim,
            "the table went away",
            FailureRecord::Final,
            0,
            OffsetDateTime::now_utc(),
        )
        .await
        .unwrap();
}

/// A scan whose root made `n` children, each of which finished: `n + 1` done rows.
pub async fn finished_scan(ledger: &Ledger, n: usize) -> WorkItem {
    let root = new_scan(ledger).await;
    let kids = children(&root, n);
    finish(ledger, &root, &kids).await;
    for kid in &kids {
        finish(ledger, kid, &[]).await;
    }
    root
}
