//! The ledger's own code on its in-memory table, which counts requests and entities as the
//! Table service does: each constant of `ledger_costs` must be what that code asks.

use super::*;
use tablescan::job::{
    Begin, FailureRecord, Finish, Ledger, ReadRange, ScanSpec, StepCounts, WorkItem,
};
use tablescan::scan::keys::KeyRange;
use tablescan::storage::table::in_memory::InMemoryTable;
use time::{Duration, OffsetDateTime};

const LEASE: Duration = Duration::seconds(60);

fn t0() -> OffsetDateTime {
    time::macros::datetime!(2026-11-26 00:00 UTC)
}

fn spec() -> ScanSpec {
    ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into()),
    )
    .expect("a valid spec")
}

fn child(parent: &WorkItem, n: usize) -> WorkItem {
    parent.follow_up(ReadRange::Partition {
        partition_key: format!("p{n}"),
        row_keys: KeyRange::all(),
        prefix: String::new(),
        cursor: None,
        unstarted: false,
    })
}

/// What `table` was asked since `before`.
fn since(table: &InMemoryTable, before: (u64, u64)) -> Cost {
    Cost {
        requests: table.requests() - before.0,
        entities: table.entities() - before.1,
    }
}

fn mark(table: &InMemoryTable) -> (u64, u64) {
    (table.requests(), table.entities())
}

#[tokio::test]
async fn the_counts_are_what_the_ledger_asks_of_its_table() {
    let table = InMemoryTable::new("ledger");
    table.set_now(t0());
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    let root = WorkItem::root(tablescan::job::ledger::new_scan_id(), KeyRange::all(), "");
    ledger.create_scan(&spec(), &root, t0()).await.unwrap();

    // The root's begin also marks the scan started (one write more, once per scan).
    let Begin::Run(mut claim) = ledger.begin(&root, t0(), LEASE).await.unwrap() else {
        panic!("the root runs");
    };

    let before = mark(&table);
    assert!(ledger
        .renew(&root, &mut claim, t0() + Duration::seconds(20), LEASE)
        .await
        .unwrap());
    assert_eq!(since(&table, before), RENEW, "renew");

    let children: Vec<WorkItem> = (0..4).map(|n| child(&root, n)).collect();
    let before = mark(&table);
    let finish_result = ledger
        .finish(&root, &claim, StepCounts::default(), &children, t0())
        .await
        .unwrap();
    assert!(matches!(finish_result, Finish::Recorded));
    assert_eq!(since(&table, before), finish(4), "finish with 4 children");

    let before = mark(&table);
    let Begin::Run(claim) = ledger.begin(&children[0], t0(), LEASE).await.unwrap() else {
        panic!("the child runs");
    };
    assert_eq!(since(&table, before), BEGIN, "begin");

    // A transient failure of a child.
    let before = mark(&table);
    ledger
        .fail(
            &children[0],
            &claim,
            "busy",
            FailureRecord::Retry {
                failing_since: Some(0),
            },
            1,
            t0(),
        )
        .await
        .unwrap();
    assert_eq!(since(&table, before), FAIL, "fail");

    let before = mark(&table);
    let read = ledger
        .read_status(&root.scan, t0())
        .await
        .unwrap()
        .expect("the scan");
    assert_eq!(since(&table, before), STATUS_READ, "status read");
    assert_eq!(
        (u64::from(read.cost.requests), u64::from(read.cost.entities)),
        (STATUS_READ.requests, STATUS_READ.entities),
        "the status read's own account of its cost"
    );

    let before = mark(&table);
    ledger.scan(&root.scan).await.unwrap().expect("the scan");
    assert_eq!(since(&table, before), CANCEL_CHECK, "scan row read");

    // Parking the children not started, and taking them back.
    let before = mark(&table);
    let item = &children[1];
    assert!(ledger
        .park(&item.scan, &item.id(), &item.encode(), t0())
        .await
        .unwrap());
    assert_eq!(since(&table, before), PARK, "park");
    for item in &children[2..] {
        ledger
            .park(&item.scan, &item.id(), &item.encode(), t0())
            .await
            .unwrap();
    }
    let before = mark(&table);
    assert_eq!(ledger.unpark(&root.scan, 2, None).await.unwrap().len(), 2);
    assert_eq!(since(&table, before), unpark(2), "unpark of two");
    let before = mark(&table);
    assert_eq!(ledger.unpark(&root.scan, 4, None).await.unwrap().len(), 1);
    assert_eq!(since(&table, before), unpark(1), "unpark of the last");
    let before = mark(&table);
    assert!(ledger.unpark(&root.scan, 4, None).await.unwrap().is_empty());
    assert_eq!(since(&table, before), unpark(0), "a look that finds none");
}
