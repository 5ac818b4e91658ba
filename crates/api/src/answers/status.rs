//! The status document of `GET /api/scans/{id}`: written by the ledger (`ledger::status`
//! fills it from the scan's counter shards), read by the CLI.
//!
//! Every field has a default when read: an app of an earlier version may not send it (the
//! `default` attributes change nothing of what is written). Only the reading form
//! ([`crate::answers::StatusAnswer`]) can be read: the app's own spec and state have no
//! default, and the app never reads a status back.

use serde::{Deserialize, Serialize, Serializer};

use crate::{ActionSpec, ScanSpec};

/// Where a scan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Created; no step has started.
    Pending,
    Running,
    /// Every work item done.
    Succeeded,
    /// No work left, but some work items failed for good.
    Failed,
    /// Cancelled, and some step still holds a claim: it stops at its next page.
    Cancelling,
    /// Cancelled, and no step runs any more: the counts are final.
    Cancelled,
    /// Paused, and some step still holds a claim: it stops at its next page.
    Pausing,
    /// Paused, and no step runs: nothing is read or written until it is resumed.
    Paused,
}

impl State {
    /// Every state, in the order of a scan's life.
    pub const ALL: [State; 8] = [
        State::Pending,
        State::Running,
        State::Succeeded,
        State::Failed,
        State::Cancelling,
        State::Cancelled,
        State::Pausing,
        State::Paused,
    ];

    /// The state's name in the API, as its JSON spells it (`running`).
    pub fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Cancelling => "cancelling",
            State::Cancelled => "cancelled",
            State::Pausing => "pausing",
            State::Paused => "paused",
        }
    }

    /// The state the API names `name`.
    pub fn named(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|state| state.name() == name)
    }
}

/// The status document of `GET /api/scans/{id}`: `Spec` is the app's [`ScanSpec`] where the
/// ledger writes it and the CLI's tolerant [`crate::answers::SpecShown`] where it is read;
/// `S`, the state, likewise ([`State`], or its name).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(
    serialize = "Spec: ShowSpec, S: Serialize",
    deserialize = "Spec: Deserialize<'de> + Default, S: Deserialize<'de> + Default"
))]
pub struct ScanStatus<Spec = ScanSpec, S = State> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub state: S,
    /// The request as the app normalised it, in the form a request takes ([`ShowSpec`]).
    #[serde(default, serialize_with = "show_spec")]
    pub spec: Spec,
    /// The cap the scan learned from its accounts' refusals (entities per second), which it is
    /// paced at when lower than its own (see `ledger::learning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_max_rows_per_second: Option<u32>,
    #[serde(default)]
    pub progress: Progress,
    #[serde(default)]
    pub errors: Vec<StepFailure>,
    /// Why a failed scan failed, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_because: Option<String>,
    /// Some of the rows the action could not act on, with their keys and why (the count is
    /// `progress.rowsFailed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub row_failures: Vec<NotedRow>,
    /// In a dry run, some of the rows the action would have acted on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run_rows: Vec<NotedRow>,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// For count scans that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CountResult>,
    /// For scans in flight, read by `GET /api/scans/{id}`: why the scan is or is not moving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<Activity>,
    /// For scans in flight, read by `GET /api/scans/{id}`: how fast it goes now, against its
    /// cap (see `ledger::slices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<Pace>,
    /// For exports: where the blobs are, how many are written, and the manifest once it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportProgress>,
    /// The scan's rate since its start, in at most `ledger::history::SAMPLES` intervals, read
    /// with the counter shards at no cost of its own; none before a step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<RateHistory>,
    /// When the scan was paused (while it is), or resumed (after a pause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<String>,
    /// A resume is still sending the messages of the items the pause left pending (the next
    /// resume call or the re-drive sweep goes on; see `ledger::pause`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resuming: bool,
}

/// How a status writes its spec.
pub trait ShowSpec {
    fn show<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error>;
}

/// The app's spec is shown in the form of a request ([`spec_as_requested`]).
impl ShowSpec for ScanSpec {
    fn show<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        spec_as_requested(self).serialize(serializer)
    }
}

fn show_spec<T: ShowSpec, S: Serializer>(spec: &T, serializer: S) -> Result<S::Ok, S::Error> {
    spec.show(serializer)
}

/// `spec` as JSON in the form of a request: an enqueue over several queues names them in
/// `queues` alone. The ledger keeps its own form (with `queue`, the first of them, too), which
/// the API would refuse in a request ("name either queue or queues, not both").
pub fn spec_as_requested(spec: &ScanSpec) -> serde_json::Value {
    let mut value = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
    if let ActionSpec::Enqueue { queues, .. } = &spec.action {
        if !queues.is_empty() {
            if let Some(action) = value.get_mut("action").and_then(|a| a.as_object_mut()) {
                action.remove("queue");
            }
        }
    }
    value
}

/// Where an export stands.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExportProgress {
    pub container: String,
    pub prefix: String,
    /// Data blobs written by the steps counted so far, and their bytes.
    pub blobs: u64,
    pub bytes: u64,
    /// The manifest's name once it is written (the scan has succeeded then); `null` before.
    pub manifest: Option<String>,
    pub manifest_written_at: Option<String>,
    /// Why the manifest could not be written yet (the last attempt's error), while it cannot;
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_error: Option<String>,
}

