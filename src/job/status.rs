//! A scan's status, derived from its ledger entries every time it is asked for, so it is never
//! stale and never disagrees with the ledger.

use serde::Serialize;
use time::OffsetDateTime;

use super::ledger::{format_time, tally, Ledger, LedgerError, ScanRecord, StepCounts};
use super::redrive::{stranded_among, Stranded};
use super::spec::{ActionSpec, ScanSpec};

/// Where a scan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Created; no step has started.
    Pending,
    Running,
    /// Every work item done.
    Succeeded,
    /// No work left, but some work items failed for good.
    Failed,
    Cancelled,
}

/// The status document of `GET /api/scans/{id}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScanStatus {
    pub id: String,
    pub state: State,
    pub spec: ScanSpec,
    pub progress: Progress,
    pub errors: Vec<StepFailure>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// For count scans that succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<CountResult>,
}

/// Exact progress counts.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    pub partitions: u64,
    pub steps_done: u64,
    pub steps_pending: u64,
    pub steps_failed: u64,
    /// Pending steps whose last attempt failed and that will be tried again.
    pub steps_retrying: u64,
    pub queries: u64,
    pub rows_per_second: f64,
    /// The longest single step, in seconds.
    pub longest_step_seconds: f64,
    /// Work items whose messages were sent again because nobody had touched them for a long
    /// time (a lost message); see `job::redrive`.
    pub steps_redriven: u64,
}

/// A work item that failed for good.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepFailure {
    pub step: String,
    pub error: String,
    pub attempts: u64,
}

/// The answer of a count scan.
#[derive(Debug, Clone, Serialize)]
pub struct CountResult {
    pub rows: u64,
    pub partitions: u64,
}

impl Ledger {
    /// The status of a scan; `None` if there is no such scan.
    pub async fn status(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<ScanStatus>, LedgerError> {
        Ok(self
            .status_and_stranded(id, now, time::Duration::MAX)
            .await?
            .map(|(status, _)| status))
    }

    /// The status of a scan and its work items stranded for `after` (see `job::redrive`), from
    /// one read of its ledger entries: a status is read often, and on a busy ledger a second
    /// read of the whole scan would double its cost.
    pub async fn status_and_stranded(
        &self,
        id: &str,
        now: OffsetDateTime,
        after: time::Duration,
    ) -> Result<Option<(ScanStatus, Vec<Stranded>)>, LedgerError> {
        let Some(record) = self.scan(id).await? else {
            return Ok(None);
        };
        let entries = self.entries(id).await?;
        let stranded = stranded_among(&entries, now, after);
        Ok(Some((status_of(record, &entries, now), stranded)))
    }
}

fn status_of(
    record: ScanRecord,
    entries: &[crate::storage::table::entity::Entity],
    now: OffsetDateTime,
) -> ScanStatus {
    let t = tally(entries);
    let state = if record.cancelled_at.is_some() {
        State::Cancelled
    } else if t.pending > 0 {
        if t.done + t.failed > 0 || record.started_at.is_some() {
            State::Running
        } else {
            State::Pending
        }
    } else if t.failed > 0 {
        State::Failed
    } else {
        State::Succeeded
    };
    let finished = match state {
        State::Cancelled => record.cancelled_at,
        State::Succeeded | State::Failed => t.last_finished.or(Some(now)),
        State::Pending | State::Running => None,
    };
    let began = record.started_at.unwrap_or(record.created_at);
    let seconds = (finished.unwrap_or(now) - began).as_seconds_f64();
    let counts: StepCounts = t.counts;
    let rows_per_second = if seconds > 0.0 {
        (counts.rows_read as f64 / seconds * 10.0).round() / 10.0
    } else {
        0.0
    };
    let result = (state == State::Succeeded && record.spec.action == ActionSpec::Count).then_some(
        CountResult {
            rows: counts.rows_acted,
            partitions: counts.partitions,
        },
    );
    ScanStatus {
        id: record.id,
        state,
        spec: record.spec,
        progress: Progress {
            rows_read: counts.rows_read,
            rows_acted: counts.rows_acted,
            rows_skipped: counts.rows_skipped,
            partitions: counts.partitions,
            steps_done: t.done,
            steps_pending: t.pending,
            steps_failed: t.failed,
            steps_retrying: t.retrying,
            queries: counts.queries,
            rows_per_second,
            longest_step_seconds: counts.duration_ms as f64 / 1000.0,
            steps_redriven: super::redrive::redriven_count(entries),
        },
        errors: t
            .errors
            .into_iter()
            .map(|(step, error, attempts)| StepFailure {
                step,
                error,
                attempts,
            })
            .collect(),
        created_at: format_time(record.created_at),
        started_at: record.started_at.map(format_time),
        finished_at: finished.map(format_time),
        result,
    }
}
