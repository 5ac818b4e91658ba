//! The queue-triggered functions: each invocation runs one step of one work item, as
//! decode -> begin -> run -> record.
//!
//! This file decodes the message, begins the step (`begin`: admitted, then claimed), has it run
//! and records its finish (`record`), and answers the host. `admission` admits a step by its
//! scan's pace and waits for a busy claim; `run` runs the claimed step, keeping its claim;
//! `sink` holds the action's side of a step and the paced reader; `failure` records a failed
//! step and hands it on; `parking` parks an item that keeps finding no room, and sends parked
//! items with the follow-ups of a step that leaves room.

mod admission;
mod failure;
mod import;
mod parking;
mod run;
mod sink;
#[cfg(test)]
mod sink_tests;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use time::OffsetDateTime;
use tracing::Instrument;

use crate::app::AppState;
use crate::names::ITEM_BINDING;
use crate::pacing::StepPace;
use crate::protocol::{Failure, Invocation, Outcome};
use crate::send::with_items;
use admission::{admit_before_claim, begin_when_free, give_back, Admission};
use failure::on_failure;
pub(super) use failure::{FailureKind, StepFailure};
use run::run_claimed;
pub(super) use run::StepDone;
pub(super) use sink::ActionSink;
use tablescan_api::ActionSpec;
use tablescan_ledger::{Begin, Claim, Finish, StepCounts};
use tablescan_ledger::{ReadRange, Task, WorkItem};

/// The kind of work item a queue-triggered function serves: each kind has a queue of its own
/// (`AppState::item_queues`), and an item that arrives on another kind's queue is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// Ranges of PartitionKeys (`range` items).
    Range,
    /// Ranges of RowKeys within one partition (`partition` items).
    Partition,
    /// An import's items (`export-part` and `export-blob`).
    Export,
}

/// Runs one delivered work item.
pub async fn handle(state: &AppState, kind: ItemKind, body: &[u8]) -> Response {
    let invocation = match Invocation::parse(body) {
        Ok(invocation) => invocation,
        Err(why) => return Failure::new(StatusCode::BAD_REQUEST, why).into_response(),
    };
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return Failure::new(StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    };
    let message_id = invocation.message_id().unwrap_or_default();
    let text = match invocation.queue_message(ITEM_BINDING) {
        Ok(text) => text,
        Err(why) => return reject(ledger, &message_id, &why, "").await,
    };
    let item = match decode(&text, kind) {
        Ok(item) => item,
        Err(why) => return reject(ledger, &message_id, &why, &text).await,
    };
    // Every line logged while the step runs carries the scan, the step and the queue message
    // (the host logs the message id with the invocation: that is how the two are matched).
    let span =
        tracing::info_span!("step", scan = %item.scan, step = %item.id(), message_id = %message_id);
    run_item(state, ledger, kind, &invocation, item, &message_id, &text)
        .instrument(span)
        .await
}

/// Runs a decoded work item: begins it (admitted and claimed), runs its step, records it and
/// answers the host.
async fn run_item(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    kind: ItemKind,
    invocation: &Invocation,
    item: WorkItem,
    message_id: &str,
    text: &str,
) -> Response {
    let (mut claim, admitted) =
        match begin(state, ledger, kind, invocation, &item, message_id, text).await {
            Ok(begun) => begun,
            Err(answer) => return answer,
        };
    let outcome = run_claimed(state, ledger, &item, &mut claim, admitted).await;
    match outcome {
        Ok(done) if hands_itself_on(&item, &done) => {
            // Its work handed on as it came (the action's first writes, or its first read, got
            // no share of the rate in time or were refused): recorded, its child would be the
            // item itself (the same range is the same work, one id), a finish the ledger
            // refuses for good, and the scan failed (devhost's faults test, a learned cap of
            // 100 entities a second). Tried again later instead, as any transient failure.
            let failure = StepFailure::new(
                FailureKind::Transient,
                "the step made no progress (no share of the scan's rate came in time, or the \
                 account refused it); it is tried again later"
                    .to_string(),
            );
            let attempt = invocation.dequeue_count().unwrap_or(claim.attempt);
            on_failure(state, ledger, kind, &item, &claim, attempt, failure).await
        }
        Ok(done) => record(state, ledger, kind, invocation, &item, &claim, done).await,
        Err(failure) => {
            let attempt = invocation.dequeue_count().unwrap_or(claim.attempt);
            on_failure(state, ledger, kind, &item, &claim, attempt, failure).await
        }
    }
}

