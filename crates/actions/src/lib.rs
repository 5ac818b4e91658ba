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

    /// The messages writing `rows` puts on each queue, with that queue's back-off; empty for
    /// an action that writes no queue. A queue takes about 2,000 messages a second, so a step
    /// is paced by these as by its table writes (the handler's `StepPace::before_put`), all
    /// of a page at once, before `apply` sends them.
    pub fn queue_writes(
        &self,
        rows: &[Entity],
    ) -> Vec<(u64, std::sync::Arc<tablescan_storage::pacing::Governor>)> {
        match self {
            Action::Enqueue(enqueue) => enqueue.messages_per_queue(rows),
            Action::Count
            | Action::Copy(_)
            | Action::Delete(_)
            | Action::Update(_)
            | Action::Export(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tablescan_storage::queue::MessageEncoding;
    use tablescan_storage::{ClientOptions, QueueServiceClient, StorageAccount};

    fn queues() -> QueueServiceClient {
        let account = StorageAccount::from_connection_string("UseDevelopmentStorage=true").unwrap();
        QueueServiceClient::new(&account, ClientOptions::default()).unwrap()
    }

    fn rows(partitions: usize, per_partition: usize) -> Vec<Entity> {
        (0..partitions)
            .flat_map(|p| {
                (0..per_partition).map(move |r| Entity::new(format!("p{p:03}"), format!("r{r}")))
            })
            .collect()
    }

    #[test]
    fn an_enqueue_charges_each_queue_its_messages_with_that_queues_back_off() {
        let service = queues();
        let one = EnqueueRows::new(
            service.queue("out").unwrap(),
            MessageBody::Row,
            MessageEncoding::Text,
        );
        let writes = Action::Enqueue(one.clone()).queue_writes(&rows(10, 3));
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].0, 30);
        // The queue's own back-off, the one the pipeline cuts when a put to it is refused.
        assert!(Arc::ptr_eq(
            &writes[0].1,
            &service.queue("out").unwrap().governor()
        ));
        // Seven rows a message: 30 rows in 5 messages.
        let grouped = Action::Enqueue(one.with_rows_per_message(7)).queue_writes(&rows(10, 3));
        assert_eq!(grouped.len(), 1);
        assert_eq!(grouped[0].0, 5);
        // Spread over three queues: every row counted once, each queue its own back-off.
        let spread = EnqueueRows::new(
            service.queue("out").unwrap(),
            MessageBody::Row,
            MessageEncoding::Text,
        )
        .spread_over(
            ["out-a", "out-b", "out-c"]
                .map(|q| service.queue(q).unwrap())
                .to_vec(),
        );
        let writes = Action::Enqueue(spread).queue_writes(&rows(40, 2));
        assert_eq!(writes.iter().map(|w| w.0).sum::<u64>(), 80);
        assert!(writes.len() > 1);
        assert!(!Arc::ptr_eq(&writes[0].1, &writes[1].1));
    }

    #[test]
    fn actions_that_write_no_queue_charge_none() {
        assert!(Action::Count.queue_writes(&rows(3, 3)).is_empty());
        assert!(Action::Count.table_writes(&rows(3, 3)).is_none());
    }
}
