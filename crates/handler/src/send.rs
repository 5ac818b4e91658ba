//! Sending work items' messages straight to their queues, as the host writes a function's
//! queue output bindings: for work that starts outside an HTTP answer or a step (a schedule's
//! occurrence, a resume round the sweep sends).

use super::app::AppState;
use super::names::STORAGE_CONNECTION;
use tablescan_engine::WorkItem;
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
