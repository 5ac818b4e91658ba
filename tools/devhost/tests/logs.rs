//! Logs that can be followed, through devhost on Azurite: every line has a timestamp; every
//! line a step logs carries its scan, its step and its queue message id, which devhost (as the
//! host) logs with the invocation; a start logs what it started and the caller's idempotency
//! key; status reads are not logged; each re-drive sweep is one line.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use serde_json::json;

/// The fields of a line's `step{...}` span, if it has one.
fn step_fields(line: &str) -> Option<BTreeMap<String, String>> {
    let start = line.find("step{")? + "step{".len();
    let end = start + line[start..].find("}:")?;
    Some(
        line[start..end]
            .split(' ')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// Whether a line starts with a UTC timestamp such as `2026-11-24T10:36:52.123Z`.
fn stamped(line: &str) -> bool {
    let first = line.split(' ').next().unwrap_or("");
    first.len() >= 20
        && first.as_bytes()[4] == b'-'
        && first.as_bytes()[10] == b'T'
        && first.ends_with('Z')
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lines_of_one_step_share_its_ids_and_every_line_has_a_time() {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let answer = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/api/scans", host.port))
        .header("Idempotency-Key", "nightly-count-42")
        .json(&json!({"table": source.name(), "pageSize": 50, "action": {"type": "count"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
    let id = answer.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let status = host.wait(&id, Duration::from_secs(240)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    // Let a sweep or two run after the end.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = host.log();
    let lines: Vec<&str> = log.lines().collect();

    for line in &lines {
        assert!(stamped(line), "a line without a time: {line:?}");
    }

    // The audit line of the start.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("scan started: count over table")
                && l.contains("idempotency_key=nightly-count-42")
                && l.contains(&id)),
        "{log}"
    );

    // The handler's lines of each step, by the queue message that carried it.
    let mut steps: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    let mut done_lines = 0;
    for line in &lines {
        if let Some(fields) = step_fields(line) {
            let message = fields.get("message_id").cloned().unwrap_or_default();
            assert!(
                !message.is_empty(),
                "a step line without its message: {line}"
            );
            steps.entry(message).or_default().insert((
                fields.get("scan").cloned().unwrap_or_default(),
                fields.get("step").cloned().unwrap_or_default(),
            ));
            if line.contains(" done: ") {
                done_lines += 1;
            }
        }
    }
    let steps_done = status["progress"]["stepsDone"].as_u64().unwrap();
    assert!(steps_done > 5, "{status}");
    assert_eq!(done_lines, steps_done, "one line per finished step:\n{log}");
    for (message, ids) in &steps {
        assert_eq!(
            ids.len(),
            1,
            "message {message}: lines of more than one step: {ids:?}"
        );
        let (scan, step) = ids.iter().next().unwrap();
        assert_eq!(scan, &id);
        assert!(!step.is_empty());
    }
    // Each queue invocation devhost logged names a message whose step lines are there.
    let invoked: BTreeSet<String> = lines
        .iter()
        .filter(|l| {
            l.contains("[devhost] ScanRange id=") || l.contains("[devhost] ScanPartition id=")
        })
        .filter_map(|l| {
            l.split(" id=")
                .nth(1)?
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .collect();
    assert!(!invoked.is_empty(), "{log}");
    for message in &invoked {
        assert!(
            steps.contains_key(message),
            "no handler lines for message {message}:\n{log}"
        );
    }

    // Status reads are not logged (DEVHOST_VERBOSE=1 shows them).
    assert!(!log.contains("GetScan GET"), "{log}");
    // One line per sweep: as many sweep lines as timer runs (one may be between the two).
    let sweeps = lines
        .iter()
        .filter(|l| l.contains("re-drive sweep:"))
        .count();
    let runs = lines
        .iter()
        .filter(|l| l.contains("RedriveScans (timer): succeeded"))
        .count();
    assert!(runs > 0, "{log}");
    assert!(
        sweeps <= runs + 1 && sweeps + 1 >= runs,
        "{sweeps} sweep lines for {runs} runs:\n{log}"
    );
}
