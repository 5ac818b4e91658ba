//! The activity of a scan in flight, for its status: its claims (running, abandoned), how long
//! since a step finished, the messages waiting in its queues when they could explain a stall,
//! and a sentence saying why it waits. Every read comes out of the status read's budget.

use time::OffsetDateTime;

use super::status_read::{paced, PACE_READ};
use crate::app::AppState;
use tablescan_ledger::read_budget::{ReadBudget, ReadCost};

/// The most entities a claims window may read: `job::activity::CLAIMS_WINDOW`, less what a
/// capped scan's pace read needs after it.
fn claims_window(status: &tablescan_ledger::ScanStatus, budget: &ReadBudget) -> u16 {
    let reserved = match paced(status) {
        Some(()) => PACE_READ.entities,
        None => 0,
    };
    let room = budget.left().entities.saturating_sub(reserved);
    u16::try_from(room)
        .unwrap_or(u16::MAX)
        .min(tablescan_ledger::activity::CLAIMS_WINDOW)
}

/// The claims among the scan's pending items: none without reading when nothing is pending,
/// else one window if `budget` holds a request and a few entities; `None` if not or if the
/// window could not be read.
async fn claims_within(
    ledger: &tablescan_ledger::Ledger,
    status: &tablescan_ledger::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<tablescan_ledger::activity::Claims> {
    let pending = status.progress.steps_pending;
    if pending == 0 {
        return Some(tablescan_ledger::activity::Claims::default());
    }
    let window = claims_window(status, budget);
    if window < MIN_CLAIMS_WINDOW || !budget.spend(ReadCost::new(1, u32::from(window))) {
        return None;
    }
    let now = OffsetDateTime::now_utc();
    match ledger.claims(&status.id, pending, window, now).await {
        Ok(claims) => Some(claims),
        Err(e) => {
            tracing::warn!(scan = %status.id, "could not count the scan's claims: {e}");
            None
        }
    }
}

/// A claims window smaller than this says too little to be worth its request.
const MIN_CLAIMS_WINDOW: u16 = 5;

/// Messages waiting in the queues scan `status`'s items travel on (an import's one queue, a
/// table scan's two), if `budget` holds a request for each; `None` if not or if a count could
/// not be read.
async fn queued_messages(
    state: &AppState,
    status: &tablescan_ledger::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<u64> {
    let queues = scan_queues(&state.item_queues, &status.spec);
    if !budget.spend(ReadCost::new(queues.len() as u32, 0)) {
        return None;
    }
    let clients = state.clients(crate::names::STORAGE_CONNECTION).ok()?;
    let mut total = 0u64;
    for name in queues {
        let queue = clients.queues().ok()?.queue(name).ok()?;
        total += queue.approximate_count().await.ok()?;
    }
    Some(total)
}

/// The queues a scan's work items travel on: an import's items on the export queue, a table
/// scan's on the range and partition queues (`ItemQueues::of`).
fn scan_queues<'a>(
    queues: &'a crate::app::ItemQueues,
    spec: &tablescan_api::ScanSpec,
) -> Vec<&'a str> {
    match spec.import {
        Some(_) => vec![queues.export.as_str()],
        None => vec![queues.range.as_str(), queues.partition.as_str()],
    }
}

