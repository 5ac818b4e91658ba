//! The schedules' API: `PUT /api/schedules/{name}` (create or replace), `GET /api/schedules`,
//! `GET /api/schedules/{name}`, `DELETE /api/schedules/{name}`, and `POST
//! /api/schedules/{name}/{action}` for `pause`, `resume`, `run` (now) and `preview` (a dry run
//! of the scan the next occurrence would start).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use crate::answers::{answer, error, request};
use crate::app::AppState;
use crate::http::start_request;
use crate::schedules::{overlap, recover_interrupted, run_occurrence};
use tablescan_ledger::schedules::{is_schedule_name, Schedule, MOST_SCHEDULES};
use tablescan_ledger::timetable::Timetable;
use tablescan_ledger::{Ledger, State};
use tablescan_storage::table::entity::EdmDateTime;

/// How many coming occurrences an answer shows.
const NEXT_SHOWN: usize = 5;

fn stamp(t: OffsetDateTime) -> String {
    EdmDateTime::new(t).to_string()
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        format!("{what} could not be read or written: {e}"),
    )
}

/// The schedule's name from the route, and the ledger; or the answer to give.
fn target<'a>(
    state: &'a AppState,
    body: &[u8],
) -> Result<(&'a Ledger, String, crate::protocol::HttpRequest), Box<Response>> {
    let req = request(body).map_err(|failure| Box::new(failure.into_response()))?;
    let name = req.param("name").unwrap_or_default().to_string();
    if !is_schedule_name(&name) {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            Some("name"),
            format!(
                "{name:?} cannot name a schedule: use 1 to 63 lowercase letters, digits and dashes"
            ),
        )));
    }
    let ledger = state
        .ledger()
        .map_err(|why| Box::new(error(StatusCode::SERVICE_UNAVAILABLE, None, why)))?;
    Ok((ledger, name, req))
}

/// A schedule as the API shows it; with `runs` as stored (their scans' outcomes are added by
/// [`with_outcomes`]).
fn view(schedule: &Schedule, now: OffsetDateTime) -> Value {
    let mut out = json!({ "name": schedule.name });
    match &schedule.timetable {
        Timetable::Cron {
            expression,
            time_zone,
            ..
        } => {
            out["cron"] = json!(expression);
            out["timeZone"] = json!(time_zone);
        }
        Timetable::Every { text, .. } => out["every"] = json!(text),
    }
    out["scan"] = serde_json::from_str(&schedule.request).unwrap_or(Value::Null);
    out["paused"] = json!(schedule.paused);
    out["createdAt"] = json!(stamp(schedule.created_at));
    out["lastOccurrence"] = json!(schedule.last_occurrence.map(stamp));
    out["nextRuns"] = if schedule.paused {
        json!([])
    } else {
        json!(schedule
            .timetable
            .upcoming(now, NEXT_SHOWN)
            .into_iter()
            .map(stamp)
            .collect::<Vec<_>>())
    };
    out["runs"] = serde_json::to_value(&schedule.runs).unwrap_or(Value::Null);
    out
}

/// Adds to each run that started a scan that scan's outcome: its state, rows acted on, and how
/// long it took (one status read per run, at most `job::schedules::RUNS_KEPT`).
async fn with_outcomes(ledger: &Ledger, mut shown: Value) -> Value {
    let now = OffsetDateTime::now_utc();
    if let Some(runs) = shown["runs"].as_array_mut() {
        for run in runs {
            let Some(scan) = run["scan"].as_str().map(str::to_string) else {
                continue;
            };
            match ledger.status(&scan, now).await {
                Ok(Some(status)) => {
                    run["state"] = serde_json::to_value(status.state).unwrap_or(Value::Null);
                    run["rowsActed"] = json!(status.progress.rows_acted);
                    if let Some(why) = status.failed_because {
                        run["failedBecause"] = json!(why);
                    }
                    let seconds = seconds_between(
                        status.started_at.as_deref(),
                        status.finished_at.as_deref(),
                    );
                    if let Some(seconds) = seconds {
                        run["seconds"] = json!(seconds);
                    }
                }
                Ok(None) => run["state"] = json!("removed"),
                Err(e) => run["state"] = json!(format!("unreadable: {e}")),
            }
        }
    }
    shown
}

fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<f64> {
    let from = EdmDateTime::parse(from?)?.time();
    let to = EdmDateTime::parse(to?)?.time();
    Some(((to - from).as_seconds_f64() * 10.0).round() / 10.0)
}

