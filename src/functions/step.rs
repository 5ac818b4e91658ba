//! The queue-triggered functions: each invocation runs one step of one work item.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use time::OffsetDateTime;
use tracing::Instrument;

use super::app::AppState;
use super::names::{
    EXPORT_OUTPUT, ITEM_BINDING, PARTITION_OUTPUT, RANGE_OUTPUT, STORAGE_CONNECTION,
};
use super::pacing::{NotAdmitted, Reservation, StepPace, ADMIT_WAIT};
use super::plan::{action_for, scan_options};
use super::protocol::{Failure, Invocation, Outcome};
use crate::actions::{Action, ActionCounts, Applied, RowFailure, FAILURES_KEPT};
use crate::job::exports::{BlobEntry, Layout};
use crate::job::notes::{NotedRow, RowNotes};
use crate::job::{ActionSpec, Begin, Claim, FailureRecord, Finish, StepCounts};
use crate::scan::item::{Task, WorkItem};
use crate::scan::reader::{PageRequest, TableReader};
use crate::scan::{run_step, Clock, RowSink, StepError, SystemClock};
use crate::storage::pacing::Governor;
use crate::storage::queue::{MessageEncoding, PutOptions};
use crate::storage::table::entity::Entity;
use crate::storage::table::query::Page;
use crate::storage::throttled::counting_throttled;
use crate::storage::StorageError;

/// How many of its budgets (15 s by default) a step's storage requests may retry for: past the
/// action's deadline (1.5 budgets) with room for the writes started before it.
pub(super) const STORAGE_DEADLINE_BUDGETS: u32 = 3;

/// Which queue (and so which kind of work item) a function serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    Range,
    Partition,
    /// An import's items.
    Export,
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
    // Every line logged while the step runs carries the scan, the step and the queue message
    // (the host logs the message id with the invocation: that is how the two are matched).
    let span =
        tracing::info_span!("step", scan = %item.scan, step = %item.id(), message_id = %message_id);
    run_item(state, ledger, queue, &invocation, item, &message_id, &text)
        .instrument(span)
        .await
}

