//! Two exports started at once into one empty prefix both pass the start's check, and each
//! writes its manifest parts and its `manifest.json` when it ends: the manifest that lands last
//! must still describe its own export whole, never list the other's blobs through a part the
//! other overwrote. Each part's name holds its export's scan id and the manifest records each
//! part's SHA-256; an import reads the parts the manifest names, checks them, and refuses a
//! part that is not the one its manifest describes.
//!
//! Azurite, the handler called as the host calls it (export items included).

mod common;

use common::host::TestHost;
use common::{fresh_table, load, tables, unique_name};
use serde_json::{json, Value};
use tablescan::job::exports::Manifest;
use tablescan::storage::blob::BlobServiceClient;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, ContainerClient};

fn container(name: &str) -> ContainerClient {
    BlobServiceClient::new(&common::account(), ClientOptions::default())
        .unwrap()
        .container(name)
        .unwrap()
}

async fn source(prefix: &str, rows: usize) -> tablescan::storage::TableClient {
    let table = fresh_table(prefix).await;
    let entities: Vec<Entity> = (0..rows)
        .map(|i| Entity::new(format!("{prefix}{:02}", i % 5), format!("r{i:03}")))
        .collect();
    load(&table, &entities).await;
    table
}

async fn keys(table: &str) -> Vec<(String, String)> {
    let mut keys: Vec<_> = tables()
        .table(table)
        .unwrap()
        .query_all(&Query::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.partition_key, e.row_key))
        .collect();
    keys.sort();
    keys
}

async fn import(host: &mut TestHost, container: &str) -> (String, Value) {
    let restored = unique_name("partsrestored");
    let id = host
        .run_scan(
            &json!({"import": {"container": container, "prefix": "both/"},
            "action": {"type": "copy", "table": restored}}),
        )
        .await;
    let (_, status) = host.status(&id).await;
    (restored, status)
}

#[tokio::test]
async fn two_exports_into_one_prefix_keep_their_own_parts_and_the_import_checks_them() {
    let first = source("parta", 40).await;
    let second = source("partb", 25).await;
    let name = unique_name("parts");
    let mut host = TestHost::start(&[]).await;
    let export = |table: &str| {
        json!({"table": table, "pageSize": 10,
            "action": {"type": "export", "container": name, "prefix": "both/"}})
    };
    // Both start while the prefix is empty.
    let (start_a, a) = host.start_scan(&export(first.name())).await;
    let (start_b, b) = host.start_scan(&export(second.name())).await;
    host.enqueue_outputs(&start_a);
    host.drain().await;
    let blobs = container(&name);
    let manifest_a = blobs.get("both/manifest.json").await.unwrap();
    host.enqueue_outputs(&start_b);
    host.drain().await;
    for id in [&a, &b] {
        let (_, status) = host.status(id).await;
        assert_eq!(status["state"], "succeeded", "{status}");
    }
    // The first export's manifest lands last (its sealing step ran late).
    blobs
        .put("both/manifest.json", manifest_a.clone(), "application/json")
        .await
        .unwrap();
    let manifest = Manifest::parse(&manifest_a).unwrap();
    assert_eq!(manifest.scan, a);
    for part in &manifest.parts {
        assert!(part.name.contains(&a), "{} names its export", part.name);
        assert!(part.sha256.is_some(), "{} has its SHA-256", part.name);
    }

    // The import restores the first export, whole, and nothing of the second.
    let (restored, status) = import(&mut host, &name).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(keys(&restored).await, keys(first.name()).await);

    // A part changed since the manifest was written fails its item, naming it.
    let part = &manifest.parts[0].name;
    let mut changed = blobs.get(part).await.unwrap();
    changed.extend_from_slice(b"\n");
    blobs
        .put(part, changed, "application/x-ndjson")
        .await
        .unwrap();
    let (_, status) = import(&mut host, &name).await;
    assert_eq!(status["state"], "failed", "{status}");
    let error = status["errors"][0]["error"].as_str().unwrap();
    assert!(
        error.contains(part.as_str()) && error.contains("SHA-256"),
        "{error}"
    );
}

