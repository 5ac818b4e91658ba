//! Running schedules: the `RunSchedules` timer starts each due occurrence once, and `run now`
//! starts one by hand (`job::schedules` keeps them; docs/schedules.md says how they behave).
//!
//! Once: the occurrence is first marked on the schedule's row as the one being started
//! (conditional on the row as read), its scan is started with the idempotency key
//! `schedule NAME UNIX` (two instances that both go on start the same scan), and the run is
//! recorded on the row, clearing the mark. A process killed between the start and the record
//! leaves the mark: the next look (of the timer, or a run by hand) finds the scan by its key,
//! finishes its start as a retried start does, and records it as that occurrence's run, so
//! every scan a schedule starts is among its runs (and the next occurrence's overlap check
//! sees it). A mark with no scan behind it stays until an occurrence is handled: the marked
//! one again if it is still the latest due, or a later one that counts it as missed.
//!
//! Never overlapping: an occurrence whose schedule's previous scan is still in flight is
//! skipped and recorded as skipped. After a downtime, only the latest due occurrence runs,
//! late, with the number of occurrences it missed.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use time::{Duration, OffsetDateTime};

use crate::app::AppState;
use crate::http::{finish_recorded, idempotent_scan_id, start_request, Started};
use crate::protocol::{Failure, Invocation, Outcome};
use tablescan_ledger::schedules::{Run, Schedule};
use tablescan_ledger::{Ledger, State};
use tablescan_storage::table::entity::EdmDateTime;

/// An occurrence started later than this after its time counts as late: the timer runs every
/// minute, so a minute and a margin.
pub const LATE_AFTER: Duration = Duration::seconds(90);
/// The most missed occurrences counted for a late run.
const MISSED_COUNTED: u32 = 10_000;

fn stamp(t: OffsetDateTime) -> String {
    EdmDateTime::new(t).to_string()
}

/// Whether a scan in `state` is still in flight (a paused one too: it has not ended).
fn in_flight(state: State) -> bool {
    !matches!(state, State::Succeeded | State::Failed | State::Cancelled)
}

