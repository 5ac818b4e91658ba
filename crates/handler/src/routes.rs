//! The handler's axum router: one route per function, plus `GET /`, each reading its body and
//! calling its function's module. The top of the handler: it uses every function's module, and
//! none of them uses it.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;
use crate::names::*;
use crate::{http, redrive, step};

/// The largest queue-trigger invocation the handler reads (work items are small); HTTP
/// triggers read theirs through `functions::http_body`, which answers a larger one with a 413.
const MAX_INVOCATION_BYTES: usize = crate::http_body::MAX_INVOCATION_BYTES;

/// The handler's routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(|| async { "tablescan handler" }))
        .route(&format!("/{SCAN_RANGE}"), post(scan_range))
        .route(&format!("/{SCAN_PARTITION}"), post(scan_partition))
        .route(&format!("/{SCAN_EXPORT}"), post(scan_export))
        .route(&format!("/{START_SCAN}"), post(start_scan))
        .route(&format!("/{GET_SCAN}"), post(get_scan))
        .route(&format!("/{LIST_SCANS}"), post(list_scans))
        .route(&format!("/{CANCEL_SCAN}"), post(cancel_scan))
        .route(&format!("/{RETRY_SCAN}"), post(retry_scan))
        .route(&format!("/{PAUSE_SCAN}"), post(pause_scan))
        .route(&format!("/{RESUME_SCAN}"), post(resume_scan))
        .route(&format!("/{PUT_SCHEDULE}"), post(put_schedule))
        .route(&format!("/{GET_SCHEDULE}"), post(get_schedule))
        .route(&format!("/{LIST_SCHEDULES}"), post(list_schedules))
        .route(&format!("/{DELETE_SCHEDULE}"), post(delete_schedule))
        .route(&format!("/{SCHEDULE_ACTION}"), post(schedule_action))
        .route(&format!("/{RUN_SCHEDULES}"), post(run_schedules))
        .route(&format!("/{DELETE_SCAN}"), post(delete_scan))
        .route(&format!("/{CLEAR_REJECTED}"), post(clear_rejected))
        .route(&format!("/{REDRIVE_SCANS}"), post(redrive_scans))
        .route(&format!("/{SCANS_PAGE}"), post(scans_page))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            refuse_while_settings_are_bad,
        ))
        .layer(DefaultBodyLimit::max(MAX_INVOCATION_BYTES))
        .with_state(state)
}

/// Answers every function with the reason while some of the handler's settings cannot be
/// used (`functions::config`): a 500 naming them, as a failed invocation (queue and timer
/// triggers, which the host retries or logs) or as the HTTP answer. A step refused so is
/// left pending in the ledger, and re-driven once the setting is mended. `GET /` and the
/// page of scans need no setting.
async fn refuse_while_settings_are_bad(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(bad) = &state.bad_settings else {
        return next.run(request).await;
    };
    let function = request.uri().path().trim_start_matches('/');
    let why = format!("the app's settings need mending: {bad}");
    let status = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
    match function {
        "" | SCANS_PAGE => next.run(request).await,
        SCAN_RANGE | SCAN_PARTITION | SCAN_EXPORT | RUN_SCHEDULES | REDRIVE_SCANS => {
            axum::response::IntoResponse::into_response(crate::protocol::Failure::new(status, why))
        }
        _ => crate::answers::error(status, None, why),
    }
}

async fn scan_range(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    step::handle(&state, step::ItemKind::Range, &body).await
}

async fn scan_export(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    step::handle(&state, step::ItemKind::Export, &body).await
}

async fn scan_partition(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    step::handle(&state, step::ItemKind::Partition, &body).await
}

async fn start_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::start_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn get_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::get_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn scans_page(body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => crate::ui::page_answer(&body),
        Err(refused) => refused,
    }
}

async fn list_scans(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::list_scans(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn cancel_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::cancel_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn pause_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => crate::pause::pause_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn resume_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => crate::pause::resume_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn delete_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::delete_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn clear_rejected(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::clear_rejected(&state, &body).await,
        Err(refused) => refused,
    }
}

async fn retry_scan(State(state): State<Arc<AppState>>, body: Body) -> Response {
    match crate::http_body::read(body).await {
        Ok(body) => http::retry_scan(&state, &body).await,
        Err(refused) => refused,
    }
}

/// The schedules' HTTP functions: each reads its body, then `functions::schedules_http`.
macro_rules! schedule_route {
    ($name:ident) => {
        async fn $name(State(state): State<Arc<AppState>>, body: Body) -> Response {
            match crate::http_body::read(body).await {
                Ok(body) => crate::schedules_http::$name(&state, &body).await,
                Err(refused) => refused,
            }
        }
    };
}
schedule_route!(put_schedule);
schedule_route!(get_schedule);
schedule_route!(list_schedules);
schedule_route!(delete_schedule);
schedule_route!(schedule_action);

async fn run_schedules(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    crate::schedules::tick_handler(&state, &body).await
}

async fn redrive_scans(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    redrive::sweep_handler(&state, &body).await
}
