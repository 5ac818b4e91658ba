//! The JSON body of `POST /api/scans` made from `tablescan start`'s flags. The app checks the
//! values and answers a 400 naming the field; here only what the command line itself carries
//! is checked: the JSON of `--set` (`set`), and that every flag given applies to the action
//! (`applies`), so that none is dropped.

use serde_json::{json, Map, Value};

use crate::api::ApiError;
use crate::args::{value_name, StartArgs};
use tablescan_api::answers::{ErrorAnswer, ErrorDetail};

/// The start request, or why a flag's value cannot make one (naming the flag).
pub fn start_request(args: &StartArgs) -> Result<Value, String> {
    crate::applies::check(args)?;
    let mut body = Map::new();
    match &args.import {
        Some(export) => {
            let mut import = container_and_prefix(export);
            put(&mut import, "connection", args.connection.as_deref());
            body.insert("import".into(), Value::Object(import));
        }
        None => {
            put(&mut body, "table", args.table.as_deref());
            put(&mut body, "connection", args.connection.as_deref());
        }
    }

    let mut scope = Map::new();
    put(&mut scope, "prefix", args.prefix.as_deref());
    put(&mut scope, "after", args.after.as_deref());
    put(&mut scope, "before", args.before.as_deref());
    put(&mut scope, "rowPrefix", args.row_prefix.as_deref());
    put(&mut scope, "rowAfter", args.row_after.as_deref());
    put(&mut scope, "rowBefore", args.row_before.as_deref());
    if !scope.is_empty() {
        body.insert("scope".into(), Value::Object(scope));
    }
    put(&mut body, "filter", args.filter.as_deref());
    put(&mut body, "olderThan", args.older_than.as_deref());
    if !args.select.is_empty() {
        body.insert("select".into(), json!(args.select));
    }
    if let Some(size) = args.page_size {
        body.insert("pageSize".into(), json!(size));
    }
    if let Some(strategy) = args.strategy {
        body.insert("strategy".into(), json!(value_name(strategy)));
    }
    if let Some(cap) = &args.max_rows_per_second {
        // A number goes as a number; anything else ("unlimited", or a mistake the app names)
        // as the text it is.
        let value = cap
            .trim()
            .parse::<u64>()
            .map_or_else(|_| json!(cap), |n| json!(n));
        body.insert("maxRowsPerSecond".into(), value);
    }
    if let Some(failures) = args.max_row_failures {
        body.insert("maxRowFailures".into(), json!(failures));
    }
    if args.dry_run {
        body.insert("dryRun".into(), json!(true));
    }
    body.insert("action".into(), action(args)?);
    Ok(Value::Object(body))
}

fn action(args: &StartArgs) -> Result<Value, String> {
    let mut action = Map::new();
    let target_connection = args.to_connection.as_deref();
    if args.count {
        action.insert("type".into(), json!("count"));
    } else if let Some(target) = &args.copy {
        action.insert("type".into(), json!("copy"));
        action.insert("table".into(), json!(target));
        put(&mut action, "connection", target_connection);
        if let Some(mode) = args.mode {
            action.insert("mode".into(), json!(value_name(mode)));
        }
    } else if let Some(queues) = &args.enqueue {
        action.insert("type".into(), json!("enqueue"));
        match queues.as_slice() {
            [one] => action.insert("queue".into(), json!(one)),
            many => action.insert("queues".into(), json!(many)),
        };
        put(&mut action, "connection", target_connection);
        if let Some(per) = args.per {
            action.insert("per".into(), json!(value_name(per)));
        }
        if let Some(encoding) = args.encoding {
            action.insert("encoding".into(), json!(value_name(encoding)));
        }
        if let Some(rows) = args.rows_per_message {
            action.insert("rowsPerMessage".into(), json!(rows));
        }
    } else if args.delete {
        action.insert("type".into(), json!("delete"));
    } else if args.update {
        action.insert("type".into(), json!("update"));
        if let Some(set) = &args.set {
            action.insert("set".into(), Value::Object(crate::set::properties(set)?));
        }
        if !args.remove.is_empty() {
            action.insert("remove".into(), json!(args.remove));
        }
    } else if let Some(place) = &args.export {
        action.insert("type".into(), json!("export"));
        action.extend(container_and_prefix(place));
        put(&mut action, "connection", target_connection);
        if let Some(compression) = args.compression {
            action.insert("compression".into(), json!(value_name(compression)));
        }
    } else if let Some(queue) = &args.partition_keys {
        action.insert("type".into(), json!("partition-keys"));
        action.insert("queue".into(), json!(queue));
        put(&mut action, "connection", target_connection);
        if let Some(encoding) = args.encoding {
            action.insert("encoding".into(), json!(value_name(encoding)));
        }
    }
    Ok(Value::Object(action))
}

/// `container` and, if given, `prefix` from `CONTAINER/PREFIX`.
fn container_and_prefix(place: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    let (container, prefix) = place.split_once('/').unwrap_or((place, ""));
    fields.insert("container".into(), json!(container));
    if !prefix.is_empty() {
        fields.insert("prefix".into(), json!(prefix));
    }
    fields
}

fn put(object: &mut Map<String, Value>, name: &str, value: Option<&str>) {
    if let Some(value) = value {
        object.insert(name.into(), json!(value));
    }
}

