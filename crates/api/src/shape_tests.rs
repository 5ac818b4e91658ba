//! The request's shape as serde reads it: a field of the wrong kind is refused by its path, in
//! the parser's words, and what depends on other fields is refused as it always was.

use super::*;

fn settings(name: &str) -> Option<String> {
    (name == DEFAULT_CONNECTION).then(|| "UseDevelopmentStorage=true".to_string())
}

fn refusal(body: &str) -> SpecError {
    ScanSpec::parse(body, &settings).expect_err(body)
}

#[test]
fn a_field_of_the_wrong_kind_is_named_by_its_path() {
    for (body, field, message) in [
        (
            r#"{"table":"tab1","action":{"type":"enqueue","queue":"qq1","rowsPerMessage":"5"}}"#,
            "action.rowsPerMessage",
            "must be a number from 1 to 1000",
        ),
        (
            r#"{"table":"tab1","scope":{"after":5},"action":{"type":"count"}}"#,
            "scope.after",
            "must be a string",
        ),
        (
            r#"{"table":"tab1","select":["a",null],"action":{"type":"count"}}"#,
            "select[1]",
            "must be a string",
        ),
        (
            r#"{"table":"tab1","action":{"type":"enqueue","queues":["qq1","qq2",3]}}"#,
            "action.queues[2]",
            "must be a queue name",
        ),
        (
            r#"{"table":"tab1","action":{"type":"update","remove":[{}]}}"#,
            "action.remove[0]",
            "must be a property name",
        ),
        (
            r#"{"table":"tab1","action":{"type":"update","set":[1]}}"#,
            "action.set",
            "must be an object of properties and values",
        ),
        (
            r#"{"import":{"container":"bk1","prefix":7},"action":{"type":"count"}}"#,
            "import.prefix",
            "must be a string",
        ),
        (
            r#"{"table":"tab1","action":{"type":"copy","table":"tab2","mode":"upsert"}}"#,
            "action.mode",
            "must be \"replace\", \"merge\" or \"insert\", not \"upsert\"",
        ),
        (
            r#"{"table":"tab1","dryRun":1,"action":{"type":"delete"}}"#,
            "dryRun",
            "must be true or false",
        ),
        (
            r#"{"table":"tab1","action":{"type":5}}"#,
            "action.type",
            "must be a string",
        ),
    ] {
        let e = refusal(body);
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            (field, message),
            "{body}"
        );
    }
}

/// serde would read a struct from an array of its fields in order; a request's parts are
/// objects only.
#[test]
fn an_array_is_not_an_object() {
    for (body, field) in [
        (
            r#"{"table":"tab1","scope":["a"],"action":{"type":"count"}}"#,
            "scope",
        ),
        (r#"{"table":"tab1","action":["count"]}"#, "action"),
        (r#"{"table":"tab1","action":["copy","tab2"]}"#, "action"),
        (r#"{"import":["bk1"],"action":{"type":"count"}}"#, "import"),
    ] {
        assert_eq!(refusal(body).field, field, "{body}");
    }
}

/// A missing field is named before an unknown one, as before: the body of another function
/// posted to StartScan is answered "table: is required".
#[test]
fn a_missing_field_is_named_before_an_unknown_one() {
    let e = refusal(r#"{"name":"Anjana","age":12}"#);
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("table", "is required")
    );
    let e = refusal(r#"{"table":"tab1","action":{"type":"copy","extra":1}}"#);
    assert_eq!(e.field, "action.table");
    let e = refusal(r#"{"table":"tab1","action":{"type":"count","table":"tab2"}}"#);
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("action.table", "is not a known field")
    );
}

/// Beside an import a `table` or `connection` is refused as out of place whatever it holds
/// (`null` too), and so is a `queue` beside `queues`.
#[test]
fn a_field_out_of_place_is_refused_as_such_whatever_it_holds() {
    for value in ["null", "5", "[]", "\"tab1\""] {
        for field in ["table", "connection"] {
            let body = format!(
                r#"{{"import":{{"container":"bk1"}},"{field}":{value},"action":{{"type":"count"}}}}"#
            );
            let e = refusal(&body);
            assert_eq!(e.field, field, "{body}");
            assert!(e.message.contains("leave it out"), "{body}: {e}");
        }
        let body = format!(
            r#"{{"table":"tab1","action":{{"type":"enqueue","queues":["qq1"],"queue":{value}}}}}"#
        );
        let e = refusal(&body);
        assert_eq!(e.field, "action.queues", "{body}");
    }
    // Elsewhere `null` is as if the field were absent.
    let spec = ScanSpec::parse(
        r#"{"table":"tab1","connection":null,"scope":null,"select":null,"dryRun":null,
            "action":{"type":"enqueue","queue":"qq1","queues":null,"per":null}}"#,
        &settings,
    )
    .unwrap();
    assert_eq!(spec.connection, DEFAULT_CONNECTION);
    assert_eq!(spec.action.target_queues(), ["qq1"]);
}
