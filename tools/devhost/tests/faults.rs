//! Every action through a proxy that injects storage faults into the handler's data path
//! (source table, target table, target queue): 503, 500, 408, slow answers, connections reset
//! after the request was done, short pages and empty pages with continuations. Three handler
//! instances under devhost. Results are checked by reading Azurite directly.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use fault_proxy::FaultProxy;
use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::query::Query;

/// A proxy with random faults in front of the test storage's endpoint `name`, and the
/// endpoint to use instead (same account path).
async fn faulty(name: &str, rate: f64, seed: u64) -> (FaultProxy, String) {
    let (origin, account) = endpoint(name);
    let proxy = FaultProxy::start_random(origin, rate, seed).await;
    let replaced = format!("http://{}{account}", proxy.address);
    (proxy, replaced)
}

/// How often each key arrived.
fn tally<K: Ord>(keys: impl IntoIterator<Item = K>) -> BTreeMap<K, usize> {
    let mut counts = BTreeMap::new();
    for key in keys {
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

async fn every_action_under_faults(rate: f64, seed: u64) {
    let connection = storage();
    let (tables_proxy, tables_endpoint) = faulty("TableEndpoint", rate, seed).await;
    let (queues_proxy, queues_endpoint) = faulty("QueueEndpoint", rate, seed + 1).await;
    let faulty = storage_with(&[
        ("TableEndpoint", tables_endpoint.as_str()),
        ("QueueEndpoint", queues_endpoint.as_str()),
    ]);

    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(
        3,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "2"),
            ("FAULTY_STORAGE", faulty.as_str()),
        ],
    );
    let scan = |action: Value| {
        json!({
            "table": source.name(),
            "connection": "FAULTY_STORAGE",
            "pageSize": 25,
            "action": action,
        })
    };
    let distinct: BTreeSet<String> = rows.iter().map(|e| e.partition_key.clone()).collect();

    let count = host.run(scan(json!({"type": "count"}))).await;
    assert_eq!(count["state"], "succeeded", "{count}\n{}", host.log());
    assert_eq!(
        count["result"],
        json!({"rows": rows.len(), "partitions": distinct.len()}),
        "exact counts through faults"
    );

    let copy_name = unique("copy");
    let copy = host
        .run(scan(json!({
            "type": "copy", "table": copy_name, "connection": "FAULTY_STORAGE"
        })))
        .await;
    assert_eq!(copy["state"], "succeeded", "{copy}\n{}", host.log());
    let target = tables().table(&copy_name).unwrap();
    assert_same_rows(&target, &source, "the copy is identical").await;
    assert_eq!(copy["progress"]["rowsActed"], rows.len() as u64, "{copy}");

    // A queue put whose answer was lost may have been done: enqueueing is at least once. A
    // retried put doubles one message; a step that fails puts its messages (at most 50 here:
    // 2 pages of 25) again. Either way each extra message traces back to an injected fault.
    let faults_before = queues_proxy.injected.total() + tables_proxy.injected.total();
    let row_queue = unique("rows-");
    let enqueue = host
        .run(scan(json!({
            "type": "enqueue", "queue": row_queue, "connection": "FAULTY_STORAGE"
        })))
        .await;
    assert_eq!(enqueue["state"], "succeeded", "{enqueue}\n{}", host.log());
    let messages = drain_queue(&row_queue, MessageEncoding::Base64).await;
    let arrived = tally(messages.iter().map(|m| {
        (
            m["PartitionKey"].as_str().unwrap().to_string(),
            m["RowKey"].as_str().unwrap().to_string(),
        )
    }));
    assert_eq!(
        arrived.keys().cloned().collect::<BTreeSet<_>>(),
        keys(&rows),
        "every row enqueued"
    );
    let extra = messages.len() - rows.len();
    let faults = queues_proxy.injected.total() + tables_proxy.injected.total() - faults_before;
    assert!(
        extra as u64 <= faults * 50,
        "{extra} extra messages for {faults} faults"
    );
    eprintln!(
        "fault rate {rate}: enqueue put {} messages for {} rows ({extra} extra, {faults} faults)",
        messages.len(),
        rows.len()
    );
    assert_eq!(enqueue["progress"]["rowsActed"], rows.len() as u64);

    let delete = host
        .run(json!({
            "table": copy_name,
            "connection": "FAULTY_STORAGE",
            "pageSize": 25,
            "action": {"type": "delete"},
        }))
        .await;
    assert_eq!(delete["state"], "succeeded", "{delete}\n{}", host.log());
    assert!(
        target
            .query_all(&Query::default())
            .await
            .unwrap()
            .is_empty(),
        "every row deleted"
    );
    eprintln!(
        "fault rate {rate}: tables: {}; queues: {}",
        tables_proxy.injected.summary(),
        queues_proxy.injected.summary()
    );
    assert!(
        tables_proxy.injected.total() > 0,
        "the proxy injected faults"
    );

    // No secret anywhere a user or an operator can read: the handler's and devhost's logs,
    // every status, the scan list, the ledger.
    let mut readable = host.log();
    for status in [&count, &copy, &enqueue, &delete] {
        readable.push_str(&status.to_string());
    }
    let list = reqwest::get(format!("http://127.0.0.1:{}/api/scans", host.port))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    readable.push_str(&list);
    for entry in tables()
        .table(&host.ledger)
        .unwrap()
        .query_all(&Query::default())
        .await
        .unwrap()
    {
        readable.push_str(&entry.to_json());
    }
    let key = storage_setting("AccountKey");
    assert!(readable.len() > 10_000, "there is something to search");
    for secret in [
        key.as_str(),
        "AccountKey",
        faulty.as_str(),
        connection.as_str(),
    ] {
        assert!(
            !readable.contains(secret),
            "a secret leaked: {secret:.12}..."
        );
    }
}

