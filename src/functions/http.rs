//! The HTTP-triggered functions: start, inspect, list and cancel scans.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use time::OffsetDateTime;

use super::app::AppState;
use super::guard::{self, Place, Protected, Touches};
use super::names;
use super::names::{HTTP_REQUEST, HTTP_RESPONSE};
use super::plan::scope_range;
use super::protocol::{Failure, HttpRequest, Invocation, Outcome};
use super::reach::{self, Check, Service};
use super::scans_list::ListQuery;
use crate::job::ledger::{is_scan_id, new_scan_id};
use crate::job::read_budget::{ReadBudget, ReadCost, STATUS_READ};
use crate::job::spec::{ActionSpec, ScanSpec};
use crate::job::{Created, State, StatusRead};
use crate::scan::item::WorkItem;
use crate::storage::table::query::Query;
use crate::storage::{Missing, Reason, TableServiceClient};

/// Scan requests larger than this are refused with 413.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// The answer to the caller, as the `res` output.
pub(super) fn answer(status: StatusCode, body: Value) -> Outcome {
    Outcome::default().http(HTTP_RESPONSE, status, &body, &[])
}

/// A refusal to the caller: status, the request field at fault (if any), and why.
pub(super) struct HttpError {
    status: StatusCode,
    field: Option<String>,
    message: String,
}

impl HttpError {
    /// The refusal as one line: `field: message`, or the message.
    pub(super) fn describe(&self) -> String {
        match &self.field {
            Some(field) => format!("{field}: {}", self.message),
            None => self.message.clone(),
        }
    }

    pub(super) fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let mut detail = json!({ "message": self.message });
        if let Some(field) = self.field {
            detail["field"] = Value::String(field);
        }
        answer(self.status, json!({ "error": detail })).into_response()
    }
}

