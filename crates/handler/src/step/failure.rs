//! A failed step: whether it may succeed later (`FailureKind`), its record in the ledger, and
//! its hand-on in a fresh message when its message's deliveries run out during an outage.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use time::OffsetDateTime;

use super::ItemKind;
use crate::app::AppState;
use crate::names::STORAGE_CONNECTION;
use crate::protocol::{Failure, Outcome};
use tablescan_engine::StepError;
use tablescan_ledger::WorkItem;
use tablescan_ledger::{Claim, FailureRecord};
use tablescan_storage::queue::{MessageEncoding, PutOptions};
use tablescan_storage::StorageError;

/// Whether a failed step may succeed if tried again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// Throttling, a timeout, a dropped connection, a server error.
    Transient,
    /// Anything another attempt would meet again: a missing table, refused credentials, a
    /// bad setting.
    Permanent,
}

/// Why a step failed; the message is what the status shows.
#[derive(Debug)]
pub(crate) struct StepFailure {
    pub(super) kind: FailureKind,
    pub(super) message: String,
    /// How many of the attempt's storage requests were answered "too busy".
    pub(super) requests_throttled: u64,
}

impl StepFailure {
    pub(crate) fn new(kind: FailureKind, message: String) -> Self {
        StepFailure {
            kind,
            message,
            requests_throttled: 0,
        }
    }

    pub(crate) fn permanent(message: String) -> Self {
        Self::new(FailureKind::Permanent, message)
    }
}

impl From<StepError<StorageError>> for StepFailure {
    fn from(e: StepError<StorageError>) -> Self {
        let transient = match &e {
            StepError::Read(e) | StepError::Action(e) => e.is_transient(),
            _ => false,
        };
        StepFailure {
            requests_throttled: 0,
            kind: if transient {
                FailureKind::Transient
            } else {
                FailureKind::Permanent
            },
            message: e.to_string(),
        }
    }
}

/// Records a failed step and answers the host.
///
/// A permanent failure (a missing table, refused credentials, a bad request) fails the item
/// for good at once, with its cause in the status: more attempts would only spend time. A
/// transient one (throttling, an outage) leaves the item pending for the host's next delivery;
/// on the message's last delivery the item is handed on in a fresh message, sent with a delay,
/// so that no outage shorter than the outage window fails an item for good.
pub(super) async fn on_failure(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    kind: ItemKind,
    item: &WorkItem,
    claim: &Claim,
    attempt: u32,
    failure: StepFailure,
) -> Response {
    let id = item.id();
    let now = OffsetDateTime::now_utc();
    let now_ms = tablescan_ledger::rows::millis(now);
    let why = failure.message.clone();
    let (record, hand_on) = match failure.kind {
        FailureKind::Permanent => (FailureRecord::Final, false),
        FailureKind::Transient => {
            let since = claim.failing_since.unwrap_or(now_ms);
            let window = state.config.outage_window.as_millis() as u64;
            if now_ms.saturating_sub(since) >= window {
                (FailureRecord::Final, false)
            } else {
                let record = FailureRecord::Retry {
                    failing_since: Some(since),
                };
                (record, attempt >= state.host_queues.max_dequeue_count)
            }
        }
    };
    match record {
        FailureRecord::Final => {
            tracing::error!(attempt, kind = ?failure.kind, "failed for good: {why}")
        }
        FailureRecord::Retry { .. } => {
            tracing::warn!(attempt, kind = ?failure.kind, "failed, to be tried again: {why}")
        }
    }
    if let Err(e) = ledger
        .fail(item, claim, &why, record, failure.requests_throttled, now)
        .await
    {
        tracing::warn!("could not record the failure: {e}");
        return Failure::new(StatusCode::INTERNAL_SERVER_ERROR, why).into_response();
    }
    if record == FailureRecord::Final {
        // Recorded: the message is done with; the status shows the cause.
        return Outcome::default().into_response();
    }
    if hand_on {
        match send_again_later(state, kind, item).await {
            Ok(()) => {
                tracing::info!("that was its message's last delivery; handed on in a new message");
                return Outcome::default().into_response();
            }
            Err(e) => tracing::warn!("could not hand step {id} on: {e}"),
        }
    }
    Failure::new(StatusCode::INTERNAL_SERVER_ERROR, why).into_response()
}

/// Puts `item`'s message in its queue again, invisible for twice the host's own pause between
/// two deliveries (a minute with this project's host.json).
async fn send_again_later(state: &AppState, kind: ItemKind, item: &WorkItem) -> Result<(), String> {
    let delay = state.host_queues.visibility_timeout * 2;
    // It ran: the give-backs before it are over.
    send_later(state, kind, &item.as_first_sent(), delay).await
}

/// Puts `item`'s message in its queue again, invisible for `delay` (1 s to 10 min).
pub(super) async fn send_later(
    state: &AppState,
    kind: ItemKind,
    item: &WorkItem,
    delay: Duration,
) -> Result<(), String> {
    let queues = state.clients(STORAGE_CONNECTION)?.queues()?.clone();
    let name = match kind {
        ItemKind::Range => &state.item_queues.range,
        ItemKind::Partition => &state.item_queues.partition,
        ItemKind::Export => &state.item_queues.export,
    };
    let options = PutOptions {
        encoding: MessageEncoding::Base64,
        visibility_timeout: delay.clamp(Duration::from_secs(1), Duration::from_secs(600)),
        at_least_once: true,
        ..PutOptions::default()
    };
    queues
        .queue(name)
        .map_err(|e| e.to_string())?
        .put_message(item.encode().as_bytes(), &options)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
