//! Sending work items' messages: in an answer's queue output bindings, each to its kind's queue
//! ([`with_items`], for a step's follow-ups and the items an HTTP function starts), or straight
//! to their queues as the host writes those bindings ([`send_items`], for work that starts
//! outside an answer: a schedule's occurrence, a resume round the sweep sends).

use crate::app::AppState;
use crate::names::{EXPORT_OUTPUT, PARTITION_OUTPUT, RANGE_OUTPUT, STORAGE_CONNECTION};
use crate::protocol::Outcome;
use tablescan_ledger::{ReadRange, Task, WorkItem};
use tablescan_storage::queue::{MessageEncoding, PutOptions};

/// Puts each of `messages` (work items) on its item queue; how many were put. Stops at the
/// first that cannot be put: the caller's ledger rows keep the rest for the re-drive.
pub async fn send_items(state: &AppState, messages: &[String]) -> Result<u64, String> {
    if messages.is_empty() {
        return Ok(0);
    }
    let queues = state.clients(STORAGE_CONNECTION)?.queues()?.clone();
    // As the host writes output bindings (host.json messageEncoding: base64).
    let options = PutOptions {
        encoding: MessageEncoding::Base64,
        at_least_once: true,
        ..PutOptions::default()
    };
    let mut sent = 0;
    for message in messages {
        let Ok(item) = WorkItem::decode(message) else {
            continue;
        };
        let queue = queues
            .queue(state.item_queues.of(&item.task))
            .map_err(|e| e.to_string())?;
        match queue.put_message(message.as_bytes(), &options).await {
            Ok(_) => {}
            // As the host's output binding does, a queue not there yet is created.
            Err(e) if e.is_not_found() => {
                queue.create().await.map_err(|e| e.to_string())?;
                queue
                    .put_message(message.as_bytes(), &options)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Err(e) => return Err(e.to_string()),
        }
        sent += 1;
    }
    Ok(sent)
}

/// `outcome` with encoded work items, each in the output binding of its kind's queue.
pub(crate) fn with_items(outcome: Outcome, messages: Vec<String>) -> Outcome {
    let (mut ranges, mut partitions, mut exports) = (Vec::new(), Vec::new(), Vec::new());
    for message in messages {
        match WorkItem::decode(&message).map(|item| item.task) {
            Ok(Task::Table(ReadRange::Partition { .. })) => partitions.push(message),
            Ok(Task::Import(_)) => exports.push(message),
            _ => ranges.push(message),
        }
    }
    outcome
        .messages(RANGE_OUTPUT, ranges)
        .messages(PARTITION_OUTPUT, partitions)
        .messages(EXPORT_OUTPUT, exports)
}
