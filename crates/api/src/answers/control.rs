//! The short answers: a start's, the control routes' that the CLI reads typed (cancel and
//! pause; retry) and a refusal's. `S` is the state: [`State`] where the app writes it, its name where the
//! CLI reads it (a newer app's new state is shown, not refused).

use serde::{Deserialize, Serialize};

use super::status::State;

/// `POST /api/scans` (202): the scan started (or found by its idempotency key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct Started<S = State> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub state: S,
    /// The scan's status route (`/api/scans/{id}`).
    #[serde(default)]
    pub status: String,
}

/// `POST /api/scans/{id}/cancel` and `/pause`: the scan's state now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct StateAnswer<S = State> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub state: S,
}

/// `POST /api/scans/{id}/retry`: failed items sent again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct Retried<S = State> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub state: S,
    #[serde(default)]
    pub retried: u64,
    /// Another call sends the rest.
    #[serde(default)]
    pub more: bool,
}

/// A refusal or failure: `{"error": {"message", "field"}}`, the field absent when no request
/// field is at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}
