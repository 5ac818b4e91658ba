//! Sends again the messages of a scan's stranded work items (see `job::redrive`), when someone
//! reads the scan's status. Failures here never fail the status read: they are logged, and the
//! next read tries again.

use time::OffsetDateTime;

use super::app::AppState;
use super::names::STORAGE_CONNECTION;
use crate::job::redrive::Stranded;
use crate::job::Ledger;
use crate::scan::{Task, WorkItem};
use crate::storage::queue::{MessageEncoding, PutOptions};

/// How long a pending item may go untouched before it counts as stranded.
pub fn redrive_after(state: &AppState) -> time::Duration {
    time::Duration::try_from(state.redrive_after).unwrap_or(time::Duration::MAX)
}

/// Sends again the messages of scan `id`'s `stranded` items; returns how many were sent.
pub async fn redrive_stranded(
    state: &AppState,
    ledger: &Ledger,
    id: &str,
    stranded: Vec<Stranded>,
) -> Result<u64, String> {
    if stranded.is_empty() {
        return Ok(0);
    }
    let now = OffsetDateTime::now_utc();
    let queues = state.clients(STORAGE_CONNECTION)?.queues;
    // As the host writes output bindings (host.json messageEncoding: base64).
    let options = PutOptions {
        encoding: MessageEncoding::Base64,
        at_least_once: true,
        ..PutOptions::default()
    };
    let mut sent = 0;
    for item in stranded {
        let queue = match WorkItem::decode(&item.message).map(|w| w.task) {
            Ok(Task::Range { .. }) => &state.item_queues.range,
            Ok(Task::Partition { .. }) => &state.item_queues.partition,
            Err(_) => continue,
        };
        if !ledger
            .mark_redriven(id, &item, now)
            .await
            .map_err(|e| e.to_string())?
        {
            continue;
        }
        queues
            .queue(queue)
            .map_err(|e| e.to_string())?
            .put_message(item.message.as_bytes(), &options)
            .await
            .map_err(|e| e.to_string())?;
        tracing::warn!(scan = id, item = %item.row_key, queue, "sent a stranded work item again");
        sent += 1;
    }
    Ok(sent)
}
