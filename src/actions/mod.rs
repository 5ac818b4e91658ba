//! What a scan does with the rows it reads. Knows the storage client; nothing of how the rows
//! were found. Every action is safe to repeat on the same rows (a step can run again after a
//! crash): copies upsert, deletes are conditional, counts come from the ledger.

mod copy;
mod delete;
mod enqueue;

use crate::storage::table::entity::Entity;
use crate::storage::StorageError;

pub use copy::{plan_transactions, CopyRows};
pub use delete::DeleteRows;
pub use enqueue::{xml_safe_json, EnqueueRows, MessageBody};

/// What an action did with one batch of rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionCounts {
    /// Rows the action applied to (copied, enqueued, deleted, counted).
    pub acted: u64,
    /// Rows it left alone on purpose (a delete whose row changed since it was read).
    pub skipped: u64,
}

impl std::ops::AddAssign for ActionCounts {
    fn add_assign(&mut self, other: Self) {
        self.acted += other.acted;
        self.skipped += other.skipped;
    }
}

/// A scan's action.
#[derive(Clone)]
pub enum Action {
    /// Counts rows (partitions are counted by the scan itself).
    Count,
    Copy(CopyRows),
    Enqueue(EnqueueRows),
    Delete(DeleteRows),
}

impl Action {
    /// Applies the action to rows in table order.
    pub async fn apply(&self, rows: Vec<Entity>) -> Result<ActionCounts, StorageError> {
        match self {
            Action::Count => Ok(ActionCounts {
                acted: rows.len() as u64,
                skipped: 0,
            }),
            Action::Copy(copy) => copy.apply(rows).await,
            Action::Enqueue(enqueue) => enqueue.apply(rows).await,
            Action::Delete(delete) => delete.apply(rows).await,
        }
    }
}

/// Splits rows (in table order) into runs that share a PartitionKey.
pub(crate) fn by_partition(rows: Vec<Entity>) -> Vec<Vec<Entity>> {
    let mut groups: Vec<Vec<Entity>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(group) if group[0].partition_key == row.partition_key => group.push(row),
            _ => groups.push(vec![row]),
        }
    }
    groups
}

/// Runs the writes, at most `limit` at once; the first failure is the result.
pub(crate) async fn write_all<F>(writes: Vec<F>, limit: usize) -> Result<(), StorageError>
where
    F: std::future::Future<Output = Result<(), StorageError>> + Send + 'static,
{
    bounded(writes, limit).await.into_iter().collect()
}

/// Runs at most `limit` futures at once and returns their results in order.
pub(crate) async fn bounded<T, F>(futures: Vec<F>, limit: usize) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut results: Vec<Option<T>> = (0..futures.len()).map(|_| None).collect();
    let mut set = tokio::task::JoinSet::new();
    let mut queue = futures.into_iter().enumerate();
    loop {
        while set.len() < limit.max(1) {
            match queue.next() {
                Some((index, future)) => {
                    set.spawn(async move { (index, future.await) });
                }
                None => break,
            }
        }
        match set.join_next().await {
            Some(Ok((index, value))) => results[index] = Some(value),
            // A panicking task is a bug; propagate it rather than lose a result.
            Some(Err(e)) => std::panic::resume_unwind(e.into_panic()),
            None => break,
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every task finished"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_group_by_consecutive_partition() {
        let rows = vec![
            Entity::new("a", "1"),
            Entity::new("a", "2"),
            Entity::new("b", "1"),
            Entity::new("c", "1"),
        ];
        let groups = by_partition(rows);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1, 1]);
    }

    #[tokio::test]
    async fn bounded_keeps_order() {
        let futures: Vec<_> = (0..20u64)
            .map(|i| async move {
                tokio::time::sleep(std::time::Duration::from_millis(20 - i)).await;
                i
            })
            .collect();
        assert_eq!(bounded(futures, 4).await, (0..20).collect::<Vec<_>>());
    }
}
