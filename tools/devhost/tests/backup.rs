//! Backup and restore through devhost on Azurite: a table exported to blobs and imported into
//! a new table comes back identical, row by row and type by type; a step killed after writing
//! its blob and before its finish was recorded leaves every row in the export once; a damaged
//! or missing blob fails its item alone, naming the blob, and the rest is imported.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fault_proxy::{FaultProxy, Moment};
use serde_json::{json, Value};
use tablescan::actions::export::format::{next_chunk, parse_line};
use tablescan::functions::plan::compression;
use tablescan::job::exports::{parse_part, Manifest};
use tablescan::job::spec::Compression;
use tablescan::storage::blob::BlobServiceClient;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::{ClientOptions, ContainerClient, StorageAccount};

fn container(name: &str) -> ContainerClient {
    BlobServiceClient::new(
        &StorageAccount::from_connection_string(&storage()).unwrap(),
        ClientOptions::default(),
    )
    .unwrap()
    .container(name)
    .unwrap()
}

/// `n` rows with the difficult keys of the other tests and a property of every EDM type,
/// edge values included (NaN, -0.0, infinities, i64 extremes, empty strings and binaries, a
/// DateTime with 100 ns precision, characters XML and JSON must escape).
fn every_type_rows(n: usize) -> Vec<Entity> {
    let mut keys = DIFFICULT_KEYS.to_vec();
    keys.push("q\"&<>");
    let doubles = [0.5, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308];
    let longs = [0, i64::MAX, i64::MIN, -1];
    (0..n)
        .map(|i| {
            let pk = format!("{}{:03}", keys[i % keys.len()], i / 97);
            let rk = format!("{:06}{}", i, keys[(i / 3) % keys.len()]);
            let when = time::OffsetDateTime::from_unix_timestamp(1_600_000_000 + i as i64).unwrap()
                + time::Duration::nanoseconds(((i % 10_000) * 100) as i64);
            let mut row = Entity::new(pk, rk)
                .with(
                    "s",
                    Edm::String(format!("{}\t\n{}", keys[i % 10], "x".repeat(i % 7))),
                )
                .with("i32", Edm::Int32(i as i32 * -7))
                .with("i64", Edm::Int64(longs[i % longs.len()]))
                .with("d", Edm::Double(doubles[i % doubles.len()]))
                .with("b", Edm::Boolean(i % 2 == 0))
                .with("t", Edm::DateTime(EdmDateTime::new(when)))
                .with("g", Edm::Guid(uuid::Uuid::from_u128(i as u128 * 7919)))
                .with("bin", Edm::Binary((0..(i % 5) as u8).collect()));
            if i % 11 == 0 {
                row = row.with("empty", Edm::String(String::new()));
            }
            row
        })
        .collect()
}

/// The rows of every blob the manifest under `prefix` lists, with the blob each came from.
async fn exported_rows(container: &ContainerClient, prefix: &str) -> (Manifest, Vec<Entity>) {
    let manifest = Manifest::parse(
        &container
            .get(&format!("{prefix}manifest.json"))
            .await
            .unwrap(),
    )
    .unwrap();
    let mut rows = Vec::new();
    for part in &manifest.parts {
        for entry in parse_part(&container.get(&part.name).await.unwrap()).unwrap() {
            let data = container.get(&entry.name).await.unwrap();
            assert_eq!(data.len() as u64, entry.bytes, "{}", entry.name);
            let mut at = 0;
            let mut in_blob = 0;
            while let Some(chunk) =
                next_chunk(&data[at..], at as u64, compression(manifest.compression)).unwrap()
            {
                for line in chunk.text.lines() {
                    rows.push(parse_line(line).unwrap());
                    in_blob += 1;
                }
                at += chunk.length;
            }
            assert_eq!(in_blob, entry.rows, "{}", entry.name);
        }
    }
    (manifest, rows)
}

