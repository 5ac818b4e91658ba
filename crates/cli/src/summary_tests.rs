use serde_json::{json, Value};

/// The summary of a status given as JSON, read as the command reads the app's answer.
fn summary(status: &Value) -> String {
    super::summary(&serde_json::from_value(status.clone()).unwrap())
}

fn status(spec: Value, progress: Value) -> Value {
    json!({
        "id": "s1", "state": "succeeded", "spec": spec,
        "progress": progress,
        "startedAt": "2026-11-21T23:59:58.5000000Z",
        "finishedAt": "2026-11-22T00:00:03.5000000Z"
    })
}

fn progress(read: u64, acted: u64, partitions: u64) -> Value {
    json!({"rowsRead": read, "rowsActed": acted, "rowsSkipped": 0, "rowsFailed": 0,
           "partitions": partitions, "stepsDone": 3, "stepsPending": 0, "stepsFailed": 0,
           "queries": 4, "requestsThrottled": 0})
}

#[test]
fn a_count_gives_rows_and_partitions_and_the_time_taken() {
    let mut count = status(
        json!({"table": "logs", "action": {"type": "count"}}),
        progress(25_000, 25_000, 10),
    );
    count["result"] = json!({"rows": 25000, "partitions": 10});
    assert_eq!(
        summary(&count),
        "scan s1: count logs — succeeded\n\
         \x20 counted         25,000 rows in 10 partitions\n\
         \x20 rows read       25,000\n\
         \x20 steps           3 done, 0 pending, 0 failed\n\
         \x20 queries         4\n\
         \x20 took            5.0 s (5,000 rows/s)\n"
    );
}

#[test]
fn an_import_count_says_what_it_read_against_the_manifest_and_no_partitions() {
    let import = status(
        json!({"table": "logs", "import": {"container": "b", "prefix": "day/",
            "connection": "AzureWebJobsStorage", "manifest": {"rows": 3000, "blobs": 1}},
            "action": {"type": "count"}}),
        progress(3000, 3000, 0),
    );
    let text = summary(&import);
    assert!(
        text.contains(
            "counted         3,000 rows read and checked (the export's manifest lists 3,000)"
        ),
        "{text}"
    );
    assert!(
        !text.contains("partition") && !text.contains("queries"),
        "{text}"
    );
}

#[test]
fn a_dry_run_says_what_it_would_do() {
    let dry = status(
        json!({"table": "logs", "dryRun": true, "action": {"type": "delete"}}),
        progress(493, 493, 16),
    );
    let text = summary(&dry);
    assert!(
        text.starts_with("scan s1: delete logs (dry run) — succeeded\n"),
        "{text}"
    );
    assert!(
        text.contains("would delete    493 rows (dry run: nothing deleted)"),
        "{text}"
    );
}

#[test]
fn a_copy_names_the_other_account() {
    let copy = status(
        json!({"table": "logs", "action": {"type": "copy", "table": "there",
            "connection": "BackupStorage"}}),
        progress(10, 10, 2),
    );
    let text = summary(&copy);
    assert!(
        text.starts_with("scan s1: copy logs -> there in BackupStorage — succeeded\n"),
        "{text}"
    );
    assert!(
        text.contains("copied          10 rows into there in BackupStorage\n"),
        "{text}"
    );
}

#[test]
fn messages_are_counted_in_what_the_status_keeps() {
    let spread = status(
        json!({"table": "t", "action": {"type": "enqueue", "queues": ["a", "b", "c"],
            "rowsPerMessage": 5, "per": "row"}}),
        progress(3000, 3000, 112),
    );
    let text = summary(&spread);
    assert!(
        text.contains("sent            3,000 rows to queues a, b, c, in messages of up to 5 rows (at least 600 messages;"),
        "{text}"
    );
    assert!(text.contains("delivery        at least once"), "{text}");
    let per_partition = status(
        json!({"table": "t", "action": {"type": "enqueue", "queue": "q", "per": "partition"}}),
        progress(162, 112, 112),
    );
    let text = summary(&per_partition);
    assert!(
        text.contains("sent            112 messages to queue q, one per partition"),
        "{text}"
    );
    let keys = status(
        json!({"table": "t", "action": {"type": "partition-keys", "queue": "k"}}),
        json!({"rowsRead": 162, "rowsActed": 112, "partitions": 112, "rowsReadPerPartition": 1.45}),
    );
    let text = summary(&keys);
    assert!(text.contains("partitions      112 found\n"), "{text}");
    assert!(text.contains("read/partition  1.45 rows\n"), "{text}");
}

#[test]
fn an_export_names_its_blobs_and_manifest() {
    let mut export = status(
        json!({"table": "logs", "action": {"type": "export", "container": "backups", "prefix": "logs/"}}),
        progress(25, 25, 2),
    );
    export["export"] = json!({"container": "backups", "prefix": "logs/", "blobs": 12,
        "bytes": 1234567, "manifest": "logs/manifest.json"});
    let text = summary(&export);
    assert!(
        text.starts_with("scan s1: export logs -> backups/logs/ — succeeded\n"),
        "{text}"
    );
    assert!(
        text.contains("exported        25 rows into 12 blobs (1,234,567 bytes)\n"),
        "{text}"
    );
    assert!(
        text.contains("manifest        backups/logs/manifest.json (restore with --import)\n"),
        "{text}"
    );
    export["state"] = json!("cancelled");
    export["export"]["manifest"] = Value::Null;
    let text = summary(&export);
    assert!(
        text.contains("manifest        none: the export is not whole"),
        "{text}"
    );
}

#[test]
fn a_failed_scan_names_the_command_that_retries_it() {
    let mut failed = status(
        json!({"table": "logs", "action": {"type": "count"}}),
        json!({"rowsRead": 5, "rowsActed": 5, "stepsFailed": 2}),
    );
    failed["state"] = json!("failed");
    failed["failedBecause"] =
        json!("2 steps failed for good (see errors; POST /api/scans/s1/retry runs them again)");
    failed["errors"] = json!([
        {"step": "x", "error": "table gone (request id 1)", "attempts": 1},
        {"step": "y", "error": "table gone (request id 2)", "attempts": 1},
        {"step": "z", "error": "credentials refused", "attempts": 1}
    ]);
    let text = summary(&failed);
    assert!(!text.contains("POST"), "{text}");
    assert!(
        text.contains("failed because  2 steps failed for good (see errors; `tablescan retry s1` runs them again)"),
        "{text}"
    );
    assert!(
        text.contains("error           table gone (2 steps)\n"),
        "{text}"
    );
    assert!(
        text.contains("error           credentials refused\n"),
        "{text}"
    );
    assert!(
        text.contains("counted         5 rows in 0 partitions so far, not the whole scope"),
        "{text}"
    );
    assert_eq!(text.matches("`tablescan retry s1`").count(), 1, "{text}");
    failed["failedBecause"] = Value::Null;
    let text = summary(&failed);
    assert!(
        text.contains("next            `tablescan retry s1`"),
        "{text}"
    );
}
