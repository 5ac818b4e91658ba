//! Filters through devhost on Azurite: counts with filters on every EDM type, checked against
//! the rows themselves (plain Rust, not the project's own filter evaluator); a retention delete
//! of rows older than an age leaves exactly the newer ones; a bad filter is a 400 that says
//! where.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{EdmDateTime, Entity, Value as Edm};
use tablescan::storage::table::query::Query;

/// 240 rows in 24 partitions, each with a property of every EDM type derived from its number.
fn typed_rows() -> Vec<Entity> {
    (0..240i64)
        .map(|n| {
            let day = 1 + (n % 28);
            Entity::new(format!("part{:02}", n % 24), format!("row{n:03}"))
                .with("Name", Edm::String(format!("name-{}", n % 10)))
                .with("Small", Edm::Int32((n % 50) as i32))
                .with("Big", Edm::Int64(n * 10_000_000_000))
                .with("Ratio", Edm::Double(n as f64 / 7.0))
                .with("Even", Edm::Boolean(n % 2 == 0))
                .with(
                    "When",
                    Edm::DateTime(
                        EdmDateTime::parse(&format!("2025-02-{day:02}T10:00:00Z")).unwrap(),
                    ),
                )
                .with(
                    "Id",
                    Edm::Guid(uuid::Uuid::from_u128(
                        0x4185404A_5818_48C3_B9BE_000000000000 + n as u128,
                    )),
                )
                .with("Data", Edm::Binary(vec![(n % 4) as u8, 0xAB]))
        })
        .collect()
}

