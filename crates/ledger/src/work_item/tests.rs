//! The work-item format across the split of the task: table ranges in the engine, an import's
//! tasks here. Messages and ids are pinned to what the version before the split wrote (one
//! enum of all four kinds), and a bad task still fails with serde's words for it.

use super::*;
use tablescan_engine::item::DecodeError;
use tablescan_engine::keys::{KeyRange, Lower, Upper};
use tablescan_storage::table::query::Continuation;

const SCAN: &str = "0123456789abcdef0123456789abcdef";

fn blob(offset: u64, skip: u32) -> ImportTask {
    ImportTask::ExportBlob {
        name: "exports/data/x/blob-1.ndjson.gz".into(),
        bytes: 1234,
        sha256: "q83vEjRWeJA=".into(),
        offset,
        skip,
    }
}

fn import_root() -> WorkItem {
    WorkItem::root(SCAN, KeyRange::all(), "")
        .with_task(Task::Import(ImportTask::ExportPart { part: 0, from: 0 }))
}

/// The same ids as `tablescan_engine::item`'s pinned ones for a table's items, and pinned ids
/// for an import's (computed from the canonical JSON the version before the split hashed).
#[test]
fn ids_are_the_ones_the_version_before_the_split_computed() {
    let root = WorkItem::root(SCAN, KeyRange::all(), "");
    let child = root.follow_up(ReadRange::Partition {
        partition_key: "p1".into(),
        row_keys: KeyRange {
            lower: Lower::Excluded("r0019".into()),
            upper: Upper::Unbounded,
        },
        prefix: "r".into(),
        cursor: Some(Continuation {
            next_partition_key: "1!8!cDE-".into(),
            next_row_key: Some("1!8!cjA-".into()),
        }),
        unstarted: false,
    });
    assert_eq!(root.id(), "EH4i0xkuu7jzSyIxR2Lc-JSt");
    assert_eq!(child.id(), "DoRoYMfPHvYXE-OMpWBfKn-Q");

    let import = import_root();
    assert_eq!(import.id(), "PgCa_hsVMLSs6HLDpV4S8zxt");
    let next_part = import.follow_up(ImportTask::ExportPart { part: 2, from: 250 });
    assert_eq!(next_part.id(), "BTZ9hc3Avf8zHf-xlKZNme_Y");
    assert_eq!(
        import.follow_up(blob(0, 0)).id(),
        "g2pUODwAtMCJwsviH4PeWHMY"
    );
    assert_eq!(
        import.follow_up(blob(512, 3)).id(),
        "V2gzj5GPU_PFZ3SUsaRFNXIw"
    );
}

/// Messages as the version before the split wrote them, byte for byte: read, they are the
/// items they were, and written again, the same text.
#[test]
fn messages_are_the_ones_the_version_before_the_split_wrote_and_read() {
    let cases: [(&str, WorkItem); 4] = [
        (
            r#"{"v":1,"scan":"s","depth":0,"task":{"kind":"export-part","part":0,"from":0}}"#,
            WorkItem::root("s", KeyRange::all(), "")
                .with_task(ImportTask::ExportPart { part: 0, from: 0 }.into()),
        ),
        (
            r#"{"v":1,"scan":"s","depth":1,"task":{"kind":"export-blob","name":"exports/data/x/blob-1.ndjson.gz","bytes":1234,"sha256":"q83vEjRWeJA="}}"#,
            WorkItem::root("s", KeyRange::all(), "").follow_up(blob(0, 0)),
        ),
        (
            r#"{"v":1,"scan":"s","depth":1,"task":{"kind":"export-blob","name":"exports/data/x/blob-1.ndjson.gz","bytes":1234,"sha256":"q83vEjRWeJA=","offset":512,"skip":3},"back":2}"#,
            WorkItem {
                given_back: 2,
                ..WorkItem::root("s", KeyRange::all(), "").follow_up(blob(512, 3))
            },
        ),
        (
            r#"{"v":1,"scan":"s","depth":0,"task":{"kind":"range","pk":{"lo":"min","hi":"max"},"prefix":""}}"#,
            WorkItem::root("s", KeyRange::all(), ""),
        ),
    ];
    for (text, item) in cases {
        assert_eq!(WorkItem::decode(text).as_ref(), Ok(&item), "{text}");
        assert_eq!(item.encode(), text);
    }
}