/// Why an occurrence of `schedule` cannot start now: its previous scan is still in flight.
pub async fn overlap(ledger: &Ledger, schedule: &Schedule) -> Result<Option<String>, String> {
    let Some(scan) = schedule.last_scan() else {
        return Ok(None);
    };
    match ledger.status(scan, OffsetDateTime::now_utc()).await {
        Ok(Some(status)) if in_flight(status.state) => Ok(Some(format!(
            "the previous run's scan {scan} is still {}",
            serde_json::to_value(status.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        ))),
        // Removed, or ended.
        Ok(_) => Ok(None),
        Err(e) => Err(format!(
            "the previous run's scan {scan} could not be read: {e}"
        )),
    }
}

/// Starts (or skips) occurrence `occurrence` of `schedule` at `now`, or a run by hand; records
/// it on the schedule. The run; `None` when another instance marked the occurrence first (it
/// starts and records it).
pub async fn run_occurrence(
    state: &AppState,
    ledger: &Ledger,
    mut schedule: Schedule,
    occurrence: OffsetDateTime,
    now: OffsetDateTime,
    manual: bool,
) -> Result<Option<Run>, String> {
    let mut run = new_run(&schedule, occurrence, now, manual);
    match overlap(ledger, &schedule).await? {
        Some(why) => run.skipped = Some(why),
        None => {
            let key = if manual {
                format!(
                    "schedule {} by hand {}",
                    schedule.name,
                    occurrence.unix_timestamp_nanos()
                )
            } else {
                // Marked again when it is marked already: the write is conditional on the row
                // as read, so a schedule deleted, replaced or paused since (or an instance
                // that went on first) stops this start.
                match ledger.mark_starting(&schedule, occurrence).await {
                    Ok(Some(marked)) => schedule = marked,
                    Ok(None) => return Ok(None),
                    Err(e) => return Err(format!("the occurrence could not be marked: {e}")),
                }
                occurrence_key(&schedule.name, occurrence)
            };
            match start_request(state, &schedule.request, Some(&key)).await {
                Ok(started) => {
                    send_first_message(state, &schedule.name, &started).await;
                    run.scan = Some(started.id);
                }
                Err(refused) if refused.status().is_server_error() => {
                    return Err(refused.describe());
                }
                Err(refused) => run.error = Some(refused.describe()),
            }
        }
    }
    tracing::info!(
        schedule = %schedule.name,
        occurrence = %run.occurrence,
        scan = run.scan.as_deref().unwrap_or(""),
        late = run.late,
        missed = run.missed,
        skipped = run.skipped.as_deref().unwrap_or(""),
        error = run.error.as_deref().unwrap_or(""),
        "schedule run"
    );
    record_run(ledger, schedule, &run, occurrence, manual).await?;
    Ok(Some(run))
}

/// Sends a scan's first message; one that cannot be put now is sent by the re-drive once the
/// scan is stranded (the scan is recorded).
async fn send_first_message(state: &AppState, schedule: &str, started: &Started) {
    if let Err(why) = crate::send::send_items(state, &started.roots).await {
        tracing::warn!(
            schedule = %schedule,
            scan = %started.id,
            "the scan's first message waits for the re-drive: {why}"
        );
    }
}

/// The run of `occurrence` of `schedule` handled at `at` (by hand or by the timer), before
/// what it did is known: late and with the occurrences it missed, for the timer's.
fn new_run(
    schedule: &Schedule,
    occurrence: OffsetDateTime,
    at: OffsetDateTime,
    manual: bool,
) -> Run {
    let missed = match (manual, schedule.last_occurrence) {
        (false, Some(last)) => schedule.timetable.between(last, occurrence, MISSED_COUNTED),
        _ => 0,
    };
    Run {
        occurrence: stamp(occurrence),
        at: stamp(at),
        late: !manual && (missed > 0 || at - occurrence > LATE_AFTER),
        missed,
        manual,
        ..Run::default()
    }
}

/// Clears `schedule`'s mark alone (its run is recorded already); the schedule as it is then.
async fn clear_mark(ledger: &Ledger, mut schedule: Schedule) -> Result<Option<Schedule>, String> {
    schedule.starting = None;
    // Lost to another write: the next look clears it.
    ledger
        .record_schedule(&schedule)
        .await
        .map_err(|e| format!("the mark of a recorded run could not be cleared: {e}"))?;
    ledger
        .schedule(&schedule.name)
        .await
        .map_err(|e| format!("the schedule could not be read again: {e}"))
}

/// The idempotency key of the scan the timer starts for `occurrence` of schedule `name`.
fn occurrence_key(name: &str, occurrence: OffsetDateTime) -> String {
    format!("schedule {name} {}", occurrence.unix_timestamp())
}

/// Resolves the mark of an occurrence whose start was interrupted (`Schedule::starting`) when
/// its scan exists: the start is finished as a retried start finishes it (the scan's index
/// row, its first message if no step took it yet) and the scan recorded as that occurrence's
/// run. The schedule as it is afterwards (read again when a run was recorded; `None` if it was
/// deleted meanwhile). A mark with no scan behind it is left for the next occurrence handled
/// (run, skipped or refused). A process still between the two writes (slow, not killed) is
/// harmless: its start answers the same scan, and of the two records one adds the run. One
/// window stays open: a process that marks, then stalls for longer than a look, while another
/// finds no scan and marks a later occurrence, then starts its scan and dies before its
/// record, leaves that scan unnamed (it runs; the schedule does not list it).
pub async fn recover_interrupted(
    state: &AppState,
    ledger: &Ledger,
    schedule: Schedule,
) -> Result<Option<Schedule>, String> {
    let Some(occurrence) = schedule.starting else {
        return Ok(Some(schedule));
    };
    let key = occurrence_key(&schedule.name, occurrence);
    let id = idempotent_scan_id(&key)?;
    let found = ledger
        .scan(&id)
        .await
        .map_err(|e| format!("the scan of an interrupted start could not be read: {e}"))?;
    let Some(record) = found else {
        return Ok(Some(schedule));
    };
    if schedule
        .runs
        .iter()
        .any(|run| run.scan.as_deref() == Some(&id))
    {
        // Recorded already, by a version that left the mark: the mark alone goes.
        return clear_mark(ledger, schedule).await;
    }
    // From the request as the scan stored it: the schedule's may have been replaced since.
    match finish_recorded(state, &record).await {
        Ok(started) => send_first_message(state, &schedule.name, &started).await,
        Err(refused) => {
            return Err(format!(
                "the interrupted start of occurrence {} could not be finished: {}",
                stamp(occurrence),
                refused.describe()
            ))
        }
    }
    let run = Run {
        scan: Some(id),
        ..new_run(&schedule, occurrence, record.created_at, false)
    };
    tracing::info!(
        schedule = %schedule.name,
        occurrence = %run.occurrence,
        scan = run.scan.as_deref().unwrap_or(""),
        "schedule run recorded after an interrupted start"
    );
    let name = schedule.name.clone();
    record_run(ledger, schedule, &run, occurrence, false).await?;
    ledger
        .schedule(&name)
        .await
        .map_err(|e| format!("the schedule could not be read again: {e}"))
}

/// Records `run` on `schedule`, clearing the mark of its occurrence. When another write came
/// first (another instance, a pause, a PUT) and this run started a scan, the schedule is read
/// again and the run added to it, unless that write recorded this occurrence already: a scan a
/// schedule started is never missing from its runs, or the next occurrence's overlap check
/// would not see it.
async fn record_run(
    ledger: &Ledger,
    mut schedule: Schedule,
    run: &Run,
    occurrence: OffsetDateTime,
    manual: bool,
) -> Result<bool, String> {
    for _ in 0..RECORD_RACES {
        if !manual {
            schedule.last_occurrence = schedule.last_occurrence.max(Some(occurrence));
            if schedule.starting == Some(occurrence) {
                schedule.starting = None;
            }
        }
        schedule.add_run(run.clone());
        if ledger
            .record_schedule(&schedule)
            .await
            .map_err(|e| format!("the run could not be recorded: {e}"))?
        {
            return Ok(true);
        }
        if run.scan.is_none() {
            // A skip or a refusal: whoever wrote first handled the occurrence, or will.
            return Ok(false);
        }
        schedule = match ledger.schedule(&schedule.name).await {
            Ok(Some(now)) => now,
            // Deleted meanwhile: its scans stay, unrecorded.
            Ok(None) => return Ok(false),
            Err(e) => return Err(format!("the run could not be recorded: {e}")),
        };
        if schedule.runs.iter().any(|r| r.scan == run.scan) {
            return Ok(false);
        }
    }
    Err(format!(
        "the run of scan {} could not be recorded: the schedule kept changing",
        run.scan.as_deref().unwrap_or_default()
    ))
}

/// How many times a run that started a scan is recorded again after losing a race.
const RECORD_RACES: u32 = 5;

/// What one tick of the timer did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tick {
    pub schedules: usize,
    pub started: usize,
    pub skipped: usize,
    pub refused: usize,
    /// Schedules that could not be read or run now (tried again at the next tick).
    pub failed: usize,
}

