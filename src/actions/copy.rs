//! Copy: upsert every row into a target table, in entity group transactions per partition.

use super::{by_partition, write_until, ActionCounts, Applied, GoOn};
use crate::storage::table::batch::{Operation, MAX_BODY_BYTES, MAX_OPERATIONS};
use crate::storage::table::entity::Entity;
use crate::storage::{StorageError, TableClient};

/// Transactions one step keeps in flight. A page of 1,000 rows with three or four rows per
/// partition needs ~300 transactions of ~30 ms each: 32 at once write it in about the time the
/// next page takes to read (~140 ms), so a copy step runs at the speed of its reads.
pub const CONCURRENCY: usize = 32;
/// Room per operation for the request line and headers around its JSON body.
const OPERATION_OVERHEAD: usize = 512;

/// Copies rows into `target`, replacing what is there: repeating a copy changes nothing.
#[derive(Clone)]
pub struct CopyRows {
    target: TableClient,
}

impl CopyRows {
    pub fn new(target: TableClient) -> Self {
        CopyRows { target }
    }

    pub fn target(&self) -> &TableClient {
        &self.target
    }

    /// Upserts `rows`, in order, until `go_on` says no; the transactions started are finished.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        let transactions = plan_transactions(rows);
        let sizes: Vec<usize> = transactions.iter().map(Vec::len).collect();
        let futures: Vec<_> = transactions
            .into_iter()
            .map(|operations| {
                let target = self.target.clone();
                async move { target.submit_transaction(&operations).await.map(drop) }
            })
            .collect();
        let started = write_until(futures, CONCURRENCY, go_on).await?;
        let finished: usize = sizes[..started].iter().sum();
        Ok(Applied {
            counts: ActionCounts {
                acted: finished as u64,
                skipped: 0,
            },
            finished,
        })
    }
}

/// The transactions a copy sends for rows in table order: upserts grouped by partition, cut at
/// 100 operations and well under 4 MiB each. (The simulator plans copies with this too.)
pub fn plan_transactions(rows: Vec<Entity>) -> Vec<Vec<Operation>> {
    by_partition(rows)
        .into_iter()
        .flat_map(transactions_for)
        .collect()
}

/// Upserts for one partition, cut at 100 operations and well under 4 MiB per transaction.
fn transactions_for(group: Vec<Entity>) -> Vec<Vec<Operation>> {
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
        current.push(Operation::UpsertReplace(entity));
    }
    if !current.is_empty() {
        transactions.push(current);
    }
    transactions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::table::entity::Value;

    #[test]
    fn transactions_respect_count_and_size() {
        let many: Vec<Entity> = (0..250).map(|i| Entity::new("p", i.to_string())).collect();
        let sizes: Vec<usize> = transactions_for(many).iter().map(Vec::len).collect();
        assert_eq!(sizes, [100, 100, 50]);
        let big = Value::String("x".repeat(60_000));
        let heavy: Vec<Entity> = (0..100)
            .map(|i| Entity::new("p", i.to_string()).with("s", big.clone()))
            .collect();
        let transactions = transactions_for(heavy);
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