/// A table's item is the same message whether the engine or the ledger writes it, and each
/// reads the other's.
#[test]
fn a_tables_item_is_the_engines_message() {
    let engines: tablescan_engine::WorkItem =
        tablescan_engine::WorkItem::root("s", KeyRange::with_prefix("a"), "a").follow_up(
            ReadRange::Range {
                partition_keys: KeyRange::with_prefix("ab"),
                prefix: "ab".into(),
                cursor: Some(Continuation {
                    next_partition_key: "1!4!YWI-".into(),
                    next_row_key: None,
                }),
                last_partition: Some("ab".into()),
            },
        );
    let ours = engines.with_task(Task::Table(engines.task.clone()));
    assert_eq!(ours.encode(), engines.encode());
    assert_eq!(ours.id(), engines.id());
    assert_eq!(WorkItem::decode(&engines.encode()), Ok(ours.clone()));
    assert_eq!(
        tablescan_engine::WorkItem::decode(&ours.encode()),
        Ok(engines)
    );
}

fn malformed(task: &str) -> String {
    let text = format!(r#"{{"v":1,"scan":"s","depth":0,"task":{task}}}"#);
    match WorkItem::decode(&text) {
        Err(DecodeError::Malformed(why)) => why,
        other => panic!("{task}: {other:?}"),
    }
}

/// A bad task fails its message alone, in the words the version before the split used (each
/// expected text is what it said), but for a task that is no object, which named a Rust type.
#[test]
fn a_bad_task_is_refused_with_serdes_words_for_it() {
    let cases = [
        ("{}", "missing field `kind`"),
        ("[]", "missing field `kind`"),
        (r#"{"kind":1}"#, "invalid type: integer `1`, expected variant identifier"),
        (
            r#"{"kind":"nope"}"#,
            "unknown variant `nope`, expected one of `range`, `partition`, `export-part`, `export-blob`",
        ),
        (r#"{"kind":"export-part","part":1}"#, "missing field `from`"),
        (
            r#"{"kind":"export-part","part":1,"from":2,"x":3}"#,
            "unknown field `x`, expected `part` or `from`",
        ),
        (
            r#"{"kind":"export-part","part":-1,"from":2}"#,
            "invalid value: integer `-1`, expected u32",
        ),
        (r#"{"kind":"export-blob","name":"n","bytes":1}"#, "missing field `sha256`"),
        (r#"{"kind":"range","prefix":""}"#, "missing field `pk`"),
        (
            r#"{"kind":"partition","part":1,"from":0}"#,
            "unknown field `from`, expected one of `pk`, `rk`, `prefix`, `cursor`, `new`",
        ),
        (
            r#"5"#,
            "invalid type: integer `5`, expected a work item's task (an object with its kind)",
        ),
        (
            "null",
            "invalid type: null, expected a work item's task (an object with its kind)",
        ),
    ];
    for (task, expected) in cases {
        assert_eq!(malformed(task), expected, "{task}");
    }
}

/// As before, a task may be read from an array, its kind first (serde's form of an internally
/// tagged enum); it is written as an object.
#[test]
fn a_task_in_an_array_reads_as_before() {
    let item =
        WorkItem::decode(r#"{"v":1,"scan":"s","depth":0,"task":["export-part",1,2]}"#).unwrap();
    assert_eq!(
        item.task,
        Task::Import(ImportTask::ExportPart { part: 1, from: 2 })
    );
    assert_eq!(
        malformed(r#"["nope"]"#),
        "unknown variant `nope`, expected one of `range`, `partition`, `export-part`, `export-blob`"
    );
    assert_eq!(
        malformed("[1]"),
        "invalid type: integer `1`, expected variant identifier"
    );
}

#[test]
fn only_an_imports_task_is_an_import() {
    assert!(import_root().task.is_import());
    assert!(!WorkItem::root("s", KeyRange::all(), "").task.is_import());
}