/// Runs a decoded work item: claims it, runs its step, records it and answers the host.
async fn run_item(
    state: &AppState,
    ledger: &crate::job::Ledger,
    queue: Queue,
    invocation: &Invocation,
    item: WorkItem,
    message_id: &str,
    text: &str,
) -> Response {
    let id = item.id();
    // Admitted by its scan's pace before the item is claimed: a step that cannot run here
    // soon is given back to the queue for later, without a ledger write.
    let mut admitted = match admit_before_claim(state, ledger, &item).await {
        Admission::Admitted(pace) => Some(pace),
        Admission::NotNow(why) => return give_back(state, queue, &item, &why).await,
        Admission::Undecided => None,
    };
    let sent = invocation.insertion_time();
    let begin = match begin_when_free(state, ledger, &item, sent, &mut admitted).await {
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
            tracing::info!("a redelivery of a finished step");
            return send_unstarted(state, ledger, &item, &children).await;
        }
        Begin::Orphan => {
            tracing::info!("written ahead by a finish that chose other work; dropped");
            return Outcome::default().into_response();
        }
        Begin::Superseded => {
            tracing::info!(
                "an older message of a step sent again after its claim was abandoned; the \
                 newer message's delivery runs it, this one is dropped"
            );
            return Outcome::default().into_response();
        }
        Begin::Cancelled => {
            tracing::info!("the scan is cancelled; the step is dropped");
            return Outcome::default().into_response();
        }
        Begin::Paused => {
            tracing::info!(
                "the scan is paused; the message is dropped and the item left pending (a \
                 resume sends it again)"
            );
            return Outcome::default().into_response();
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
            return reject(ledger, message_id, &why, text).await;
        }
        Begin::FailedForGood => {
            tracing::info!("failed for good already; this delivery is a duplicate");
            return Outcome::default().into_response();
        }
        Begin::UnknownItem => {
            let why = format!("step {id} is not recorded in scan {}", item.scan);
            return reject(ledger, message_id, &why, text).await;
        }
    };
    let mut claim = *claim;
    let outcome = run_claimed(state, ledger, &item, &mut claim, admitted).await;
    match outcome {
        Ok(StepDone {
            counts,
            notes,
            blob,
            follow_ups,
        }) => {
            match ledger
                .finish_noting(
                    &item,
                    &claim,
                    counts,
                    &notes,
                    blob.as_ref(),
                    &follow_ups,
                    OffsetDateTime::now_utc(),
                )
                .await
            {
                Ok(Finish::Recorded) => {}
                Ok(Finish::FinishedByAnother(children)) => {
                    tracing::info!("finished by another delivery; this one's counts are dropped");
                    return send_unstarted(state, ledger, &item, &children).await;
                }
                Ok(Finish::ClaimLost) => {
                    tracing::info!(
                        "its claim was lost (another delivery runs the step, or the scan \
                         dropped it); this one's counts are dropped"
                    );
                    return Outcome::default().into_response();
                }
                Err(e) if e.refused_for_good() => {
                    // Refused the same way at every attempt (an entity twice in the
                    // transaction, a done row already there, a transaction too large): more
                    // deliveries would only loop through the poison queue and the re-drive.
                    let why = format!("the step ran but its finish cannot be recorded: {e}");
                    let attempt = invocation.dequeue_count().unwrap_or(claim.attempt);
                    let failure = StepFailure::permanent(why);
                    return on_failure(state, ledger, queue, &item, &claim, attempt, failure).await;
                }
                Err(e) => {
                    return Failure::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("the step ran but the ledger could not record it: {e}"),
                    )
                    .into_response()
                }
            }
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
            if follow_ups.is_empty() && matches!(claim.scan.spec.action, ActionSpec::Export { .. })
            {
                // Perhaps the export's last step: then its manifest is written now.
                super::manifest::seal_record_if_done(state, ledger, &claim.scan).await;
            }
            with_items(
                Outcome::default(),
                follow_ups.iter().map(WorkItem::encode).collect(),
            )
            .into_response()
        }
        Err(failure) => {
            let attempt = invocation.dequeue_count().unwrap_or(claim.attempt);
            on_failure(state, ledger, queue, &item, &claim, attempt, failure).await
        }
    }
}

/// Answers for a step finished by another delivery (or an earlier one): sends again its
/// recorded `children` not started yet (their messages may have been lost with that delivery's
/// answer), never a done child's subtree; writes the export's manifest if that delivery stopped
/// before it. 503 if the children cannot be read (a 200 would leave lost ones to the re-drive).
async fn send_unstarted(
    state: &AppState,
    ledger: &crate::job::Ledger,
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
    super::manifest::seal_if_done(state, ledger, &item.scan).await;
    with_items(Outcome::default(), unstarted).into_response()
}