/// Starts every due occurrence of every schedule that is not paused, after resolving any
/// interrupted start (paused or not).
pub async fn tick(state: &AppState, ledger: &Ledger, now: OffsetDateTime) -> Result<Tick, String> {
    let (schedules, unreadable) = ledger.schedules().await.map_err(|e| e.to_string())?;
    let mut done = Tick {
        schedules: schedules.len() + unreadable.len(),
        failed: unreadable.len(),
        ..Tick::default()
    };
    for (name, why) in unreadable {
        tracing::warn!(schedule = %name, "a schedule cannot be read: {why}");
    }
    for schedule in schedules {
        let name = schedule.name.clone();
        match run_due(state, ledger, schedule, now).await {
            Ok(Some(run)) if run.scan.is_some() => done.started += 1,
            Ok(Some(run)) if run.skipped.is_some() => done.skipped += 1,
            Ok(Some(_)) => done.refused += 1,
            // Nothing due, or another instance is starting it.
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(schedule = %name, "a due occurrence waits for the next tick: {why}");
                done.failed += 1;
            }
        }
    }
    Ok(done)
}

/// Resolves `schedule`'s interrupted start, if any, then runs its due occurrence unless it is
/// paused.
async fn run_due(
    state: &AppState,
    ledger: &Ledger,
    schedule: Schedule,
    now: OffsetDateTime,
) -> Result<Option<Run>, String> {
    let Some(schedule) = recover_interrupted(state, ledger, schedule).await? else {
        return Ok(None);
    };
    if schedule.paused {
        return Ok(None);
    }
    match schedule.due(now) {
        Some(due) => run_occurrence(state, ledger, schedule, due, now, false).await,
        None => Ok(None),
    }
}