/// Rewrites the export under `both/` as an earlier version wrote it: parts named
/// `manifest/part-NNNNN.ndjson`, no SHA-256 in the manifest; `parts_of` gives each part's text.
async fn write_old_format(blobs: &ContainerClient, manifest: &Manifest, parts_of: &[Vec<u8>]) {
    let mut old: Value = serde_json::to_value(manifest).unwrap();
    for (index, part) in old["parts"].as_array_mut().unwrap().iter_mut().enumerate() {
        let name = format!("both/manifest/part-{index:05}.ndjson");
        blobs
            .put(&name, parts_of[index].clone(), "application/x-ndjson")
            .await
            .unwrap();
        part["name"] = Value::String(name);
        part.as_object_mut().unwrap().remove("sha256");
    }
    blobs
        .put(
            "both/manifest.json",
            serde_json::to_vec(&old).unwrap(),
            "application/json",
        )
        .await
        .unwrap();
}

/// An export written before parts were named by their scan still imports; and its manifest,
/// whose part another export overwrote (as that version allowed), is refused rather than
/// imported with the other export's rows.
#[tokio::test]
async fn an_earlier_versions_export_imports_and_its_overwritten_part_is_refused() {
    let first = source("olda", 30).await;
    let second = source("oldb", 20).await;
    let name = unique_name("oldparts");
    let mut host = TestHost::start(&[]).await;
    let export = |table: &str| {
        json!({"table": table, "pageSize": 10,
            "action": {"type": "export", "container": name, "prefix": "both/"}})
    };
    let (start_a, _) = host.start_scan(&export(first.name())).await;
    let (start_b, _) = host.start_scan(&export(second.name())).await;
    let blobs = container(&name);
    host.enqueue_outputs(&start_a);
    host.drain().await;
    let manifest_a = Manifest::parse(&blobs.get("both/manifest.json").await.unwrap()).unwrap();
    host.enqueue_outputs(&start_b);
    host.drain().await;
    let manifest_b = Manifest::parse(&blobs.get("both/manifest.json").await.unwrap()).unwrap();
    assert_eq!(manifest_a.parts.len(), 1);
    let part_a = blobs.get(&manifest_a.parts[0].name).await.unwrap();
    let part_b = blobs.get(&manifest_b.parts[0].name).await.unwrap();

    write_old_format(&blobs, &manifest_a, &[part_a]).await;
    let (restored, status) = import(&mut host, &name).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(keys(&restored).await, keys(first.name()).await);

    // The first export's manifest over the second's part, as two exports into one prefix
    // could leave them before.
    write_old_format(&blobs, &manifest_a, &[part_b]).await;
    let (restored, status) = import(&mut host, &name).await;
    assert_eq!(status["state"], "failed", "{status}");
    let error = status["errors"][0]["error"].as_str().unwrap();
    assert!(error.contains("another export"), "{error}");
    assert!(keys(&restored).await.is_empty(), "nothing of it imported");

    // A manifest replaced after the import started is refused, not read as the one it began.
    write_old_format(
        &blobs,
        &manifest_a,
        &[blobs.get(&manifest_a.parts[0].name).await.unwrap()],
    )
    .await;
    let (started, id) = host
        .start_scan(&json!({"import": {"container": name, "prefix": "both/"},
            "action": {"type": "copy", "table": unique_name("partsrestored")}}))
        .await;
    blobs
        .put(
            "both/manifest.json",
            serde_json::to_vec(&manifest_b).unwrap(),
            "application/json",
        )
        .await
        .unwrap();
    host.enqueue_outputs(&started);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "failed", "{status}");
    let error = status["errors"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("was replaced since the import started"),
        "{error}"
    );
}
