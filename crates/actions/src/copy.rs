//! Copy: write every row into a target table, in entity group transactions per partition.
//!
//! Three modes decide what happens to a row the target holds already: `replace` (the copy's
//! row replaces it whole), `merge` (the copy's properties are merged into it, the others kept)
//! and `insert` (it is kept as it is). Each is safe to repeat: a step that runs again writes
//! the same rows the same way.
//!
//! A row the target refuses as invalid (a 400 for that operation of a transaction) fails
//! alone: it is reported and the rest of its transaction is sent again without it.

use std::collections::HashMap;

use crate::writes::{by_partition, send_transactions};
use crate::{Applied, GoOn, RowFailure};
use tablescan_storage::table::batch::{Operation, MAX_BODY_BYTES, MAX_OPERATIONS};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::filter::{Comparison, Filter};
use tablescan_storage::table::query::Query;
use tablescan_storage::{ErrorKind, Reason, StorageError, TableClient};

/// Transactions one step keeps in flight. A page of 1,000 rows with three or four rows per
/// partition needs ~300 transactions of ~30 ms each: 32 at once write it in about the time the
/// next page takes to read (~140 ms), so a copy step runs at the speed of its reads.
pub const CONCURRENCY: usize = 32;
/// Room per operation for the request line and headers around its JSON body.
const OPERATION_OVERHEAD: usize = 512;
/// How often a transaction in `insert` mode is sent again after a conflict with a row that
/// then could not be found (deleted in between) before the step gives up on it.
const VANISHED_CONFLICTS: u32 = 3;

/// What a copy does with a row the target holds already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyMode {
    /// Replaces it with the copied row.
    #[default]
    Replace,
    /// Merges the copied row's properties into it, keeping the rest.
    Merge,
    /// Keeps it: counted as skipped if it differs from the copied row, as copied if the
    /// same (what an earlier attempt of the same step wrote).
    Insert,
}

/// Copies rows into `target`, each in the given mode.
#[derive(Clone)]
pub struct CopyRows {
    target: TableClient,
    mode: CopyMode,
}

impl CopyRows {
    pub fn new(target: TableClient, mode: CopyMode) -> Self {
        CopyRows { target, mode }
    }

    pub fn target(&self) -> &TableClient {
        &self.target
    }

    /// Writes `rows`, in order, until `go_on` says no; the transactions started are finished.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        send_transactions(plan(rows, self.mode), CONCURRENCY, go_on, |operations| {
            let target = self.target.clone();
            let mode = self.mode;
            async move { write(&target, operations, mode).await }
        })
        .await
    }
}

/// Sends one transaction. A row the target refuses as invalid is failed and the rest sent
/// again; in `insert` mode, the rows the target holds already are left out and the rest sent
/// again.
async fn write(
    target: &TableClient,
    mut operations: Vec<Operation>,
    mode: CopyMode,
) -> Result<Applied, StorageError> {
    let mut outcome = Applied::default();
    let mut there_already = 0;
    let mut vanished = 0;
    while !operations.is_empty() {
        let Err(e) = target.submit_transaction(&operations).await else {
            break;
        };
        match e.kind() {
            ErrorKind::Batch { index, error }
                if *index < operations.len() && error.reason() == Reason::BadRequest =>
            {
                let refused = operations.remove(*index);
                let (partition_key, row_key) = refused.keys();
                outcome.fail(RowFailure::new(
                    partition_key,
                    row_key,
                    format!("the target refused the row: {error}"),
                ));
            }
            ErrorKind::Batch { index, error }
                if mode == CopyMode::Insert
                    && *index < operations.len()
                    && error.reason() == Reason::AlreadyExists =>
            {
                let existing = existing_rows(target, &operations[*index..]).await?;
                let before = operations.len();
                operations.retain(|op| {
                    let Operation::Insert(row) = op else {
                        return true;
                    };
                    let key = (row.partition_key.clone(), row.row_key.clone());
                    match existing.get(&key) {
                        Some(held) if held.properties == row.properties => {
                            there_already += 1;
                            false
                        }
                        Some(_) => {
                            outcome.counts.skipped += 1;
                            false
                        }
                        None => true,
                    }
                });
                if operations.len() == before {
                    // The row in the way was deleted before we looked: send the rest again.
                    vanished += 1;
                    if vanished > VANISHED_CONFLICTS {
                        return Err(e);
                    }
                }
            }
            _ => return Err(e),
        }
    }
    outcome.counts.acted = operations.len() as u64 + there_already;
    Ok(outcome)
}