/// Whether a step that ran hands its own work on untouched: one of its follow-ups is the item
/// itself (a follow-up starts after whatever the step acted on, so this one acted on nothing).
fn hands_itself_on(item: &WorkItem, done: &StepDone) -> bool {
    let id = item.id();
    done.follow_ups.iter().any(|next| next.id() == id)
}

/// Admits the step by its scan's pace and claims its item: the claim and the step's place in
/// the pace (if it was admitted before the claim), or the answer for a step that does not run.
async fn begin(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    kind: ItemKind,
    invocation: &Invocation,
    item: &WorkItem,
    message_id: &str,
    text: &str,
) -> Result<(Claim, Option<StepPace>), Response> {
    // Admitted by its scan's pace before the item is claimed: a step that cannot run here
    // soon is given back to the queue for later, without a ledger write.
    let mut admitted = match admit_before_claim(state, ledger, item).await {
        Admission::Admitted(pace) => Some(pace),
        // Waiting for a cap being learned is short: never parked.
        Admission::NotNow(why)
            if why.learning_for.is_none() && parking::park_if_due(ledger, item).await =>
        {
            tracing::debug!("not run here now ({why})");
            return Err(Outcome::default().into_response());
        }
        Admission::NotNow(why) => return Err(give_back(state, kind, item, &why).await),
        Admission::Undecided => None,
    };
    let sent = invocation.insertion_time();
    let begin = match begin_when_free(state, ledger, item, sent, &mut admitted).await {
        Ok(begin) => begin,
        Err(e) => {
            return Err(Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the ledger could not be read: {e}"),
            )
            .into_response())
        }
    };
    let claim = claim_or_answer(state, ledger, item, begin, message_id, text).await?;
    Ok((claim, admitted))
}

/// The claim of a step the ledger says to run, or the answer for one it says not to.
async fn claim_or_answer(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    item: &WorkItem,
    begin: Begin,
    message_id: &str,
    text: &str,
) -> Result<Claim, Response> {
    let id = item.id();
    let answer = match begin {
        Begin::Run(claim) => return Ok(*claim),
        Begin::AlreadyDone(children) => {
            tracing::info!("a redelivery of a finished step");
            send_unstarted(state, ledger, item, &children).await
        }
        Begin::Orphan => {
            tracing::info!("written ahead by a finish that chose other work; dropped");
            Outcome::default().into_response()
        }
        Begin::Superseded => {
            tracing::info!(
                "an older message of a step sent again after its claim was abandoned; the \
                 newer message's delivery runs it, this one is dropped"
            );
            Outcome::default().into_response()
        }
        Begin::Cancelled => {
            tracing::info!("the scan is cancelled; the step is dropped");
            Outcome::default().into_response()
        }
        Begin::Paused => {
            tracing::info!(
                "the scan is paused; the message is dropped and the item left pending (a \
                 resume sends it again)"
            );
            Outcome::default().into_response()
        }
        Begin::Busy(_) => Failure::new(
            StatusCode::CONFLICT,
            format!("step {id} is being run by another delivery"),
        )
        .into_response(),
        Begin::UnknownScan => {
            let why = format!("scan {} does not exist", item.scan);
            reject(ledger, message_id, &why, text).await
        }
        Begin::FailedForGood => {
            tracing::info!("failed for good already; this delivery is a duplicate");
            Outcome::default().into_response()
        }
        Begin::UnknownItem => {
            let why = format!("step {id} is not recorded in scan {}", item.scan);
            reject(ledger, message_id, &why, text).await
        }
    };
    Err(answer)
}