/// Opt-in (`--ignored`): the run at one in five covers every fault kind more often, and the
/// two together took a quarter of CI's test time.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "opt-in: the one-in-five run covers the same faults harder"]
async fn every_action_is_exact_with_one_request_in_twenty_faulted() {
    every_action_under_faults(0.05, 11).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_is_exact_with_one_request_in_five_faulted() {
    every_action_under_faults(0.2, 23).await;
}

/// An outage of the source and target (every request answered 503) long enough for work items
/// to spend all five deliveries of their messages, or to be given back to their queue by the
/// scan's pace (the accounts' back-off leaves a process room for a step or two, the rest wait
/// in the queue): either way nothing fails for good, and the copy ends succeeded and exact once
/// the outage is over.
#[tokio::test(flavor = "multi_thread")]
async fn an_outage_longer_than_five_deliveries_fails_nothing_for_good() {
    let (tables_proxy, tables_endpoint) = faulty("TableEndpoint", 0.0, 7).await;
    let faulty = storage_with(&[("TableEndpoint", tables_endpoint.as_str())]);
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(
        2,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("FAULTY_STORAGE", faulty.as_str()),
        ],
    );
    let copy_name = unique("outage");
    let id = host
        .start_scan(json!({
            "table": source.name(), "connection": "FAULTY_STORAGE", "pageSize": 10,
            "action": {"type": "copy", "table": copy_name, "connection": "FAULTY_STORAGE"}
        }))
        .await;
    host.wait_for_steps(&id, 5).await;
    tables_proxy.set_outage(true);
    // Each attempt meets the back-off of the accounts, which keeps lowering its rate while
    // everything is refused: an attempt took from 5 s to over 2 minutes in CI (2 cores, a
    // loaded machine), so five deliveries can take more than 3 minutes.
    let outage_ends = std::time::Instant::now() + std::time::Duration::from_secs(420);
    let waited_out = |log: &str| {
        log.contains("handed on in a new message") && log.contains("failed, to be tried again")
            || log.contains("given back to the queue") && log.contains("failed, to be tried again")
    };
    while !waited_out(&host.log()) {
        assert!(
            std::time::Instant::now() < outage_ends,
            "no item spent its deliveries or was given back in 7 minutes of outage:\n{}",
            host.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // An opt-in longer outage, e.g. the 10 minutes of issue 14:
    // TABLESCAN_OUTAGE_SECONDS=600 cargo nextest run -p devhost --test faults outage
    if let Some(seconds) = std::env::var("TABLESCAN_OUTAGE_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    }
    tables_proxy.set_outage(false);
    let done = host.wait(&id, std::time::Duration::from_secs(240)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    assert_eq!(done["progress"]["stepsFailed"], 0, "{done}");
    assert_eq!(done["progress"]["rowsActed"], rows.len() as u64, "{done}");
    assert!(
        done["progress"]["attemptsFailed"].as_u64().unwrap() >= 1,
        "{done}"
    );
    // Every failed attempt met at least one 503, and the status counts them.
    assert!(
        done["progress"]["requestsThrottled"].as_u64().unwrap()
            >= done["progress"]["attemptsFailed"].as_u64().unwrap(),
        "{done}"
    );
    let target = tables().table(&copy_name).unwrap();
    assert_same_rows(&target, &source, "the copy is identical").await;
}