/// The `RunSchedules` timer.
pub async fn tick_handler(state: &AppState, body: &[u8]) -> Response {
    if let Err(why) = Invocation::parse(body) {
        return Failure::new(StatusCode::BAD_REQUEST, why).into_response();
    }
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return Failure::new(StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    };
    match tick(state, ledger, OffsetDateTime::now_utc()).await {
        Ok(done) => {
            if done.started + done.skipped + done.refused + done.failed > 0 {
                tracing::info!(
                    "schedules: {} in all, {} started, {} skipped, {} refused, {} to try again",
                    done.schedules,
                    done.started,
                    done.skipped,
                    done.refused,
                    done.failed
                );
            }
            Outcome::default().into_response()
        }
        Err(why) => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the schedules could not be read: {why}"),
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablescan_ledger::timetable::Timetable;
    use tablescan_storage::table::in_memory::InMemoryTable;

    fn run(scan: Option<&str>) -> Run {
        Run {
            occurrence: "o".into(),
            at: "a".into(),
            scan: scan.map(str::to_string),
            ..Run::default()
        }
    }

    /// A run that started a scan is recorded even when a pause landed between the timer's read
    /// of the schedule and its write; the pause stays, the occurrence's mark goes.
    #[tokio::test]
    async fn a_started_run_that_loses_its_record_race_is_recorded_on_the_schedule_as_it_is_now() {
        let ledger = Ledger::in_memory(InMemoryTable::new("ledger"));
        let now = OffsetDateTime::from_unix_timestamp(OffsetDateTime::now_utc().unix_timestamp())
            .unwrap();
        let t = Timetable::every("PT1M", now).unwrap();
        ledger
            .put_schedule(&Schedule::new("s", t, "{}".into(), now))
            .await
            .unwrap();
        let occurrence = now + time::Duration::MINUTE;
        let read = ledger.schedule("s").await.unwrap().unwrap();
        let read = ledger
            .mark_starting(&read, occurrence)
            .await
            .unwrap()
            .unwrap();
        let mut paused = read.clone();
        paused.paused = true;
        assert!(ledger.record_schedule(&paused).await.unwrap());
        assert!(record_run(
            &ledger,
            read.clone(),
            &run(Some("scan1")),
            occurrence,
            false
        )
        .await
        .unwrap());
        let after = ledger.schedule("s").await.unwrap().unwrap();
        assert!(after.paused, "the pause stays");
        assert_eq!(after.starting, None, "the mark is cleared");
        assert_eq!(after.last_scan(), Some("scan1"));
        assert_eq!(after.last_occurrence, Some(occurrence));
        // A skip that loses its race is left to whoever wrote first.
        assert!(!record_run(&ledger, read, &run(None), occurrence, false)
            .await
            .unwrap());
        assert_eq!(ledger.schedule("s").await.unwrap().unwrap().runs.len(), 1);
    }
}