/// Why a scan in flight is or is not moving; `None` if the ledger could not say (or could not
/// within the read's `budget`).
pub(super) async fn activity(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    status: &tablescan_ledger::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<tablescan_ledger::Activity> {
    let now = OffsetDateTime::now_utc();
    let claims = claims_within(ledger, status, budget).await?;
    let since = seconds_since_last_step(status, now);
    let now_ms = tablescan_ledger::rows::millis(now);
    // Only a stall with nothing running and nothing abandoned is explained by the queues.
    let stalled =
        !awaits_manifest(status) && claims.abandoned == 0 && claims.running == 0 && since >= 60;
    let queued_messages = match stalled {
        true => queued_messages(state, status, budget).await,
        false => None,
    };
    let redrive_minutes = state.config.redrive_after.as_secs() / 60;
    let note = stall_note(status, &claims, since, queued_messages, redrive_minutes);
    Some(tablescan_ledger::Activity {
        steps_running: claims.running,
        steps_abandoned: claims.abandoned,
        estimated: claims.estimated,
        oldest_pending_seconds: claims
            .oldest_touched_ms
            .map(|touched| now_ms.saturating_sub(touched) / 1000),
        abandoned_return_by: abandoned_return_by(&claims),
        oldest_parked_seconds: None,
        queued_messages,
        seconds_since_last_step: since,
        note,
    })
}

/// Seconds since a step last finished, or since the scan started (or was created) if none has.
fn seconds_since_last_step(status: &tablescan_ledger::ScanStatus, now: OffsetDateTime) -> u64 {
    let last = status
        .progress
        .last_step_at
        .as_deref()
        .or(status.started_at.as_deref())
        .unwrap_or(&status.created_at);
    tablescan_storage::table::entity::EdmDateTime::parse(last)
        .map(|t| (now - t.time()).whole_seconds().max(0) as u64)
        .unwrap_or(0)
}

/// Whether every step of an export is done and only its manifest is still to be written.
fn awaits_manifest(status: &tablescan_ledger::ScanStatus) -> bool {
    status.export.as_ref().is_some_and(|e| e.manifest.is_none())
        && status.progress.steps_pending == 0
}

/// When, at the latest, the messages of abandoned steps come back: the Functions host holds a
/// delivered queue message at most 10 minutes (its visibility while an execution runs), and a
/// stopped host's messages come back after that.
fn abandoned_return_by(claims: &tablescan_ledger::activity::Claims) -> Option<String> {
    const HOST_HOLD_MS: u64 = 10 * 60 * 1000;
    let ms = claims.abandoned_touched_ms.map(|t| t + HOST_HOLD_MS)?;
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .map(tablescan_ledger::ledger::format_time)
}

/// A sentence explaining why the scan waits, when the figures show it: an export's manifest
/// being written (or failing to be), abandoned claims, messages that seem lost, or work that
/// waits in the queues with nothing running.
fn stall_note(
    status: &tablescan_ledger::ScanStatus,
    claims: &tablescan_ledger::activity::Claims,
    since: u64,
    queued_messages: Option<u64>,
    redrive_minutes: u64,
) -> Option<String> {
    let awaits_manifest = awaits_manifest(status);
    let manifest_error = status
        .export
        .as_ref()
        .is_some_and(|e| e.manifest_error.is_some());
    if awaits_manifest && manifest_error {
        Some(
            "every step is done, but the export's manifest could not be written yet (see \
             export.manifestError); the re-drive sweep tries again, and the scan fails if it \
             still cannot after TABLESCAN_OUTAGE_WINDOW_SECONDS"
                .to_string(),
        )
    } else if awaits_manifest {
        Some(
            "every step is done; the export's manifest is being written (if the step that \
             finished last stopped before writing it, the next re-drive sweep writes it)"
                .to_string(),
        )
    } else if claims.abandoned > 0 {
        Some(format!(
            "{} work item(s) were held by a step that stopped without finishing (its host \
             stopped); the next re-drive look (a status read, or the timer within a minute) \
             sends them again, and the scan goes on",
            claims.abandoned
        ))
    } else if claims.running == 0 && since >= 60 && queued_messages == Some(0) {
        Some(format!(
            "no step is running and the work queues are empty: the pending items' messages \
             seem lost; they are sent again once untouched for {redrive_minutes} minutes"
        ))
    } else if claims.running == 0 && since >= 60 && queued_messages.unwrap_or(0) > 0 {
        Some(
            "work waits in the queues and no step is running: the app is starting instances \
             or busy with other scans"
                .to_string(),
        )
    } else {
        None
    }
}