fn number_of(row: &Entity) -> i64 {
    row.row_key[3..].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn counts_with_filters_on_every_type_match_the_rows_themselves() {
    let rows = typed_rows();
    let source = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    type Test = fn(&Entity) -> bool;
    let cases: Vec<(&str, Test)> = vec![
        ("Name eq 'name-3'", |r| number_of(r) % 10 == 3),
        ("Small lt 5", |r| number_of(r) % 50 < 5),
        ("Big ge 2000000000000L", |r| {
            number_of(r) * 10_000_000_000 >= 2_000_000_000_000
        }),
        ("Ratio gt 30.5", |r| number_of(r) as f64 / 7.0 > 30.5),
        ("Even eq false", |r| number_of(r) % 2 == 1),
        ("When lt datetime'2025-02-04T00:00:00Z'", |r| {
            1 + number_of(r) % 28 < 4
        }),
        ("Id eq guid'4185404a-5818-48c3-b9be-000000000011'", |r| {
            number_of(r) == 0x11
        }),
        ("Data eq X'02ab'", |r| number_of(r) % 4 == 2),
        ("PartitionKey ge 'part20' and RowKey lt 'row100'", |r| {
            number_of(r) % 24 >= 20 && number_of(r) < 100
        }),
        (
            "not (Even eq true) and (Small lt 10 or Name eq 'name-4')",
            |r| {
                let n = number_of(r);
                n % 2 == 1 && (n % 50 < 10 || n % 10 == 4)
            },
        ),
        ("Missing eq 'x'", |_| false),
        ("Small ge 0", |_| true),
    ];
    for (filter, test) in cases {
        let status = host
            .run(
                json!({"table": source.name(), "pageSize": 20, "filter": filter,
                "action": {"type": "count"}}),
            )
            .await;
        assert_eq!(status["state"], "succeeded", "{filter}: {status}");
        let matching: Vec<&Entity> = rows.iter().filter(|r| test(r)).collect();
        let partitions: BTreeSet<&str> =
            matching.iter().map(|r| r.partition_key.as_str()).collect();
        assert_eq!(
            status["result"],
            json!({"rows": matching.len(), "partitions": partitions.len()}),
            "{filter}"
        );
        assert_eq!(
            status["progress"]["rowsRead"],
            matching.len() as u64,
            "{filter}"
        );
    }
    // RowKey bounds in the scope, alone and with a PartitionKey prefix.
    type RowTest = fn(i64) -> bool;
    let bounded: Vec<(Value, RowTest)> = vec![
        (json!({"rowPrefix": "row1"}), |n| (100..200).contains(&n)),
        (json!({"rowAfter": "row050", "rowBefore": "row075"}), |n| {
            n > 50 && n < 75
        }),
        (
            json!({"prefix": "part1", "rowPrefix": "row2", "rowAfter": "row210"}),
            |n| (10..20).contains(&(n % 24)) && n > 210 && n < 300,
        ),
    ];
    for (scope, test) in bounded {
        let status = host
            .run(
                json!({"table": source.name(), "pageSize": 20, "scope": scope,
                "action": {"type": "count"}}),
            )
            .await;
        let matching: Vec<&Entity> = rows.iter().filter(|r| test(number_of(r))).collect();
        let partitions: BTreeSet<&str> =
            matching.iter().map(|r| r.partition_key.as_str()).collect();
        assert_eq!(
            status["result"],
            json!({"rows": matching.len(), "partitions": partitions.len()}),
            "{scope}: {status}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retention_delete_leaves_exactly_the_newer_rows() {
    // The host first: the age is measured from the start of the scan, which must follow the
    // newer rows' writes closely.
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let old: Vec<Entity> = typed_rows().into_iter().step_by(2).collect();
    let table = table_with(&old).await;
    // Rows written 8 s later: younger than the 4 s the scan keeps.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let new: Vec<Entity> = typed_rows()
        .into_iter()
        .skip(1)
        .step_by(2)
        .map(|r| r.with("Fresh", Edm::Boolean(true)))
        .collect();
    load(&table, &new).await;
    let dry = host
        .run(
            json!({"table": table.name(), "pageSize": 25, "olderThan": "PT4S", "dryRun": true,
            "action": {"type": "delete"}}),
        )
        .await;
    assert_eq!(dry["state"], "succeeded", "{dry}");
    assert_eq!(dry["progress"]["rowsActed"], old.len() as u64, "{dry}");
    assert_eq!(dry["spec"]["olderThan"]["age"], "PT4S", "{dry}");
    // The delete at the very moment the dry run resolved (a later olderThan would move it).
    let before = dry["spec"]["olderThan"]["before"].as_str().unwrap();
    let delete = host
        .run(json!({"table": table.name(), "pageSize": 25,
            "filter": format!("Timestamp lt datetime'{before}'"),
            "action": {"type": "delete"}}))
        .await;
    assert_eq!(delete["state"], "succeeded", "{delete}");
    assert_eq!(
        delete["progress"]["rowsActed"],
        old.len() as u64,
        "{delete}"
    );
    let left = table.query_all(&Query::default()).await.unwrap();
    assert_eq!(keys(&left), keys(&new), "exactly the newer rows are left");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_filter_is_a_400_that_says_where() {
    let table = table_with(&typed_rows()[..10]).await;
    let host = Host::start(1, &[]);
    for (filter, position) in [
        ("Name eq name-3", 9),
        ("Small < 5", 7),
        ("(Even eq true", 14),
        ("Big ge 20000000000", 8),
        ("When lt datetime'not a date'", 9),
        ("PartitionKey eq 3", 17),
        ("", 1),
        ("Name", 5),
        ("Name eq", 8),
        ("Name equals 'a'", 6),
        ("Name EQ 'a'", 6),
        ("Name eq 'a", 9),
        ("'a' eq Name", 1),
        ("Name eq 'a')", 12),
        ("Name eq 'a' and", 16),
        ("Name eq 'a' xor Small eq 1", 13),
        ("Ratio lt 1.2.3", 10),
        ("Id eq guid'123'", 7),
        ("Data eq X'abc'", 9),
        ("Timestamp lt '2025-01-01'", 14),
    ] {
        let (status, body) = host
            .post_scan(
                &json!({"table": table.name(), "filter": filter, "action": {"type": "count"}}),
            )
            .await;
        assert_eq!(status, 400, "{filter}");
        assert_eq!(body["error"]["field"], "filter", "{filter}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("at character {position}:")),
            "{filter}: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_changes_exactly_the_matching_rows() {
    let rows = typed_rows();
    let table = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let request = |dry_run: bool| {
        json!({"table": table.name(), "pageSize": 20, "filter": "Small lt 5", "dryRun": dry_run,
            "action": {"type": "update", "set": {"Flag": "checked", "Level": 3, "Level@odata.type": "Edm.Int64"},
                "remove": ["Data"]}})
    };
    let matching: BTreeSet<(String, String)> = rows
        .iter()
        .filter(|r| number_of(r) % 50 < 5)
        .map(|r| (r.partition_key.clone(), r.row_key.clone()))
        .collect();
    let dry = host.run(request(true)).await;
    assert_eq!(dry["state"], "succeeded", "{dry}");
    assert_eq!(dry["progress"]["rowsActed"], matching.len() as u64, "{dry}");
    let untouched = table.query_all(&Query::default()).await.unwrap();
    assert!(untouched.iter().all(|r| !r.properties.contains_key("Flag")));
    let status = host.run(request(false)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(
        status["progress"]["rowsActed"],
        matching.len() as u64,
        "{status}"
    );
    for row in table.query_all(&Query::default()).await.unwrap() {
        let key = (row.partition_key.clone(), row.row_key.clone());
        if matching.contains(&key) {
            assert_eq!(
                row.properties["Flag"],
                Edm::String("checked".into()),
                "{key:?}"
            );
            assert_eq!(row.properties["Level"], Edm::Int64(3), "{key:?}");
            assert!(!row.properties.contains_key("Data"), "{key:?}");
            assert!(
                row.properties.contains_key("Ratio"),
                "the rest kept: {key:?}"
            );
        } else {
            assert!(!row.properties.contains_key("Flag"), "{key:?}");
            assert!(row.properties.contains_key("Data"), "{key:?}");
        }
    }
    // Keys cannot be changed, and select does not go with an update.
    for (action, field) in [
        (
            json!({"type": "update", "set": {"RowKey": "x"}}),
            "action.set.RowKey",
        ),
        (json!({"type": "update"}), "action.set"),
        (
            json!({"type": "update", "remove": ["A"], "set": {"A": 1}}),
            "action.remove[0]",
        ),
    ] {
        let (status, body) = host
            .post_scan(&json!({"table": table.name(), "action": action}))
            .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_takes_the_filter() {
    let rows = typed_rows();
    let source = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    // Rows 0-9 of every 50, in every partition whose number ends in 0-9 of 24.
    let filter = "Small lt 10";
    let matching: Vec<&Entity> = rows.iter().filter(|r| number_of(r) % 50 < 10).collect();
    let matching_keys: BTreeSet<(String, String)> = matching
        .iter()
        .map(|r| (r.partition_key.clone(), r.row_key.clone()))
        .collect();
    let partitions: BTreeSet<String> = matching.iter().map(|r| r.partition_key.clone()).collect();

    let target = unique("filtered");
    let copy = host
        .run(
            json!({"table": source.name(), "pageSize": 20, "filter": filter,
            "action": {"type": "copy", "table": target}}),
        )
        .await;
    assert_eq!(copy["state"], "succeeded", "{copy}");
    let copied = tables()
        .table(&target)
        .unwrap()
        .query_all(&Query::default())
        .await
        .unwrap();
    assert_eq!(
        keys(&copied),
        matching_keys,
        "the copy holds exactly the matching rows"
    );

    let queue = unique("matching-");
    let enqueue = host
        .run(
            json!({"table": source.name(), "pageSize": 20, "filter": filter,
            "action": {"type": "enqueue", "queue": queue}}),
        )
        .await;
    assert_eq!(enqueue["state"], "succeeded", "{enqueue}");
    let sent: Vec<(String, String)> = drain_queue(&queue, MessageEncoding::Base64)
        .await
        .iter()
        .map(|m| {
            (
                m["PartitionKey"].as_str().unwrap().to_string(),
                m["RowKey"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(sent.len(), matching.len(), "one message per matching row");
    assert_eq!(sent.into_iter().collect::<BTreeSet<_>>(), matching_keys);

    let key_queue = unique("holding-");
    let listed = host
        .run(
            json!({"table": source.name(), "pageSize": 20, "filter": filter,
            "action": {"type": "partition-keys", "queue": key_queue, "encoding": "none"}}),
        )
        .await;
    assert_eq!(listed["state"], "succeeded", "{listed}");
    let keys_sent: Vec<String> = drain_queue(&key_queue, MessageEncoding::Text)
        .await
        .iter()
        .map(|m| m["PartitionKey"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        keys_sent.len(),
        partitions.len(),
        "one message per partition holding a match"
    );
    assert_eq!(keys_sent.into_iter().collect::<BTreeSet<_>>(), partitions);
}
