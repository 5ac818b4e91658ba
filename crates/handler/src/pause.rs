//! `POST /api/scans/{id}/pause` and `POST /api/scans/{id}/resume`, and the resume's rounds
//! the re-drive sweep goes on with (see `job::pause` for what a pause leaves in the ledger).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use time::OffsetDateTime;

use crate::answers::{answer, error, json_of, scan_target};
use crate::app::AppState;
use crate::names::HTTP_RESPONSE;
use crate::protocol::Outcome;
use tablescan_api::answers::{ResumeRound, StateAnswer};
use tablescan_ledger::pause::RESUME_ROWS_PER_ROUND;
use tablescan_ledger::{Ledger, ScanStatus, State};

/// The state's name in a sentence, as the API names it (no JSON quotes).
fn in_words(state: State) -> String {
    match serde_json::to_value(state) {
        Ok(Value::String(name)) => name,
        _ => String::new(),
    }
}

/// The answer of a pause: the scan's state now.
fn state_answer(id: &str, state: State) -> Response {
    let answer_now = StateAnswer {
        id: id.to_string(),
        state,
    };
    answer(StatusCode::OK, json_of(&answer_now)).into_response()
}

/// The state to answer with after a change: as the ledger reads it now, or `fallback`.
async fn state_now(ledger: &Ledger, id: &str, fallback: State) -> State {
    match ledger.status(id, OffsetDateTime::now_utc()).await {
        Ok(Some(status)) => status.state,
        _ => fallback,
    }
}

/// Reads scan `id`'s status for a pause or resume: the status, or the answer to give.
async fn status_for(ledger: &Ledger, id: &str) -> Result<ScanStatus, Box<Response>> {
    match ledger.status(id, OffsetDateTime::now_utc()).await {
        Ok(Some(status)) => Ok(status),
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

/// `POST /api/scans/{id}/pause`: running steps stop at their next page, recording exactly
/// where they stopped; no step starts until the scan is resumed. `pausing` while a step still
/// runs, then `paused`. Pausing a paused scan changes nothing; a scan that ended or was
/// cancelled cannot be paused (409).
pub async fn pause_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let status = match status_for(ledger, id).await {
        Ok(status) => status,
        Err(response) => return *response,
    };
    match status.state {
        State::Pending | State::Running => {}
        State::Pausing | State::Paused => return state_answer(id, status.state),
        State::Succeeded | State::Failed | State::Cancelling | State::Cancelled => {
            return error(
                StatusCode::CONFLICT,
                None,
                format!(
                    "only a pending or running scan can be paused; this one is {}",
                    in_words(status.state)
                ),
            )
        }
    }
    match ledger.pause(id, OffsetDateTime::now_utc()).await {
        Ok(Some(_)) => {
            state.forget_record(id);
            tracing::info!(scan = id, "paused");
            state_answer(id, state_now(ledger, id, State::Pausing).await)
        }
        Ok(None) => error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scan could not be paused: {e}"),
        ),
    }
}

/// `POST /api/scans/{id}/resume`: the scan runs again from where its steps stopped. The
/// messages of the items the pause left pending are sent in rounds of at most
/// `job::pause::RESUME_ROWS_PER_ROUND`; an answer with `"more": true` is followed by another
/// call (the re-drive sweep also goes on, every minute, if nobody calls). 202 with how many
/// messages this call sent; 409 for a scan that is neither paused nor resuming.
pub async fn resume_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let status = match status_for(ledger, id).await {
        Ok(status) => status,
        Err(response) => return *response,
    };
    match status.state {
        State::Pausing | State::Paused => {
            match ledger.resume(id, OffsetDateTime::now_utc()).await {
                Ok(Some(_)) => {
                    state.forget_record(id);
                    tracing::info!(scan = id, "resumed");
                }
                Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
                Err(e) => {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        None,
                        format!("the scan could not be resumed: {e}"),
                    )
                }
            }
        }
        State::Pending | State::Running if status.resuming => {}
        _ => {
            return error(
                StatusCode::CONFLICT,
                None,
                format!(
                    "only a paused scan can be resumed; this one is {}",
                    in_words(status.state)
                ),
            )
        }
    }
    let round = match ledger
        .resume_round(id, OffsetDateTime::now_utc(), RESUME_ROWS_PER_ROUND)
        .await
    {
        Ok(round) => round,
        Err(e) => {
            // The resume is recorded: the next call, or the sweep, sends the messages.
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the scan is resumed, but its items' messages could not be sent yet (call again): {e}"),
            );
        }
    };
    let sent = round.messages.len();
    tracing::info!(scan = id, sent, more = round.more, "resume round");
    let now = state_now(ledger, id, State::Running).await;
    let body = ResumeRound {
        id: id.to_string(),
        state: now,
        sent: sent as u64,
        more: round.more,
    };
    let outcome =
        Outcome::default().http(HTTP_RESPONSE, StatusCode::ACCEPTED, &json_of(&body), &[]);
    crate::send::with_items(outcome, round.messages).into_response()
}

/// Before a retry: a scan paused while its last steps failed for good reads `failed`, and its
/// retried items would be dropped as paused when they arrive; the retry resumes it (its other
/// items, if any, are sent by the resume's rounds). The answer to give if that fails.
pub async fn resume_for_retry(
    state: &AppState,
    ledger: &Ledger,
    id: &str,
) -> Result<(), Box<Response>> {
    let refused = |why: String| Box::new(error(StatusCode::SERVICE_UNAVAILABLE, None, why));
    match ledger.scan(id).await {
        Ok(Some(record)) if record.is_paused() => {
            ledger
                .resume(id, OffsetDateTime::now_utc())
                .await
                .map_err(|e| {
                    refused(format!(
                        "the paused scan could not be resumed for its retry: {e}"
                    ))
                })?;
            state.forget_record(id);
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(refused(format!("the scan could not be read: {e}"))),
    }
}

/// One round of a resume that nobody goes on with (the re-drive sweep's): sends the messages
/// straight to their queues, as the host writes output bindings. How many were sent.
pub async fn resume_round_by_sweep(
    state: &AppState,
    ledger: &Ledger,
    id: &str,
) -> Result<u64, String> {
    let round = ledger
        .resume_round(id, OffsetDateTime::now_utc(), RESUME_ROWS_PER_ROUND)
        .await
        .map_err(|e| e.to_string())?;
    // A message that cannot be put now stays marked: the re-drive sends it once it is
    // stranded.
    crate::send::send_items(state, &round.messages).await
}
