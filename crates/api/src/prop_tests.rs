//! The parser on any input: arbitrary JSON, and valid requests with one part changed. It never
//! panics, and a refusal always names a field: `body`, or a path that starts at a field the
//! request gave or one it must give.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;

/// The fields a request knows at its top.
const TOP_FIELDS: [&str; 13] = [
    "import",
    "table",
    "connection",
    "scope",
    "strategy",
    "pageSize",
    "select",
    "action",
    "maxRowsPerSecond",
    "dryRun",
    "maxRowFailures",
    "filter",
    "olderThan",
];

/// Names a generated object's fields take: every field of every part of a request, and a few
/// it does not know.
const FIELD_NAMES: [&str; 36] = [
    "import",
    "table",
    "connection",
    "scope",
    "strategy",
    "pageSize",
    "select",
    "action",
    "maxRowsPerSecond",
    "dryRun",
    "maxRowFailures",
    "filter",
    "olderThan",
    "type",
    "mode",
    "queue",
    "queues",
    "per",
    "encoding",
    "rowsPerMessage",
    "container",
    "prefix",
    "compression",
    "set",
    "remove",
    "after",
    "before",
    "rowPrefix",
    "rowAfter",
    "rowBefore",
    "extra",
    "",
    "PartitionKey",
    "Timestamp",
    "n@odata.type",
    "odata.etag",
];

/// Strings a generated value takes: the words requests use, names good and bad, and oddities.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "count",
            "copy",
            "enqueue",
            "delete",
            "update",
            "partition-keys",
            "export",
            "prefix",
            "serial",
            "merge",
            "insert",
            "replace",
            "row",
            "partition",
            "base64",
            "none",
            "gzip",
            "unlimited",
            "orders",
            "queue1",
            "AzureWebJobsStorage",
            "Other",
            "Missing",
            "P90D",
            "PT12H",
            "P1Y",
            "n eq 1",
            "Name eq 'x'",
            "../x",
            "a/b",
            "Edm.Int64",
            "Edm.DateTime",
            "manifest.json",
            "",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z0-9 ./%'\\-_:=;#?\\\\\u{0}-\u{1f}\u{e9}\u{1f600}]{0,12}",
    ]
}

/// Any JSON value, a few levels deep, its objects' fields named from [`FIELD_NAMES`].
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop::sample::select(vec![0i64, 1, 2, 5, 1000, 1001, 64, 65, -1]).prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELD_NAMES.to_vec()), inner), 0..6)
                .prop_map(|fields| Value::Object(
                    fields
                        .into_iter()
                        .map(|(name, value)| (name.to_string(), value))
                        .collect::<Map<String, Value>>()
                )),
        ]
    })
}

/// Requests the parser takes, between them giving every field of every part.
fn valid_requests() -> Vec<Value> {
    vec![
        json!({"table": "orders", "action": {"type": "count"}}),
        json!({"table": "orders", "connection": "Other", "strategy": "serial", "pageSize": 5,
            "scope": {"prefix": "a", "after": "a1", "before": "a9", "rowPrefix": "r",
                "rowAfter": "r1", "rowBefore": "r9"},
            "select": ["x", "y"], "maxRowsPerSecond": 100, "maxRowFailures": 3,
            "filter": "n eq 1", "olderThan": "P90D",
            "action": {"type": "copy", "table": "backup", "connection": "Other", "mode": "merge"}}),
        json!({"table": "orders", "dryRun": true, "maxRowsPerSecond": "unlimited",
            "action": {"type": "delete"}}),
        json!({"table": "orders", "action": {"type": "update", "set": {"n": 1,
            "d@odata.type": "Edm.DateTime", "d": "2026-01-01T00:00:00Z"}, "remove": ["old"]}}),
        json!({"table": "orders", "action": {"type": "enqueue", "queues": ["q-a", "q-b"],
            "connection": "Other", "per": "partition", "encoding": "none",
            "rowsPerMessage": 10}}),
        json!({"table": "orders", "action": {"type": "enqueue", "queue": "q-a"}}),
        json!({"table": "orders", "action": {"type": "partition-keys", "queue": "keys",
            "encoding": "base64"}}),
        json!({"table": "orders", "action": {"type": "export", "container": "backups",
            "prefix": "day/1", "compression": "none", "connection": "Other"}}),
        json!({"import": {"container": "backups", "prefix": "day/1", "connection": "Other"},
            "action": {"type": "copy", "table": "restored", "mode": "insert"}}),
    ]
}

/// Every place in `value`: the path of each object field and array item (as the parser names
/// them) with the parent and the key or index under which it sits.
fn places(value: &Value, path: &str, into: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            for (key, inner) in object {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                into.push(child.clone());
                places(inner, &child, into);
            }
        }
        Value::Array(items) => {
            for (index, inner) in items.iter().enumerate() {
                let child = format!("{path}[{index}]");
                into.push(child.clone());
                places(inner, &child, into);
            }
        }
        _ => {}
    }
}