pub(super) fn refusal(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> HttpError {
    HttpError {
        status,
        field: field.map(str::to_string),
        message: message.into(),
    }
}

fn refuse<T>(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> Result<T, HttpError> {
    Err(refusal(status, field, message))
}

pub(super) fn error(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> Response {
    refusal(status, field, message).into_response()
}

pub(super) fn request(body: &[u8]) -> Result<HttpRequest, Failure> {
    Invocation::parse(body)
        .and_then(|invocation| invocation.http_request(HTTP_REQUEST))
        .map_err(|why| Failure::new(StatusCode::BAD_REQUEST, why))
}

/// `POST /api/scans`. A refused start is logged with its reason (not the body).
pub async fn start_scan(state: &AppState, body: &[u8]) -> Response {
    match try_start_scan(state, body).await {
        Ok(response) => response,
        Err(refused) => {
            tracing::info!(
                status = refused.status.as_u16(),
                field = refused.field.as_deref().unwrap_or(""),
                "a scan start was refused: {}",
                refused.message
            );
            refused.into_response()
        }
    }
}

async fn try_start_scan(state: &AppState, body: &[u8]) -> Result<Response, HttpError> {
    let req = match request(body) {
        Ok(req) => req,
        Err(failure) => return Ok(failure.into_response()),
    };
    let Some(text) = req.body.as_deref().filter(|b| !b.trim().is_empty()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            Some("body"),
            "the request has no body; send the scan as JSON",
        );
    };
    if text.len() > MAX_REQUEST_BYTES {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            Some("body"),
            format!(
                "the request is {} bytes; the limit is {MAX_REQUEST_BYTES}",
                text.len()
            ),
        );
    }
    let key = req.header(IDEMPOTENCY_KEY);
    let started = start_request(state, text, key).await?;
    let location = format!("/api/scans/{}", started.id);
    let answer = Outcome::default().http(
        HTTP_RESPONSE,
        StatusCode::ACCEPTED,
        &json!({ "id": started.id, "state": State::Pending, "status": location }),
        &[("Location", location.clone())],
    );
    Ok(super::step::with_items(answer, started.roots).into_response())
}

/// A scan started (or found started by the same idempotency key), and the messages of its
/// first work item to send (none when a step took it already).
pub(super) struct Started {
    pub id: String,
    pub roots: Vec<String>,
}

/// Starts the scan `text` asks for, as `POST /api/scans` does, with idempotency key `key` if
/// given: checked, prepared (targets created), recorded. Also what a schedule's occurrence
/// runs (`functions::schedules`).
pub(super) async fn start_request(
    state: &AppState,
    text: &str,
    key: Option<&str>,
) -> Result<Started, HttpError> {
    let default_cap = match state.default_cap() {
        Ok(cap) => cap,
        Err(why) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, None, why),
    };
    let mut spec = match super::allowlist::parse_start(state, text, default_cap).and_then(|spec| {
        spec.check_stored_size()
            .map(|()| spec)
            .map_err(super::allowlist::Refused::Request)
    }) {
        Ok(spec) => spec,
        Err(refused) => {
            let (status, field, message) = refused.answer();
            return refuse(status, field.as_deref(), message);
        }
    };
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return refuse(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    let id = match key {
        None => new_scan_id(),
        Some(key) => match idempotent_scan_id(key) {
            Ok(id) => id,
            Err(why) => return refuse(StatusCode::BAD_REQUEST, Some(IDEMPOTENCY_KEY), why),
        },
    };
    prepare(state, &mut spec, &id).await?;
    // What a start adds to the request (an import's manifest summary) must fit too.
    if let Err(crate::job::SpecError { field, message }) = spec.check_stored_size() {
        return refuse(StatusCode::BAD_REQUEST, Some(&field), message);
    }
    let root = match &spec.import {
        // An import starts from the first part of the export's manifest.
        Some(_) => WorkItem {
            v: crate::scan::item::WORK_ITEM_VERSION,
            scan: id.clone(),
            depth: 0,
            task: crate::scan::item::Task::ExportPart { part: 0, from: 0 },
        },
        None => {
            let (range, prefix) = scope_range(&spec);
            WorkItem::root(id.clone(), range, prefix)
        }
    };
    let created = match ledger
        .create_scan(&spec, &root, OffsetDateTime::now_utc())
        .await
    {
        Ok(created) => created,
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the scan could not be recorded: {e}"),
            )
        }
    };
    // A start retried with the same key answers the same scan, and sends its first work item
    // again if no step took it yet (the first attempt may have stopped before its message was
    // written; a duplicate is harmless).
    let send_root = match &created {
        Created::New => true,
        Created::Existing(existing) if !existing.spec.same_request(&spec) => {
            return refuse(
                StatusCode::CONFLICT,
                Some(IDEMPOTENCY_KEY),
                "this key already started a scan with a different request",
            )
        }
        Created::Existing(_) => match ledger.root_unstarted(&root).await {
            Ok(unstarted) => unstarted,
            Err(e) => {
                return refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    format!("the scan could not be read: {e}"),
                )
            }
        },
    };
    // The audit line: what was started, and the caller's idempotency key if it sent one (the
    // host logs who asked).
    let key = key.unwrap_or("none");
    match created {
        Created::New => tracing::info!(
            scan = %id,
            idempotency_key = %key,
            "scan started: {}",
            spec.summary()
        ),
        Created::Existing(_) => tracing::info!(
            scan = %id,
            idempotency_key = %key,
            "the start was retried with the same idempotency key; it answers the scan started before"
        ),
    }
    let roots = if send_root {
        vec![root.encode()]
    } else {
        Vec::new()
    };
    Ok(Started { id, roots })
}