/// Checks `body` with the API's own parser (`tablescan_api`, which the app reads requests
/// with) before it is sent: a request the app would refuse is refused here, with the refusal
/// the app would give (400, the field and why), and nothing is asked of the app. The checks
/// that need the app (its settings, the accounts, the allow-list) are left to it.
pub fn check(body: &Value) -> Result<(), ApiError> {
    let now = time::OffsetDateTime::now_utc();
    match tablescan_api::ScanSpec::parse_unresolved_at(&body.to_string(), None, now) {
        Ok(_) => Ok(()),
        Err(tablescan_api::SpecError { field, message }) => {
            let answer = ErrorAnswer {
                error: ErrorDetail {
                    message: message.clone(),
                    field: Some(field.clone()),
                },
            };
            Err(ApiError::Refused {
                status: 400,
                field: Some(field),
                message,
                body: serde_json::to_value(answer).unwrap_or_default(),
            })
        }
    }
}

#[cfg(test)]
#[path = "request_flags_tests.rs"]
mod flags_tests;

#[cfg(test)]
mod tests {

    /// A request the app would refuse is refused before it is sent, as the app refuses it.
    #[test]
    fn a_bad_request_is_refused_here_as_the_app_refuses_it() {
        let body =
            serde_json::json!({"table": "things", "pageSize": 5000, "action": {"type": "count"}});
        let refused = check(&body).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "refused (400)\n  pageSize: must be a whole number from 1 to 1000, not 5000"
        );
        assert_eq!(refused.json().unwrap()["error"]["field"], "pageSize");
        let good = serde_json::json!({"table": "things", "action": {"type": "count"}});
        assert!(check(&good).is_ok());
    }
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn request(args: &[&str]) -> Result<Value, String> {
        let mut all = vec!["tablescan", "start"];
        all.extend_from_slice(args);
        let Command::Start(start) = Cli::try_parse_from(all).unwrap().command else {
            panic!("not a start");
        };
        start_request(&start)
    }

    #[test]
    fn flags_become_the_apis_fields() {
        let body = request(&[
            "--table=logs",
            "--connection",
            "LOGS",
            "--prefix=2025-",
            "--row-after",
            "r",
            "--filter",
            "Level eq 'Debug'",
            "--older-than=P90D",
            "--dry-run",
            "--max-rows-per-second=2000",
            "--delete",
        ])
        .unwrap();
        assert_eq!(
            body,
            json!({
                "table": "logs", "connection": "LOGS",
                "scope": {"prefix": "2025-", "rowAfter": "r"},
                "filter": "Level eq 'Debug'", "olderThan": "P90D",
                "maxRowsPerSecond": 2000, "dryRun": true,
                "action": {"type": "delete"}
            })
        );
    }

    #[test]
    fn exports_and_imports_name_a_container_and_a_prefix() {
        let body = request(&[
            "--table=logs",
            "--export=backups/logs/2026-11-25",
            "--to-connection=BACKUP",
            "--compression=none",
        ])
        .unwrap();
        assert_eq!(
            body,
            json!({
                "table": "logs",
                "action": {"type": "export", "container": "backups",
                           "prefix": "logs/2026-11-25", "connection": "BACKUP",
                           "compression": "none"}
            })
        );
        let body =
            request(&["--import=backups", "--connection=BACKUP", "--copy=restored"]).unwrap();
        assert_eq!(
            body,
            json!({
                "import": {"container": "backups", "connection": "BACKUP"},
                "action": {"type": "copy", "table": "restored"}
            })
        );
    }

    #[test]
    fn each_action_carries_its_options() {
        assert_eq!(
            request(&[
                "--table=t",
                "--copy=t2",
                "--to-connection=B",
                "--mode=merge"
            ])
            .unwrap()["action"],
            json!({"type": "copy", "table": "t2", "connection": "B", "mode": "merge"})
        );
        assert_eq!(
            request(&[
                "--table=t",
                "--enqueue=q1,q2",
                "--per=partition",
                "--encoding=none"
            ])
            .unwrap()["action"],
            json!({"type": "enqueue", "queues": ["q1", "q2"], "per": "partition", "encoding": "none"})
        );
        assert_eq!(
            request(&["--table=t", "--enqueue=q", "--rows-per-message=32"]).unwrap()["action"],
            json!({"type": "enqueue", "queue": "q", "rowsPerMessage": 32})
        );
        assert_eq!(
            request(&[
                "--table=t",
                "--update",
                "--set={\"S\":1}",
                "--remove=A",
                "--remove=B"
            ])
            .unwrap()["action"],
            json!({"type": "update", "set": {"S": 1}, "remove": ["A", "B"]})
        );
        assert_eq!(
            request(&["--table=t", "--partition-keys=pk"]).unwrap()["action"],
            json!({"type": "partition-keys", "queue": "pk"})
        );
        assert_eq!(
            request(&["--table=t", "--count", "--max-rows-per-second=unlimited"]).unwrap()
                ["maxRowsPerSecond"],
            json!("unlimited")
        );
    }

    #[test]
    fn a_set_that_is_not_a_json_object_names_the_flag() {
        for bad in ["{oops", "[1]"] {
            let error = request(&["--table=t", "--update", "--set", bad]).unwrap_err();
            assert!(error.starts_with("--set must be a JSON object"), "{error}");
        }
    }
}