/// Records a failed step and answers the host.
///
/// A permanent failure (a missing table, refused credentials, a bad request) fails the item
/// for good at once, with its cause in the status: more attempts would only spend time. A
/// transient one (throttling, an outage) leaves the item pending for the host's next delivery;
/// on the message's last delivery the item is handed on in a fresh message, sent with a delay,
/// so that no outage shorter than the outage window fails an item for good.
async fn on_failure(
    state: &AppState,
    ledger: &crate::job::Ledger,
    queue: Queue,
    item: &WorkItem,
    claim: &Claim,
    attempt: u32,
    failure: StepFailure,
) -> Response {
    let id = item.id();
    let now = OffsetDateTime::now_utc();
    let now_ms = crate::job::rows::millis(now);
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
        match send_again_later(state, queue, item).await {
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
async fn send_again_later(state: &AppState, queue: Queue, item: &WorkItem) -> Result<(), String> {
    let delay = state.host_queues.visibility_timeout * 2;
    send_later(state, queue, item, delay).await
}

/// Puts `item`'s message in its queue again, invisible for `delay` (1 s to 10 min).
async fn send_later(
    state: &AppState,
    queue: Queue,
    item: &WorkItem,
    delay: Duration,
) -> Result<(), String> {
    let queues = state.clients(STORAGE_CONNECTION)?.queues()?.clone();
    let name = match queue {
        Queue::Range => &state.item_queues.range,
        Queue::Partition => &state.item_queues.partition,
        Queue::Export => &state.item_queues.export,
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

/// Whether a step may run now, decided before its item is claimed.
enum Admission {
    Admitted(StepPace),
    /// The scan's pace has no room for it in this process soon.
    NotNow(NotAdmitted),
    /// Decided after the claim: the scan is unknown, cancelled or unreadable (the claim says
    /// what to do), or the step is admitted then.
    Undecided,
}

/// Admits `item`'s step by its scan's pace, from the scan as this process last read it.
async fn admit_before_claim(
    state: &AppState,
    ledger: &crate::job::Ledger,
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
fn pace_source(
    state: &AppState,
    item: &WorkItem,
    spec: &crate::job::ScanSpec,
) -> Result<std::sync::Arc<Governor>, String> {
    if item.task.is_import() {
        return Ok(std::sync::Arc::new(Governor::default()));
    }
    Ok(state.scan_source(&spec.connection, &spec.table)?.governor())
}

/// How long a work item given back stays out of sight: a second or two, spread so that items
/// given back together do not all come back together. Short, because the share it waited for
/// may come free a moment later (the last steps of a scan); each return costs a queue message
/// and an invocation, never a ledger write.
fn give_back_delay() -> Duration {
    let spread = (uuid::Uuid::new_v4().as_u128() % 2_000) as u64;
    Duration::from_millis(1_000 + spread)
}

/// Gives a step not admitted back to its queue for later and answers the host that the
/// message is done with; if the message cannot be sent, the host's own retry brings it back.
async fn give_back(state: &AppState, queue: Queue, item: &WorkItem, why: &NotAdmitted) -> Response {
    let delay = give_back_delay();
    match send_later(state, queue, item, delay).await {
        Ok(()) => {
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
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

/// Runs the step while keeping its claim: the claim is renewed every third of the lease for as
/// long as the step runs, so a step that takes longer than one lease (storage retries, a slow
/// target) is never run a second time by another delivery meanwhile. If the claim is lost all
/// the same (the ledger was unreachable for a whole lease), the step stops acting at its next
/// page; its finish will then not count.
async fn run_claimed(
    state: &AppState,
    ledger: &crate::job::Ledger,
    item: &WorkItem,
    claim: &mut Claim,
    admitted: Option<StepPace>,
) -> Result<StepDone, StepFailure> {
    let lease = time::Duration::try_from(state.config.lease).unwrap_or(time::Duration::MINUTE);
    let period = (state.config.lease / 3).max(Duration::from_millis(100));
    let lost = std::sync::atomic::AtomicBool::new(false);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let scan = claim.scan.clone();
    let attempt = claim.attempt;
    let work = async {
        let run = run(state, ledger, item, &scan, attempt, &lost, admitted);
        let (outcome, throttled) = counting_throttled(run).await;
        let _ = stop.send(true);
        match outcome {
            Ok(mut done) => {
                done.counts.requests_throttled = throttled;
                Ok(done)
            }
            Err(mut failure) => {
                failure.requests_throttled = throttled;
                Err(failure)
            }
        }
    };
    let renewal = async {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stopped.changed() => return,
            }
            match ledger
                .renew(item, claim, OffsetDateTime::now_utc(), lease)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!("the step's claim was lost; it stops acting");
                    lost.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                // The claim still holds until its lease ends; the next renewal tries again.
                Err(e) => tracing::warn!("could not renew the claim of step {}: {e}", item.id()),
            }
        }
    };
    let (outcome, ()) = tokio::join!(work, renewal);
    outcome
}

/// Claims the work item. If another delivery holds the claim (a duplicate message, or a retry
/// after a crash whose claim has not run out yet), waits for the claim to run out rather than
/// failing: failing would spend one of the message's few attempts on waiting and could send a
/// healthy work item to the poison queue. The waiting ends early when the holder finishes.
async fn begin_when_free(
    state: &AppState,
    ledger: &crate::job::Ledger,
    item: &WorkItem,
    sent: Option<OffsetDateTime>,
    admitted: &mut Option<StepPace>,
) -> Result<Begin, crate::job::LedgerError> {
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
        (Task::Range { .. }, Queue::Range)
        | (Task::Partition { .. }, Queue::Partition)
        | (Task::ExportPart { .. } | Task::ExportBlob { .. }, Queue::Export) => Ok(item),
        _ => Err("the work item arrived on the wrong queue for its kind".into()),
    }
}

/// `outcome` with encoded work items, each in the output binding of its kind's queue.
pub(crate) fn with_items(outcome: Outcome, messages: Vec<String>) -> Outcome {
    let (mut ranges, mut partitions, mut exports) = (Vec::new(), Vec::new(), Vec::new());
    for message in messages {
        match WorkItem::decode(&message).map(|item| item.task) {
            Ok(Task::Partition { .. }) => partitions.push(message),
            Ok(task) if task.is_import() => exports.push(message),
            _ => ranges.push(message),
        }
    }
    outcome
        .messages(RANGE_OUTPUT, ranges)
        .messages(PARTITION_OUTPUT, partitions)
        .messages(EXPORT_OUTPUT, exports)
}

/// Passes each page to the action and adds up what it did; stops acting once the scan is
/// cancelled.
pub(super) struct ActionSink<'a> {
    action: Action,
    pub(super) counts: ActionCounts,
    /// Rows the action could not act on (up to [`FAILURES_KEPT`]) and, in a dry run, rows it
    /// would have acted on (as many).
    pub(super) notes: RowNotes,
    /// Counts what the action would do and writes nothing.
    dry_run: bool,
    /// The step's clock, to tell the action when its time is up.
    clock: SystemClock,
    state: &'a AppState,
    scan: &'a str,
    /// Set when the step's claim was lost: another delivery may be running the item.
    lost: &'a std::sync::atomic::AtomicBool,
    /// Set when a page was refused because the scan was cancelled or the claim lost.
    pub(super) cancelled: bool,
    /// Set once the scan is seen paused: every page from then on is cut to its first row, so
    /// the step stops as a step whose time is up does, exactly where it stopped.
    pausing: bool,
    /// Writes wait for their share of the scan's cap and the target's back-off.
    pace: &'a StepPace,
}

impl<'a> ActionSink<'a> {
    pub(super) fn new(
        action: Action,
        dry_run: bool,
        clock: SystemClock,
        state: &'a AppState,
        scan: &'a str,
        lost: &'a std::sync::atomic::AtomicBool,
        pace: &'a StepPace,
    ) -> Self {
        ActionSink {
            action,
            counts: ActionCounts::default(),
            notes: RowNotes::default(),
            dry_run,
            clock,
            state,
            scan,
            lost,
            cancelled: false,
            pausing: false,
            pace,
        }
    }
}

/// The step's source, read at its scan's pace: each page waits for the rows it asks for (sized
/// to the step's share of the rate), and what a short page did not use is given back.
struct PacedReader<'a> {
    table: &'a crate::storage::TableClient,
    pace: &'a StepPace,
    /// The share reserved for the next page while this one is on its way (given back if the
    /// step reads no more).
    next: std::sync::Mutex<Option<Reservation>>,
}

impl PacedReader<'_> {
    fn take_next(&self) -> Option<Reservation> {
        self.next.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn release_next(&self) {
        if let Some(reserved) = self.take_next() {
            self.pace.release(reserved);
        }
    }
}

impl TableReader for PacedReader<'_> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        let top = self.pace.page_size(request.top);
        let reserved = self.take_next();
        let wait = self.pace.before_reserved_read(u64::from(top), reserved);
        let ticket = tokio::time::timeout(super::pacing::SHARE_WAIT, wait)
            .await
            .map_err(|_| super::pacing::no_share("query entities", self.pace.scan()))?;
        // A step reads page after page: the next one's share is earned while this one is on
        // its way, so a step alone is not held to a page per wait plus request.
        let next = self.pace.reserve_read(u64::from(top));
        // The pieces of a partition-keys step read side by side through one reader: a place
        // another piece reserved and nobody took is given back, not dropped.
        let replaced = self
            .next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(next);
        if let Some(replaced) = replaced {
            self.pace.release(replaced);
        }
        let paced = PageRequest { top, ..*request };
        let page = self.table.read_page(&paced).await;
        // A refused or failed request took nothing from the account.
        let used = page.as_ref().map_or(0, |page| page.entities.len() as u64);
        self.pace
            .after_read(ticket, used, u64::from(top).saturating_sub(used));
        page
    }
}

