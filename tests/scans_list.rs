//! `GET /api/scans` shows what each scan touches (a dry run marked, an import's export, a
//! copy's target and its account, an enqueue's queues, an export's container and prefix) and
//! filters a page by state, action and table, each page costing the same as an unfiltered one.

mod common;

use common::host::TestHost;
use common::{fresh_table, load, unique_name};
use serde_json::{json, Value};
use tablescan::storage::table::entity::Entity;

async fn list(host: &TestHost, query: &[(&str, &str)]) -> Value {
    let (status, page) = host
        .http_with_headers("ListScans", "GET", "/api/scans", &[], None, &[], query)
        .await
        .res();
    assert_eq!(status, 200, "{query:?}: {page}");
    page
}

fn ids(page: &Value) -> Vec<String> {
    page["scans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_list_shows_what_each_scan_touches_and_filters_by_state_action_and_table() {
    let source = fresh_table("listed").await;
    load(&source, &[Entity::new("p", "r"), Entity::new("q", "s")]).await;
    let other = fresh_table("other").await;
    load(&other, &[Entity::new("p", "r")]).await;
    let connection = common::connection_string();
    let mut host = TestHost::start(&[("BackupStorage", connection.as_str())]).await;
    let table = source.name();
    let target = unique_name("copied");
    let container = unique_name("backups");
    let queues = [unique_name("spread-"), unique_name("spread-")];
    let count = host
        .run_scan(&json!({"table": table, "action": {"type": "count"}}))
        .await;
    let copy = host
        .run_scan(
            &json!({"table": table, "action": {"type": "copy", "table": target,
            "connection": "BackupStorage", "mode": "merge"}}),
        )
        .await;
    let dry_delete = host
        .run_scan(&json!({"table": table, "dryRun": true, "action": {"type": "delete"}}))
        .await;
    let enqueue = host
        .run_scan(
            &json!({"table": table, "action": {"type": "enqueue", "queues": queues,
            "rowsPerMessage": 5}}),
        )
        .await;
    let export = host
        .run_scan(
            &json!({"table": table, "action": {"type": "export", "container": container,
            "prefix": "day/one"}}),
        )
        .await;
    let import = host
        .run_scan(
            &json!({"import": {"container": container, "prefix": "day/one"},
            "action": {"type": "count"}}),
        )
        .await;
    let update = host
        .run_scan(&json!({"table": other.name(), "action": {"type": "update",
            "set": {"Status": "x".repeat(1000), "N": "5", "N@odata.type": "Edm.Int64"},
            "remove": ["Old"]}}))
        .await;

    let page = list(&host, &[]).await;
    assert_eq!(
        ids(&page),
        [
            &update,
            &import,
            &export,
            &enqueue,
            &dry_delete,
            &copy,
            &count
        ]
        .map(|s| s.clone()),
        "{page}"
    );
    let entry = |id: &str| -> Value {
        page["scans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    let copied = entry(&copy);
    assert_eq!(copied["action"], "copy");
    assert_eq!(
        copied["target"],
        json!({"table": target, "connection": "BackupStorage", "mode": "merge"})
    );
    assert_eq!(copied["connection"], "AzureWebJobsStorage");
    assert!(copied.get("dryRun").is_none(), "{copied}");
    assert_eq!(entry(&dry_delete)["dryRun"], true);
    // Every queue, and not the first of them twice (the API takes `queue` or `queues`).
    let spread = entry(&enqueue)["target"].clone();
    assert_eq!(spread["queues"], json!(queues), "{spread}");
    assert!(spread.get("queue").is_none(), "{spread}");
    assert_eq!(spread["rowsPerMessage"], 5, "{spread}");
    assert_eq!(
        entry(&export)["target"],
        json!({"container": container, "prefix": "day/one/", "connection": "AzureWebJobsStorage"})
    );
    let imported = entry(&import);
    // With the export's size from its manifest: the page's progress and ETA of an import.
    assert_eq!(
        imported["import"],
        json!({"container": container, "prefix": "day/one/", "connection": "AzureWebJobsStorage", "rows": 2})
    );
    // What a scan reads, so that an earlier count of the same scope is found from the list.
    assert_eq!(copied["scope"]["prefix"], "", "{copied}");
    assert_eq!(imported["action"], "count");
    assert_eq!(imported["progress"]["rowsRead"], 2, "{imported}");
    // An update's properties by name: the list stays small whatever the values.
    assert_eq!(
        entry(&update)["target"],
        json!({"set": ["N", "Status"], "remove": ["Old"]})
    );
    assert_eq!(entry(&count)["progress"]["partitions"], 2);

    // Filters.
    let by = |query: &'static [(&'static str, &'static str)]| {
        let host = &host;
        async move { ids(&list(host, query).await) }
    };
    assert_eq!(by(&[("action", "copy")]).await, [copy.as_str()]);
    assert_eq!(by(&[("action", "DELETE")]).await, [dry_delete.as_str()]);
    assert_eq!(
        ids(&list(&host, &[("table", other.name())]).await),
        [update.as_str()]
    );
    // A table is touched as a copy's target too; an import reads blobs, not its table.
    assert_eq!(
        ids(&list(&host, &[("table", &target)]).await),
        [copy.as_str()]
    );
    assert_eq!(
        ids(&list(&host, &[("table", &table.to_uppercase())]).await),
        [&export, &enqueue, &dry_delete, &copy, &count].map(|s| s.clone())
    );
    assert_eq!(
        ids(&list(&host, &[("table", table), ("action", "count")]).await),
        [count.as_str()]
    );
    assert!(by(&[("state", "running")]).await.is_empty());

    // A filter keeps what one page's reads found: a page of 2 that matches nothing still
    // says where the next one starts.
    let page = list(&host, &[("limit", "2"), ("action", "copy")]).await;
    assert_eq!(ids(&page), Vec::<String>::new(), "{page}");
    let next = page["next"].as_str().expect("more to look at").to_string();
    let page = list(
        &host,
        &[("limit", "4"), ("action", "copy"), ("after", &next)],
    )
    .await;
    assert_eq!(ids(&page), [copy.as_str()], "{page}");

    for (query, field) in [
        (("action", "scan"), "action"),
        (("table", "no_such-table"), "table"),
    ] {
        let (status, body) = host
            .http_with_headers("ListScans", "GET", "/api/scans", &[], None, &[], &[query])
            .await
            .res();
        assert_eq!(status, 400, "{query:?}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
}
