//! The queue-triggered functions: each invocation runs one step of one work item.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use time::OffsetDateTime;

use super::app::AppState;
use super::names::{ITEM_BINDING, MAX_DEQUEUE_COUNT, PARTITION_OUTPUT, RANGE_OUTPUT};
use super::plan::{action_for, scan_options};
use super::protocol::{Failure, Invocation, Outcome};
use crate::actions::{Action, ActionCounts};
use crate::job::{Begin, Claim, Finish, StepCounts};
use crate::scan::item::{Task, WorkItem};
use crate::scan::{run_step, Clock, RowSink, SystemClock};
use crate::storage::table::entity::Entity;
use crate::storage::StorageError;

/// Which queue (and so which kind of work item) a function serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    Range,
    Partition,
}

/// Runs one delivered work item.
pub async fn handle(state: &AppState, queue: Queue, body: &[u8]) -> Response {
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
    let item = match decode(&text, queue) {
        Ok(item) => item,
        Err(why) => return reject(ledger, &message_id, &why, &text).await,
    };
    let id = item.id();
    let begin = match begin_when_free(state, ledger, &item).await {
        Ok(begin) => begin,
        Err(e) => {
            return Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the ledger could not be read: {e}"),
            )
            .into_response()
        }
    };
    let claim = match begin {
        Begin::Run(claim) => claim,
        Begin::AlreadyDone(children) => {
            // A redelivery of finished work: send its children again (harmless if they were
            // already sent), do nothing else.
            let (ranges, partitions) = split_messages(children);
            return Outcome::default()
                .messages(RANGE_OUTPUT, ranges)
                .messages(PARTITION_OUTPUT, partitions)
                .log(format!("step {id} of scan {} was already done", item.scan))
                .into_response();
        }
        Begin::Cancelled => {
            return Outcome::default()
                .log(format!(
                    "scan {} is cancelled; step {id} dropped",
                    item.scan
                ))
                .into_response();
        }
        Begin::Busy(_) => {
            return Failure::new(
                StatusCode::CONFLICT,
                format!("step {id} is being run by another delivery"),
            )
            .into_response();
        }
        Begin::UnknownScan => {
            let why = format!("scan {} does not exist", item.scan);
            return reject(ledger, &message_id, &why, &text).await;
        }
        Begin::UnknownItem => {
            let why = format!(
                "step {id} is not recorded in scan {} (or failed for good already)",
                item.scan
            );
            return reject(ledger, &message_id, &why, &text).await;
        }
    };
    match run(state, &item, &claim).await {
        Ok((counts, follow_ups)) => {
            match ledger
                .finish(
                    &item,
                    &claim,
                    counts,
                    &follow_ups,
                    OffsetDateTime::now_utc(),
                )
                .await
            {
                Ok(Finish::Recorded) => {}
                Ok(Finish::AlreadyFinished) => {
                    return Outcome::default()
                        .log(format!("step {id} was finished by another delivery"))
                        .into_response();
                }
                Err(e) => {
                    return Failure::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("the step ran but the ledger could not record it: {e}"),
                    )
                    .into_response()
                }
            }
            let (ranges, partitions) =
                split_messages(follow_ups.iter().map(WorkItem::encode).collect());
            Outcome::default()
                .messages(RANGE_OUTPUT, ranges)
                .messages(PARTITION_OUTPUT, partitions)
                .log(format!(
                    "step {id} of scan {}: {} rows read, {} acted on, {} queries, {} follow-ups",
                    item.scan,
                    counts.rows_read,
                    counts.rows_acted,
                    counts.queries,
                    follow_ups.len()
                ))
                .into_response()
        }
        Err(why) => {
            let attempt = invocation.dequeue_count().unwrap_or(claim.attempt);
            let final_attempt = attempt >= MAX_DEQUEUE_COUNT;
            tracing::error!(scan = %item.scan, step = %id, attempt, final_attempt, "step failed: {why}");
            if let Err(e) = ledger
                .fail(
                    &item,
                    &claim,
                    &why,
                    final_attempt,
                    OffsetDateTime::now_utc(),
                )
                .await
            {
                tracing::warn!("could not record the failure: {e}");
            }
            Failure::new(StatusCode::INTERNAL_SERVER_ERROR, why).into_response()
        }
    }
}