impl Drop for PacedReader<'_> {
    fn drop(&mut self) {
        self.release_next();
    }
}

impl RowSink for ActionSink<'_> {
    type Error = StorageError;

    async fn accept(
        &mut self,
        rows: Vec<Entity>,
        deadline: Duration,
    ) -> Result<usize, StorageError> {
        if self.cancelled
            || self.lost.load(std::sync::atomic::Ordering::SeqCst)
            || self.state.cancelled(self.scan).await
        {
            // Nothing of this page is done: the step ends, and its rest is dropped.
            self.cancelled = true;
            return Ok(0);
        }
        let mut rows = rows;
        if self.pausing || self.state.paused(self.scan).await {
            // The first row, never none: a step that finished nothing would hand on its own
            // task, and its child would be itself.
            self.pausing = true;
            rows.truncate(1);
        }
        if self.dry_run {
            let applied = self.action.preview(&rows);
            self.note_sample(&rows, &applied.failures);
            return Ok(self.note(applied));
        }
        if let Some((entities, target)) = self.action.table_writes(&rows) {
            self.pace.before_write(entities, &target).await?;
        }
        let clock = self.clock;
        let go_on = move || clock.now() < deadline;
        let applied = self.action.apply(rows, &go_on).await?;
        for failure in &applied.failures {
            tracing::warn!(
                partition_key = %failure.partition_key,
                row_key = %failure.row_key,
                "a row failed: {}",
                failure.reason
            );
        }
        Ok(self.note(applied))
    }

    /// Once the scan is seen paused: a page of one row cannot be cut, so the step is told to
    /// stop after it.
    fn stopping(&self) -> bool {
        self.pausing
    }
}

