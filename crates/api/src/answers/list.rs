//! The page of `GET /api/scans`: what it shows of each scan, where the next page starts, the
//! scans it could not read and the queue messages that were not valid work items. Read
//! tolerantly by the CLI (see the module above).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::shown::{ActionShown, ImportShown};
use super::status::{Progress, State};
use crate::{OlderThan, Scope};

/// A page of the scans list. `S` is the state: [`State`] where the app writes it, its name
/// where the CLI reads it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct ScansPage<S = State> {
    #[serde(default = "Vec::new")]
    pub scans: Vec<ListEntry<S>>,
    /// Where the next page starts (`after`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
    #[serde(default)]
    pub unreadable_scans: Vec<UnreadableScan>,
    /// Queue messages that were not valid work items, as the ledger recorded them: the CLI
    /// counts them and shows them only as JSON, so they are kept as they came.
    #[serde(default)]
    pub rejected_messages: Vec<Value>,
}

/// A scan the list could not read (damaged, or a read that failed), and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnreadableScan {
    pub id: String,
    pub error: String,
}

/// What the list shows of a scan: its state, what it reads and what its action touches (the
/// action's fields as a request names them, an update's properties by name only), whether it
/// is a dry run, and its main counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct ListEntry<S = State> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub state: S,
    #[serde(default)]
    pub table: String,
    #[serde(default)]
    pub connection: String,
    /// The action's type (`copy`, `partition-keys`, ...).
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub target: ActionShown,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub progress: ListProgress,
    /// The scan's status route (`/api/scans/{id}`).
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// In flight: rows read per second over the last 20 seconds or so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_rows_per_second: Option<f64>,
    /// What the scan reads, so that an earlier count of the same scope can be found from the
    /// list alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<OlderThan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<ImportShown>,
}

/// The counts a list entry shows (a status shows them all: [`Progress`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListProgress {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    pub rows_failed: u64,
    pub partitions: u64,
    pub steps_done: u64,
    pub steps_pending: u64,
    pub steps_failed: u64,
    pub requests_throttled: u64,
    pub rows_per_second: f64,
}

impl From<&Progress> for ListProgress {
    fn from(p: &Progress) -> ListProgress {
        ListProgress {
            rows_read: p.rows_read,
            rows_acted: p.rows_acted,
            rows_skipped: p.rows_skipped,
            rows_failed: p.rows_failed,
            partitions: p.partitions,
            steps_done: p.steps_done,
            steps_pending: p.steps_pending,
            steps_failed: p.steps_failed,
            requests_throttled: p.requests_throttled,
            rows_per_second: p.rows_per_second,
        }
    }
}
