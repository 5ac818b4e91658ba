//! Scans capped so low that a page of 100 rows, or an import's chunk, takes the scan's share
//! longer than a step waits for it (`SHARE_WAIT`, 5 s) still read and write every row: pages
//! and writes are cut to what the share earns in a quarter of that wait. Before, every read of
//! a copy capped at 10 entities/s timed out, and every write of an import's 150-row chunk
//! capped at 20: each step ended having done nothing, and its item came back for ever.
//!
//! Azurite, the handler called as the host calls it, at default page sizes.

mod common;

use std::time::Duration;

use common::host::TestHost;
use common::{fresh_table, load, tables, unique_name};
use serde_json::{json, Value};
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;

/// Longer than the scans take at their caps (6 and 8 s), far shorter than for ever.
const BOUND: Duration = Duration::from_secs(90);

async fn run(host: &mut TestHost, request: Value) -> Value {
    let id = tokio::time::timeout(BOUND, host.run_scan(&request))
        .await
        .expect("the scan ends: its steps' shares come in time");
    host.status(&id).await.1
}

async fn rows_in(table: &str) -> usize {
    tables()
        .table(table)
        .unwrap()
        .query_all(&Query::default())
        .await
        .unwrap()
        .len()
}

fn rows(n: i32) -> Vec<Entity> {
    (0..n)
        .map(|i| Entity::new("p", format!("r{i:04}")).with("n", Edm::Int32(i)))
        .collect()
}

#[tokio::test]
async fn a_copy_capped_under_a_pages_share_in_its_wait_copies_every_row() {
    let source = fresh_table("lowcap").await;
    load(&source, &rows(30)).await;
    let target = unique_name("lowcapt");
    let mut host = TestHost::start(&[]).await;
    // 60 entities (30 read, 30 written) at 10 a second.
    let status = run(
        &mut host,
        json!({"table": source.name(), "maxRowsPerSecond": 10,
            "action": {"type": "copy", "table": target}}),
    )
    .await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsActed"], 30, "{status}");
    assert_eq!(rows_in(&target).await, 30);
}

#[tokio::test]
async fn an_import_capped_under_its_chunks_share_in_a_wait_writes_it_in_pieces() {
    let source = fresh_table("lowcapi").await;
    load(&source, &rows(150)).await;
    let container = unique_name("lowcap");
    let mut host = TestHost::start(&[]).await;
    // One chunk of 150 rows.
    let export = run(
        &mut host,
        json!({"table": source.name(), "pageSize": 1000, "maxRowsPerSecond": "unlimited",
            "action": {"type": "export", "container": container, "prefix": "x/"}}),
    )
    .await;
    assert_eq!(export["state"], "succeeded", "{export}");
    let restored = unique_name("lowcapr");
    // 150 entities written at 20 a second: 7.5 s, where a write waits 5 s for its share.
    let status = run(
        &mut host,
        json!({"import": {"container": container, "prefix": "x/"}, "maxRowsPerSecond": 20,
            "action": {"type": "copy", "table": restored}}),
    )
    .await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsActed"], 150, "{status}");
    assert_eq!(status["progress"]["rowsRead"], 150, "{status}");
    assert_eq!(rows_in(&restored).await, 150);
}
