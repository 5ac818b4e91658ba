//! Who may do what, through devhost on Azurite: an export or import prefix with a `..` segment
//! is refused and writes nothing outside its container; with `TABLESCAN_CONNECTIONS` set, a
//! read-only connection can be counted but not deleted from, and a connection that is not
//! listed, not set or broken is refused with one and the same answer.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tablescan::storage::blob::BlobServiceClient;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;
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

fn rows(n: usize) -> Vec<Entity> {
    (0..n)
        .map(|i| {
            Entity::new(format!("p{}", i % 5), format!("r{i:03}")).with("n", Edm::Int64(i as i64))
        })
        .collect()
}

/// `"prefix": "../$web/"` would put a table's rows into the static website container (public
/// when the site is on), `"../<container>/"` into any other: the URL parser removes the `..`
/// with the container before it. Every spelling is refused naming the field, and neither the
/// export's container nor the one next to it holds anything afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_prefix_that_leaves_its_container_is_refused_and_writes_nothing_outside() {
    let source = table_with(&rows(30)).await;
    let host = Host::start(1, &[]);
    let exports = unique("exports").to_lowercase();
    let outside = unique("outside").to_lowercase();
    container(&outside).create(true).await.unwrap();
    let outside_prefix = format!("../{outside}/");
    let encoded_prefix = format!("%2e%2E/{outside}/");
    let mixed_prefix = format!("a/.%2e/../{outside}/");
    for prefix in [
        "../$web/",
        outside_prefix.as_str(),
        encoded_prefix.as_str(),
        mixed_prefix.as_str(),
        "../azure-webjobs-secrets/",
    ] {
        let request = json!({"table": source.name(), "maxRowsPerSecond": "unlimited",
            "action": {"type": "export", "container": exports, "prefix": prefix}});
        let (status, answer) = host.post_scan(&request).await;
        assert_eq!(status, 400, "{prefix}: {answer}");
        assert_eq!(
            answer["error"]["field"], "action.prefix",
            "{prefix}: {answer}"
        );
        let import = json!({"import": {"container": exports, "prefix": prefix},
            "action": {"type": "copy", "table": unique("restored")}});
        let (status, answer) = host.post_scan(&import).await;
        assert_eq!(status, 400, "{prefix}: {answer}");
        assert_eq!(
            answer["error"]["field"], "import.prefix",
            "{prefix}: {answer}"
        );
    }
    // Give a scan that had been started the time to write (none was).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written_outside = container(&outside).list_all("").await.unwrap();
    assert!(written_outside.is_empty(), "{written_outside:?}");
    // The export's container was never created: nothing was started.
    let inside = container(&exports).list_all("").await;
    assert!(
        inside.as_ref().map_or(true, Vec::is_empty),
        "{:?}",
        inside.map(|b| b.len())
    );
    let scans: Value = reqwest::get(format!("http://127.0.0.1:{}/api/scans", host.port))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(scans["scans"].as_array().map(Vec::len), Some(0), "{scans}");
}

/// The allowlist's answer to a start: 403 naming the field, or the scan's id.
async fn refused_or_started(host: &Host, request: &Value) -> Result<String, (u16, Value)> {
    match host.post_scan(request).await {
        (202, answer) => Ok(answer["id"].as_str().unwrap().to_string()),
        (status, answer) => Err((status, answer)),
    }
}

