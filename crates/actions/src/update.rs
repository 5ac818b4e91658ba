//! Update: change every row read in place, each only if it is unchanged since it was read (its
//! etag), in transactions per partition. `set` properties are merged into the row; with
//! `remove`, the row is replaced by itself without those properties (and with `set`). A row
//! changed or deleted since it was read is left alone and counted as skipped; a row the service
//! refuses (the change makes it too large, say) fails alone.

use std::collections::BTreeMap;

use crate::writes::{partition_chunks, send_transactions};
use crate::{Applied, GoOn, RowFailure};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::{Entity, Value};
use tablescan_storage::{ErrorKind, Reason, StorageError, TableClient};

/// Transactions one step keeps in flight.
pub const CONCURRENCY: usize = 8;

/// What an update does to each row.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Properties to write, with their types.
    pub set: BTreeMap<String, Value>,
    /// Properties to take away.
    pub remove: Vec<String>,
}

impl Change {
    /// Whether the whole row must be read and written back (a replace), not only merged into.
    pub fn needs_whole_rows(&self) -> bool {
        !self.remove.is_empty()
    }

    /// The transactions that update `rows` (in table order): a partition's rows per chunk, at
    /// most a transaction's 100 each, each row's write as [`Change::operation`] makes it.
    pub fn transactions(&self, rows: Vec<Entity>) -> Vec<Vec<Operation>> {
        partition_chunks(rows, |row| self.operation(row))
    }

    /// The write for `row` (read with its etag, and with every property when
    /// [`Change::needs_whole_rows`]).
    fn operation(&self, row: Entity) -> Operation {
        let if_match = row.etag.clone().map_or(IfMatch::Any, IfMatch::Etag);
        if self.remove.is_empty() {
            let mut merge = Entity::new(row.partition_key, row.row_key);
            merge.properties = self.set.clone();
            return Operation::Merge(merge, if_match);
        }
        let mut replaced = Entity::new(row.partition_key, row.row_key);
        replaced.properties = row.properties;
        for name in &self.remove {
            replaced.properties.remove(name);
        }
        for (name, value) in &self.set {
            replaced.properties.insert(name.clone(), value.clone());
        }
        Operation::Update(replaced, if_match)
    }
}

#[derive(Clone)]
pub struct UpdateRows {
    table: TableClient,
    change: Change,
}

impl UpdateRows {
    pub fn new(table: TableClient, change: Change) -> Self {
        UpdateRows { table, change }
    }

    pub fn table(&self) -> &TableClient {
        &self.table
    }

    /// Updates `rows`, in order, a partition's chunk per transaction, until `go_on` says no.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        send_transactions(
            self.change.transactions(rows),
            CONCURRENCY,
            go_on,
            |chunk| {
                let table = self.table.clone();
                async move { update_chunk(&table, chunk).await }
            },
        )
        .await
    }
}

/// Sends one partition's chunk; an operation refused because its row changed (412) or is gone
/// (404) is counted as skipped, one the service refuses as invalid (400) as failed, and the
/// rest sent again.
async fn update_chunk(
    table: &TableClient,
    mut operations: Vec<Operation>,
) -> Result<Applied, StorageError> {
    let mut outcome = Applied::default();
    while !operations.is_empty() {
        let Err(e) = table.submit_transaction(&operations).await else {
            break;
        };
        match e.kind() {
            ErrorKind::Batch { index, error } if *index < operations.len() => {
                match error.reason() {
                    Reason::NotFound(_) | Reason::PreconditionFailed => {
                        operations.remove(*index);
                        outcome.counts.skipped += 1;
                    }
                    Reason::BadRequest => {
                        let refused = operations.remove(*index);
                        let (partition_key, row_key) = refused.keys();
                        outcome.fail(RowFailure::new(
                            partition_key,
                            row_key,
                            format!("the service refused the change: {error}"),
                        ));
                    }
                    _ => return Err(e),
                }
            }
            _ => return Err(e),
        }
    }
    outcome.counts.acted = operations.len() as u64;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Entity {
        let mut row = Entity::new("p", "r")
            .with("Keep", Value::Int32(1))
            .with("Old", Value::String("x".into()));
        row.etag = Some("W/\"1\"".into());
        row
    }

    #[test]
    fn a_set_merges_and_a_remove_replaces_on_the_rows_etag() {
        let set = BTreeMap::from([("New".to_string(), Value::Boolean(true))]);
        let merge = Change {
            set: set.clone(),
            remove: Vec::new(),
        };
        match merge.operation(row()) {
            Operation::Merge(e, IfMatch::Etag(etag)) => {
                assert_eq!(etag, "W/\"1\"");
                assert_eq!(e.properties, set);
            }
            other => panic!("{other:?}"),
        }
        let replace = Change {
            set,
            remove: vec!["Old".into()],
        };
        assert!(replace.needs_whole_rows());
        match replace.operation(row()) {
            Operation::Update(e, IfMatch::Etag(_)) => {
                let names: Vec<&String> = e.properties.keys().collect();
                assert_eq!(names, ["Keep", "New"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