/// The request header that makes a start idempotent.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The scan id an idempotency key stands for: 32 hex digits of a hash of the key, so the same
/// key always names the same scan, on any instance, with no lookup table.
fn idempotent_scan_id(key: &str) -> Result<String, String> {
    if key.is_empty() || key.len() > 200 || key.chars().any(char::is_control) {
        return Err("an idempotency key is 1 to 200 printable characters".into());
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("tablescan idempotency key\0{key}").as_bytes(),
    );
    Ok(digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Checks what a scan will touch before it starts: the ledger table exists, the source table
/// exists, the copy target and the message queue are created.
/// Refuses a scan that would write to the app's own storage or copy a table onto itself
/// (`functions::guard`), before anything is created.
fn guard(
    state: &AppState,
    spec: &ScanSpec,
    source: Place,
    ledger_tables: &TableServiceClient,
    ledger_table: &str,
) -> Result<(), HttpError> {
    let unavailable = |e: String| refusal(StatusCode::SERVICE_UNAVAILABLE, None, e);
    let app = state
        .clients(names::STORAGE_CONNECTION)
        .map_err(unavailable)?;
    let app_queues = app.queues().map_err(unavailable)?;
    let protected = Protected {
        ledger: Place::new(Service::Table, ledger_tables.endpoint(), ledger_table),
        // The queues the app's function.json files name (renamed ones too), and the built-in
        // names in case a file could not be read.
        work_queues: [
            state.item_queues.range.as_str(),
            state.item_queues.partition.as_str(),
            state.item_queues.export.as_str(),
            names::RANGE_QUEUE,
            names::PARTITION_QUEUE,
            names::EXPORT_QUEUE,
        ]
        .map(|queue| Place::new(Service::Queue, app_queues.endpoint(), queue))
        .to_vec(),
    };
    let not_usable = |e: String| refusal(StatusCode::BAD_REQUEST, Some("action.connection"), e);
    let target = |connection: &str| state.clients(connection).map_err(not_usable);
    let (target_table, target_queues) = match &spec.action {
        ActionSpec::Copy {
            table, connection, ..
        } => {
            let target = target(connection)?;
            let tables = target.tables().map_err(not_usable)?;
            (
                Some(Place::new(Service::Table, tables.endpoint(), table)),
                Vec::new(),
            )
        }
        ActionSpec::Enqueue { connection, .. } | ActionSpec::PartitionKeys { connection, .. } => {
            let target = target(connection)?;
            let endpoint = target.queues().map_err(not_usable)?.endpoint();
            let places = spec
                .action
                .target_queues()
                .iter()
                .map(|queue| Place::new(Service::Queue, endpoint, queue))
                .collect();
            (None, places)
        }
        ActionSpec::Count
        | ActionSpec::Delete
        | ActionSpec::Update { .. }
        | ActionSpec::Export { .. } => (None, Vec::new()),
    };
    let touches = Touches {
        source,
        target_table,
        target_queues,
    };
    guard::check(spec, &touches, &protected).map_err(|refused| {
        refusal(
            StatusCode::BAD_REQUEST,
            Some(refused.field),
            refused.message,
        )
    })
}

/// Makes ready what a scan needs before its first step: the ledger table, and the target it
/// writes to (not in a dry run). Checks on the way, within seconds (`functions::reach`), that
/// the source table exists and its account takes the setting's credentials, that the target's
/// account does, and that nothing the scan writes is protected (`functions::guard`).
async fn prepare(state: &AppState, spec: &mut ScanSpec, id: &str) -> Result<(), HttpError> {
    let unavailable = |what: String| refusal(StatusCode::SERVICE_UNAVAILABLE, None, what);
    let ledger = state.ledger().map_err(unavailable)?;
    let ledger_account = state
        .clients(&state.config.ledger_connection)
        .map_err(unavailable)?;
    let ledger_tables = ledger_account.tables().map_err(unavailable)?;
    ledger_tables
        .create_table(ledger.table().name(), true)
        .await
        .map_err(|e| unavailable(format!("the scan ledger table could not be created: {e}")))?;
    let account = |setting: &str, field: &str| account_for(state, setting, field);
    let probe = |setting: &str, field: &str| probe_for(state, setting, field);
    if spec.import.is_some() {
        let source = super::export_checks::prepare_import(state, spec).await?;
        guard(state, spec, source, ledger_tables, ledger.table().name())?;
        return prepare_target(state, spec, id).await;
    }
    let source_account = account(&spec.connection, "connection")?;
    let source = probe(&spec.connection, "connection")?;
    let source = source
        .tables()
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("connection"), e))?;
    let table = source
        .table(&spec.table)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("table"), e.to_string()))?;
    let check = Check {
        setting: &spec.connection,
        field: "connection",
        service: Service::Table,
        account: &source_account,
    };
    let what = "reading the source table";
    match within(&check, what, table.query_page(&first_key(), None)).await? {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                Some("table"),
                format!(
                    "table {:?} does not exist in the account of {:?}",
                    spec.table, spec.connection
                ),
            ))
        }
        Err(e) => return Err(refused(&check, what, &e)),
    }
    let source = Place::new(Service::Table, source.endpoint(), &spec.table);
    guard(state, spec, source, ledger_tables, ledger.table().name())?;
    prepare_target(state, spec, id).await
}