/// The target's rows among the keys of `operations` (one partition, in key order), from the
/// first: one page of the key range they span, so at least the first one if it exists.
async fn existing_rows(
    target: &TableClient,
    operations: &[Operation],
) -> Result<HashMap<(String, String), Entity>, StorageError> {
    let (partition_key, first) = operations[0].keys();
    let (_, last) = operations[operations.len() - 1].keys();
    let filter = Filter::partition_key(Comparison::Eq, partition_key)
        .and(Filter::row_key(Comparison::Ge, first))
        .and(Filter::row_key(Comparison::Le, last));
    let page = target.query_page(&Query::filtered(filter), None).await?;
    Ok(page
        .entities
        .into_iter()
        .map(|row| ((row.partition_key.clone(), row.row_key.clone()), row))
        .collect())
}

/// The transactions a copy in `replace` mode sends for rows in table order: upserts grouped by
/// partition, cut at 100 operations and well under 4 MiB each. (The simulator plans copies
/// with this too.)
pub fn plan_transactions(rows: Vec<Entity>) -> Vec<Vec<Operation>> {
    plan(rows, CopyMode::Replace)
}

/// The transactions for rows in table order, each row written as `mode` says.
fn plan(rows: Vec<Entity>, mode: CopyMode) -> Vec<Vec<Operation>> {
    by_partition(rows)
        .into_iter()
        .flat_map(|group| transactions_for(group, mode))
        .collect()
}

/// Writes for one partition, cut at 100 operations and well under 4 MiB per transaction.
fn transactions_for(group: Vec<Entity>, mode: CopyMode) -> Vec<Vec<Operation>> {
    let budget = MAX_BODY_BYTES - 64 * 1024;
    let mut transactions = Vec::new();
    let mut current: Vec<Operation> = Vec::new();
    let mut size = 0;
    for entity in group {
        let cost = entity.json_len_upper_bound() + OPERATION_OVERHEAD + entity.row_key.len() * 3;
        if !current.is_empty() && (current.len() == MAX_OPERATIONS || size + cost > budget) {
            transactions.push(std::mem::take(&mut current));
            size = 0;
        }
        size += cost;
        current.push(match mode {
            CopyMode::Replace => Operation::UpsertReplace(entity),
            CopyMode::Merge => Operation::UpsertMerge(entity),
            CopyMode::Insert => Operation::Insert(entity),
        });
    }
    if !current.is_empty() {
        transactions.push(current);
    }
    transactions
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablescan_storage::table::entity::Value;

    #[test]
    fn transactions_respect_count_and_size() {
        let many: Vec<Entity> = (0..250).map(|i| Entity::new("p", i.to_string())).collect();
        let sizes: Vec<usize> = transactions_for(many, CopyMode::Replace)
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        let big = Value::String("x".repeat(60_000));
        let heavy: Vec<Entity> = (0..100)
            .map(|i| Entity::new("p", i.to_string()).with("s", big.clone()))
            .collect();
        let transactions = transactions_for(heavy, CopyMode::Replace);
        assert!(transactions.len() >= 2);
        for t in &transactions {
            let bytes: usize = t
                .iter()
                .map(|op| match op {
                    Operation::UpsertReplace(e) => e.to_json().len() + OPERATION_OVERHEAD,
                    _ => 0,
                })
                .sum();
            assert!(bytes < MAX_BODY_BYTES, "{bytes}");
        }
    }
}