/// The body of a `PUT`: `cron` (with `timeZone`) or `every`, and `scan`, the request a start
/// takes; `paused` optional. Each mistake is a 400 naming its field (`scan.<field>` within the
/// scan request).
fn parse_put(
    state: &AppState,
    name: &str,
    text: &str,
    now: OffsetDateTime,
) -> Result<Schedule, (Option<String>, String)> {
    let bad = |field: &str, message: String| (Some(field.to_string()), message);
    let body: Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => return Err(bad("body", "the schedule must be a JSON object".into())),
    };
    for key in body.keys() {
        if !["cron", "timeZone", "every", "scan", "paused"].contains(&key.as_str()) {
            return Err(bad(
                key,
                format!(
                    "{key:?} is not a field of a schedule (cron, timeZone, every, scan, paused)"
                ),
            ));
        }
    }
    let string = |field: &str| -> Result<Option<&str>, (Option<String>, String)> {
        match body.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(bad(field, "must be a string".into())),
        }
    };
    let timetable = match (string("cron")?, string("every")?) {
        (Some(_), Some(_)) => {
            return Err(bad("every", "give either cron or every, not both".into()))
        }
        (None, None) => {
            return Err(bad(
                "cron",
                "a schedule needs a timetable: cron (with timeZone) or every".into(),
            ))
        }
        (Some(cron), None) => Timetable::cron(cron, string("timeZone")?),
        (None, Some(every)) => {
            if string("timeZone")?.is_some() {
                return Err(bad("timeZone", "goes with cron, not every".into()));
            }
            Timetable::every(every, now)
        }
    }
    .map_err(|e| bad(&e.field, e.message))?;
    let scan = match body.get("scan") {
        Some(scan @ Value::Object(_)) => scan.to_string(),
        Some(_) => return Err(bad("scan", "must be a scan request, a JSON object".into())),
        None => {
            return Err(bad(
                "scan",
                "a schedule needs the scan it starts, as POST /api/scans takes it".into(),
            ))
        }
    };
    let default_cap = state.default_cap().map_err(|why| (None, why))?;
    if let Err(refused) = state.parse_start(&scan, default_cap) {
        let (_, field, message) = refused.answer();
        return Err((Some(format!("scan.{}", field.unwrap_or_default())), message));
    }
    let paused = match body.get("paused") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(paused)) => *paused,
        Some(_) => return Err(bad("paused", "must be true or false".into())),
    };
    let mut schedule = Schedule::new(name, timetable, scan, now);
    schedule.paused = paused;
    Ok(schedule)
}

