//! Admission of a step before it runs: by its scan's pace, before its item is claimed (a step
//! that cannot run here soon is given back to its queue), and the wait for a claim held by
//! another delivery.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use time::OffsetDateTime;

use super::failure::send_later;
use super::ItemKind;
use crate::app::AppState;
use crate::pacing::{give_back_delay, NotAdmitted, StepPace, ADMIT_WAIT};
use crate::protocol::{Failure, Outcome};
use tablescan_ledger::Begin;
use tablescan_ledger::WorkItem;
use tablescan_storage::pacing::Governor;

/// Whether a step may run now, decided before its item is claimed.
pub(super) enum Admission {
    Admitted(StepPace),
    /// The scan's pace has no room for it in this process soon.
    NotNow(NotAdmitted),
    /// Decided after the claim: the scan is unknown, cancelled or unreadable (the claim says
    /// what to do), or the step is admitted then.
    Undecided,
}

/// Admits `item`'s step by its scan's pace, from the scan as this process last read it.
pub(super) async fn admit_before_claim(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    item: &WorkItem,
) -> Admission {
    let Some(record) = state.scan_record(&item.scan).await else {
        return Admission::Undecided;
    };
    if record.cancelled_at.is_some() {
        return Admission::Undecided;
    }
    let Ok(source) = pace_source(state, item, &record.spec) else {
        return Admission::Undecided;
    };
    match state
        .pacing
        .admit(ledger, &record, source, ADMIT_WAIT)
        .await
    {
        Ok(pace) => Admission::Admitted(pace),
        Err(why) => Admission::NotNow(why),
    }
}

/// The back-off of the account a step reads: the scan's source table's; an import reads blobs,
/// and its writes wait on their target's own.
pub(super) fn pace_source(
    state: &AppState,
    item: &WorkItem,
    spec: &tablescan_api::ScanSpec,
) -> Result<std::sync::Arc<Governor>, String> {
    if item.task.is_import() {
        return Ok(std::sync::Arc::new(Governor::default()));
    }
    Ok(state.scan_source(&spec.connection, &spec.table)?.governor())
}

/// Gives a step not admitted back to its queue for later and answers the host that the
/// message is done with; if the message cannot be sent, the host's own retry brings it back.
pub(super) async fn give_back(
    state: &AppState,
    kind: ItemKind,
    item: &WorkItem,
    why: &NotAdmitted,
) -> Response {
    let unit = (uuid::Uuid::new_v4().as_u128() % 1_000) as f64 / 1_000.0;
    let again = match why.learning_for {
        // Back once the cap may have come, spread over a second; not counted as a return for
        // want of room (those lengthen the next delay, and park the item after a few).
        Some(left) => (left + Duration::from_secs(1).mul_f64(unit), item.clone()),
        None => (
            give_back_delay(item.given_back, unit),
            WorkItem {
                given_back: item.given_back.saturating_add(1),
                ..item.clone()
            },
        ),
    };
    let (delay, again) = again;
    match send_later(state, kind, &again, delay).await {
        Ok(()) => {
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
                given_back = again.given_back,
                "not run here now ({why}); given back to the queue"
            );
            Outcome::default().into_response()
        }
        Err(e) => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not run here now ({why}), and could not be given back: {e}"),
        )
        .into_response(),
    }
}

/// Claims the work item. If another delivery holds the claim (a duplicate message, or a retry
/// after a crash whose claim has not run out yet), waits for the claim to run out rather than
/// failing: failing would spend one of the message's few attempts on waiting and could send a
/// healthy work item to the poison queue. The waiting ends early when the holder finishes.
pub(super) async fn begin_when_free(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    item: &WorkItem,
    sent: Option<OffsetDateTime>,
    admitted: &mut Option<StepPace>,
) -> Result<Begin, tablescan_ledger::LedgerError> {
    let lease = time::Duration::try_from(state.config.lease).unwrap_or(time::Duration::MINUTE);
    let mut waited = std::time::Duration::ZERO;
    loop {
        let begin = ledger
            .begin_sent(item, sent, OffsetDateTime::now_utc(), lease)
            .await?;
        let Begin::Busy(remaining) = begin else {
            return Ok(begin);
        };
        if waited >= state.config.lease * 2 {
            return Ok(Begin::Busy(remaining));
        }
        let pause =
            remaining.min(std::time::Duration::from_secs(5)) + std::time::Duration::from_millis(50);
        // A duplicate waiting for the claim holds no place in its scan's pace meanwhile: the
        // step is admitted again after its claim if it runs.
        *admitted = None;
        tokio::time::sleep(pause).await;
        waited += pause;
    }
}
