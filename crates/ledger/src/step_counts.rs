//! What a finished step contributes to its scan's progress, as the step reports it: stored in
//! its done row (`rows`) and added to a counter shard by its finish (`ledger::finish`). Below
//! both, so that the row formats need nothing of the ledger's operations.

use serde::Serialize;

/// What a finished step contributes to the scan's progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCounts {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    /// Rows the action could not act on.
    pub rows_failed: u64,
    pub partitions: u64,
    pub queries: u64,
    /// Its storage requests answered "too busy" (see `storage::throttled`).
    pub requests_throttled: u64,
    /// How long the step took (the longest is reported, not the sum).
    pub duration_ms: u64,
}
