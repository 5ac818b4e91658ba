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
