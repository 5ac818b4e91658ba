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
