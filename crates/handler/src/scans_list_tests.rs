//! The status and list answers pinned to the byte: their types moved into `tablescan-api`
//! (shared with the CLI), and the HTTP API must not change by a byte for it.

use super::entry;
use serde_json::{json, Map, Value};
use tablescan_api::{Compression, ManifestSummary, ScanSpec};
use tablescan_ledger::history::RateHistory;
use tablescan_ledger::notes::NotedRow;
use tablescan_ledger::status::{
    spec_as_requested, Activity, CountResult, ExportProgress, Pace, Progress, ScanStatus,
    StepFailure,
};
use tablescan_ledger::State;

fn spec(request: &str) -> ScanSpec {
    let now = time::OffsetDateTime::from_unix_timestamp(1_795_168_800).unwrap();
    ScanSpec::parse_unresolved_at(request, Some(5000), now).unwrap()
}

/// A status with every optional part present (and one with none), as a status read answers.
fn statuses() -> (ScanStatus, ScanStatus) {
    let full = ScanStatus {
        id: "a".repeat(32),
        state: State::Failed,
        spec: spec(
            r#"{"table":"things","scope":{"prefix":"p","rowAfter":"r"},"filter":"N gt 5",
                "olderThan":"P9D","dryRun":true,"maxRowFailures":3,
                "action":{"type":"enqueue","queues":["qa1","qb2"],"rowsPerMessage":4}}"#,
        ),
        learned_max_rows_per_second: Some(1200),
        progress: Progress {
            rows_read: 12345,
            rows_acted: 12000,
            rows_skipped: 5,
            rows_failed: 4,
            partitions: 7,
            steps_done: 9,
            steps_pending: 2,
            steps_failed: 1,
            attempts_failed: 3,
            requests_throttled: 6,
            steps_retried: 1,
            queries: 40,
            rows_per_second: 1234.5,
            longest_step_seconds: 2.0,
            last_step_at: Some("2026-11-20T10:05:00.0000000Z".into()),
            steps_redriven: 1,
            rows_read_per_partition: Some(1.25),
        },
        errors: vec![StepFailure {
            step: "s1".into(),
            error: "boom (request id 1)".into(),
            attempts: 5,
        }],
        failed_because: Some("1 step failed for good".into()),
        row_failures: vec![NotedRow {
            partition_key: "p1".into(),
            row_key: "r1".into(),
            reason: Some("too big".into()),
        }],
        dry_run_rows: vec![NotedRow {
            partition_key: "p2".into(),
            row_key: "r2".into(),
            reason: None,
        }],
        created_at: "2026-11-20T10:00:00.0000000Z".into(),
        started_at: Some("2026-11-20T10:00:01.0000000Z".into()),
        finished_at: None,
        result: Some(CountResult {
            rows: 10,
            partitions: 2,
        }),
        activity: Some(Activity {
            steps_running: 1,
            steps_abandoned: 0,
            estimated: true,
            oldest_pending_seconds: Some(30),
            oldest_parked_seconds: None,
            abandoned_return_by: None,
            queued_messages: None,
            seconds_since_last_step: 4,
            note: Some("waiting".into()),
        }),
        pace: Some(Pace {
            max_rows_per_second: None,
            entities_per_second: 100.0,
            instances: 2,
        }),
        export: Some(ExportProgress {
            container: "c".into(),
            prefix: "x/".into(),
            blobs: 3,
            bytes: 4096,
            manifest: None,
            manifest_written_at: None,
            manifest_error: Some("busy".into()),
        }),
        history: Some(RateHistory {
            bucket_seconds: 5,
            offset_seconds: -1,
            rows_read: vec![1, 2],
            entities: vec![1, 2],
            requests_throttled: vec![0, 1],
        }),
        paused_at: Some("2026-11-20T10:06:00.0000000Z".into()),
        resumed_at: None,
        resuming: true,
    };
    let mut bare = ScanStatus {
        id: "b".repeat(32),
        state: State::Succeeded,
        spec: spec(
            r#"{"import":{"container":"backups","prefix":"day/"},
                "action":{"type":"copy","table":"restored"}}"#,
        ),
        learned_max_rows_per_second: None,
        progress: Progress {
            rows_per_second: 0.0,
            ..full.progress.clone()
        },
        errors: Vec::new(),
        failed_because: None,
        row_failures: Vec::new(),
        dry_run_rows: Vec::new(),
        created_at: "2026-11-20T10:00:00Z".into(),
        started_at: None,
        finished_at: Some("2026-11-20T11:00:00Z".into()),
        result: None,
        activity: None,
        pace: None,
        export: None,
        history: None,
        paused_at: None,
        resumed_at: Some("2026-11-20T10:30:00Z".into()),
        resuming: false,
    };
    if let Some(import) = bare.spec.import.as_mut() {
        import.manifest = Some(ManifestSummary {
            table: "things".into(),
            scan: "c".repeat(32),
            rows: 99,
            blobs: 2,
            parts: 1,
            compression: Compression::Gzip,
        });
    }
    (full, bare)
}

