//! What a scan does with the rows it reads: count, copy, delete, update, enqueue, export. Every
//! action is safe to repeat on the same rows (a step can run again after a crash): copies
//! upsert, deletes are conditional, counts come from the ledger.
//!
//! May use: `tablescan-storage`. Must not use: the engine (how the rows were found), the API,
//! the ledger or the handler; the handler turns a request's action into an [`Action`].

mod copy;
mod delete;
mod enqueue;
pub mod export;
mod report;
mod update;
mod writes;

use tablescan_storage::table::entity::Entity;
use tablescan_storage::StorageError;

pub use copy::{plan_transactions, CopyMode, CopyRows, CONCURRENCY as COPY_CONCURRENCY};
pub use delete::DeleteRows;
pub use enqueue::{xml_safe_json, EnqueueRows, MessageBody, CONCURRENCY as ENQUEUE_CONCURRENCY};
pub use export::{ExportRows, Written};
pub use report::{ActionCounts, Applied, GoOn, RowFailure, FAILURES_KEPT};
pub use update::{Change, UpdateRows, CONCURRENCY as UPDATE_CONCURRENCY};
pub use writes::PROCESS_WRITES_IN_FLIGHT;

/// A scan's action.
#[derive(Clone)]
pub enum Action {
    /// Counts rows (partitions are counted by the scan itself).
    Count,
    Copy(CopyRows),
    Enqueue(EnqueueRows),
    Delete(DeleteRows),
    Update(UpdateRows),
    /// Gathers the step's rows for its blob (written by the step when it ends).
    Export(ExportRows),
}

impl Action {
    /// Applies the action to rows in table order, starting no new write once `go_on` says no.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        match self {
            Action::Count => Ok(Applied::all_acted(rows.len())),
            Action::Copy(copy) => copy.apply(rows, go_on).await,
            Action::Enqueue(enqueue) => enqueue.apply(rows, go_on).await,
            Action::Delete(delete) => delete.apply(rows, go_on).await,
            Action::Update(update) => update.apply(rows, go_on).await,
            Action::Export(export) => Ok(export.apply(rows)),
        }
    }

    /// What `apply` would do with `rows`, writing nothing (a dry run): every row it would act
    /// on counted as acted, and the rows it could tell it would fail without asking the target
    /// (a row too large for a queue message) failed.
    pub fn preview(&self, rows: &[Entity]) -> Applied {
        match self {
            Action::Enqueue(enqueue) => enqueue.preview(rows),
            Action::Count
            | Action::Copy(_)
            | Action::Delete(_)
            | Action::Update(_)
            | Action::Export(_) => Applied::all_acted(rows.len()),
        }
    }

    /// The table entities writing `rows` costs (one per row copied or deleted), with the
    /// back-off of the account written to; `None` for an action that writes no table.
    pub fn table_writes(
        &self,
        rows: &[Entity],
    ) -> Option<(u64, std::sync::Arc<tablescan_storage::pacing::Governor>)> {
        let target = match self {
            Action::Copy(copy) => copy.target(),
            Action::Delete(delete) => delete.table(),
            Action::Update(update) => update.table(),
            Action::Count | Action::Enqueue(_) | Action::Export(_) => return None,
        };
        Some((rows.len() as u64, target.governor()))
    }
}
