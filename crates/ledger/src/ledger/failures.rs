//! A failed attempt: the item released for another (its cause kept for the status) or failed
//! for good, and the retry that makes items failed for good pending again.

use time::OffsetDateTime;

use super::{Claim, Ledger, LedgerError};
use crate::rows::{self, millis, pending_key, FailedRow, PendingRow, Tallies};
use crate::work_item::WorkItem;
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::{Entity, Value};
use tablescan_storage::table::query::Query;
use tablescan_storage::ErrorKind;

/// How a failed attempt is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureRecord {
    /// The item stays pending for another attempt; `failing_since` (ms since the epoch) is when
    /// its current run of transient failures began, `None` if this failure is not transient.
    Retry { failing_since: Option<u64> },
    /// The item is failed for good; the scan will end failed.
    Final,
}

impl Ledger {
    /// Records a failed attempt: the cause for the status and the lease released, or, when
    /// `record` is final, the item failed for good; `throttled` is how many of the attempt's
    /// storage requests were answered "too busy".
    pub async fn fail(
        &self,
        item: &WorkItem,
        claim: &Claim,
        error: &str,
        record: FailureRecord,
        throttled: u64,
        now: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let mut claim = claim.clone();
        // Once more if the row changed under a claim still this delivery's (its own renewal
        // applied with its answer lost, or a re-drive's mark).
        for _ in 0..2 {
            match self
                .try_fail(item, &claim, error, record, throttled, now)
                .await
            {
                Err(LedgerError::Storage(e))
                    if matches!(e.kind(), ErrorKind::Batch { index: 0, error }
                        if error.reason().is_gone_or_changed()) =>
                {
                    match self
                        .own_pending(&item.scan, &item.id(), &claim.token)
                        .await?
                    {
                        Some(etag) => claim.etag = etag,
                        // The claim was lost (another delivery owns the item now), or this
                        // very write applied and its answer was lost: nothing more to do.
                        None => return Ok(()),
                    }
                }
                other => return other,
            }
        }
        Ok(())
    }

    /// One try of [`Ledger::fail`].
    async fn try_fail(
        &self,
        item: &WorkItem,
        claim: &Claim,
        error: &str,
        record: FailureRecord,
        throttled: u64,
        now: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let id = item.id();
        let error: String = error.chars().take(2000).collect();
        let (operations, delta) = match record {
            FailureRecord::Final => {
                let failed = FailedRow {
                    error,
                    attempts: u64::from(claim.attempt),
                    // As first sent: a retry starts the item's give-backs afresh.
                    message: item.as_first_sent().encode(),
                    finished_at: now,
                };
                let operations = vec![
                    Operation::Delete {
                        partition_key: item.scan.clone(),
                        row_key: pending_key(&id),
                        if_match: IfMatch::Etag(claim.etag.clone()),
                    },
                    Operation::Insert(failed.to_entity(&item.scan, &id)),
                ];
                let delta = Tallies {
                    failed: 1,
                    throttled,
                    last_finished_ms: millis(now),
                    ..Tallies::default()
                };
                (operations, delta)
            }
            FailureRecord::Retry { failing_since } => {
                // The mark cleared too: a retry of this write whose first try applied (its
                // answer lost) then finds the claim no longer this delivery's, and the
                // attempt is not counted twice.
                let released = Entity::new(item.scan.clone(), pending_key(&id))
                    .with("leaseUntil", rows::int(0))
                    .with("claimedBy", Value::String(String::new()))
                    .with("lastError", Value::String(error))
                    .with("failingSince", rows::int(failing_since.unwrap_or(0)));
                let operations = vec![Operation::Merge(
                    released,
                    IfMatch::Etag(claim.etag.clone()),
                )];
                let delta = Tallies {
                    attempts_failed: 1,
                    throttled,
                    ..Tallies::default()
                };
                (operations, delta)
            }
        };
        self.commit_counted(&item.scan, &id, operations, delta)
            .await
    }

    /// Makes up to `limit` of a scan's failed items pending again, each in one transaction
    /// (its failed row deleted, a fresh pending row, `retried` counted), and returns their
    /// messages to send. The scan is listed in flight again so that the re-drive looks after
    /// it: before, and after its items are pending, so that a sweep that read the scan settled
    /// before then cannot take it off the list (`Ledger::settle` is conditional on the entry
    /// as read). Counts stay exact: a failed item never counted rows, and runs once more from
    /// scratch.
    pub async fn retry_failed(&self, scan: &str, limit: u16) -> Result<Vec<String>, LedgerError> {
        self.list_active(scan).await?;
        let query =
            Query::filtered(rows::rows_of(scan, rows::failed_range())).top(limit.clamp(1, 1000));
        let page = self.table.query_page(&query, None).await?;
        let mut messages = Vec::new();
        for entity in &page.entities {
            let Some((item, failed)) = FailedRow::from_entity(entity) else {
                continue;
            };
            let Ok(work) = WorkItem::decode(&failed.message) else {
                return Err(LedgerError::Corrupt(
                    entity.row_key.clone(),
                    "its message is not a work item".into(),
                ));
            };
            let operations = vec![
                Operation::Delete {
                    partition_key: scan.to_string(),
                    row_key: entity.row_key.clone(),
                    if_match: IfMatch::Etag(entity.etag.clone().unwrap_or_default()),
                },
                Operation::Insert(
                    PendingRow::new(failed.message.clone(), u64::from(work.depth))
                        .to_entity(scan, &item),
                ),
            ];
            let delta = Tallies {
                retried: 1,
                ..Tallies::default()
            };
            match self.commit_counted(scan, &item, operations, delta).await {
                Ok(()) => messages.push(failed.message),
                // Retried by a concurrent call meanwhile.
                Err(LedgerError::Storage(e))
                    if matches!(e.kind(), ErrorKind::Batch { index: 0 | 1, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if !messages.is_empty() {
            self.list_active(scan).await?;
        }
        Ok(messages)
    }

    /// Up to `limit` of a scan's items that failed for good.
    pub(crate) async fn failures(
        &self,
        scan: &str,
        limit: u16,
    ) -> Result<Vec<(String, FailedRow)>, LedgerError> {
        let query =
            Query::filtered(rows::rows_of(scan, rows::failed_range())).top(limit.clamp(1, 1000));
        let page = self.table.query_page(&query, None).await?;
        Ok(page
            .entities
            .iter()
            .filter_map(FailedRow::from_entity)
            .collect())
    }
}
