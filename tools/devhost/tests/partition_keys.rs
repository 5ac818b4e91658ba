//! Partition keys without reading partitions, on Azurite through devhost: the demo's table
//! (NuGet-like rows, about 25 versions per package id, the demo's generator and seed) listed
//! with at most two rows read per partition found, every partition once, one message each.

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::json;
use tablescan::scan::model::nuget_like;
use tablescan::storage::queue::MessageEncoding;

/// Lists the partition keys of the demo's table of `rows` rows; the scan's progress.
async fn demo_table_partition_keys(rows: usize) -> serde_json::Value {
    let rows = nuget_like(rows, 42);
    let partitions: BTreeSet<String> = rows.iter().map(|r| r.partition_key.clone()).collect();
    let source = table_with(&rows).await;
    let host = Host::start(2, &[]);
    let queue = unique("keys").to_lowercase();
    let done = host
        .run(
            json!({"table": source.name(), "maxRowsPerSecond": "unlimited",
                    "action": {"type": "partition-keys", "queue": queue}}),
        )
        .await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    let progress = done["progress"].clone();
    eprintln!("partition keys of the demo table: {progress}");
    assert_eq!(progress["partitions"], partitions.len() as u64, "{done}");
    assert_eq!(progress["rowsActed"], partitions.len() as u64, "{done}");
    let per_partition = progress["rowsReadPerPartition"].as_f64().unwrap();
    assert!(
        per_partition <= 2.0,
        "{per_partition} rows read per partition: {done}"
    );
    let messages = drain_queue(&queue, MessageEncoding::Base64).await;
    let listed: Vec<String> = messages
        .iter()
        .map(|m| m["PartitionKey"].as_str().unwrap().to_string())
        .collect();
    let distinct: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(listed.len(), distinct.len(), "each partition once");
    assert_eq!(distinct, partitions);
    progress
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_tables_partition_keys_cost_at_most_two_rows_each() {
    // A fifth of the demo's 100,000 rows (about 800 partitions): Azurite looks at its whole
    // table for every query, so its seeks cost what pages cost, and the full table takes
    // minutes; the test below runs it on demand.
    demo_table_partition_keys(20_000).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "opt-in: the demo's full 100,000 rows, about 3 minutes on Azurite"]
async fn the_full_demo_tables_partition_keys_cost_at_most_two_rows_each() {
    demo_table_partition_keys(100_000).await;
}