/// Claims the work item. If another delivery holds the claim (a duplicate message, or a retry
/// after a crash whose claim has not run out yet), waits for the claim to run out rather than
/// failing: failing would spend one of the message's few attempts on waiting and could send a
/// healthy work item to the poison queue. The waiting ends early when the holder finishes.
async fn begin_when_free(
    state: &AppState,
    ledger: &crate::job::Ledger,
    item: &WorkItem,
) -> Result<Begin, crate::job::LedgerError> {
    let lease = time::Duration::try_from(state.lease).unwrap_or(time::Duration::MINUTE);
    let mut waited = std::time::Duration::ZERO;
    loop {
        let begin = ledger.begin(item, OffsetDateTime::now_utc(), lease).await?;
        let Begin::Busy(remaining) = begin else {
            return Ok(begin);
        };
        if waited >= state.lease * 2 {
            return Ok(Begin::Busy(remaining));
        }
        let pause =
            remaining.min(std::time::Duration::from_secs(5)) + std::time::Duration::from_millis(50);
        tokio::time::sleep(pause).await;
        waited += pause;
    }
}

/// Fails a message that is not a work item of a known scan: logged, remembered in the ledger for
/// the scans list, and answered with an error so the host retries it and then poisons it.
async fn reject(ledger: &crate::job::Ledger, message_id: &str, why: &str, text: &str) -> Response {
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

fn decode(text: &str, queue: Queue) -> Result<WorkItem, String> {
    let item = WorkItem::decode(text).map_err(|e| e.to_string())?;
    match (&item.task, queue) {
        (Task::Range { .. }, Queue::Range) | (Task::Partition { .. }, Queue::Partition) => Ok(item),
        _ => Err("the work item arrived on the wrong queue for its kind".into()),
    }
}

/// Sorts encoded work items by the queue they go to.
fn split_messages(messages: Vec<String>) -> (Vec<String>, Vec<String>) {
    messages.into_iter().partition(|m| {
        WorkItem::decode(m)
            .map(|item| matches!(item.task, Task::Range { .. }))
            .unwrap_or(true)
    })
}

/// Passes each page to the action and adds up what it did.
struct ActionSink {
    action: Action,
    counts: ActionCounts,
    /// The step's clock, to tell the action when its time is up.
    clock: SystemClock,
}

impl RowSink for ActionSink {
    type Error = StorageError;

    async fn accept(
        &mut self,
        rows: Vec<Entity>,
        deadline: Duration,
    ) -> Result<usize, StorageError> {
        let clock = self.clock;
        let go_on = move || clock.now() < deadline;
        let applied = self.action.apply(rows, &go_on).await?;
        self.counts += applied.counts;
        Ok(applied.finished)
    }
}

/// Runs the step; the error text is what the status will show.
async fn run(
    state: &AppState,
    item: &WorkItem,
    claim: &Claim,
) -> Result<(StepCounts, Vec<WorkItem>), String> {
    let started = std::time::Instant::now();
    let spec = &claim.scan.spec;
    let source = state.scan_source(&spec.connection, &spec.table)?;
    let action = action_for(state, spec)?;
    let options = scan_options(spec, state.budget);
    let clock = SystemClock::default();
    let mut sink = ActionSink {
        action,
        counts: ActionCounts::default(),
        clock,
    };
    let report = run_step(&source, item, &options, &clock, &mut sink)
        .await
        .map_err(|e| e.to_string())?;
    let counts = StepCounts {
        rows_read: report.rows_read,
        rows_acted: sink.counts.acted,
        rows_skipped: sink.counts.skipped,
        partitions: report.partitions_started,
        queries: u64::from(report.queries),
        duration_ms: started.elapsed().as_millis() as u64,
    };
    Ok((counts, report.follow_ups))
}