/// With `TABLESCAN_CONNECTIONS` set, a read-only connection is counted and copied from but not
/// deleted from or written into; a read-write one takes a copy; the app's own storage, not
/// listed, is read-only. A connection that is not listed, listed but not set, or set to
/// something broken gets the same answer, word for word: the caller cannot tell which app
/// settings exist.
#[tokio::test(flavor = "multi_thread")]
async fn the_allowlist_lets_a_read_only_connection_be_counted_but_not_deleted_from() {
    let rows = rows(30);
    let source = table_with(&rows).await;
    let test_storage = storage();
    let host = Host::start(
        1,
        &[
            (
                "TABLESCAN_CONNECTIONS",
                "DATA:ro, BACKUP:rw, MISSING:rw, BROKEN:rw",
            ),
            ("DATA", test_storage.as_str()),
            ("BACKUP", test_storage.as_str()),
            ("UNLISTED", test_storage.as_str()),
            ("BROKEN", "AccountName=a;AccountKey=!!notbase64!!"),
        ],
    );
    let table = source.name();

    // Read-only: counted.
    let count = json!({"table": table, "connection": "DATA", "action": {"type": "count"}});
    let id = refused_or_started(&host, &count)
        .await
        .expect("a count is a read");
    let status = host.wait(&id, Duration::from_secs(120)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsRead"], 30, "{status}");

    // Read-only: not deleted from, not written into, not updated.
    for (request, field) in [
        (
            json!({"table": table, "connection": "DATA", "action": {"type": "delete"}}),
            "connection",
        ),
        (
            json!({"table": table, "connection": "DATA",
                "action": {"type": "update", "set": {"x": 1}}}),
            "connection",
        ),
        (
            json!({"table": table, "connection": "BACKUP",
                "action": {"type": "copy", "table": unique("into"), "connection": "DATA"}}),
            "action.connection",
        ),
        // The app's own storage is read-only when the list leaves it out.
        (
            json!({"table": table, "action": {"type": "delete"}}),
            "connection",
        ),
    ] {
        let (status, answer) = refused_or_started(&host, &request).await.unwrap_err();
        assert_eq!(status, 403, "{request}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{request}: {answer}");
    }
    // ... and a dry run of the delete, which writes nothing, is a read.
    let dry = json!({"table": table, "connection": "DATA", "dryRun": true,
        "action": {"type": "delete"}});
    let id = refused_or_started(&host, &dry)
        .await
        .expect("a dry run reads");
    let status = host.wait(&id, Duration::from_secs(120)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    let default_count = json!({"table": table, "action": {"type": "count"}});
    refused_or_started(&host, &default_count)
        .await
        .expect("the app's storage may be read");

    // Read-write: a copy from the read-only connection into the read-write one.
    let copy_name = unique("copied");
    let copy = json!({"table": table, "connection": "DATA",
        "action": {"type": "copy", "table": copy_name, "connection": "BACKUP"}});
    let id = refused_or_started(&host, &copy)
        .await
        .expect("a copy into rw");
    let status = host.wait(&id, Duration::from_secs(120)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsActed"], 30, "{status}");

    // Every refused connection gets the same words, whether it is not listed, listed and not
    // set, listed and broken, or nothing at all.
    for (read, field) in [(true, "connection"), (false, "action.connection")] {
        let mut answers = Vec::new();
        for name in ["UNLISTED", "MISSING", "BROKEN", "NOSUCH"] {
            let request = if read {
                json!({"table": table, "connection": name, "action": {"type": "count"}})
            } else {
                json!({"table": table, "connection": "BACKUP",
                    "action": {"type": "copy", "table": unique("never"), "connection": name}})
            };
            let (status, answer) = refused_or_started(&host, &request).await.unwrap_err();
            assert_eq!(status, 403, "{name}: {answer}");
            assert_eq!(answer["error"]["field"], field, "{name}: {answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("TABLESCAN_CONNECTIONS"), "{message}");
            answers.push(message.replace(name, "<name>"));
        }
        assert!(
            answers.iter().all(|a| *a == answers[0]),
            "one answer for every unusable connection: {answers:#?}"
        );
    }

    // Nothing was deleted, and the log says why a listed connection could not be used (the
    // operator's business, not the caller's), naming settings, never values.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let left = source.query_all(&Query::default()).await.unwrap();
    assert_eq!(left.len(), 30);
    let log = host.log();
    assert!(
        log.lines()
            .any(|l| l.contains("\"BROKEN\"") && l.contains("TABLESCAN_CONNECTIONS")),
        "{log}"
    );
    assert!(!log.contains("notbase64"), "a setting's value never shows");
}

/// A value the handler cannot read refuses every start with a 500 that names the setting,
/// rather than letting every connection through.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_allowlist_refuses_every_start_naming_the_setting() {
    let source = table_with(&rows(3)).await;
    for bad in ["DATA", "DATA:rwx", "DATA:ro,DATA:rw", "", " , "] {
        let host = Host::start(1, &[("TABLESCAN_CONNECTIONS", bad)]);
        let request = json!({"table": source.name(), "action": {"type": "count"}});
        let (status, answer) = host.post_scan(&request).await;
        assert_eq!(status, 500, "{bad:?}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("TABLESCAN_CONNECTIONS"),
            "{bad:?}: {message}"
        );
        assert!(
            host.log().contains("TABLESCAN_CONNECTIONS"),
            "logged at start: {bad:?}"
        );
    }
}