/// Asserts that the exported rows are the source's, each exactly once.
fn assert_each_once(exported: &[Entity], source: &[Entity], what: &str) {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for row in exported {
        *seen
            .entry((row.partition_key.clone(), row.row_key.clone()))
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "{what}: rows exported twice: {twice:?}");
    assert_eq!(seen.len(), source.len(), "{what}: rows exported");
    assert_eq!(
        seen.keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        keys(source),
        "{what}"
    );
}

async fn run_ok(host: &Host, request: Value) -> Value {
    let done = host.run(request).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn an_export_imported_into_a_new_table_is_identical_type_by_type() {
    let rows = every_type_rows(20_000);
    let source = table_with(&rows).await;
    let host = Host::start(3, &[]);
    let name = unique("exports").to_lowercase();
    let prefix = "backups/first/";
    let export = run_ok(
        &host,
        json!({"table": source.name(), "maxRowsPerSecond": "unlimited",
               "action": {"type": "export", "container": name, "prefix": "backups/first"}}),
    )
    .await;
    assert_eq!(export["progress"]["rowsActed"], 20_000, "{export}");
    let blobs = export["export"]["blobs"].as_u64().unwrap();
    assert!(blobs > 1, "the export is spread over steps: {export}");
    assert_eq!(
        export["export"]["manifest"],
        format!("{prefix}manifest.json"),
        "{export}"
    );

    let exports = container(&name);
    let (manifest, exported) = exported_rows(&exports, prefix).await;
    assert_eq!(manifest.rows, 20_000);
    assert_eq!(manifest.blobs, blobs);
    assert_eq!(manifest.table, source.name());
    assert_eq!(manifest.compression, Compression::Gzip);
    assert_each_once(&exported, &rows, "export");
    // Nothing but the manifest's blobs is left under the prefix.
    let listed = exports.list_all(prefix).await.unwrap();
    assert_eq!(
        listed.len() as u64,
        blobs + manifest.parts.len() as u64 + 1,
        "{:?}",
        listed.iter().map(|b| &b.name).collect::<Vec<_>>()
    );

    let restored = unique("restored");
    let import = run_ok(
        &host,
        json!({"import": {"container": name, "prefix": prefix}, "maxRowsPerSecond": "unlimited",
               "action": {"type": "copy", "table": restored}}),
    )
    .await;
    assert_eq!(import["progress"]["rowsRead"], 20_000, "{import}");
    assert_eq!(import["progress"]["rowsActed"], 20_000, "{import}");
    assert_eq!(
        import["spec"]["import"]["manifest"]["rows"], 20_000,
        "{import}"
    );
    let target = tables().table(&restored).unwrap();
    assert_same_rows(&target, &source, "export then import").await;

    // A count of the export reads and checks every blob and writes nothing.
    let count = run_ok(
        &host,
        json!({"import": {"container": name, "prefix": prefix}, "action": {"type": "count"}}),
    )
    .await;
    assert_eq!(count["result"]["rows"], 20_000, "{count}");

    // Plain JSON lines, imported in insert mode into a table that holds some rows already.
    let plain = run_ok(
        &host,
        json!({"table": source.name(), "scope": {"prefix": "z"}, "maxRowsPerSecond": "unlimited",
               "action": {"type": "export", "container": name, "prefix": "plain",
                          "compression": "none"}}),
    )
    .await;
    let in_scope: Vec<Entity> = rows
        .iter()
        .filter(|r| r.partition_key.starts_with('z'))
        .cloned()
        .collect();
    assert_eq!(plain["progress"]["rowsActed"], in_scope.len() as u64);
    let (manifest, exported) = exported_rows(&exports, "plain/").await;
    assert_eq!(manifest.compression, Compression::None);
    assert_each_once(&exported, &in_scope, "plain export");
    let partly = unique("partly");
    tables().create_table(&partly, false).await.unwrap();
    let partly_table = tables().table(&partly).unwrap();
    load(&partly_table, &in_scope[..10]).await;
    let import = run_ok(
        &host,
        json!({"import": {"container": name, "prefix": "plain/"},
               "action": {"type": "copy", "table": partly, "mode": "insert"}}),
    )
    .await;
    assert_eq!(
        import["progress"]["rowsActed"],
        in_scope.len() as u64,
        "rows the target held already, the same, count as copied: {import}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_exports_and_imports_are_refused_naming_the_field() {
    let rows = every_type_rows(50);
    let source = table_with(&rows).await;
    let host = Host::start(1, &[]);
    let name = unique("refusals").to_lowercase();
    let exports = container(&name);
    exports.create(true).await.unwrap();
    exports
        .put("taken/notes.txt", b"mine".to_vec(), "text/plain")
        .await
        .unwrap();
    let refused = |body: Value, field: &'static str, says: &'static str| {
        let host = &host;
        async move {
            let (status, answer) = host.post_scan(&body).await;
            assert_eq!(status, 400, "{body}: {answer}");
            assert_eq!(answer["error"]["field"], field, "{answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{message}");
        }
    };
    refused(
        json!({"table": source.name(), "action": {"type": "export", "container": name, "prefix": "taken/"}}),
        "action.prefix",
        "taken/notes.txt",
    )
    .await;
    refused(
        json!({"table": source.name(), "action": {"type": "export", "container": "azure-webjobs-hosts"}}),
        "action.container",
        "Functions host",
    )
    .await;
    refused(
        json!({"table": source.name(), "action": {"type": "export", "container": "Bad_Name"}}),
        "action.container",
        "container",
    )
    .await;
    refused(
        json!({"import": {"container": name, "prefix": "nothing/"}, "action": {"type": "count"}}),
        "import.prefix",
        "manifest.json does not exist",
    )
    .await;
    refused(
        json!({"import": {"container": name, "prefix": "taken"}, "action": {"type": "delete"}}),
        "action.type",
        "copy",
    )
    .await;
    exports
        .put(
            "fake/manifest.json",
            b"{\"kind\":\"other\"}".to_vec(),
            "application/json",
        )
        .await
        .unwrap();
    refused(
        json!({"import": {"container": name, "prefix": "fake"}, "action": {"type": "count"}}),
        "import.prefix",
        "not a tablescan manifest",
    )
    .await;
    refused(
        json!({"import": {"container": name}, "table": source.name(), "action": {"type": "count"}}),
        "table",
        "leave it out",
    )
    .await;
}

/// A small export of many blobs: pages of 50 rows and two queries a step.
async fn small_export(host: &Host, rows: &[Entity], name: &str, prefix: &str) -> Value {
    let source = table_with(rows).await;
    let done = run_ok(
        host,
        json!({"table": source.name(), "pageSize": 50,
               "action": {"type": "export", "container": name, "prefix": prefix}}),
    )
    .await;
    assert_eq!(done["progress"]["rowsActed"], rows.len() as u64, "{done}");
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_or_missing_blob_fails_its_item_alone_and_the_rest_is_imported() {
    let rows = every_type_rows(3_000);
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let name = unique("damaged").to_lowercase();
    small_export(&host, &rows, &name, "x/").await;
    let exports = container(&name);
    let (manifest, _) = exported_rows(&exports, "x/").await;
    let entries = parse_part(&exports.get(&manifest.parts[0].name).await.unwrap()).unwrap();
    assert!(entries.len() >= 4, "{entries:?}");
    // One blob with a byte changed (its size unchanged), one deleted.
    let damaged = &entries[1];
    let mut data = exports.get(&damaged.name).await.unwrap();
    let middle = data.len() / 2;
    data[middle] ^= 0x20;
    exports
        .put(&damaged.name, data, "application/gzip")
        .await
        .unwrap();
    let missing = &entries[2];
    exports.delete_blob(&missing.name).await.unwrap();

    let restored = unique("restored");
    let done = host
        .run(json!({"import": {"container": name, "prefix": "x/"},
                     "action": {"type": "copy", "table": restored}}))
        .await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["progress"]["stepsFailed"], 2, "{done}");
    let errors = done["errors"].to_string();
    assert!(
        errors.contains(&damaged.name) && errors.contains("damaged"),
        "{errors}"
    );
    assert!(
        errors.contains(&missing.name) && errors.contains("missing"),
        "{errors}"
    );
    let expected = rows.len() as u64 - damaged.rows - missing.rows;
    assert_eq!(done["progress"]["rowsActed"], expected, "{done}");
    let target = tables().table(&restored).unwrap();
    let everything = tablescan::storage::table::query::Query::default();
    let written = target.query_all(&everything).await.unwrap();
    assert_eq!(written.len() as u64, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_killed_after_writing_its_blob_leaves_each_row_in_the_export_once() {
    let rows = every_type_rows(3_000);
    let source = table_with(&rows).await;
    let (origin, account) = endpoint("BlobEndpoint");
    let proxy = FaultProxy::start(origin).await;
    let data = storage_with(&[(
        "BlobEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let host = Host::start(
        1,
        &[
            ("DATA", data.as_str()),
            ("TABLESCAN_STEP_MAX_QUERIES", "2"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "3"),
            ("TABLESCAN_REDRIVE_AFTER_SECONDS", "2"),
        ],
    );
    // Every third data blob written: the handler dies once it is stored, before the step's
    // finish reaches the ledger; twice in the scan.
    let killed: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = Arc::new(AtomicU32::new(0));
    let lines = host.lines.clone();
    let (killed_in, lines_in) = (killed.clone(), lines.clone());
    proxy.on(
        Box::new(move |method, path| {
            let data_blob = method == "PUT" && path.contains("/data/");
            if !data_blob || seen.fetch_add(1, Ordering::SeqCst) % 3 != 1 {
                return None;
            }
            let killed = killed_in.lock().unwrap();
            let alive = handler_pids_in(&lines_in)
                .last()
                .copied()
                .filter(|pid| !killed.contains(pid));
            (killed.len() < 2 && alive.is_some()).then_some(Moment::After)
        }),
        Box::new(move || {
            let mut killed = killed.lock().unwrap();
            if let Some(pid) = handler_pids_in(&lines)
                .last()
                .copied()
                .filter(|pid| !killed.contains(pid))
            {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                killed.push(pid);
            }
        }),
    );
    let name = unique("killed").to_lowercase();
    let id = host
        .start_scan(json!({"table": source.name(), "pageSize": 50,
                           "action": {"type": "export", "container": name, "prefix": "k/",
                                      "connection": "DATA"}}))
        .await;
    let done = host.wait(&id, Duration::from_secs(300)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    assert_eq!(done["progress"]["rowsActed"], 3_000, "{done}");
    assert_eq!(host.handler_pids().len(), 3, "two handlers were killed");
    let exports = container(&name);
    let (manifest, exported) = exported_rows(&exports, "k/").await;
    assert_each_once(&exported, &rows, "an export with killed steps");
    // The killed attempts' blobs were written and are not in the manifest: deleted when it
    // was written.
    let data_blobs = exports
        .list_all(&format!("k/data/{id}/"))
        .await
        .unwrap()
        .len() as u64;
    assert_eq!(
        data_blobs, manifest.blobs,
        "only the manifest's blobs are left"
    );
    let attempts: Vec<String> = exported_attempts(&exports, &manifest).await;
    assert!(
        attempts.iter().any(|a| a != "1"),
        "some blob was written by a second attempt: {attempts:?}"
    );

    let restored = unique("restored");
    run_ok(
        &host,
        json!({"import": {"container": name, "prefix": "k/", "connection": "DATA"},
               "action": {"type": "copy", "table": restored}}),
    )
    .await;
    assert_same_rows(&tables().table(&restored).unwrap(), &source, "restored").await;
}

/// The attempt number in each listed blob's name (`<item>.<attempt>.ndjson.gz`).
async fn exported_attempts(container: &ContainerClient, manifest: &Manifest) -> Vec<String> {
    let mut attempts = Vec::new();
    for part in &manifest.parts {
        for entry in parse_part(&container.get(&part.name).await.unwrap()).unwrap() {
            let file = entry.name.rsplit('/').next().unwrap().to_string();
            attempts.push(file.split('.').nth(1).unwrap().to_string());
        }
    }
    attempts
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_that_runs_out_of_time_resumes_mid_blob_with_a_range_read() {
    let rows = every_type_rows(1_000);
    let source = table_with(&rows).await;
    // One step exports everything, a page of 50 rows a chunk: one blob of 20 chunks.
    let host = Host::start(
        1,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "100"),
            ("TABLESCAN_STEP_MAX_SECONDS", "1"),
        ],
    );
    let name = unique("resumed").to_lowercase();
    let export = run_ok(
        &host,
        json!({"table": source.name(), "pageSize": 50, "strategy": "serial",
               "maxRowsPerSecond": "unlimited",
               "action": {"type": "export", "container": name, "prefix": "r/"}}),
    )
    .await;
    let blobs = export["export"]["blobs"].as_u64().unwrap();
    // At 250 rows a second, a blob takes about 4 s to write: 1-second steps hand it on.
    let restored = unique("restored");
    let import = run_ok(
        &host,
        json!({"import": {"container": name, "prefix": "r/"}, "maxRowsPerSecond": 250,
               "action": {"type": "copy", "table": restored}}),
    )
    .await;
    let steps = import["progress"]["stepsDone"].as_u64().unwrap();
    // The part's step, a step per blob, and the steps that resumed.
    assert!(
        steps >= 1 + blobs + 2,
        "{steps} steps for {blobs} blobs: {import}"
    );
    assert_eq!(import["progress"]["rowsRead"], 1_000, "{import}");
    assert_eq!(import["progress"]["rowsActed"], 1_000, "{import}");
    // Every row read once, so each resumed step started where the one before it stopped.
    assert_same_rows(
        &tables().table(&restored).unwrap(),
        &source,
        "resumed import",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_export_started_again_with_its_idempotency_key_answers_the_same_scan() {
    // An empty table: its export is a manifest alone (no data blob of the scan's own under the
    // prefix to recognise it by).
    let source = table_with(&[]).await;
    let host = Host::start(1, &[]);
    let name = unique("again").to_lowercase();
    let request = json!({"table": source.name(),
        "action": {"type": "export", "container": name, "prefix": "a/"}});
    let key = unique("key");
    let start = || {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/api/scans", host.port))
            .header("Idempotency-Key", &key)
            .json(&request)
            .send()
    };
    let first = start().await.unwrap();
    assert_eq!(first.status(), 202);
    let id = first.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = host.wait(&id, Duration::from_secs(120)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["export"]["blobs"], 0, "{done}");
    let manifest =
        Manifest::parse(&container(&name).get("a/manifest.json").await.unwrap()).unwrap();
    assert_eq!((manifest.rows, manifest.parts.len()), (0, 0));
    // The prefix now holds the export's manifest: the same start answers the scan.
    let again = start().await.unwrap();
    assert_eq!(again.status(), 202);
    assert_eq!(again.json::<Value>().await.unwrap()["id"], id.as_str());
    // Another export into that prefix is refused.
    let (status, answer) = host.post_scan(&request).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "action.prefix", "{answer}");
    // The empty export imports as an empty table.
    let restored = unique("restored");
    let import = run_ok(
        &host,
        json!({"import": {"container": name, "prefix": "a/"},
               "action": {"type": "copy", "table": restored}}),
    )
    .await;
    assert_eq!(import["progress"]["rowsActed"], 0, "{import}");
    assert_same_rows(&tables().table(&restored).unwrap(), &source, "empty").await;
}
