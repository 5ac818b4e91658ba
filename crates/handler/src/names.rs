//! Every function, binding, queue and route name, in one place. `function_definitions` is what
//! each `function_app/<Function>/function.json` must contain; a test compares them, so the code
//! and the configuration cannot drift apart.

use serde_json::{json, Value};

/// Queue of `range` work items.
pub const RANGE_QUEUE: &str = "tablescan-range";
/// Queue of `partition` work items.
pub const PARTITION_QUEUE: &str = "tablescan-partition";
/// Queue of an import's work items (`export-part` and `export-blob`).
pub const EXPORT_QUEUE: &str = "tablescan-export";

pub const SCAN_RANGE: &str = "ScanRange";
pub const SCAN_PARTITION: &str = "ScanPartition";
pub const SCAN_EXPORT: &str = "ScanExport";
pub const START_SCAN: &str = "StartScan";
pub const GET_SCAN: &str = "GetScan";
pub const LIST_SCANS: &str = "ListScans";
pub const CANCEL_SCAN: &str = "CancelScan";
pub const RETRY_SCAN: &str = "RetryScan";
pub const PAUSE_SCAN: &str = "PauseScan";
pub const RESUME_SCAN: &str = "ResumeScan";
pub const PUT_SCHEDULE: &str = "PutSchedule";
pub const GET_SCHEDULE: &str = "GetSchedule";
pub const LIST_SCHEDULES: &str = "ListSchedules";
pub const DELETE_SCHEDULE: &str = "DeleteSchedule";
pub const SCHEDULE_ACTION: &str = "ScheduleAction";
pub const RUN_SCHEDULES: &str = "RunSchedules";

/// When `RunSchedules` looks for due occurrences (NCRONTAB, with seconds): every minute, at
/// second 30 (away from the re-drive's second 0). An occurrence starts within a minute of its
/// time.
pub const SCHEDULES_SCHEDULE: &str = "30 */1 * * * *";
pub const DELETE_SCAN: &str = "DeleteScan";
pub const CLEAR_REJECTED: &str = "ClearRejected";
pub const REDRIVE_SCANS: &str = "RedriveScans";
/// The page to watch and start scans (`GET /api/ui`, see `functions::ui`).
pub const SCANS_PAGE: &str = "ScansPage";

/// When `RedriveScans` runs (NCRONTAB, with seconds): every minute. A claim abandoned by a
/// host that died counts as stranded as soon as its lease has run out, and a scan with no
/// claim alive and no step finished for a lease has its unclaimed items sent again, so after
/// a crash work resumes within about two minutes (a lease, then the next sweep) instead of
/// waiting out the dead host's 10-minute hold on its messages; an item whose message was lost counts after
/// `TABLESCAN_REDRIVE_AFTER_SECONDS` (15 minutes by default). A sweep of an idle app reads one
/// empty partition.
pub const REDRIVE_SCHEDULE: &str = "0 */1 * * * *";
/// The timer trigger's binding name.
pub const TIMER_BINDING: &str = "timer";

/// The queue trigger's binding name: the work item arrives under `Data.item`.
pub const ITEM_BINDING: &str = "item";
/// Output binding for follow-up `range` items.
pub const RANGE_OUTPUT: &str = "rangeItems";
/// Output binding for follow-up `partition` items.
pub const PARTITION_OUTPUT: &str = "partitionItems";
/// Output binding for an import's follow-up items.
pub const EXPORT_OUTPUT: &str = "exportItems";
/// HTTP trigger and output bindings.
pub const HTTP_REQUEST: &str = "req";
pub const HTTP_RESPONSE: &str = "res";

/// host.json's `maxDequeueCount`: the attempt at which a failing message goes to poison.
pub const MAX_DEQUEUE_COUNT: u32 = 5;
/// The storage connection of the triggers and outputs (an app setting name).
pub const STORAGE_CONNECTION: &str = "AzureWebJobsStorage";

fn queue_outputs() -> Vec<Value> {
    vec![
        json!({ "name": RANGE_OUTPUT, "type": "queue", "direction": "out", "queueName": RANGE_QUEUE, "connection": STORAGE_CONNECTION }),
        json!({ "name": PARTITION_OUTPUT, "type": "queue", "direction": "out", "queueName": PARTITION_QUEUE, "connection": STORAGE_CONNECTION }),
        json!({ "name": EXPORT_OUTPUT, "type": "queue", "direction": "out", "queueName": EXPORT_QUEUE, "connection": STORAGE_CONNECTION }),
    ]
}

fn queue_function(queue: &str) -> Value {
    let mut bindings = vec![json!({
        "name": ITEM_BINDING, "type": "queueTrigger", "direction": "in",
        "queueName": queue, "connection": STORAGE_CONNECTION
    })];
    bindings.extend(queue_outputs());
    json!({ "bindings": bindings })
}