/// How fast a scan in flight goes now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pace {
    /// The scan's cap in entities per second (rows read plus rows written), `null` for none.
    pub max_rows_per_second: Option<u32>,
    /// Entities per second the scan moved over the last second or so, summed over the
    /// processes running it.
    pub entities_per_second: f64,
    /// Handler processes running or waiting to run steps of the scan.
    pub instances: u64,
}

/// Why a scan in flight is or is not moving (see `ledger::activity`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Activity {
    /// Items a step is working on now.
    pub steps_running: u64,
    /// Items whose step stopped without finishing: their messages come back when the host's
    /// hold on them ends.
    pub steps_abandoned: u64,
    /// Whether the two figures above are estimates: exact up to 25 pending items, scaled up
    /// from 25 of them (chosen by their hashed ids) above that (`ledger::activity`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// How long the oldest pending item has waited since it was written or last sent (of 25 of
    /// them when the scan has more pending items): a large figure with nothing running means its
    /// message is stuck or lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_pending_seconds: Option<u64>,
    /// When, at the latest, the messages of abandoned steps come back (the host's hold on a
    /// delivered message ends at most 10 minutes after the delivery).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandoned_return_by: Option<String>,
    /// How long the oldest of the scan's parked items (work items waiting in the ledger for
    /// room in the scan's pace, `docs/scan.md`, Parking) has waited; absent when none is parked,
    /// or when the status read had no request left in its budget to look.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_parked_seconds: Option<u64>,
    /// Messages in the queues this scan's work items travel on (of every scan using them,
    /// visible or not: the service's approximate counts). Read only when they could explain a
    /// stall (no step running, none abandoned, none finished for a minute); `None` otherwise,
    /// or when they could not be read.
    pub queued_messages: Option<u64>,
    /// Seconds since a step last finished, or since the scan was created if none has.
    pub seconds_since_last_step: u64,
    /// A sentence explaining a stall, when the figures show one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Exact progress counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Progress {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    /// Rows the action could not act on (each reported, never retried).
    pub rows_failed: u64,
    pub partitions: u64,
    pub steps_done: u64,
    pub steps_pending: u64,
    pub steps_failed: u64,
    /// Attempts that failed and were tried again (a count of attempts, not of items).
    pub attempts_failed: u64,
    /// Storage requests of the scan's steps that the service answered "too busy" (503, or 500
    /// Operation Timed Out), retried or not: how hard the accounts pushed back.
    pub requests_throttled: u64,
    /// Items that had failed for good and were run again by `POST /api/scans/{id}/retry`.
    pub steps_retried: u64,
    pub queries: u64,
    pub rows_per_second: f64,
    /// The longest single step, in seconds.
    pub longest_step_seconds: f64,
    /// When a step last finished (or failed for good).
    pub last_step_at: Option<String>,
    /// Work items whose messages were sent again because nobody had touched them for a long
    /// time (a lost message); see `ledger::redrive`.
    pub steps_redriven: u64,
    /// For scans that want one row per partition (partition-keys, enqueue per partition): rows
    /// the service returned per partition found, what the account was charged for each
    /// (`engine::seek` keeps it near 1 where partitions are large).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_read_per_partition: Option<f64>,
}

/// A work item that failed for good.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StepFailure {
    pub step: String,
    /// Read from `message` too, as the CLI read it before these types were shared.
    #[serde(alias = "message")]
    pub error: String,
    pub attempts: u64,
}

/// The answer of a count scan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CountResult {
    pub rows: u64,
    pub partitions: u64,
}

/// One noted row: its keys, and why it failed (`None` in a dry run's sample). Also the form
/// the ledger stores notes in (`ledger::notes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotedRow {
    pub partition_key: String,
    pub row_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A scan's rate since its start, as a status shows it: per interval of `bucket_seconds`, the
/// first starting `offset_seconds` after the scan's start (`ledger::history` keeps it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateHistory {
    pub bucket_seconds: u64,
    pub offset_seconds: i64,
    pub rows_read: Vec<u64>,
    pub entities: Vec<u64>,
    pub requests_throttled: Vec<u64>,
}

impl RateHistory {
    /// Rows read per second over the last `window` seconds (at least an interval) of a scan
    /// `elapsed` seconds after its start: the rows of the intervals that end in the window,
    /// over the time from the window's start (or the earliest of those intervals' starts,
    /// never before the scan's) to now. `None` before the scan has run for any time.
    pub fn recent_rows_per_second(&self, elapsed: f64, window: f64) -> Option<f64> {
        let width = self.bucket_seconds as f64;
        let since = (elapsed - window.max(width)).max(0.0);
        let mut rows = 0u64;
        let mut from = since;
        for (i, read) in self.rows_read.iter().enumerate().rev() {
            let start = self.offset_seconds as f64 + i as f64 * width;
            if start + width <= since {
                break;
            }
            rows += read;
            from = from.min(start.max(0.0));
        }
        let span = elapsed - from;
        (span > 0.0).then(|| (rows as f64 / span * 10.0).round() / 10.0)
    }
}