/// The value at `path` (the form [`places`] writes, with no `.` or `[` in a key).
fn at<'a>(value: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut here = value;
    for part in path.split('.') {
        let (key, indexes) = part.split_once('[').unwrap_or((part, ""));
        here = here.get_mut(key)?;
        for index in indexes.split('[').filter(|i| !i.is_empty()) {
            here = here.get_mut(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(here)
}

/// One change to a request.
#[derive(Debug, Clone)]
enum Change {
    /// The value at a place (by its index among the places) replaced.
    Replace(usize, Value),
    /// The field at a place left out.
    Remove(usize),
    /// A field added to the object at a place (or at the top).
    Add(usize, String, Value),
}

fn change() -> impl Strategy<Value = Change> {
    let place = any::<usize>();
    prop_oneof![
        (place, any_json()).prop_map(|(at, value)| Change::Replace(at, value)),
        place.prop_map(Change::Remove),
        (
            place,
            prop::sample::select(FIELD_NAMES.to_vec()),
            any_json()
        )
            .prop_map(|(at, name, value)| Change::Add(at, name.to_string(), value)),
    ]
}

/// `request` with `changes` made, each at a place picked among those it has then.
fn changed(mut request: Value, changes: &[Change]) -> Value {
    for change in changes {
        let mut all = vec![String::new()];
        places(&request, "", &mut all);
        let pick = |n: usize| all[n % all.len()].clone();
        match change {
            Change::Replace(n, value) => match pick(*n).as_str() {
                "" => request = value.clone(),
                path => {
                    if let Some(place) = at(&mut request, path) {
                        *place = value.clone();
                    }
                }
            },
            Change::Remove(n) => {
                let path = pick(*n);
                let (parent, key) = path.rsplit_once('.').unwrap_or(("", &path));
                let parent = if parent.is_empty() {
                    Some(&mut request)
                } else {
                    at(&mut request, parent)
                };
                if let Some(Value::Object(object)) = parent {
                    object.remove(key);
                }
            }
            Change::Add(n, name, value) => {
                let path = pick(*n);
                let place = if path.is_empty() {
                    Some(&mut request)
                } else {
                    at(&mut request, &path)
                };
                if let Some(Value::Object(object)) = place {
                    object.insert(name.clone(), value.clone());
                }
            }
        }
    }
    request
}

fn settings(name: &str) -> Option<String> {
    matches!(name, "AzureWebJobsStorage" | "Other").then(|| "UseDevelopmentStorage=true".into())
}

/// Parses `body`, and checks that a refusal names `body` or a place in it: the field at
/// fault, or the object that lacks it (an update's `set` names a property without its
/// `@odata.type`, so there only `action.set` is looked for).
fn parses_or_names_a_field(body: &Value) -> Result<(), TestCaseError> {
    let text = body.to_string();
    let Err(refusal) = ScanSpec::parse(&text, &settings) else {
        return Ok(());
    };
    let field = refusal.field.as_str();
    let mut all = Vec::new();
    places(body, "", &mut all);
    let (parent, _) = field.rsplit_once(['.', '[']).unwrap_or(("", field));
    let named = field == "body"
        || all.iter().any(|place| place == field)
        || (parent.is_empty() && TOP_FIELDS.contains(&field))
        || all.iter().any(|place| place == parent)
        || (field.starts_with("action.set.") && all.iter().any(|place| place == "action.set"));
    prop_assert!(named, "{text} is refused naming no place in it: {refusal}");
    prop_assert!(!refusal.message.is_empty(), "{text}: {refusal}");
    Ok(())
}

/// Text a request's might be mangled with: cut short, a bracket or quote too many, a field
/// given twice.
const SNIPPETS: [&str; 9] = [
    "}",
    "{",
    "]",
    "\"",
    ",",
    "null",
    ",\"table\":\"other\"",
    ",\"action\":{\"type\":\"delete\"}",
    ",\"type\":\"count\"",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_json_is_parsed_or_refused_naming_a_field(body in any_json()) {
        parses_or_names_a_field(&body)?;
    }

    #[test]
    fn a_changed_request_is_parsed_or_refused_naming_a_field(
        which in 0..9usize,
        changes in prop::collection::vec(change(), 1..4),
    ) {
        let body = changed(valid_requests()[which].clone(), &changes);
        parses_or_names_a_field(&body)?;
    }

    /// A request's text mangled (not JSON, or a field given twice) is refused naming `body`
    /// or the field given twice.
    #[test]
    fn mangled_text_is_parsed_or_refused_naming_a_field(
        which in 0..9usize,
        cut in any::<prop::sample::Index>(),
        snippet in prop::sample::select(SNIPPETS.to_vec()),
        truncate in any::<bool>(),
    ) {
        let mut text = valid_requests()[which].to_string();
        let at = cut.index(text.len() + 1);
        let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        if truncate {
            text.truncate(at);
        } else {
            text.insert_str(at, snippet);
        }
        if let Err(refusal) = ScanSpec::parse(&text, &settings) {
            prop_assert!(!refusal.field.is_empty() && !refusal.message.is_empty(), "{text}: {refusal}");
        }
    }
}

#[test]
fn the_valid_requests_are_valid() {
    for request in valid_requests() {
        ScanSpec::parse(&request.to_string(), &settings)
            .unwrap_or_else(|e| panic!("{request} is refused: {e}"));
    }
}