/// `PUT /api/schedules/{name}`.
pub async fn put_schedule(state: &AppState, body: &[u8]) -> Response {
    let (ledger, name, req) = match target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let now = OffsetDateTime::now_utc();
    let text = req.body.as_deref().unwrap_or_default();
    let schedule = match parse_put(state, &name, text, now) {
        Ok(schedule) => schedule,
        Err((field, message)) => return error(StatusCode::BAD_REQUEST, field.as_deref(), message),
    };
    let existing = match ledger.schedules().await {
        Ok((good, bad)) => good.len() + bad.len(),
        Err(e) => return unavailable("the schedules", e),
    };
    let new = match ledger.schedule(&name).await {
        Ok(found) => found.is_none(),
        Err(e) => return unavailable("the schedule", e),
    };
    if new && existing >= MOST_SCHEDULES {
        return error(
            StatusCode::CONFLICT,
            None,
            format!("an app keeps at most {MOST_SCHEDULES} schedules; delete one first"),
        );
    }
    match ledger.put_schedule(&schedule).await {
        Ok(stored) => {
            tracing::info!(schedule = %name, "schedule set");
            let status = if new {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            answer(status, view(&stored, now)).into_response()
        }
        Err(e) => unavailable("the schedule", e),
    }
}

/// `GET /api/schedules`: every schedule, with its last run.
pub async fn list_schedules(state: &AppState, body: &[u8]) -> Response {
    if let Err(failure) = request(body) {
        return failure.into_response();
    }
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    let now = OffsetDateTime::now_utc();
    match ledger.schedules().await {
        Ok((good, bad)) => {
            let schedules: Vec<Value> = good
                .iter()
                .map(|s| {
                    let mut shown = view(s, now);
                    let last = s.runs.last().cloned();
                    shown.as_object_mut().map(|o| o.remove("runs"));
                    shown["lastRun"] = serde_json::to_value(last).unwrap_or(Value::Null);
                    shown
                })
                .collect();
            let unreadable: Vec<Value> = bad
                .into_iter()
                .map(|(name, why)| json!({ "name": name, "error": why }))
                .collect();
            answer(
                StatusCode::OK,
                json!({ "schedules": schedules, "unreadableSchedules": unreadable }),
            )
            .into_response()
        }
        Err(e) => unavailable("the schedules", e),
    }
}

/// `GET /api/schedules/{name}`: with its last runs and their scans' outcomes.
pub async fn get_schedule(state: &AppState, body: &[u8]) -> Response {
    let (ledger, name, _) = match target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    match ledger.schedule(&name).await {
        Ok(Some(schedule)) => {
            let shown = with_outcomes(ledger, view(&schedule, OffsetDateTime::now_utc())).await;
            answer(StatusCode::OK, shown).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, None, "no schedule has this name"),
        Err(e) => unavailable("the schedule", e),
    }
}

/// `DELETE /api/schedules/{name}`: the schedule goes; the scans it started stay.
pub async fn delete_schedule(state: &AppState, body: &[u8]) -> Response {
    let (ledger, name, _) = match target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    match ledger.delete_schedule(&name).await {
        Ok(true) => {
            tracing::info!(schedule = %name, "schedule deleted");
            answer(StatusCode::OK, json!({ "name": name, "deleted": true })).into_response()
        }
        Ok(false) => error(StatusCode::NOT_FOUND, None, "no schedule has this name"),
        Err(e) => unavailable("the schedule", e),
    }
}

/// `POST /api/schedules/{name}/{action}`.
pub async fn schedule_action(state: &AppState, body: &[u8]) -> Response {
    let (ledger, name, req) = match target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let action = req.param("action").unwrap_or_default().to_string();
    let schedule = match ledger.schedule(&name).await {
        Ok(Some(schedule)) => schedule,
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no schedule has this name"),
        Err(e) => return unavailable("the schedule", e),
    };
    let now = OffsetDateTime::now_utc();
    match action.as_str() {
        "pause" | "resume" => set_paused(ledger, schedule, action == "pause", now).await,
        "run" => run_now(state, ledger, &name, schedule, now).await,
        "preview" => preview(state, &name, &schedule).await,
        _ => error(
            StatusCode::NOT_FOUND,
            Some("action"),
            format!("{action:?} is not an action on a schedule (pause, resume, run, preview)"),
        ),
    }
}

/// How many times a pause or a resume is written again after the timer wrote the schedule
/// between its read and its write (the timer writes each occurrence's mark, then its run).
const PAUSE_RACES: u32 = 5;

/// `pause` or `resume` (`paused` false): written over the schedule as read, read again and
/// written again if the timer came first (either is the same whatever it recorded).
async fn set_paused(
    ledger: &Ledger,
    mut schedule: Schedule,
    paused: bool,
    now: OffsetDateTime,
) -> Response {
    for _ in 0..PAUSE_RACES {
        schedule.paused = paused;
        if !paused {
            // Occurrences that fell while it was paused are not run.
            schedule.last_occurrence = schedule
                .timetable
                .latest_at_or_before(now)
                .max(schedule.last_occurrence);
        }
        match ledger.record_schedule(&schedule).await {
            Ok(true) => return answer(StatusCode::OK, view(&schedule, now)).into_response(),
            Ok(false) => {}
            Err(e) => return unavailable("the schedule", e),
        }
        schedule = match ledger.schedule(&schedule.name).await {
            Ok(Some(schedule)) => schedule,
            Ok(None) => return error(StatusCode::NOT_FOUND, None, "no schedule has this name"),
            Err(e) => return unavailable("the schedule", e),
        };
    }
    error(
        StatusCode::CONFLICT,
        None,
        "the schedule kept changing (occurrences being recorded); try again",
    )
}

/// `run`: starts a run by hand now, unless the schedule's last scan is still in flight (an
/// interrupted start resolved first, so that its scan counts).
async fn run_now(
    state: &AppState,
    ledger: &Ledger,
    name: &str,
    schedule: Schedule,
    now: OffsetDateTime,
) -> Response {
    let schedule = match recover_interrupted(state, ledger, schedule).await {
        Ok(Some(schedule)) => schedule,
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no schedule has this name"),
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    match overlap(ledger, &schedule).await {
        Ok(Some(why)) => return error(StatusCode::CONFLICT, None, why),
        Ok(None) => {}
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, None, why),
    }
    let run = match run_occurrence(state, ledger, schedule, now, now, true).await {
        Ok(Some(run)) => run,
        // Only the timer's runs mark their occurrence and may find another's mark first.
        Ok(None) => return error(StatusCode::CONFLICT, None, "the schedule changed meanwhile"),
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    match (&run.scan, &run.error) {
        (Some(scan), _) => answer(
            StatusCode::ACCEPTED,
            json!({ "name": name, "scan": scan, "status": format!("/api/scans/{scan}") }),
        )
        .into_response(),
        (None, Some(why)) => error(StatusCode::BAD_REQUEST, Some("scan"), why.clone()),
        (None, None) => error(
            StatusCode::CONFLICT,
            None,
            run.skipped.unwrap_or_else(|| "skipped".into()),
        ),
    }
}

/// A dry run of the scan the next occurrence would start, started now: it reads what the scan
/// would act on and writes nothing to it (its status lists a sample of the rows).
async fn preview(state: &AppState, name: &str, schedule: &Schedule) -> Response {
    let mut request: Value = match serde_json::from_str(&schedule.request) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, None, e.to_string()),
    };
    request["dryRun"] = Value::Bool(true);
    match start_request(state, &request.to_string(), None).await {
        Ok(started) => {
            if let Err(why) = crate::send::send_items(state, &started.roots).await {
                return error(StatusCode::SERVICE_UNAVAILABLE, None, why);
            }
            answer(
                StatusCode::ACCEPTED,
                json!({
                    "name": name, "scan": started.id, "dryRun": true, "state": State::Pending,
                    "status": format!("/api/scans/{}", started.id),
                }),
            )
            .into_response()
        }
        Err(refused) => refused.into_response(),
    }
}
