//! The update action against Azurite: merged and removed properties, each row only if
//! unchanged since it was read (a row changed meanwhile is skipped and keeps its change).

mod common;

use std::collections::BTreeMap;

use common::fresh_table;
use tablescan::actions::{Change, UpdateRows};
use tablescan::storage::table::entity::{Entity, Value};
use tablescan::storage::table::query::Query;
use tablescan::storage::table::WriteMode;

fn always() -> bool {
    true
}

#[tokio::test]
async fn an_update_changes_each_row_unless_it_changed_since_it_was_read() {
    let table = fresh_table("update").await;
    for n in 0..30 {
        table
            .insert(
                &Entity::new(format!("p{}", n % 3), format!("r{n:02}"))
                    .with("Keep", Value::Int32(n))
                    .with("Old", Value::String("x".into())),
            )
            .await
            .unwrap();
    }
    let read = table.query_all(&Query::default()).await.unwrap();
    // Changed after it was read: the update must leave it alone.
    let changed = Entity::new("p1", "r01").with("Keep", Value::Int32(-1));
    table.upsert(&changed, WriteMode::Merge).await.unwrap();
    let update = UpdateRows::new(
        table.clone(),
        Change {
            set: BTreeMap::from([("Archived".to_string(), Value::Boolean(true))]),
            remove: vec!["Old".into()],
        },
    );
    let applied = update.apply(read, &always).await.unwrap();
    assert_eq!(applied.counts.acted, 29);
    assert_eq!(applied.counts.skipped, 1);
    assert_eq!(applied.finished, 30);
    for row in table.query_all(&Query::default()).await.unwrap() {
        if row.row_key == "r01" {
            assert_eq!(row.properties["Keep"], Value::Int32(-1), "kept its change");
            assert!(row.properties.contains_key("Old"), "not updated: {row:?}");
            assert!(!row.properties.contains_key("Archived"));
        } else {
            assert_eq!(row.properties.get("Archived"), Some(&Value::Boolean(true)));
            assert!(!row.properties.contains_key("Old"), "{row:?}");
            assert!(row.properties.contains_key("Keep"), "{row:?}");
        }
    }
}
