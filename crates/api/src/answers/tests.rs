//! The answers read as the CLI reads them: an app of another version may add fields, lack
//! some, or name a state or an action this crate does not know.

use serde_json::{json, Value};

use super::{ListEntry, Progress, ScansPage, State, StatusAnswer, LISTED_COUNTS};

#[test]
fn a_status_of_a_newer_app_is_read_its_new_fields_ignored() {
    let status: StatusAnswer = serde_json::from_value(json!({
        "id": "s1", "state": "archived", "somethingNew": {"a": 1},
        "spec": {"table": "t", "action": {"type": "shred", "depth": 3}, "newKnob": true},
        "progress": {"rowsRead": 5, "newCount": 7}
    }))
    .unwrap();
    assert_eq!(status.state, "archived");
    assert_eq!(status.spec.kind(), "shred");
    assert_eq!(status.progress.rows_read, 5);
}

#[test]
fn a_status_of_an_older_app_is_read_its_missing_fields_defaulted() {
    let status: StatusAnswer =
        serde_json::from_value(json!({"id": "s1", "state": "running", "spec": {}})).unwrap();
    assert_eq!(status.progress.steps_done, 0);
    assert!(status.errors.is_empty() && status.activity.is_none());
    assert_eq!(status.spec.kind(), "?");
}

#[test]
fn a_list_page_reads_its_entries_and_an_update_set_by_names() {
    let page: ScansPage<String> = serde_json::from_value(json!({
        "scans": [{"id": "a", "state": "running", "action": "update",
                   "target": {"set": ["N", "S"], "remove": ["Old"]}, "progress": {"rowsRead": 3},
                   "startedAt": null, "finishedAt": null}],
        "next": null, "rejectedMessages": [{"anything": 1}]
    }))
    .unwrap();
    let entry: &ListEntry<String> = &page.scans[0];
    let set = entry.target.set.as_ref().unwrap();
    assert_eq!(set.names(), vec!["N", "S"]);
    assert_eq!(entry.progress.rows_read, 3);
    assert!(page.unreadable_scans.is_empty());
    assert_eq!(page.rejected_messages.len(), 1);
}

#[test]
fn a_states_name_is_its_json() {
    for state in State::ALL {
        assert_eq!(serde_json::to_value(state).unwrap(), json!(state.name()));
        assert_eq!(State::named(state.name()), Some(state));
    }
    assert_eq!(State::named("Running"), None);
}

#[test]
fn a_list_entry_shows_the_listed_counts_of_the_progress_and_reads_it_whole() {
    let status: StatusAnswer = serde_json::from_value(json!({
        "id": "s1", "state": "running", "spec": {},
        "progress": {"rowsRead": 5, "attemptsFailed": 2, "rowsPerSecond": 1.5, "queries": 9}
    }))
    .unwrap();
    let entry = ListEntry {
        id: "s1".into(),
        state: State::Running,
        table: "t".into(),
        connection: "c".into(),
        action: "count".into(),
        target: Default::default(),
        created_at: "2026-11-20T10:00:00Z".into(),
        started_at: None,
        finished_at: None,
        progress: status.progress.clone(),
        status: "/api/scans/s1".into(),
        dry_run: false,
        recent_rows_per_second: None,
        scope: None,
        filter: None,
        older_than: None,
        import: None,
    };
    let written = serde_json::to_value(&entry).unwrap();
    assert_eq!(
        written["progress"],
        json!({"rowsRead": 5, "rowsActed": 0, "rowsSkipped": 0, "rowsFailed": 0,
               "partitions": 0, "stepsDone": 0, "stepsPending": 0, "stepsFailed": 0,
               "requestsThrottled": 0, "rowsPerSecond": 1.5})
    );
    let read: ListEntry<String> = serde_json::from_value(written).unwrap();
    assert_eq!(read.progress.rows_read, 5);
    assert_eq!(read.progress.attempts_failed, 0, "not listed");
    // Every listed count is a count of the status's progress.
    let Value::Object(all) = serde_json::to_value(Progress::default()).unwrap() else {
        panic!("progress is an object");
    };
    for name in LISTED_COUNTS {
        assert!(all.contains_key(name), "{name}");
    }
}

/// The control routes' answers as the handler wrote them with `json!` before they were typed
/// (keys sorted, as every answer goes out through a `Value`).
#[test]
fn the_control_answers_write_what_the_handler_wrote() {
    use super::{RejectedRemovalRound, RemovalRound, ResumeRound, Retried, StateAnswer};
    fn written(answer: impl serde::Serialize) -> String {
        serde_json::to_value(answer).unwrap().to_string()
    }
    let (id, running) = (String::from("s1"), State::Running);
    assert_eq!(
        written(StateAnswer {
            id: id.clone(),
            state: State::Pausing,
        }),
        r#"{"id":"s1","state":"pausing"}"#
    );
    assert_eq!(
        written(ResumeRound {
            id: id.clone(),
            state: running,
            sent: 500,
            more: true,
        }),
        r#"{"id":"s1","more":true,"sent":500,"state":"running"}"#
    );
    assert_eq!(
        written(Retried {
            id: id.clone(),
            state: running,
            retried: 3,
            more: false,
        }),
        r#"{"id":"s1","more":false,"retried":3,"state":"running"}"#
    );
    assert_eq!(
        written(RemovalRound {
            id,
            removed_rows: 4000,
            more: true,
        }),
        r#"{"id":"s1","more":true,"removedRows":4000}"#
    );
    assert_eq!(
        written(RejectedRemovalRound {
            removed: 7,
            more: false,
        }),
        r#"{"more":false,"removed":7}"#
    );
}
