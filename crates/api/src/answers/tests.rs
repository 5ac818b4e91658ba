//! The answers read as the CLI reads them: an app of another version may add fields, lack
//! some, or name a state or an action this crate does not know.

use serde_json::json;

use super::{ListEntry, ScansPage, StatusAnswer};

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

/// The control routes' answers as the handler wrote them with `json!` before they were typed
/// (keys sorted, as every answer goes out through a `Value`).
#[test]
fn the_control_answers_write_what_the_handler_wrote() {
    use super::{RejectedRemovalRound, RemovalRound, ResumeRound, Retried, StateAnswer};
    use crate::answers::State;
    let text = |answer: serde_json::Value| answer.to_string();
    let state = StateAnswer {
        id: "s1".into(),
        state: State::Pausing,
    };
    assert_eq!(
        text(serde_json::to_value(&state).unwrap()),
        r#"{"id":"s1","state":"pausing"}"#
    );
    let resumed = ResumeRound {
        id: "s1".into(),
        state: State::Running,
        sent: 500,
        more: true,
    };
    assert_eq!(
        text(serde_json::to_value(&resumed).unwrap()),
        r#"{"id":"s1","more":true,"sent":500,"state":"running"}"#
    );
    let retried = Retried {
        id: "s1".into(),
        state: State::Running,
        retried: 3,
        more: false,
    };
    assert_eq!(
        text(serde_json::to_value(&retried).unwrap()),
        r#"{"id":"s1","more":false,"retried":3,"state":"running"}"#
    );
    let removed = RemovalRound {
        id: "s1".into(),
        removed_rows: 4000,
        more: true,
    };
    assert_eq!(
        text(serde_json::to_value(&removed).unwrap()),
        r#"{"id":"s1","more":true,"removedRows":4000}"#
    );
    let cleared = RejectedRemovalRound {
        removed: 7,
        more: false,
    };
    assert_eq!(
        text(serde_json::to_value(&cleared).unwrap()),
        r#"{"more":false,"removed":7}"#
    );
}