/// Makes ready, or checks in a dry run, what the scan's action writes to.
async fn prepare_target(state: &AppState, spec: &ScanSpec, id: &str) -> Result<(), HttpError> {
    let account = |setting: &str, field: &str| account_for(state, setting, field);
    let probe = |setting: &str, field: &str| probe_for(state, setting, field);
    match &spec.action {
        ActionSpec::Copy {
            table, connection, ..
        } => {
            let target_account = account(connection, "action.connection")?;
            let target = probe(connection, "action.connection")?;
            let target = target
                .tables()
                .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("action.connection"), e))?
                .table(table)
                .map_err(|e| {
                    refusal(StatusCode::BAD_REQUEST, Some("action.table"), e.to_string())
                })?;
            let check = Check {
                setting: connection,
                field: "action.connection",
                service: Service::Table,
                account: &target_account,
            };
            if spec.dry_run {
                // A dry run writes nothing, and so creates no target either; a missing one
                // is fine.
                let what = "reading the target table";
                match within(&check, what, target.query_page(&first_key(), None)).await? {
                    Err(e) if !e.is_not_found() => return Err(refused(&check, what, &e)),
                    _ => {}
                }
            } else {
                let what = "creating the target table";
                within(&check, what, target.create_if_missing())
                    .await?
                    .map_err(|e| refused(&check, what, &e))?;
            }
        }
        ActionSpec::Enqueue { connection, .. } | ActionSpec::PartitionKeys { connection, .. } => {
            let target_account = account(connection, "action.connection")?;
            let target = probe(connection, "action.connection")?;
            let target = target
                .queues()
                .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("action.connection"), e))?;
            let check = Check {
                setting: connection,
                field: "action.connection",
                service: Service::Queue,
                account: &target_account,
            };
            for name in spec.action.target_queues() {
                let queue = target.queue(name).map_err(|e| {
                    refusal(StatusCode::BAD_REQUEST, Some("action.queue"), e.to_string())
                })?;
                let what = format!("creating the queue {name:?}");
                let checked = if spec.dry_run {
                    match within(&check, &what, queue.approximate_count()).await? {
                        Err(e) if !e.is_not_found() => Err(e),
                        _ => Ok(()),
                    }
                } else {
                    within(&check, &what, queue.create()).await?.map(drop)
                };
                checked.map_err(|e| refused(&check, &what, &e))?;
            }
        }
        ActionSpec::Export { .. } => super::export_checks::prepare_export(state, spec, id).await?,
        ActionSpec::Count | ActionSpec::Delete | ActionSpec::Update { .. } => {}
    }
    Ok(())
}

/// The account a connection names, or a refusal naming the request's `field`.
pub(super) fn account_for(
    state: &AppState,
    setting: &str,
    field: &str,
) -> Result<crate::storage::StorageAccount, HttpError> {
    state
        .account(setting)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some(field), e))
}

/// Clients for a start's quick checks of a connection, or a refusal naming `field`.
pub(super) fn probe_for(
    state: &AppState,
    setting: &str,
    field: &str,
) -> Result<super::app::Clients, HttpError> {
    state
        .probe_clients(setting)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some(field), e))
}

/// A query for one row's keys: the cheapest read that proves a table is there and readable.
fn first_key() -> Query {
    Query::default().top(1).select(Vec::<String>::new())
}

/// Runs one account check within [`reach::CHECK_DEADLINE`]; the refusal when it takes longer.
pub(super) async fn within<T>(
    check: &Check<'_>,
    what: &str,
    work: impl std::future::Future<Output = Result<T, crate::storage::StorageError>>,
) -> Result<Result<T, crate::storage::StorageError>, HttpError> {
    tokio::time::timeout(reach::CHECK_DEADLINE, work)
        .await
        .map_err(|_| {
            let (status, message) = reach::timed_out(check, what);
            let field = status.is_client_error().then_some(check.field);
            refusal(status, field, message)
        })
}

/// The answer for a failed account check (see `functions::reach`).
pub(super) fn refused(
    check: &Check<'_>,
    what: &str,
    error: &crate::storage::StorageError,
) -> HttpError {
    let (status, message) = reach::refusal(check, what, error);
    let field = status.is_client_error().then_some(check.field);
    refusal(status, field, message)
}

