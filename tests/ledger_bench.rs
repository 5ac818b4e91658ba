//! The ledger's costs for scans of 1,000, 10,000 and 100,000 work items: requests and
//! entities per status read, per step (claim and finish) and per re-drive look. Measured twice:
//! on the in-memory table (which counts as the service counts; fast, so it runs with the tests
//! and guards the bound), and against Azurite through a counting proxy (opt-in, it writes
//! 111,000 rows: `scripts/bench-ledger` runs both and writes `target/bench/ledger.md`).
//!
//! Each scan's partition is filled directly with its real rows (half the items done, half
//! pending, the counter shards agreeing), then one operation of each kind is measured. The
//! whole-partition read that status reads used to cost is measured beside them.

mod common;

use std::sync::atomic::Ordering;

use common::fault_proxy::FaultProxy;
use common::fresh_table;
use tablescan::job::rows::{pending_range, rows_of};
use tablescan::job::rows::{shard_of, DoneRow, PendingRow, Tallies, SHARDS};
use tablescan::job::spec::ScanSpec;
use tablescan::job::{Begin, Ledger, StepCounts};
use tablescan::job::{ReadRange, WorkItem};
use tablescan::scan::keys::KeyRange;
use tablescan::storage::connection_string::{EMULATOR_ACCOUNT, EMULATOR_KEY};
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::EdmDateTime;
use tablescan::storage::table::filter::{Comparison, Filter, Literal, Property};
use tablescan::storage::table::in_memory::InMemoryTable;
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, StorageAccount, TableServiceClient};
use time::{Duration, OffsetDateTime};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// What one measured operation cost.
#[derive(Debug, Clone, Copy)]
struct Cost {
    requests: u64,
    entities: u64,
}

/// Reads how many requests and entities the ledger's table has answered so far.
struct Counter<'a>(Box<dyn Fn() -> (u64, u64) + 'a>);

impl Counter<'_> {
    fn now(&self) -> (u64, u64) {
        (self.0)()
    }

    async fn cost<T>(&self, work: impl std::future::Future<Output = T>) -> (T, Cost) {
        let (requests, entities) = self.now();
        let out = work.await;
        let (r, e) = self.now();
        (
            out,
            Cost {
                requests: r - requests,
                entities: e - entities,
            },
        )
    }
}

fn child(root: &WorkItem, n: usize) -> WorkItem {
    root.follow_up(ReadRange::Partition {
        partition_key: format!("p{n:06}"),
        row_keys: KeyRange::all(),
        prefix: String::new(),
        cursor: None,
        unstarted: false,
    })
}

/// Writes a scan of `items` work items straight into the ledger: the root and half the rest
/// done, the other half pending, and counter shards that agree.
async fn fill(ledger: &Ledger, root: &WorkItem, items: usize) -> Vec<WorkItem> {
    let scan = &root.scan;
    let children: Vec<WorkItem> = (0..items - 1).map(|n| child(root, n)).collect();
    let done_count = children.len() / 2;
    let now = OffsetDateTime::now_utc();
    let mut shards = vec![Tallies::default(); usize::from(SHARDS)];
    let mut rows = Vec::new();
    let counts = StepCounts {
        rows_read: 1,
        rows_acted: 1,
        queries: 1,
        ..StepCounts::default()
    };
    let mut record_done = |item: &WorkItem, children: Option<Vec<String>>, rows: &mut Vec<_>| {
        let id = item.id();
        let done = DoneRow {
            counts,
            depth: u64::from(item.depth),
            finished_at: now,
            children,
            // As a finish writes it: a claim's token.
            finished_by: Some(format!("{:032x}", rows.len())),
        };
        rows.push(Operation::UpsertReplace(done.to_entity(scan, &id)));
        let shard = &mut shards[usize::from(shard_of(&id))];
        shard.done += 1;
        shard.rows_read += 1;
        shard.rows_acted += 1;
    };
    // The root's own pending row was deleted by its finish; it listed no stored children here
    // (too many to keep), as a real root of a large scan would not.
    record_done(root, None, &mut rows);
    for (n, item) in children.iter().enumerate() {
        if n < done_count {
            record_done(item, Some(Vec::new()), &mut rows);
        } else {
            let pending = PendingRow::new(item.encode(), 1);
            rows.push(Operation::UpsertReplace(
                pending.to_entity(scan, &item.id()),
            ));
        }
    }
    ledger
        .table()
        .delete(
            scan,
            &tablescan::job::rows::pending_key(&root.id()),
            &tablescan::storage::table::batch::IfMatch::Any,
        )
        .await
        .ok();
    shards[usize::from(shard_of(&root.id()))].created += items as u64;
    for (n, shard) in shards.iter().enumerate() {
        rows.push(Operation::UpsertReplace(shard.to_entity(scan, n as u8)));
    }
    for chunk in rows.chunks(100) {
        ledger.table().submit_transaction(chunk).await.unwrap();
    }
    children[done_count..].to_vec()
}

