//! Delete: remove every row read, in transactions per partition, each on the etag it was read
//! with. A row changed (or deleted) since it was read is kept and counted as skipped.

use crate::writes::{partition_chunks, send_transactions};
use crate::{ActionCounts, Applied, GoOn};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::{ErrorKind, Reason, StorageError, TableClient};

const CONCURRENCY: usize = 8;

#[derive(Clone)]
pub struct DeleteRows {
    table: TableClient,
}

impl DeleteRows {
    pub fn new(table: TableClient) -> Self {
        DeleteRows { table }
    }

    pub fn table(&self) -> &TableClient {
        &self.table
    }

    /// Deletes `rows`, in order, a partition's chunk per transaction, until `go_on` says no.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        send_transactions(
            partition_chunks(rows, |row| row),
            CONCURRENCY,
            go_on,
            |chunk| {
                let table = self.table.clone();
                async move {
                    delete_chunk(&table, chunk).await.map(|counts| Applied {
                        counts,
                        ..Applied::default()
                    })
                }
            },
        )
        .await
    }
}

/// Deletes one partition's chunk; an operation refused because its row changed (412, counted
/// as skipped) or is gone (404, counted as deleted: the row is gone as asked, perhaps by an
/// earlier attempt of this very transaction whose answer was lost) is dropped and the rest
/// sent again.
async fn delete_chunk(
    table: &TableClient,
    rows: Vec<Entity>,
) -> Result<ActionCounts, StorageError> {
    let mut operations: Vec<Operation> = rows
        .into_iter()
        .map(|row| Operation::Delete {
            if_match: row.etag.map_or(IfMatch::Any, IfMatch::Etag),
            partition_key: row.partition_key,
            row_key: row.row_key,
        })
        .collect();
    let mut skipped = 0;
    let mut gone = 0;
    while !operations.is_empty() {
        match table.submit_transaction(&operations).await {
            Ok(_) => break,
            Err(e) => match e.kind() {
                ErrorKind::Batch { index, error }
                    if error.reason().is_gone_or_changed() && *index < operations.len() =>
                {
                    operations.remove(*index);
                    if matches!(error.reason(), Reason::NotFound(_)) {
                        gone += 1;
                    } else {
                        skipped += 1;
                    }
                }
                _ => return Err(e),
            },
        }
    }
    Ok(ActionCounts {
        acted: operations.len() as u64 + gone,
        skipped,
        failed: 0,
    })
}
