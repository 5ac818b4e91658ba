//! `tablescan pause` and `tablescan resume` against devhost on Azurite: a slow copy paused in
//! the middle stops (nothing is read or written while it is paused), resumes from where its
//! steps stopped, and ends with a target identical to its source, row by row, and counts that
//! are exact; then `tablescan remove` deletes its records. Pausing or resuming a scan in the
//! wrong state is refused in the command's words.

use std::time::{Duration, Instant};

use serde_json::Value;
use tablescan::storage::table::query::Query;

mod common;
use common::cli::*;
use common::*;

/// Polls the scan's status until `done` says so, for at most `limit`.
async fn status_until(
    host: &Host,
    id: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let status = host.status(id).await;
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "still {status}\n{}", host.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn acted(status: &Value) -> u64 {
    status["progress"]["rowsActed"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_copy_stops_and_resumes_to_an_identical_target() {
    let rows = rows();
    let source = table_with(&rows).await;
    let target = unique("paused");
    let host = Host::start(2, &[]);
    let url = url(&host);
    let started = tablescan(
        &url,
        &[
            "start",
            "--table",
            source.name(),
            "--copy",
            &target,
            "--page-size",
            "40",
            "--max-rows-per-second",
            "120",
        ],
        &[],
    )
    .await;
    assert_eq!(started.status.code(), Some(0), "{}", text(&started.stderr));
    let id = started_id(&text(&started.stderr));

    // Paused with some of the copy done.
    status_until(&host, &id, Duration::from_secs(60), |s| acted(s) >= 80).await;
    let paused = tablescan(&url, &["pause", &id], &[]).await;
    assert_eq!(paused.status.code(), Some(0), "{}", text(&paused.stderr));
    let said = text(&paused.stdout);
    assert!(
        said.starts_with(&format!("scan {id}: paus"))
            && said.contains(&format!("`tablescan resume {id}` goes on from there")),
        "{said}"
    );
    let still = status_until(&host, &id, Duration::from_secs(60), |s| {
        s["state"] == "paused"
    })
    .await;
    assert!(still["pausedAt"].is_string(), "{still}");
    let at_pause = acted(&still);
    assert!(
        at_pause < rows.len() as u64,
        "paused before the end: {at_pause} of {}",
        rows.len()
    );
    // Nothing moves while it is paused: not the counts, not the target.
    let copied = tables().table(&target).unwrap();
    let in_target = copied.query_all(&Query::default()).await.unwrap().len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let later = host.status(&id).await;
    assert_eq!(later["state"], "paused", "{later}");
    assert_eq!(acted(&later), at_pause, "{later}");
    assert_eq!(
        copied.query_all(&Query::default()).await.unwrap().len(),
        in_target,
        "rows written while paused"
    );
    // Watching a paused scan ends at once, exit code 5, with the way on.
    let watched = tablescan(&url, &["status", &id, "--watch"], &[]).await;
    assert_eq!(watched.status.code(), Some(5), "{}", text(&watched.stderr));
    assert!(
        text(&watched.stdout).contains(&format!("`tablescan resume {id}`")),
        "{}",
        text(&watched.stdout)
    );
    // A second pause changes nothing; a retry is refused while it is paused.
    let again = tablescan(&url, &["pause", &id], &[]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));

    let resumed = tablescan(&url, &["resume", &id], &[]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let said = text(&resumed.stdout);
    assert!(
        said.contains(" again; ") && said.contains("paused work item"),
        "{said}"
    );
    let done = tablescan(&url, &["status", &id, "--watch"], &[]).await;
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let status = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    let n = rows.len() as u64;
    assert_eq!(status["progress"]["rowsRead"], n, "{status}");
    assert_eq!(status["progress"]["rowsActed"], n, "{status}");
    assert!(status["resumedAt"].is_string(), "{status}");
    assert_same_rows(&copied, &source, "the copy paused and resumed").await;

    // Neither can be done to a scan that ended.
    let late = tablescan(&url, &["pause", &id], &[]).await;
    assert_ne!(late.status.code(), Some(0));
    let why = text(&late.stderr);
    assert!(
        why.contains("only a pending or running scan can be paused; this one is succeeded"),
        "{why}"
    );
    let late = tablescan(&url, &["resume", &id], &[]).await;
    assert_ne!(late.status.code(), Some(0));
    assert!(
        text(&late.stderr).contains("only a paused scan can be resumed"),
        "{}",
        text(&late.stderr)
    );

    let removed = tablescan(&url, &["remove", &id], &[]).await;
    assert_eq!(removed.status.code(), Some(0), "{}", text(&removed.stderr));
    let gone = tablescan(&url, &["status", &id], &[]).await;
    assert_ne!(gone.status.code(), Some(0));
    assert!(
        text(&gone.stderr).contains("no scan has this id"),
        "{}",
        text(&gone.stderr)
    );
    tables().delete_table(&target).await.unwrap();
    tables().delete_table(source.name()).await.unwrap();
}