impl ActionSink<'_> {
    /// Adds a page's counts and failed rows; returns how many of its rows were finished.
    fn note(&mut self, applied: Applied) -> usize {
        self.counts += applied.counts;
        let room = FAILURES_KEPT.saturating_sub(self.notes.failed.len());
        self.notes
            .failed
            .extend(applied.failures.into_iter().take(room).map(|f| NotedRow {
                partition_key: f.partition_key,
                row_key: f.row_key,
                reason: Some(f.reason),
            }));
        applied.finished
    }

    /// Keeps the first rows a dry run would act on (those not failed).
    fn note_sample(&mut self, rows: &[Entity], failures: &[RowFailure]) {
        let room = FAILURES_KEPT.saturating_sub(self.notes.sample.len());
        let acted = rows.iter().filter(|row| {
            !failures
                .iter()
                .any(|f| f.partition_key == row.partition_key && f.row_key == row.row_key)
        });
        self.notes
            .sample
            .extend(acted.take(room).map(|row| NotedRow {
                partition_key: row.partition_key.clone(),
                row_key: row.row_key.clone(),
                reason: None,
            }));
    }
}

/// Whether a failed step may succeed if tried again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FailureKind {
    /// Throttling, a timeout, a dropped connection, a server error.
    Transient,
    /// Anything another attempt would meet again: a missing table, refused credentials, a
    /// bad setting.
    Permanent,
}

/// Why a step failed; the message is what the status shows.
#[derive(Debug)]
pub(super) struct StepFailure {
    kind: FailureKind,
    message: String,
    /// How many of the attempt's storage requests were answered "too busy".
    requests_throttled: u64,
}

