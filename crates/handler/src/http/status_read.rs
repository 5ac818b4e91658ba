//! `GET /api/scans/{id}`: a scan's status, with, for a scan in flight, its activity and pace
//! within the read's budget (`job::read_budget`), and the read's turn at the re-drive look.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use time::OffsetDateTime;

use super::activity::activity;
use crate::answers::{answer, error, scan_target};
use crate::app::AppState;
use tablescan_ledger::read_budget::{ReadBudget, ReadCost, STATUS_READ};
use tablescan_ledger::{State, StatusRead};
use tablescan_storage::{Missing, Reason};

/// `GET /api/scans/{id}`. A scan in flight costs at most `job::read_budget::STATUS_READ` (5
/// requests, 60 entities) however many items are pending and processes run it, plus, at most
/// once a minute per scan, the re-drive look (`job::redrive`).
pub async fn get_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    match ledger.read_status(id, OffsetDateTime::now_utc()).await {
        Ok(Some(read)) => {
            let mut status = read.status.clone();
            if matches!(
                status.state,
                State::Pending | State::Running | State::Cancelling
            ) {
                let mut budget = ReadBudget::after(STATUS_READ, read.cost);
                status.activity = activity(state, ledger, &status, &mut budget).await;
                status.pace = pace(ledger, &status, &mut budget).await;
                oldest_parked(ledger, &mut status, &mut budget).await;
            }
            if crate::redrive::wants_redrive(status.state) {
                let abandoned = status
                    .activity
                    .as_ref()
                    .is_some_and(|a| a.steps_abandoned > 0);
                redrive_look(state, ledger, &read, abandoned).await;
            }
            answer(
                StatusCode::OK,
                serde_json::to_value(status).unwrap_or(Value::Null),
            )
            .into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(tablescan_ledger::LedgerError::Storage(e))
            if e.reason() == Reason::NotFound(Missing::Table) =>
        {
            error(StatusCode::NOT_FOUND, None, "no scan has this id")
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the status could not be read: {e}"),
        ),
    }
}

/// What a capped scan's pace read may cost: one query of its lease rows (16 per capped scan).
pub(super) const PACE_READ: ReadCost = ReadCost::new(1, 16);

/// Whether the scan shares out a cap (set or learned): then its slices say how fast it goes.
pub(super) fn paced(status: &tablescan_ledger::ScanStatus) -> Option<()> {
    let capped =
        status.spec.max_rows_per_second.is_some() || status.learned_max_rows_per_second.is_some();
    capped.then_some(())
}

/// How fast a capped scan (its cap set or learned) goes now, if `budget` still holds a pace
/// read; `None` for a scan without a cap (nothing shares one out, so nothing is read) or when
/// the read failed.
async fn pace(
    ledger: &tablescan_ledger::Ledger,
    status: &tablescan_ledger::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<tablescan_ledger::Pace> {
    paced(status)?;
    let cap = status.spec.max_rows_per_second;
    if !budget.spend(PACE_READ) {
        return None;
    }
    match ledger
        .pace(&status.id, cap, OffsetDateTime::now_utc())
        .await
    {
        Ok(pace) => Some(pace),
        Err(e) => {
            tracing::warn!(scan = %status.id, "could not read the scan's pace: {e}");
            None
        }
    }
}

/// What the look for parked items costs: one `$top=1` query of the key alone.
const PARKED_READ: ReadCost = ReadCost::new(1, 1);

/// Sets the activity's `oldest_parked_seconds` when the scan has parked items and `budget`
/// still holds their look (it comes last: the claims and the pace say more). A failed look
/// only leaves the figure out.
async fn oldest_parked(
    ledger: &tablescan_ledger::Ledger,
    status: &mut tablescan_ledger::ScanStatus,
    budget: &mut ReadBudget,
) {
    let Some(activity) = status.activity.as_mut() else {
        return;
    };
    if !budget.spend(PARKED_READ) {
        return;
    }
    match ledger.oldest_parked_ms(&status.id).await {
        Ok(parked) => {
            let now_ms = tablescan_ledger::rows::millis(OffsetDateTime::now_utc());
            activity.oldest_parked_seconds = parked.map(|at| now_ms.saturating_sub(at) / 1000);
        }
        Err(e) => tracing::warn!(scan = %status.id, "could not look for parked items: {e}"),
    }
}

/// The status read's re-drive look (`job::redrive`): when it is due and this reader wins the
/// scan's turn, items found stranded are sent again (the next read counts them). Failures
/// never fail the read: they are logged, and the next turn or sweep tries again. While the
/// read saw `abandoned` claims (a host died), the look is due once a lease rather than once
/// a minute, so that a watched scan resumes soon after a crash.
async fn redrive_look(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    read: &StatusRead,
    abandoned: bool,
) {
    let id = read.status.id.as_str();
    let now = OffsetDateTime::now_utc();
    let after = crate::redrive::redrive_after(state);
    // A claim can be abandoned once a lease has passed, long before an item can be stranded.
    let lease = time::Duration::try_from(state.config.lease).unwrap_or(time::Duration::MINUTE);
    let every = match abandoned {
        true => crate::redrive::status_look_every(state).min(lease),
        false => crate::redrive::status_look_every(state),
    };
    let old_enough = after.min(lease);
    if !tablescan_ledger::redrive::look_due(
        read.created_at,
        read.redrive_looked_at,
        now,
        old_enough,
        every,
    ) {
        return;
    }
    let looked = async {
        if !ledger.take_look_turn(id, &read.scan_etag, now).await? {
            return Ok(Vec::new());
        }
        let stall = tablescan_ledger::redrive::stall_after(lease);
        let quiet = tablescan_ledger::redrive::quiet_for(&read.status, now);
        ledger
            .stranded(
                id,
                now,
                after,
                (quiet >= stall).then_some(stall),
                read.resume_from.as_deref(),
            )
            .await
    };
    let stranded = match looked.await {
        Ok(stranded) => stranded,
        Err(why) => {
            tracing::warn!(scan = id, "could not look for stranded work items: {why}");
            return;
        }
    };
    let deadline = std::time::Instant::now() + crate::redrive::STATUS_READ_REDRIVE_TIME;
    if let Err(why) = crate::redrive::redrive_stranded(state, ledger, id, stranded, deadline).await
    {
        tracing::warn!(scan = id, "could not re-drive stranded work items: {why}");
    }
}
