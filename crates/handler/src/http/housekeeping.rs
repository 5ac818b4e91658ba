//! Housekeeping: the scans list, and the removal of a finished scan's rows or of the refused
//! messages, each in rounds of bounded time.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use time::OffsetDateTime;

use crate::answers::{answer, error, json_of, request, scan_target};
use crate::app::AppState;
use crate::scans_list::ListQuery;
use tablescan_api::answers::{RejectedRemovalRound, RemovalRound, ScansPage};
use tablescan_ledger::State;

/// `GET /api/scans`: the most recent scans (those the query's filters keep; see
/// `functions::scans_list`) and any rejected messages.
pub async fn list_scans(state: &AppState, body: &[u8]) -> Response {
    let req = match request(body) {
        Ok(req) => req,
        Err(failure) => return failure.into_response(),
    };
    let query = match ListQuery::parse(&req) {
        Ok(query) => query,
        Err(refused) => return refused.into_response(),
    };
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    let unavailable = |e: tablescan_ledger::LedgerError| {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scans could not be listed: {e}"),
        )
    };
    let page = match ledger.scans_page(query.limit, query.after.as_deref()).await {
        Ok(page) => page,
        Err(e) => return unavailable(e),
    };
    let rejected = match ledger.rejected(50).await {
        Ok(rejected) => rejected,
        Err(tablescan_ledger::LedgerError::Storage(e)) if e.is_not_found() => Vec::new(),
        Err(e) => return unavailable(e),
    };
    let now = OffsetDateTime::now_utc();
    let mut scans = Vec::new();
    let mut unreadable = page.unreadable;
    for record in page.scans {
        let status = match ledger.status(&record.id, now).await {
            Ok(Some(status)) => status,
            Ok(None) => continue,
            // One scan that cannot be read (damaged, or a read that failed) is reported
            // beside the others, not a reason to list none.
            Err(e) => {
                tracing::warn!(scan = %record.id, "the scans list could not read a scan: {e}");
                unreadable.push(tablescan_ledger::housekeeping::Unreadable {
                    id: record.id,
                    error: e.to_string(),
                });
                continue;
            }
        };
        if query.keeps(&status) {
            scans.push(crate::scans_list::entry(&status));
        }
    }
    let page = ScansPage {
        scans,
        next: page.next,
        unreadable_scans: unreadable,
        rejected_messages: rejected.iter().map(json_of).collect(),
    };
    answer(StatusCode::OK, json_of(&page)).into_response()
}

/// `DELETE /api/scans/{id}`: removes a finished scan's ledger rows, in rounds of at most 20 s.
pub async fn delete_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let record = match ledger.status(id, OffsetDateTime::now_utc()).await {
        Ok(Some(status))
            if !matches!(
                status.state,
                State::Succeeded | State::Failed | State::Cancelled
            ) =>
        {
            return error(
                StatusCode::CONFLICT,
                None,
                "only a finished scan can be removed; cancel it first",
            )
        }
        // A scan whose rows are damaged (one half removed by an earlier version, which deleted
        // its counter shards first) cannot run any more: its removal may go on.
        Ok(Some(_)) | Err(tablescan_ledger::LedgerError::Corrupt(..)) => {
            match ledger.scan(id).await {
                Ok(Some(record)) => record,
                Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
                Err(e) => return unavailable_ledger(e),
            }
        }
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => return unavailable_ledger(e),
    };
    match ledger
        .remove_scan(&record, std::time::Instant::now() + state.removal_time)
        .await
    {
        Ok(removed) => removal_answer(
            removed.more,
            &RemovalRound {
                id: id.to_string(),
                removed_rows: removed.rows,
                more: removed.more,
            },
        ),
        Err(e) => unavailable_ledger(e),
    }
}

/// `DELETE /api/rejected`: forgets the refused queue messages the scans list shows.
pub async fn clear_rejected(state: &AppState, body: &[u8]) -> Response {
    if let Err(failure) = request(body) {
        return failure.into_response();
    }
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    match ledger
        .clear_rejected(std::time::Instant::now() + state.removal_time)
        .await
    {
        Ok(removed) => removal_answer(
            removed.more,
            &RejectedRemovalRound {
                removed: removed.rows,
                more: removed.more,
            },
        ),
        Err(e) => unavailable_ledger(e),
    }
}

/// `200` when a removal is complete, `202` with `"more": true` when it needs another call.
fn removal_answer(more: bool, body: &impl Serialize) -> Response {
    let status = if more {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    answer(status, json_of(body)).into_response()
}

fn unavailable_ledger(e: tablescan_ledger::LedgerError) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        format!("the ledger could not be read or written: {e}"),
    )
}
