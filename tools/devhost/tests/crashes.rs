//! Handlers killed at chosen points of a step: before a query, after the action wrote, after
//! the ledger recorded the step (so before its outputs reach the host). A proxy in front of
//! Azurite sees the handler's requests and kills it (SIGKILL) at the chosen moment; devhost
//! restarts it and redelivers the message. Twice per scan, for each point (devhost gives up on
//! the third failure within 30 minutes, as the real host does). After each scan the copy must be
//! identical to its source and every count exact.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fault_proxy::{FaultProxy, Moment};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    /// The handler dies as it sends a query of the source table.
    BeforeQuery,
    /// The handler dies once the copy's transaction into the target was done.
    AfterActionWrote,
    /// The handler dies once the ledger recorded the step: its outputs never reach the host.
    AfterLedgerWrote,
}

/// The handler devhost started last (one instance: the one making the requests).
fn newest_handler(lines: &Mutex<Vec<String>>) -> Option<u32> {
    handler_pids_in(lines).last().copied()
}

async fn copy_with_kills(point: Point) {
    let rows = rows();
    let source = table_with(&rows).await;
    let (origin, account) = endpoint("TableEndpoint");
    // The ledger's tables (AzureWebJobsStorage) and the data's (DATA) through two proxies,
    // so that a transaction of the ledger and one of the copy can be told apart.
    let ledger_proxy = FaultProxy::start(origin.clone()).await;
    let data_proxy = FaultProxy::start(origin).await;
    let app_storage = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", ledger_proxy.address),
    )]);
    let data = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", data_proxy.address),
    )]);
    let host = Host::start(
        1,
        &[
            ("AzureWebJobsStorage", app_storage.as_str()),
            ("DATA", data.as_str()),
            ("TABLESCAN_STEP_MAX_QUERIES", "2"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "3"),
            ("TABLESCAN_REDRIVE_AFTER_SECONDS", "2"),
        ],
    );
    let target_name = unique("crashed");
    let id = host
        .start_scan(json!({
            "table": source.name(), "connection": "DATA", "pageSize": 20,
            "action": {"type": "copy", "table": target_name, "connection": "DATA"}
        }))
        .await;

    // Armed only now, so the scan's own creation is not hit: every fifth matching request,
    // until two handler processes were killed (requests already in flight from a killed one
    // do not count).
    let killed: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = Arc::new(AtomicU32::new(0));
    let lines = host.lines.clone();
    let (proxy, method, path_has, moment) = match point {
        Point::BeforeQuery => (&data_proxy, "GET", "$top=", Moment::Before),
        Point::AfterActionWrote => (&data_proxy, "POST", "$batch", Moment::After),
        Point::AfterLedgerWrote => (&ledger_proxy, "POST", "$batch", Moment::After),
    };
    let (killed_in, lines_in) = (killed.clone(), lines.clone());
    proxy.on(
        Box::new(move |m, path| {
            let matches = m == method && path.contains(path_has);
            if !matches || seen.fetch_add(1, Ordering::SeqCst) % 5 != 4 {
                return None;
            }
            let killed = killed_in.lock().unwrap();
            let alive = newest_handler(&lines_in).filter(|pid| !killed.contains(pid));
            (killed.len() < 2 && alive.is_some()).then_some(moment)
        }),
        Box::new(move || {
            let mut killed = killed.lock().unwrap();
            if let Some(pid) = newest_handler(&lines).filter(|pid| !killed.contains(pid)) {
                if killed.len() < 2 {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    killed.push(pid);
                }
            }
        }),
    );

    let done = host.wait(&id, Duration::from_secs(240)).await;
    assert_eq!(
        done["state"],
        "succeeded",
        "{point:?}: {done}\n{}",
        host.log()
    );
    assert_eq!(
        done["progress"]["rowsActed"],
        rows.len() as u64,
        "{point:?}: {done}"
    );
    let target = tables().table(&target_name).unwrap();
    assert_same_rows(&target, &source, "{point:?}: the copy is identical").await;
    assert_eq!(
        host.handler_pids().len(),
        3,
        "{point:?}: two handlers killed, each restarted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_killed_before_its_query_loses_nothing() {
    copy_with_kills(Point::BeforeQuery).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_killed_after_its_action_wrote_doubles_nothing() {
    copy_with_kills(Point::AfterActionWrote).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_killed_after_the_ledger_recorded_its_step_loses_no_follow_up() {
    copy_with_kills(Point::AfterLedgerWrote).await;
}
