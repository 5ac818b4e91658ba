//! Running a claimed step: `run_claimed` keeps the claim renewed while `run` reads and acts,
//! paced by the step's place in its scan's pace, and counts what it did.

use std::time::Duration;
use time::OffsetDateTime;

use super::admission::pace_source;
use super::failure::{FailureKind, StepFailure};
use super::sink::{ActionSink, PacedReader};
use crate::app::AppState;
use crate::config::STORAGE_DEADLINE_BUDGETS;
use crate::pacing::park::unpark_room;
use crate::pacing::{StepPace, ADMIT_WAIT};
use crate::plan::{action_for, scan_options};
use tablescan_actions::{Action, ExportRows};
use tablescan_api::ActionSpec;
use tablescan_engine::{run_step, StepError, SystemClock};
use tablescan_ledger::exports::{BlobEntry, Layout};
use tablescan_ledger::notes::RowNotes;
use tablescan_ledger::{Claim, StepCounts, Task, WorkItem};
use tablescan_storage::throttled::counting_throttled;
use tablescan_storage::StorageError;

/// Runs the step while keeping its claim: the claim is renewed every third of the lease for as
/// long as the step runs, so a step that takes longer than one lease (storage retries, a slow
/// target) is never run a second time by another delivery meanwhile. If the claim is lost all
/// the same (the ledger was unreachable for a whole lease), the step stops acting at its next
/// page; its finish will then not count.
pub(super) async fn run_claimed(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
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

/// What a step did: what its finish records, and its follow-up work items.
pub(crate) struct StepDone {
    pub counts: StepCounts,
    pub notes: RowNotes,
    /// The blob an export step wrote.
    pub blob: Option<BlobEntry>,
    pub follow_ups: Vec<WorkItem>,
    /// How many parked items of the scan the step may send with its follow-ups: the room it
    /// leaves in its scan's pace here (`pacing::park::unpark_room`).
    pub room: usize,
}

/// Runs the step: reads and acts, paced by its place in the scan's pace (`admitted` before
/// the claim, or admitted now).
async fn run(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    item: &WorkItem,
    scan: &tablescan_ledger::ScanRecord,
    attempt: u32,
    lost: &std::sync::atomic::AtomicBool,
    admitted: Option<StepPace>,
) -> Result<StepDone, StepFailure> {
    let spec = &scan.spec;
    let pace = admit_now(state, ledger, item, scan, admitted).await?;
    let range = match &item.task {
        Task::Table(range) => item.with_task(range.clone()),
        Task::Import(task) => {
            let done = super::import::run(state, item, task, scan, lost, &pace).await?;
            return Ok(with_room(done, &pace));
        }
    };
    let source = state
        .scan_source(&spec.connection, &spec.table)
        .map_err(StepFailure::permanent)?;
    let action = action_for(state, spec).map_err(StepFailure::permanent)?;
    // The step's budget starts once it has its slot.
    let started = std::time::Instant::now();
    let mut options = scan_options(spec, state.config.budget).map_err(StepFailure::permanent)?;
    crate::pacing::shape_for_admission(&mut options, pace.crowded());
    let clock = SystemClock::default();
    let mut sink = ActionSink::new(action, spec.dry_run, clock, state, &item.scan, lost, &pace);
    let reader = PacedReader::new(&source, &pace);
    // Past its action's deadline the step only finishes the writes it started; retries that
    // would outlast that only put off the failure that hands its work on.
    let deadline =
        tokio::time::Instant::now() + state.config.budget.max_duration * STORAGE_DEADLINE_BUDGETS;
    let report = tablescan_storage::deadline::within(
        deadline,
        run_step(&reader, &range, &options, &clock, &mut sink),
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
        // The engine's follow-ups, a table's ranges, as the items the ledger and queues hold.
        report
            .follow_ups
            .into_iter()
            .map(|follow_up| follow_up.map_task(Task::Table))
            .collect()
    };
    // An export's rows counted as done are those in its blob: written before the finish.
    let blob = match &sink.action {
        Action::Export(export) if !spec.dry_run => {
            write_blob(export, item, spec, attempt, deadline).await?
        }
        _ => None,
    };
    let done = StepDone {
        counts,
        notes: sink.notes,
        blob,
        follow_ups,
        room: 0,
    };
    Ok(with_room(done, &pace))
}

/// `done` with the room its step leaves in its scan's pace here, read while the step still
/// holds its place.
fn with_room(done: StepDone, pace: &StepPace) -> StepDone {
    let (slots, running, waiting) = pace.occupancy();
    let room = unpark_room(slots, running, waiting, done.follow_ups.len());
    StepDone { room, ..done }
}

/// The step's place in its scan's pace: the one it was admitted to before its claim, or one
/// admitted now.
async fn admit_now(
    state: &AppState,
    ledger: &tablescan_ledger::Ledger,
    item: &WorkItem,
    scan: &tablescan_ledger::ScanRecord,
    admitted: Option<StepPace>,
) -> Result<StepPace, StepFailure> {
    match admitted {
        Some(pace) => Ok(pace),
        None => {
            let source = pace_source(state, item, &scan.spec).map_err(StepFailure::permanent)?;
            state
                .pacing
                .admit(ledger, scan, source, ADMIT_WAIT)
                .await
                .map_err(|why| {
                    StepFailure::new(
                        FailureKind::Transient,
                        format!("no room in the scan's pace: {why}"),
                    )
                })
        }
    }
}

/// Writes the blob of an export step (by `deadline`); `None` if it had no rows to write.
async fn write_blob(
    export: &ExportRows,
    item: &WorkItem,
    spec: &tablescan_api::ScanSpec,
    attempt: u32,
    deadline: tokio::time::Instant,
) -> Result<Option<BlobEntry>, StepFailure> {
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
    Ok(
        tablescan_storage::deadline::within(deadline, export.write(&name))
            .await
            .map_err(|e| StepFailure::from(StepError::<StorageError>::Action(e)))?
            .map(|written| BlobEntry {
                name: written.name,
                rows: written.rows,
                bytes: written.bytes,
                sha256: written.sha256,
            }),
    )
}