/// The ledger and the scan id named by the route, or the answer that refuses the request.
pub(super) fn scan_target<'a>(
    state: &'a AppState,
    body: &[u8],
) -> Result<(&'a crate::job::Ledger, String), Box<Response>> {
    let req = request(body).map_err(|failure| Box::new(failure.into_response()))?;
    let id = req
        .param("id")
        .filter(|id| is_scan_id(id))
        .ok_or_else(|| Box::new(error(StatusCode::NOT_FOUND, None, "no scan has this id")))?
        .to_string();
    let ledger = state
        .ledger()
        .map_err(|why| Box::new(error(StatusCode::SERVICE_UNAVAILABLE, None, why)))?;
    Ok((ledger, id))
}

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
            }
            if super::redrive::wants_redrive(status.state) {
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
        Err(crate::job::LedgerError::Storage(e))
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
const PACE_READ: ReadCost = ReadCost::new(1, 16);

/// Whether the scan shares out a cap (set or learned): then its slices say how fast it goes.
fn paced(status: &crate::job::ScanStatus) -> Option<()> {
    let capped =
        status.spec.max_rows_per_second.is_some() || status.learned_max_rows_per_second.is_some();
    capped.then_some(())
}

/// How fast a capped scan (its cap set or learned) goes now, if `budget` still holds a pace
/// read; `None` for a scan without a cap (nothing shares one out, so nothing is read) or when
/// the read failed.
async fn pace(
    ledger: &crate::job::Ledger,
    status: &crate::job::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<crate::job::Pace> {
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

/// The status read's re-drive look (`job::redrive`): when it is due and this reader wins the
/// scan's turn, items found stranded are sent again (the next read counts them). Failures
/// never fail the read: they are logged, and the next turn or sweep tries again. While the
/// read saw `abandoned` claims (a host died), the look is due once a lease rather than once
/// a minute, so that a watched scan resumes soon after a crash.
async fn redrive_look(
    state: &AppState,
    ledger: &crate::job::Ledger,
    read: &StatusRead,
    abandoned: bool,
) {
    let id = read.status.id.as_str();
    let now = OffsetDateTime::now_utc();
    let after = super::redrive::redrive_after(state);
    // A claim can be abandoned once a lease has passed, long before an item can be stranded.
    let lease = time::Duration::try_from(state.config.lease).unwrap_or(time::Duration::MINUTE);
    let every = match abandoned {
        true => super::redrive::status_look_every(state).min(lease),
        false => super::redrive::status_look_every(state),
    };
    let old_enough = after.min(lease);
    if !crate::job::redrive::look_due(
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
        let stall = crate::job::redrive::stall_after(lease);
        let quiet = crate::job::redrive::quiet_for(&read.status, now);
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
    let deadline = std::time::Instant::now() + super::redrive::STATUS_READ_REDRIVE_TIME;
    if let Err(why) = super::redrive::redrive_stranded(state, ledger, id, stranded, deadline).await
    {
        tracing::warn!(scan = id, "could not re-drive stranded work items: {why}");
    }
}

/// The most entities a claims window may read: `job::activity::CLAIMS_WINDOW`, less what a
/// capped scan's pace read needs after it.
fn claims_window(status: &crate::job::ScanStatus, budget: &ReadBudget) -> u16 {
    let reserved = match paced(status) {
        Some(()) => PACE_READ.entities,
        None => 0,
    };
    let room = budget.left().entities.saturating_sub(reserved);
    u16::try_from(room)
        .unwrap_or(u16::MAX)
        .min(crate::job::activity::CLAIMS_WINDOW)
}

/// The claims among the scan's pending items: none without reading when nothing is pending,
/// else one window if `budget` holds a request and a few entities; `None` if not or if the
/// window could not be read.
async fn claims_within(
    ledger: &crate::job::Ledger,
    status: &crate::job::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<crate::job::activity::Claims> {
    let pending = status.progress.steps_pending;
    if pending == 0 {
        return Some(crate::job::activity::Claims::default());
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
    status: &crate::job::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<u64> {
    let queues = scan_queues(&state.item_queues, &status.spec);
    if !budget.spend(ReadCost::new(queues.len() as u32, 0)) {
        return None;
    }
    let clients = state.clients(super::names::STORAGE_CONNECTION).ok()?;
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
    queues: &'a super::app::ItemQueues,
    spec: &crate::job::ScanSpec,
) -> Vec<&'a str> {
    match spec.import {
        Some(_) => vec![queues.export.as_str()],
        None => vec![queues.range.as_str(), queues.partition.as_str()],
    }
}

/// Why a scan in flight is or is not moving; `None` if the ledger could not say (or could not
/// within the read's `budget`).
async fn activity(
    state: &AppState,
    ledger: &crate::job::Ledger,
    status: &crate::job::ScanStatus,
    budget: &mut ReadBudget,
) -> Option<crate::job::Activity> {
    let now = OffsetDateTime::now_utc();
    let claims = claims_within(ledger, status, budget).await?;
    let last = status
        .progress
        .last_step_at
        .as_deref()
        .or(status.started_at.as_deref())
        .unwrap_or(&status.created_at);
    let since = crate::storage::table::entity::EdmDateTime::parse(last)
        .map(|t| (now - t.time()).whole_seconds().max(0) as u64)
        .unwrap_or(0);
    let redrive_minutes = state.config.redrive_after.as_secs() / 60;
    let now_ms = crate::job::rows::millis(now);
    // The Functions host holds a delivered queue message at most 10 minutes (its visibility
    // while an execution runs); a stopped host's messages come back after that.
    const HOST_HOLD_MS: u64 = 10 * 60 * 1000;
    let abandoned_return_by_ms = claims.abandoned_touched_ms.map(|t| t + HOST_HOLD_MS);
    let awaits_manifest = status.export.as_ref().is_some_and(|e| e.manifest.is_none())
        && status.progress.steps_pending == 0;
    // Only a stall with nothing running and nothing abandoned is explained by the queues.
    let stalled = !awaits_manifest && claims.abandoned == 0 && claims.running == 0 && since >= 60;
    let queued_messages = match stalled {
        true => queued_messages(state, status, budget).await,
        false => None,
    };
    let manifest_error = status
        .export
        .as_ref()
        .is_some_and(|e| e.manifest_error.is_some());
    let note = if awaits_manifest && manifest_error {
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
    };
    Some(crate::job::Activity {
        steps_running: claims.running,
        steps_abandoned: claims.abandoned,
        estimated: claims.estimated,
        oldest_pending_seconds: claims
            .oldest_touched_ms
            .map(|touched| now_ms.saturating_sub(touched) / 1000),
        abandoned_return_by: abandoned_return_by_ms.and_then(|ms| {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
                .ok()
                .map(crate::job::ledger::format_time)
        }),
        queued_messages,
        seconds_since_last_step: since,
        note,
    })
}

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
    let unavailable = |e: crate::job::LedgerError| {
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
        Err(crate::job::LedgerError::Storage(e)) if e.is_not_found() => Vec::new(),
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
                unreadable.push(crate::job::housekeeping::Unreadable {
                    id: record.id,
                    error: e.to_string(),
                });
                continue;
            }
        };
        if query.keeps(&status) {
            scans.push(super::scans_list::entry(&status));
        }
    }
    answer(
        StatusCode::OK,
        json!({ "scans": scans, "next": page.next, "unreadableScans": unreadable, "rejectedMessages": rejected }),
    )
    .into_response()
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
        Ok(Some(_)) | Err(crate::job::LedgerError::Corrupt(..)) => match ledger.scan(id).await {
            Ok(Some(record)) => record,
            Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
            Err(e) => return unavailable_ledger(e),
        },
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => return unavailable_ledger(e),
    };
    match ledger
        .remove_scan(&record, std::time::Instant::now() + state.removal_time)
        .await
    {
        Ok(removed) => removal_answer(removed, json!({ "id": id, "removedRows": removed.rows })),
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
        Ok(removed) => removal_answer(removed, json!({ "removed": removed.rows })),
        Err(e) => unavailable_ledger(e),
    }
}

/// `200` when a removal is complete, `202` with `"more": true` when it needs another call.
fn removal_answer(removed: crate::job::housekeeping::Removed, mut body: Value) -> Response {
    body["more"] = Value::Bool(removed.more);
    let status = if removed.more {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    answer(status, body).into_response()
}

fn unavailable_ledger(e: crate::job::LedgerError) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        format!("the ledger could not be read or written: {e}"),
    )
}

/// `POST /api/scans/{id}/cancel`.
pub async fn cancel_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let now = OffsetDateTime::now_utc();
    match ledger.status(id, now).await {
        Ok(Some(status)) if matches!(status.state, State::Succeeded | State::Failed) => {
            return error(
                StatusCode::CONFLICT,
                None,
                format!("the scan already finished ({:?})", status.state).to_lowercase(),
            );
        }
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the scan could not be read: {e}"),
            )
        }
    }
    match ledger.cancel(id, now).await {
        Ok(Some(_)) => {
            state.note_cancelled(id);
            // `cancelling` while some step still holds a claim (it stops at its next page),
            // then `cancelled` with final counts.
            let state = match ledger.status(id, OffsetDateTime::now_utc()).await {
                Ok(Some(status)) => status.state,
                _ => State::Cancelling,
            };
            answer(StatusCode::OK, json!({ "id": id, "state": state })).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scan could not be cancelled: {e}"),
        ),
    }
}

