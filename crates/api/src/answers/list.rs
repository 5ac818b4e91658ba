//! The page of `GET /api/scans`: what it shows of each scan, where the next page starts, the
//! scans it could not read and the queue messages that were not valid work items. Read
//! tolerantly by the CLI (see the module above).

use serde::ser::Error as _;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

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
    /// Read whole (an older app's list sends only its [`LISTED_COUNTS`], the rest default);
    /// written as [`LISTED_COUNTS`].
    #[serde(default, serialize_with = "listed_counts")]
    pub progress: Progress,
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

/// The counts of [`Progress`] a list entry shows (a status shows them all), by their names in
/// the JSON: the finer ones (failed attempts, queries, re-drives, the longest step, ...) are
/// left out to keep a page of 100 scans small.
pub const LISTED_COUNTS: [&str; 10] = [
    "rowsRead",
    "rowsActed",
    "rowsSkipped",
    "rowsFailed",
    "partitions",
    "stepsDone",
    "stepsPending",
    "stepsFailed",
    "requestsThrottled",
    "rowsPerSecond",
];

/// Writes the counts of `progress` a list entry shows ([`LISTED_COUNTS`]).
fn listed_counts<S: Serializer>(progress: &Progress, serializer: S) -> Result<S::Ok, S::Error> {
    let Value::Object(all) = serde_json::to_value(progress).map_err(S::Error::custom)? else {
        return Err(S::Error::custom("progress is not a JSON object"));
    };
    let listed: Map<String, Value> = all
        .into_iter()
        .filter(|(name, _)| LISTED_COUNTS.contains(&name.as_str()))
        .collect();
    listed.serialize(serializer)
}