#[tokio::test]
async fn ledger_costs_do_not_grow_with_the_scan_in_memory() {
    let table = InMemoryTable::new("ledgerbench");
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    let counter = Counter(Box::new(|| (table.requests(), table.entities())));
    let lines = measure(&ledger, &counter).await;
    report("in memory", &lines, "TABLESCAN_BENCH_MEMORY_OUT");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: scripts/bench-ledger runs it"]
async fn ledger_costs_do_not_grow_with_the_scan_on_azurite() {
    let direct = fresh_table("ledgerbench").await;
    let endpoint = common::account().table_endpoint().unwrap().to_string();
    let origin = endpoint
        .trim_end_matches(&format!("/{EMULATOR_ACCOUNT}"))
        .to_string();
    let proxy = FaultProxy::start(origin).await;
    let account = StorageAccount::from_connection_string(&format!(
        "AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};TableEndpoint=http://{}/{EMULATOR_ACCOUNT}",
        proxy.address
    ))
    .unwrap();
    let table = TableServiceClient::new(&account, ClientOptions::default())
        .unwrap()
        .table(direct.name())
        .unwrap();
    let ledger = Ledger::new(table);
    let counter = Counter(Box::new(|| {
        (
            proxy.injected.forwarded.load(Ordering::Relaxed),
            proxy.injected.entities.load(Ordering::Relaxed),
        )
    }));
    let lines = measure(&ledger, &counter).await;
    report("on Azurite", &lines, "TABLESCAN_BENCH_OUT");
}

fn report(what: &str, lines: &[String], out: &str) {
    let table_text = lines.join("\n");
    println!("Ledger costs {what}:\n{table_text}");
    if let Ok(path) = std::env::var(out) {
        std::fs::write(&path, format!("{table_text}\n")).unwrap();
    }
}

/// One operation of each kind on scans of each size: the table's lines. Fails if a cost grows
/// by more than 20% from the smallest scan to the largest.
async fn measure(ledger: &Ledger, counter: &Counter<'_>) -> Vec<String> {
    let spec = ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into()),
    )
    .unwrap();

    let mut lines = vec![
        "| work items | status read | step (claim + finish, 2 children) | re-drive look | filtered look (the earlier re-drive look) | whole-partition read (the earlier status read) |".to_string(),
        "| ---: | --- | --- | --- | --- | --- |".to_string(),
    ];
    let mut status_costs = Vec::new();
    for items in SIZES {
        let root = WorkItem::root(tablescan::job::ledger::new_scan_id(), KeyRange::all(), "");
        ledger
            .create_scan(&spec, &root, OffsetDateTime::now_utc())
            .await
            .unwrap();
        let pending = fill(ledger, &root, items).await;
        let now = OffsetDateTime::now_utc();

        let (status, status_cost) = counter.cost(ledger.status(&root.scan, now)).await;
        let status = status.unwrap().unwrap();
        assert_eq!(status.progress.steps_done as usize, 1 + (items - 1) / 2);
        assert_eq!(status.progress.steps_pending as usize, pending.len());

        let item = &pending[0];
        let children = [child(item, 900_000_001), child(item, 900_000_002)];
        let ((), step_cost) = counter
            .cost(async {
                let Begin::Run(claim) = ledger.begin(item, now, Duration::MINUTE).await.unwrap()
                else {
                    panic!("the item runs")
                };
                ledger
                    .finish(item, &claim, StepCounts::default(), &children, now)
                    .await
                    .unwrap();
            })
            .await;

        let (stranded, look_cost) = counter
            .cost(ledger.stranded(&root.scan, now, Duration::minutes(15), None, None))
            .await;
        assert!(stranded.unwrap().is_empty(), "nothing is 15 minutes old");

        // The earlier re-drive look: pending rows filtered by their last write.
        let cutoff = EdmDateTime::new(now - Duration::minutes(15));
        let filtered = Query::filtered(
            rows_of(&root.scan, pending_range()).and(
                Filter::compare(
                    Property::new("Timestamp").unwrap(),
                    Comparison::Le,
                    Literal::DateTime(cutoff),
                )
                .unwrap(),
            ),
        )
        .top(100);
        let (found, filtered_cost) = counter
            .cost(ledger.table().query_page(&filtered, None))
            .await;
        assert!(found.unwrap().entities.is_empty());

        let whole = Query::filtered(Filter::partition_key(Comparison::Eq, &root.scan));
        let (entries, whole_cost) = counter.cost(ledger.table().query_all(&whole)).await;
        assert!(entries.unwrap().len() >= items);

        let cell = |c: Cost| format!("{} requests, {} entities", c.requests, c.entities);
        lines.push(format!(
            "| {items} | {} | {} | {} | {} | {} |",
            cell(status_cost),
            cell(step_cost),
            cell(look_cost),
            cell(filtered_cost),
            cell(whole_cost)
        ));
        status_costs.push((status_cost, step_cost, look_cost));
    }
    // Constant within 20% from the smallest scan to the largest.
    let (first, last) = (status_costs[0], status_costs[status_costs.len() - 1]);
    // The re-drive look reads one window from a random point: one request, or two when the
    // window wraps around the end of the pending range.
    for (small, large, what, wrap) in [
        (first.0, last.0, "status read", 0),
        (first.1, last.1, "step", 0),
        (first.2, last.2, "re-drive look", 1),
    ] {
        assert!(
            large.entities as f64 <= small.entities.max(1) as f64 * 1.2
                && large.requests as f64 <= small.requests.max(1) as f64 * 1.2 + f64::from(wrap),
            "{what}: {small:?} at {} items, {large:?} at {} items",
            SIZES[0],
            SIZES[SIZES.len() - 1]
        );
    }
    lines
}