/// Whether `retry` has work in a scan: `failed` (for good), or any item failed for good while
/// the scan runs again after an earlier retry; never once it was cancelled.
fn retriable(status: &crate::job::ScanStatus) -> bool {
    match status.state {
        State::Failed => true,
        State::Pending | State::Running => status.progress.steps_failed > 0,
        // A paused scan is resumed first: its retried items would wait for the resume.
        State::Succeeded
        | State::Cancelling
        | State::Cancelled
        | State::Pausing
        | State::Paused => false,
    }
}

/// How many failed items one retry request makes pending again; a scan with more answers
/// `"more": true` and is retried by calling again.
pub const RETRY_PER_REQUEST: u16 = 500;

/// `POST /api/scans/{id}/retry`: runs a scan's items that failed for good again. Each becomes
/// pending with a fresh message; the scan is `running` until they finish, and its counts stay
/// exact. A scan with more failed items than one call retries is `running` after the first
/// call: the next calls go on while any item is failed (a cancelled scan's are left alone).
pub async fn retry_scan(state: &AppState, body: &[u8]) -> Response {
    let (ledger, id) = match scan_target(state, body) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let id = id.as_str();
    let failed = match ledger.status(id, OffsetDateTime::now_utc()).await {
        Ok(Some(status)) if retriable(&status) => status.progress.steps_failed,
        Ok(Some(status)) => {
            return error(
                StatusCode::CONFLICT,
                None,
                format!(
                    "only a scan with failed items can be retried (and not once cancelled); this one is {} with {} failed",
                    serde_json::to_value(status.state).unwrap_or(Value::Null),
                    status.progress.steps_failed
                ),
            )
        }
        Ok(None) => return error(StatusCode::NOT_FOUND, None, "no scan has this id"),
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the scan could not be read: {e}"),
            )
        }
    };
    if let Err(refused) = super::pause::resume_for_retry(state, ledger, id).await {
        return *refused;
    }
    // An export that gave up on its manifest (every step done) tries it again now.
    if failed == 0 {
        if let Ok(Some(record)) = ledger.scan(id).await {
            if record.manifest_trouble.gave_up_at.is_some() {
                if let Err(e) = ledger
                    .clear_manifest_trouble(id, OffsetDateTime::now_utc())
                    .await
                {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        None,
                        format!("the export's manifest could not be tried again: {e}"),
                    );
                }
                super::manifest::seal_if_done(state, ledger, id).await;
            }
        }
    }
    let messages = match ledger.retry_failed(id, RETRY_PER_REQUEST).await {
        Ok(messages) => messages,
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the failed items could not be made pending again: {e}"),
            )
        }
    };
    let retried = messages.len();
    // Failed items beyond this call's (counted exactly when the status was read; an item that
    // fails meanwhile is found by the next call all the same).
    let more = failed > retried as u64;
    tracing::info!(scan = %id, "{retried} failed work items sent again");
    let answer = Outcome::default().http(
        HTTP_RESPONSE,
        StatusCode::ACCEPTED,
        &json!({ "id": id, "state": State::Running, "retried": retried, "more": more }),
        &[],
    );
    super::step::with_items(answer, messages).into_response()
}
