//! `POST /api/scans`: a scan started from its request, idempotently when the caller sends an
//! idempotency key. Also how a schedule starts its runs (`functions::schedules`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use time::OffsetDateTime;

use super::provision::prepare;
use crate::answers::{json_of, refuse, request, HttpError};
use crate::app::AppState;
use crate::names::HTTP_RESPONSE;
use crate::plan::scope_range;
use crate::protocol::Outcome;
use tablescan_api::answers::Started as StartAnswer;
use tablescan_api::ScanSpec;
use tablescan_ledger::ledger::new_scan_id;
use tablescan_ledger::{Created, State};
use tablescan_ledger::{ImportTask, WorkItem};

/// Scan requests larger than this are refused with 413.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

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

/// [`start_scan`], with a refusal as an error (for the log).
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
        &json_of(&StartAnswer {
            id: started.id.clone(),
            state: State::Pending,
            status: location.clone(),
        }),
        &[("Location", location.clone())],
    );
    Ok(crate::send::with_items(answer, started.roots).into_response())
}

/// A scan started (or found started by the same idempotency key), and the messages of its
/// first work item to send (none when a step took it already).
pub(crate) struct Started {
    pub id: String,
    pub roots: Vec<String>,
}

impl Started {
    /// Scan `id` started, with `root`'s message to send if `send_root`.
    fn new(id: &str, root: &WorkItem, send_root: bool) -> Started {
        let roots = if send_root {
            vec![root.encode()]
        } else {
            Vec::new()
        };
        Started {
            id: id.to_string(),
            roots,
        }
    }
}

/// Starts the scan `text` asks for, as `POST /api/scans` does, with idempotency key `key` if
/// given: checked, prepared (targets created), recorded. Also what a schedule's occurrence
/// runs (`functions::schedules`).
pub(crate) async fn start_request(
    state: &AppState,
    text: &str,
    key: Option<&str>,
) -> Result<Started, HttpError> {
    let default_cap = match state.default_cap() {
        Ok(cap) => cap,
        Err(why) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, None, why),
    };
    let mut spec = checked_request(state, text, default_cap)?;
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
    if let Err(tablescan_api::SpecError { field, message }) =
        tablescan_ledger::stored_size::check_stored_size(&spec)
    {
        return refuse(StatusCode::BAD_REQUEST, Some(&field), message);
    }
    let root = root_item(&spec, &id);
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
    let send_root = root_to_send(ledger, &spec, &root, &created).await?;
    log_start(&id, key, &spec, &created);
    Ok(Started::new(&id, &root, send_root))
}

/// Finishes the start of a scan found recorded, from the request as it was stored (prepared
/// then): its index row, and its first work item's message if no step took it yet, as a start
/// retried with the same key does. What a schedule runs for an occurrence whose start was
/// interrupted (`functions::schedules`): the schedule's request may have been replaced since,
/// and a start from it would prepare the new request (create a copy's target) only to be
/// refused for the key.
pub(crate) async fn finish_recorded(
    state: &AppState,
    record: &tablescan_ledger::ScanRecord,
) -> Result<Started, HttpError> {
    let unavailable = |e: tablescan_ledger::LedgerError| {
        crate::answers::refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scan's start could not be finished: {e}"),
        )
    };
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return refuse(StatusCode::SERVICE_UNAVAILABLE, None, why),
    };
    ledger
        .index_scan(&record.id, record.created_at)
        .await
        .map_err(unavailable)?;
    let root = root_item(&record.spec, &record.id);
    let send_root = root_unstarted(ledger, &root).await?;
    Ok(Started::new(&record.id, &root, send_root))
}

/// The request `text` parsed and checked against the app's allow-list, as it will be stored.
fn checked_request(
    state: &AppState,
    text: &str,
    default_cap: Option<u32>,
) -> Result<ScanSpec, HttpError> {
    let checked = state.parse_start(text, default_cap).and_then(|spec| {
        tablescan_ledger::stored_size::check_stored_size(&spec)
            .map(|()| spec)
            .map_err(crate::allowlist::Refused::Request)
    });
    checked.or_else(|refused| {
        let (status, field, message) = refused.answer();
        refuse(status, field.as_deref(), message)
    })
}

/// The scan's first work item: the first part of the export's manifest for an import, else
/// the whole of the scope's range.
fn root_item(spec: &ScanSpec, id: &str) -> WorkItem {
    match &spec.import {
        // An import starts from the first part of the export's manifest.
        Some(_) => WorkItem {
            v: tablescan_engine::item::WORK_ITEM_VERSION,
            scan: id.to_string(),
            depth: 0,
            task: ImportTask::ExportPart { part: 0, from: 0 }.into(),
            given_back: 0,
        },
        None => {
            let (range, prefix) = scope_range(spec);
            WorkItem::root(id.to_string(), range, prefix)
        }
    }
}

/// Whether the first work item's message is to be sent: always for a new scan. A start
/// retried with the same key answers the same scan, and sends its first work item again if no
/// step took it yet (the first attempt may have stopped before its message was written; a
/// duplicate is harmless); the same key with another request is refused.
async fn root_to_send(
    ledger: &tablescan_ledger::Ledger,
    spec: &ScanSpec,
    root: &WorkItem,
    created: &Created,
) -> Result<bool, HttpError> {
    match created {
        Created::New => Ok(true),
        Created::Existing(existing) if !existing.spec.same_request(spec) => refuse(
            StatusCode::CONFLICT,
            Some(IDEMPOTENCY_KEY),
            "this key already started a scan with a different request",
        ),
        Created::Existing(_) => root_unstarted(ledger, root).await,
    }
}

/// Whether a recorded scan's first work item still waits for its first step (its message is
/// then sent again); a 503 if the ledger cannot say.
async fn root_unstarted(
    ledger: &tablescan_ledger::Ledger,
    root: &WorkItem,
) -> Result<bool, HttpError> {
    ledger.root_unstarted(root).await.or_else(|e| {
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("the scan could not be read: {e}"),
        )
    })
}

/// The audit line: what was started, and the caller's idempotency key if it sent one (the
/// host logs who asked).
fn log_start(id: &str, key: Option<&str>, spec: &ScanSpec, created: &Created) {
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
}

/// The request header that makes a start idempotent.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The scan id an idempotency key stands for: 32 hex digits of a hash of the key, so the same
/// key always names the same scan, on any instance, with no lookup table.
pub(crate) fn idempotent_scan_id(key: &str) -> Result<String, String> {
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