fn http_function(method: &str, route: &str, extra: Vec<Value>) -> Value {
    http_function_at(method, route, "function", extra)
}

fn http_function_at(method: &str, route: &str, auth_level: &str, extra: Vec<Value>) -> Value {
    let mut bindings = vec![
        json!({ "name": HTTP_REQUEST, "type": "httpTrigger", "direction": "in", "authLevel": auth_level, "methods": [method], "route": route }),
        json!({ "name": HTTP_RESPONSE, "type": "http", "direction": "out" }),
    ];
    bindings.extend(extra);
    json!({ "bindings": bindings })
}

/// Each function's name and the content of its function.json.
pub fn function_definitions() -> Vec<(&'static str, Value)> {
    vec![
        (SCAN_RANGE, queue_function(RANGE_QUEUE)),
        (SCAN_PARTITION, queue_function(PARTITION_QUEUE)),
        (SCAN_EXPORT, queue_function(EXPORT_QUEUE)),
        (START_SCAN, http_function("post", "scans", queue_outputs())),
        (GET_SCAN, http_function("get", "scans/{id}", Vec::new())),
        (LIST_SCANS, http_function("get", "scans", Vec::new())),
        (
            CANCEL_SCAN,
            http_function("post", "scans/{id}/cancel", Vec::new()),
        ),
        (
            DELETE_SCAN,
            http_function("delete", "scans/{id}", Vec::new()),
        ),
        (
            CLEAR_REJECTED,
            http_function("delete", "rejected", Vec::new()),
        ),
        (
            RETRY_SCAN,
            http_function("post", "scans/{id}/retry", queue_outputs()),
        ),
        // The page is the same static text for everyone and holds no data: a browser cannot
        // send `x-functions-key` when it navigates, so the page is anonymous and every request
        // it makes for data carries the key (see `functions::ui`).
        (
            SCANS_PAGE,
            http_function_at("get", "ui", "anonymous", Vec::new()),
        ),
        (
            PAUSE_SCAN,
            http_function("post", "scans/{id}/pause", Vec::new()),
        ),
        (
            RESUME_SCAN,
            http_function("post", "scans/{id}/resume", queue_outputs()),
        ),
        (
            PUT_SCHEDULE,
            http_function("put", "schedules/{name}", Vec::new()),
        ),
        (
            GET_SCHEDULE,
            http_function("get", "schedules/{name}", Vec::new()),
        ),
        (
            LIST_SCHEDULES,
            http_function("get", "schedules", Vec::new()),
        ),
        (
            DELETE_SCHEDULE,
            http_function("delete", "schedules/{name}", Vec::new()),
        ),
        (
            SCHEDULE_ACTION,
            http_function("post", "schedules/{name}/{action}", Vec::new()),
        ),
        (
            RUN_SCHEDULES,
            json!({ "bindings": [{ "name": TIMER_BINDING, "type": "timerTrigger", "direction": "in", "schedule": SCHEDULES_SCHEDULE }] }),
        ),
        (
            REDRIVE_SCANS,
            json!({ "bindings": [{ "name": TIMER_BINDING, "type": "timerTrigger", "direction": "in", "schedule": REDRIVE_SCHEDULE }] }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The function.json files on disk are exactly what the code expects.
    #[test]
    fn function_json_files_match_the_code() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../function_app");
        let mut on_disk: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut expected: Vec<String> = function_definitions()
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        expected.sort();
        assert_eq!(on_disk, expected, "one folder per function, no others");
        for (name, definition) in function_definitions() {
            let path = root.join(name).join("function.json");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let file: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(file, definition, "{} differs from names.rs", path.display());
        }
    }

    #[test]
    fn host_json_matches_the_handler() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../host.json");
        let host: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(
            host["customHandler"]["description"]["defaultExecutablePath"],
            "handler"
        );
        assert_eq!(host["customHandler"]["enableForwardingHttpRequest"], false);
        assert_eq!(host["functionTimeout"], "00:10:00");
        assert_eq!(
            host["extensions"]["queues"]["maxDequeueCount"],
            MAX_DEQUEUE_COUNT
        );
        assert_eq!(host["extensions"]["queues"]["messageEncoding"], "base64");
        assert_eq!(host["extensions"]["http"]["routePrefix"], "api");
    }

    #[test]
    fn queue_names_are_valid() {
        for queue in [RANGE_QUEUE, PARTITION_QUEUE, EXPORT_QUEUE] {
            tablescan_storage::names::validate_queue_name(queue).unwrap();
            tablescan_storage::names::validate_queue_name(&format!("{queue}-poison")).unwrap();
        }
    }
}
