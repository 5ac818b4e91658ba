//! The short answers: a start's, the control routes' (cancel, pause, resume, retry, and the
//! removals in rounds) and a refusal's. `S` is the state: [`State`] where the app writes it,
//! its name where the CLI reads it (a newer app's new state is shown, not refused).

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

/// `POST /api/scans/{id}/resume` (202): one round of the messages of the items the pause
/// left pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct ResumeRound<S = State> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub state: S,
    /// Messages this round sent.
    #[serde(default)]
    pub sent: u64,
    /// Items are left to send: another call (or the app's re-drive sweep) goes on.
    #[serde(default)]
    pub more: bool,
}

/// `DELETE /api/scans/{id}`: one round of a finished scan's removal (200 when it is complete,
/// 202 when `more`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RemovalRound {
    pub id: String,
    /// Ledger rows this round deleted.
    pub removed_rows: u64,
    /// Rows are left: another call goes on.
    pub more: bool,
}

/// `DELETE /api/rejected`: one round of forgetting the refused queue messages (200 when it
/// is complete, 202 when `more`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RejectedRemovalRound {
    /// Records this round deleted.
    pub removed: u64,
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
