//! The form the ledger stores a spec in (ScanSpec's derived serde), pinned: scans started by
//! an earlier version are read back from it, so it changes only on purpose.

use super::*;

fn settings(name: &str) -> Option<String> {
    matches!(name, "AzureWebJobsStorage" | "Other").then(|| "UseDevelopmentStorage=true".into())
}

/// Each request, and the JSON its spec is stored as.
const STORED: [(&str, &str); 8] = [
    (
        r#"{"table":"orders","action":{"type":"count"}}"#,
        r#"{"table":"orders","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"count"}}"#,
    ),
    (
        r#"{"table":"orders","connection":"Other","strategy":"serial","pageSize":5,
            "scope":{"prefix":"a","after":"a1","before":"a9","rowPrefix":"r","rowAfter":"r1",
            "rowBefore":"r9"},"select":["x","PartitionKey","y"],"maxRowsPerSecond":100,
            "maxRowFailures":3,"filter":"n  eq 1","olderThan":"P90D",
            "action":{"type":"copy","table":"backup","connection":"Other","mode":"merge"}}"#,
        r#"{"table":"orders","connection":"Other","scope":{"prefix":"a","after":"a1","before":"a9","rowPrefix":"r","rowAfter":"r1","rowBefore":"r9"},"strategy":"serial","pageSize":5,"select":["x","y"],"action":{"type":"copy","table":"backup","connection":"Other","mode":"merge"},"maxRowsPerSecond":100,"maxRowFailures":3,"filter":"n eq 1","olderThan":{"age":"P90D","before":"2026-08-26T12:00:00.0000000Z"}}"#,
    ),
    (
        r#"{"table":"orders","dryRun":true,"action":{"type":"delete"}}"#,
        r#"{"table":"orders","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"delete"},"dryRun":true}"#,
    ),
    (
        r#"{"table":"orders","action":{"type":"update","set":{"n":1,"d@odata.type":"Edm.DateTime",
            "d":"2026-01-01T00:00:00Z"},"remove":["old"]}}"#,
        r#"{"table":"orders","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"update","set":{"d":"2026-01-01T00:00:00Z","d@odata.type":"Edm.DateTime","n":1},"remove":["old"]}}"#,
    ),
    (
        r#"{"table":"orders","action":{"type":"enqueue","queues":["q-a","q-b"],
            "connection":"Other","per":"partition","encoding":"none","rowsPerMessage":10}}"#,
        r#"{"table":"orders","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"enqueue","queue":"q-a","queues":["q-a","q-b"],"connection":"Other","per":"partition","encoding":"none","rowsPerMessage":10}}"#,
    ),
    (
        r#"{"table":"orders","action":{"type":"partition-keys","queue":"keys"}}"#,
        r#"{"table":"orders","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"partition-keys","queue":"keys","connection":"AzureWebJobsStorage","encoding":"base64"}}"#,
    ),
    (
        r#"{"table":"orders","action":{"type":"export","container":"backups","prefix":"day/1",
            "compression":"none"}}"#,
        r#"{"table":"orders","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"export","container":"backups","prefix":"day/1/","connection":"AzureWebJobsStorage","compression":"none"}}"#,
    ),
    (
        r#"{"import":{"container":"backups","prefix":"day/1/manifest.json"},
            "action":{"type":"copy","table":"restored","mode":"insert"}}"#,
        r#"{"table":"","connection":"AzureWebJobsStorage","scope":{"prefix":"","after":null,"before":null},"strategy":"prefix","pageSize":1000,"select":null,"action":{"type":"copy","table":"restored","connection":"AzureWebJobsStorage","mode":"insert"},"import":{"container":"backups","prefix":"day/1/","connection":"AzureWebJobsStorage"}}"#,
    ),
];

#[test]
fn a_spec_is_stored_as_it_always_was_and_read_back() {
    let now = time::macros::datetime!(2026-11-24 12:00:00 UTC);
    for (request, stored) in STORED {
        let spec = ScanSpec::parse_at(request, &settings, None, now)
            .unwrap_or_else(|e| panic!("{request} is refused: {e}"));
        assert_eq!(serde_json::to_string(&spec).unwrap(), stored, "{request}");
        let read: ScanSpec = serde_json::from_str(stored).unwrap();
        assert_eq!(read, spec, "{stored}");
    }
}

/// The words a request names its choices by are those the stored form writes.
#[test]
fn a_request_names_choices_as_the_stored_form_writes_them() {
    use crate::kinds::Named;
    fn same<T: Named + serde::Serialize>() {
        for (word, value) in T::NAMES {
            assert_eq!(serde_json::to_value(value).unwrap(), *word);
        }
    }
    same::<tablescan_engine::step::Strategy>();
    same::<CopyMode>();
    same::<Per>();
    same::<Encoding>();
    same::<Compression>();
}