/// Records a step that ran (its counts, notes, blob and follow-ups, in one finish) and answers
/// the host with its follow-ups.
async fn record(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    kind: ItemKind,
    invocation: &Invocation,
    item: &WorkItem,
    claim: &Claim,
    done: StepDone,
) -> Response {
    let StepDone {
        counts,
        notes,
        blob,
        follow_ups,
        room,
    } = done;
    let finish = ledger
        .finish_noting(
            item,
            claim,
            counts,
            &notes,
            blob.as_ref(),
            &follow_ups,
            OffsetDateTime::now_utc(),
        )
        .await;
    match finish {
        Ok(Finish::Recorded) => {}
        Ok(Finish::FinishedByAnother(children)) => {
            tracing::info!("finished by another delivery; this one's counts are dropped");
            return send_unstarted(state, ledger, item, &children).await;
        }
        Ok(Finish::ClaimLost) => {
            tracing::info!(
                "its claim was lost (another delivery runs the step, or the scan \
                 dropped it); this one's counts are dropped"
            );
            return Outcome::default().into_response();
        }
        Err(e) if e.refused_for_good() => {
            // Refused the same way at every attempt (an entity twice in the transaction, a
            // done row already there, a transaction too large): more deliveries would only
            // loop through the poison queue and the re-drive.
            let why = format!("the step ran but its finish cannot be recorded: {e}");
            let attempt = invocation.dequeue_count().unwrap_or(claim.attempt);
            let failure = StepFailure::permanent(why);
            return on_failure(state, ledger, kind, item, claim, attempt, failure).await;
        }
        Err(e) => {
            return Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the step ran but the ledger could not record it: {e}"),
            )
            .into_response()
        }
    }
    let parked = parking::unpark_for_room(ledger, &item.scan, room).await;
    answer_recorded(state, ledger, claim, &counts, &follow_ups, parked).await
}

/// The answer for a step whose finish is recorded: its follow-ups and the `parked` messages
/// taken for its room, sent; an export's manifest written if this was its last step.
async fn answer_recorded(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    claim: &Claim,
    counts: &StepCounts,
    follow_ups: &[WorkItem],
    parked: Vec<String>,
) -> Response {
    tracing::info!(
        "done: {} rows read, {} acted on, {} skipped, {} failed, {} queries, {} follow-ups, {} ms",
        counts.rows_read,
        counts.rows_acted,
        counts.rows_skipped,
        counts.rows_failed,
        counts.queries,
        follow_ups.len(),
        counts.duration_ms
    );
    if follow_ups.is_empty() && matches!(claim.scan.spec.action, ActionSpec::Export { .. }) {
        // Perhaps the export's last step: then its manifest is written now.
        crate::manifest::seal_record_if_done(state, ledger, &claim.scan).await;
    }
    // Parked items taken out of the ledger for the room this step leaves go with its own.
    let messages = follow_ups.iter().map(WorkItem::encode).chain(parked);
    with_items(Outcome::default(), messages.collect()).into_response()
}

/// Answers for a step finished by another delivery (or an earlier one): sends again its
/// recorded `children` not started yet (their messages may have been lost with that delivery's
/// answer), never a done child's subtree; writes the export's manifest if that delivery stopped
/// before it. 503 if the children cannot be read (a 200 would leave lost ones to the re-drive).
async fn send_unstarted(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    item: &WorkItem,
    children: &[String],
) -> Response {
    let unstarted = match ledger
        .unstarted(&item.scan, children, OffsetDateTime::now_utc())
        .await
    {
        Ok(messages) => messages,
        Err(e) => {
            let id = item.id();
            let why = format!("the unstarted children of {id} could not be read: {e}");
            return Failure::new(StatusCode::SERVICE_UNAVAILABLE, why).into_response();
        }
    };
    tracing::info!("{} unstarted children sent again", unstarted.len());
    crate::manifest::seal_if_done(state, ledger, &item.scan).await;
    with_items(Outcome::default(), unstarted).into_response()
}

/// Fails a message that is not a work item of a known scan: logged, remembered in the ledger for
/// the scans list, and answered with an error so the host retries it and then poisons it.
async fn reject(
    ledger: &tablescan_ledger::Ledger,
    message_id: &str,
    why: &str,
    text: &str,
) -> Response {
    tracing::error!(message_id = %message_id, "rejected a queue message: {why}");
    if let Err(e) = ledger
        .reject(message_id, why, text, OffsetDateTime::now_utc())
        .await
    {
        tracing::warn!("could not record the rejected message: {e}");
    }
    Failure::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("not a tablescan work item: {why}"),
    )
    .into_response()
}

fn decode(text: &str, kind: ItemKind) -> Result<WorkItem, String> {
    let item = WorkItem::decode(text).map_err(|e| e.to_string())?;
    match (&item.task, kind) {
        (Task::Table(ReadRange::Range { .. }), ItemKind::Range)
        | (Task::Table(ReadRange::Partition { .. }), ItemKind::Partition)
        | (Task::Import(_), ItemKind::Export) => Ok(item),
        _ => Err("the work item arrived on the wrong queue for its kind".into()),
    }
}