/// As the answer's body is written: through a `serde_json::Value` (its keys in order).
fn answered<T: serde::Serialize>(body: &T) -> String {
    serde_json::to_value(body).unwrap().to_string()
}

#[test]
fn the_status_answer_is_pinned() {
    let (full, bare) = statuses();
    assert_eq!(answered(&full), FULL_STATUS);
    assert_eq!(answered(&bare), BARE_STATUS);
}

#[test]
fn the_list_entries_are_pinned() {
    let (full, bare) = statuses();
    assert_eq!(answered(&entry(&full)), FULL_ENTRY);
    assert_eq!(answered(&entry(&bare)), BARE_ENTRY);
}

/// Every action, in flight or not, with and without the optional parts: the typed entry
/// writes what the entry written with `json!` before the types were shared wrote.
#[test]
fn the_typed_entry_writes_what_the_json_entry_wrote() {
    let (full, bare) = statuses();
    let actions = [
        r#"{"type":"count"}"#,
        r#"{"type":"copy","table":"there","mode":"merge","connection":"AzureWebJobsStorage"}"#,
        r#"{"type":"copy","table":"there"}"#,
        r#"{"type":"enqueue","queue":"qa1","per":"partition","encoding":"none"}"#,
        r#"{"type":"enqueue","queues":["qa1","qb2","qc3"],"rowsPerMessage":4}"#,
        r#"{"type":"delete"}"#,
        r#"{"type":"update","set":{"S":1,"N":"5","N@odata.type":"Edm.Int64"},"remove":["Old"]}"#,
        r#"{"type":"update","remove":["Old"]}"#,
        r#"{"type":"partition-keys","queue":"keys"}"#,
        r#"{"type":"export","container":"backups","prefix":"day/","compression":"none"}"#,
        r#"{"type":"export","container":"backups"}"#,
    ];
    for action in actions {
        for base in [&full, &bare] {
            let imports = action.contains(r#""count""#) || action.contains(r#""copy""#);
            if base.spec.import.is_some() && !imports {
                continue;
            }
            let mut status = base.clone();
            let table = match base.spec.import {
                Some(_) => r#""import":{"container":"bkp","prefix":"p/"}"#,
                None => r#""table":"things""#,
            };
            status.spec = spec(&format!(r#"{{{table},"action":{action}}}"#));
            assert_eq!(
                answered(&entry(&status)),
                json_entry(&status).to_string(),
                "{action}"
            );
        }
    }
    assert_eq!(answered(&entry(&full)), json_entry(&full).to_string());
    assert_eq!(answered(&entry(&bare)), json_entry(&bare).to_string());
}

/// The entry as `scans_list::entry` wrote it with `json!` before the answers' types moved into
/// `tablescan-api` (kept here as the reference the typed one must match).
fn json_entry(status: &ScanStatus) -> Value {
    let spec = &status.spec;
    let requested = spec_as_requested(spec);
    let mut target = requested["action"].as_object().cloned().unwrap_or_default();
    target.remove("type");
    if let Some(Value::Object(set)) = target.get("set") {
        let names: Vec<&String> = set.keys().filter(|k| !k.contains('@')).collect();
        target.insert("set".into(), json!(names));
    }
    let p = &status.progress;
    let mut entry = json!({
        "id": status.id,
        "state": status.state,
        "table": spec.table,
        "connection": spec.connection,
        "action": super::action_type(&spec.action),
        "target": Value::Object(target),
        "createdAt": status.created_at,
        "startedAt": status.started_at,
        "finishedAt": status.finished_at,
        "progress": {
            "rowsRead": p.rows_read, "rowsActed": p.rows_acted, "rowsSkipped": p.rows_skipped,
            "rowsFailed": p.rows_failed, "partitions": p.partitions,
            "stepsDone": p.steps_done, "stepsPending": p.steps_pending, "stepsFailed": p.steps_failed,
            "requestsThrottled": p.requests_throttled, "rowsPerSecond": p.rows_per_second,
        },
        "status": format!("/api/scans/{}", status.id),
    });
    if spec.dry_run {
        entry["dryRun"] = json!(true);
    }
    if let (Some(history), true) = (&status.history, status.finished_at.is_none()) {
        let began = status.started_at.as_deref().unwrap_or(&status.created_at);
        if let Some(began) = tablescan_storage::table::entity::EdmDateTime::parse(began) {
            let elapsed = (time::OffsetDateTime::now_utc() - began.time()).as_seconds_f64();
            let recent = history.recent_rows_per_second(elapsed, 20.0);
            entry["recentRowsPerSecond"] = json!(recent.unwrap_or(0.0));
        }
    }
    for field in ["scope", "filter", "olderThan"] {
        if let Some(value) = requested.get(field).filter(|v| !v.is_null()) {
            entry[field] = value.clone();
        }
    }
    if let Some(import) = &spec.import {
        let mut from = Map::new();
        from.insert("container".into(), json!(import.container));
        from.insert("prefix".into(), json!(import.prefix));
        from.insert("connection".into(), json!(import.connection));
        if let Some(rows) = requested["import"]["manifest"]["rows"].as_u64() {
            from.insert("rows".into(), json!(rows));
        }
        entry["import"] = Value::Object(from);
    }
    entry
}

const FULL_STATUS: &str = r#"{"activity":{"estimated":true,"note":"waiting","oldestPendingSeconds":30,"queuedMessages":null,"secondsSinceLastStep":4,"stepsAbandoned":0,"stepsRunning":1},"createdAt":"2026-11-20T10:00:00.0000000Z","dryRunRows":[{"partitionKey":"p2","rowKey":"r2"}],"errors":[{"attempts":5,"error":"boom (request id 1)","step":"s1"}],"export":{"blobs":3,"bytes":4096,"container":"c","manifest":null,"manifestError":"busy","manifestWrittenAt":null,"prefix":"x/"},"failedBecause":"1 step failed for good","finishedAt":null,"history":{"bucketSeconds":5,"entities":[1,2],"offsetSeconds":-1,"requestsThrottled":[0,1],"rowsRead":[1,2]},"id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","learnedMaxRowsPerSecond":1200,"pace":{"entitiesPerSecond":100.0,"instances":2,"maxRowsPerSecond":null},"pausedAt":"2026-11-20T10:06:00.0000000Z","progress":{"attemptsFailed":3,"lastStepAt":"2026-11-20T10:05:00.0000000Z","longestStepSeconds":2.0,"partitions":7,"queries":40,"requestsThrottled":6,"rowsActed":12000,"rowsFailed":4,"rowsPerSecond":1234.5,"rowsRead":12345,"rowsReadPerPartition":1.25,"rowsSkipped":5,"stepsDone":9,"stepsFailed":1,"stepsPending":2,"stepsRedriven":1,"stepsRetried":1},"result":{"partitions":2,"rows":10},"resuming":true,"rowFailures":[{"partitionKey":"p1","reason":"too big","rowKey":"r1"}],"spec":{"action":{"connection":"AzureWebJobsStorage","encoding":"base64","per":"row","queues":["qa1","qb2"],"rowsPerMessage":4,"type":"enqueue"},"connection":"AzureWebJobsStorage","dryRun":true,"filter":"N gt 5","maxRowFailures":3,"maxRowsPerSecond":5000,"olderThan":{"age":"P9D","before":"2026-11-11T10:00:00.0000000Z"},"pageSize":1000,"scope":{"after":null,"before":null,"prefix":"p","rowAfter":"r"},"select":null,"strategy":"prefix","table":"things"},"startedAt":"2026-11-20T10:00:01.0000000Z","state":"failed"}"#;
const BARE_STATUS: &str = r#"{"createdAt":"2026-11-20T10:00:00Z","errors":[],"finishedAt":"2026-11-20T11:00:00Z","id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","progress":{"attemptsFailed":3,"lastStepAt":"2026-11-20T10:05:00.0000000Z","longestStepSeconds":2.0,"partitions":7,"queries":40,"requestsThrottled":6,"rowsActed":12000,"rowsFailed":4,"rowsPerSecond":0.0,"rowsRead":12345,"rowsReadPerPartition":1.25,"rowsSkipped":5,"stepsDone":9,"stepsFailed":1,"stepsPending":2,"stepsRedriven":1,"stepsRetried":1},"resumedAt":"2026-11-20T10:30:00Z","spec":{"action":{"connection":"AzureWebJobsStorage","table":"restored","type":"copy"},"connection":"AzureWebJobsStorage","import":{"connection":"AzureWebJobsStorage","container":"backups","manifest":{"blobs":2,"compression":"gzip","parts":1,"rows":99,"scan":"cccccccccccccccccccccccccccccccc","table":"things"},"prefix":"day/"},"maxRowsPerSecond":5000,"pageSize":1000,"scope":{"after":null,"before":null,"prefix":""},"select":null,"strategy":"prefix","table":""},"startedAt":null,"state":"succeeded"}"#;
const FULL_ENTRY: &str = r#"{"action":"enqueue","connection":"AzureWebJobsStorage","createdAt":"2026-11-20T10:00:00.0000000Z","dryRun":true,"filter":"N gt 5","finishedAt":null,"id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","olderThan":{"age":"P9D","before":"2026-11-11T10:00:00.0000000Z"},"progress":{"partitions":7,"requestsThrottled":6,"rowsActed":12000,"rowsFailed":4,"rowsPerSecond":1234.5,"rowsRead":12345,"rowsSkipped":5,"stepsDone":9,"stepsFailed":1,"stepsPending":2},"recentRowsPerSecond":0.0,"scope":{"after":null,"before":null,"prefix":"p","rowAfter":"r"},"startedAt":"2026-11-20T10:00:01.0000000Z","state":"failed","status":"/api/scans/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","table":"things","target":{"connection":"AzureWebJobsStorage","encoding":"base64","per":"row","queues":["qa1","qb2"],"rowsPerMessage":4}}"#;
const BARE_ENTRY: &str = r#"{"action":"copy","connection":"AzureWebJobsStorage","createdAt":"2026-11-20T10:00:00Z","finishedAt":"2026-11-20T11:00:00Z","id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","import":{"connection":"AzureWebJobsStorage","container":"backups","prefix":"day/","rows":99},"progress":{"partitions":7,"requestsThrottled":6,"rowsActed":12000,"rowsFailed":4,"rowsPerSecond":0.0,"rowsRead":12345,"rowsSkipped":5,"stepsDone":9,"stepsFailed":1,"stepsPending":2},"scope":{"after":null,"before":null,"prefix":""},"startedAt":null,"state":"succeeded","status":"/api/scans/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","table":"","target":{"connection":"AzureWebJobsStorage","table":"restored"}}"#;