impl StepFailure {
    pub(super) fn new(kind: FailureKind, message: String) -> Self {
        StepFailure {
            kind,
            message,
            requests_throttled: 0,
        }
    }

    pub(super) fn permanent(message: String) -> Self {
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

/// What a step did: what its finish records, and its follow-up work items.
pub(super) struct StepDone {
    pub counts: StepCounts,
    pub notes: RowNotes,
    /// The blob an export step wrote.
    pub blob: Option<BlobEntry>,
    pub follow_ups: Vec<WorkItem>,
}

/// Runs the step: reads and acts, paced by its place in the scan's pace (`admitted` before
/// the claim, or admitted now).
async fn run(
    state: &AppState,
    ledger: &crate::job::Ledger,
    item: &WorkItem,
    scan: &crate::job::ScanRecord,
    attempt: u32,
    lost: &std::sync::atomic::AtomicBool,
    admitted: Option<StepPace>,
) -> Result<StepDone, StepFailure> {
    let spec = &scan.spec;
    let pace = match admitted {
        Some(pace) => pace,
        None => {
            let source = pace_source(state, item, spec).map_err(StepFailure::permanent)?;
            state
                .pacing
                .admit(ledger, scan, source, ADMIT_WAIT)
                .await
                .map_err(|why| {
                    StepFailure::new(
                        FailureKind::Transient,
                        format!("no room in the scan's pace: {why}"),
                    )
                })?
        }
    };
    if item.task.is_import() {
        return super::import::run(state, item, scan, lost, &pace).await;
    }
    let source = state
        .scan_source(&spec.connection, &spec.table)
        .map_err(StepFailure::permanent)?;
    let action = action_for(state, spec).map_err(StepFailure::permanent)?;
    // The step's budget starts once it has its slot.
    let started = std::time::Instant::now();
    let options = scan_options(spec, state.config.budget).map_err(StepFailure::permanent)?;
    let clock = SystemClock::default();
    let mut sink = ActionSink::new(action, spec.dry_run, clock, state, &item.scan, lost, &pace);
    let reader = PacedReader {
        table: &source,
        pace: &pace,
        next: Default::default(),
    };
    // Past its action's deadline the step only finishes the writes it started; retries that
    // would outlast that only put off the failure that hands its work on.
    let deadline =
        tokio::time::Instant::now() + state.config.budget.max_duration * STORAGE_DEADLINE_BUDGETS;
    let report = crate::storage::deadline::within(
        deadline,
        run_step(&reader, item, &options, &clock, &mut sink),
    )
    .await?;
    let counts = StepCounts {
        rows_read: report.rows_read,
        rows_acted: sink.counts.acted,
        rows_skipped: sink.counts.skipped,
        rows_failed: sink.counts.failed,
        partitions: report.partitions_started,
        queries: u64::from(report.queries),
        // Filled in by `run_claimed`, which counts around the whole step.
        requests_throttled: 0,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    // A step stopped by a cancel records what it did and drops the rest: the scan is over.
    let follow_ups = if sink.cancelled {
        Vec::new()
    } else {
        report.follow_ups
    };
    // An export's rows counted as done are those in its blob: written before the finish.
    let blob = match &sink.action {
        Action::Export(export) if !spec.dry_run => {
            let ActionSpec::Export {
                prefix,
                compression,
                ..
            } = &spec.action
            else {
                return Err(StepFailure::permanent(
                    "an export action without an export spec".into(),
                ));
            };
            let layout = Layout { prefix };
            let name = layout.data(&item.scan, &item.id(), attempt, *compression);
            crate::storage::deadline::within(deadline, export.write(&name))
                .await
                .map_err(|e| StepFailure::from(StepError::<StorageError>::Action(e)))?
                .map(|written| BlobEntry {
                    name: written.name,
                    rows: written.rows,
                    bytes: written.bytes,
                    sha256: written.sha256,
                })
        }
        _ => None,
    };
    Ok(StepDone {
        counts,
        notes: sink.notes,
        blob,
        follow_ups,
    })
}
