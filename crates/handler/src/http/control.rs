//! Changing a scan's course: cancelling it, and running its items that failed for good again.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use time::OffsetDateTime;

use crate::answers::{answer, error, json_of, scan_target};
use crate::app::AppState;
use crate::names::HTTP_RESPONSE;
use crate::protocol::Outcome;
use tablescan_api::answers::{Retried, StateAnswer};
use tablescan_ledger::State;

/// `POST /api/scans/{id}/cancel`.
pub async fn cancel_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let now = OffsetDateTime::now_utc();
    match ledger.status(id, now).await {
        Ok(Some(status)) if matches!(status.state, State::Succeeded | State::Failed) => {
            return error(
                StatusCode::CONFLICT,
                None,
                format!("the scan already finished ({:?})", status.state).to_lowercase(),
            );
        }
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the scan could not be read: {e}"),
            )
        }
    }
    match ledger.cancel(id, now).await {
        Ok(Some(_)) => {
            state.note_cancelled(id);
            // `cancelling` while some step still holds a claim (it stops at its next page),
            // then `cancelled` with final counts.
            let state = match ledger.status(id, OffsetDateTime::now_utc()).await {
                Ok(Some(status)) => status.state,
                _ => State::Cancelling,
            };
            let now = StateAnswer {
                id: id.to_string(),
                state,
            };
            answer(StatusCode::OK, json_of(&now)).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scan could not be cancelled: {e}"),
        ),
    }
}

/// Whether `retry` has work in a scan: `failed` (for good), or any item failed for good while
/// the scan runs again after an earlier retry; never once it was cancelled.
fn retriable(status: &tablescan_ledger::ScanStatus) -> bool {
    match status.state {
        State::Failed => true,
        State::Pending | State::Running => status.progress.steps_failed > 0,
        // A paused scan is resumed first: its retried items would wait for the resume.
        State::Succeeded
        | State::Cancelling
        | State::Cancelled
        | State::Pausing
        | State::Paused => false,
    }
}

/// How many failed items one retry request makes pending again; a scan with more answers
/// `"more": true` and is retried by calling again.
pub const RETRY_PER_REQUEST: u16 = 500;

/// `POST /api/scans/{id}/retry`: runs a scan's items that failed for good again. Each becomes
/// pending with a fresh message; the scan is `running` until they finish, and its counts stay
/// exact. A scan with more failed items than one call retries is `running` after the first
/// call: the next calls go on while any item is failed (a cancelled scan's are left alone).
pub async fn retry_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let failed = match failed_to_retry(ledger, id).await {
        Ok(failed) => failed,
        Err(refused) => return *refused,
    };
    if let Err(refused) = crate::pause::resume_for_retry(state, ledger, id).await {
        return *refused;
    }
    if failed == 0 {
        if let Err(refused) = retry_manifest(state, ledger, id).await {
            return *refused;
        }
    }
    let messages = match ledger.retry_failed(id, RETRY_PER_REQUEST).await {
        Ok(messages) => messages,
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the failed items could not be made pending again: {e}"),
            )
        }
    };
    let retried = messages.len();
    // Failed items beyond this call's (counted exactly when the status was read; an item that
    // fails meanwhile is found by the next call all the same).
    let more = failed > retried as u64;
    tracing::info!(scan = %id, "{retried} failed work items sent again");
    let answer = Outcome::default().http(
        HTTP_RESPONSE,
        StatusCode::ACCEPTED,
        &json_of(&Retried {
            id: id.to_string(),
            state: State::Running,
            retried: retried as u64,
            more,
        }),
        &[],
    );
    crate::send::with_items(answer, messages).into_response()
}

/// How many of scan `id`'s items failed for good, when a retry has work in it (see
/// [`retriable`]); else the answer that refuses the retry.
async fn failed_to_retry(
    ledger: &tablescan_ledger::Ledger,
    id: &str,
) -> Result<u64, Box<Response>> {
    match ledger.status(id, OffsetDateTime::now_utc()).await {
        Ok(Some(status)) if retriable(&status) => Ok(status.progress.steps_failed),
        Ok(Some(status)) => Err(Box::new(error(
            StatusCode::CONFLICT,
            None,
            format!(
                "only a scan with failed items can be retried (and not once cancelled); this one is {} with {} failed",
                serde_json::to_value(status.state).unwrap_or(Value::Null),
                status.progress.steps_failed
            ),
        ))),
        Ok(None) => Err(Box::new(error(
            StatusCode::NOT_FOUND,
            None,
            "no scan has this id",
        ))),
        Err(e) => Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scan could not be read: {e}"),
        ))),
    }
}

/// An export that gave up on its manifest (every step done) tries it again now: its trouble is
/// cleared and the manifest written if the scan is done.
async fn retry_manifest(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    id: &str,
) -> Result<(), Box<Response>> {
    let Ok(Some(record)) = ledger.scan(id).await else {
        return Ok(());
    };
    if record.manifest_trouble.gave_up_at.is_none() {
        return Ok(());
    }
    if let Err(e) = ledger
        .clear_manifest_trouble(id, OffsetDateTime::now_utc())
        .await
    {
        return Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the export's manifest could not be tried again: {e}"),
        )));
    }
    crate::manifest::seal_if_done(state, ledger, id).await;
    Ok(())
}
