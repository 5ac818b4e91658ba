//! An import's counts are exact when its steps are cut inside a chunk of a data blob: a step
//! that runs out of time part of the way through a chunk's rows hands the rest on (resumed at
//! the chunk, its finished rows skipped), and each row is read once in `rowsRead` as it is
//! written once in `rowsActed`.
//!
//! Azurite, the handler called as the host calls it. The import's steps get a budget of a
//! millisecond, so every step is cut inside the blob's one chunk after its first transactions.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::host::TestHost;
use common::{fresh_table, load, tables, unique_name};
use serde_json::json;
use tablescan::functions::{AppState, Settings};
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;

#[tokio::test]
async fn an_import_cut_inside_a_chunk_counts_each_row_once() {
    // Each row in a partition of its own: a transaction per row when copied.
    let rows: Vec<Entity> = (0..120)
        .map(|i| Entity::new(format!("p{i:03}"), "r").with("n", Edm::Int32(i)))
        .collect();
    let source = fresh_table("cutsource").await;
    load(&source, &rows).await;
    let container = unique_name("cut");

    // The export: one step, one page, one chunk of 120 rows.
    let mut exporter = TestHost::start(&[]).await;
    let export = exporter
        .run_scan(&json!({"table": source.name(), "pageSize": 1000,
            "action": {"type": "export", "container": container, "prefix": "x/"}}))
        .await;
    let (_, status) = exporter.status(&export).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["export"]["blobs"], 1, "{status}");

    // The import, by a handler whose steps get a millisecond.
    let mut state = AppState::new(Settings::from_pairs([
        (
            "AzureWebJobsStorage".to_string(),
            common::connection_string(),
        ),
        ("TABLESCAN_LEDGER_TABLE".to_string(), unique_name("ledger")),
    ]));
    Arc::get_mut(&mut state).unwrap().config.budget.max_duration = Duration::from_millis(1);
    let mut importer = TestHost::serve(state).await;
    let restored = unique_name("cutrestored");
    let import = importer
        .run_scan(&json!({"import": {"container": container, "prefix": "x/"},
            "action": {"type": "copy", "table": restored}}))
        .await;
    let (_, status) = importer.status(&import).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    let steps = status["progress"]["stepsDone"].as_u64().unwrap();
    assert!(
        steps > 3,
        "the blob's chunk was cut: {steps} steps: {status}"
    );
    assert_eq!(status["progress"]["rowsActed"], 120, "{status}");
    assert_eq!(status["progress"]["rowsRead"], 120, "{status}");
    let copied = tables()
        .table(&restored)
        .unwrap()
        .query_all(&Query::default())
        .await
        .unwrap();
    assert_eq!(copied.len(), 120);
}
