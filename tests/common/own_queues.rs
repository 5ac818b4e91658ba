//! A handler state with a ledger and work-item queues of its own, for the tests that run the
//! re-drive sweep and parking (tests/redrive_sweep.rs, tests/parking.rs) and a step that may give
//! its item back (tests/handler_actions.rs): the sweep sends to the
//! state's own queues, so another test's items never reach them.

use std::sync::Arc;
use std::time::Duration;

use tablescan::functions::app::ItemQueues;
use tablescan::functions::{AppState, Settings};
use tablescan::storage::queue::MessageEncoding;

use super::{connection_string, queues, unique_name};

/// The state, its ledger table and queues named from `prefix` and created; items count as
/// stranded after `redrive_after_seconds` (`TABLESCAN_REDRIVE_AFTER_SECONDS`).
pub async fn state(prefix: &str, redrive_after_seconds: u64) -> (Arc<AppState>, ItemQueues) {
    let redrive = redrive_after_seconds.to_string();
    state_with(
        prefix,
        &[("TABLESCAN_REDRIVE_AFTER_SECONDS", redrive.as_str())],
    )
    .await
}

/// [`state`] with these app settings besides the storage and the ledger's name.
pub async fn state_with(prefix: &str, extra: &[(&str, &str)]) -> (Arc<AppState>, ItemQueues) {
    let mut settings = vec![
        ("AzureWebJobsStorage".to_string(), connection_string()),
        ("TABLESCAN_LEDGER_TABLE".to_string(), unique_name("ledger")),
    ];
    settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut state = AppState::new(Settings::from_pairs(settings));
    let item_queues = ItemQueues {
        range: unique_name(&format!("{prefix}r")),
        partition: unique_name(&format!("{prefix}p")),
        export: unique_name(&format!("{prefix}e")),
    };
    for name in item_queues.all() {
        queues().queue(name).unwrap().create().await.unwrap();
    }
    Arc::get_mut(&mut state).unwrap().item_queues = item_queues.clone();
    (state, item_queues)
}

/// The one message a step gave back to `queue` (one of the state's own), as sent, once its
/// visibility delay is over; panics if none is visible within 30 s, or more than one is.
pub async fn given_back(queue: &str) -> String {
    let queue = queues().queue(queue).unwrap();
    for _ in 0..150 {
        let received = queue.receive(32, Duration::from_secs(60)).await.unwrap();
        if let Some(first) = received.first() {
            assert_eq!(received.len(), 1, "one message given back");
            let text = MessageEncoding::Base64.decode(&first.text).unwrap();
            return String::from_utf8(text).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no message given back was visible within 30 s");
}
