//! The answers of the HTTP functions: a JSON body as the `res` output, a refusal naming the
//! request field at fault, and reading the invocation and the scan id a route names.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::app::AppState;
use crate::names::{HTTP_REQUEST, HTTP_RESPONSE};
use crate::protocol::{Failure, HttpRequest, Invocation, Outcome};
use tablescan_api::answers::{ErrorAnswer, ErrorDetail};
use tablescan_ledger::ledger::is_scan_id;

/// The answer to the caller, as the `res` output.
pub(crate) fn answer(status: StatusCode, body: Value) -> Outcome {
    Outcome::default().http(HTTP_RESPONSE, status, &body, &[])
}

/// One of the API's typed answers (`tablescan_api::answers`) as JSON, written through a
/// `Value` as every answer is (so its keys are in order, as they always were).
pub(crate) fn json_of<T: serde::Serialize>(body: &T) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// A refusal to the caller: status, the request field at fault (if any), and why.
pub(crate) struct HttpError {
    pub(super) status: StatusCode,
    pub(super) field: Option<String>,
    pub(super) message: String,
}

impl HttpError {
    /// The refusal as one line: `field: message`, or the message.
    pub(crate) fn describe(&self) -> String {
        match &self.field {
            Some(field) => format!("{field}: {}", self.message),
            None => self.message.clone(),
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let refusal = ErrorAnswer {
            error: ErrorDetail {
                message: self.message,
                field: self.field,
            },
        };
        answer(self.status, json_of(&refusal)).into_response()
    }
}

pub(crate) fn refusal(
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

pub(super) fn refuse<T>(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> Result<T, HttpError> {
    Err(refusal(status, field, message))
}

pub(crate) fn error(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> Response {
    refusal(status, field, message).into_response()
}

pub(crate) fn request(body: &[u8]) -> Result<HttpRequest, Failure> {
    Invocation::parse(body)
        .and_then(|invocation| invocation.http_request(HTTP_REQUEST))
        .map_err(|why| Failure::new(StatusCode::BAD_REQUEST, why))
}

/// The ledger and the scan id named by the route, or the answer that refuses the request.
pub(crate) fn scan_target<'a>(
    state: &'a AppState,
    body: &[u8],
) -> Result<(&'a tablescan_ledger::Ledger, String), Box<Response>> {
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
