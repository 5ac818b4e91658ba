//! Listing scans page by page and removing what is no longer wanted: a finished scan's ledger
//! rows, and the record of refused queue messages. Removal works in bounded rounds (a deadline
//! per call), so that an HTTP call stays short however large the scan was; the caller calls
//! again while there is more.

use std::time::Instant;

use super::ledger::{
    index_key, Ledger, LedgerError, ScanRecord, INDEX_PARTITION, REJECTED_PARTITION,
};
use super::rows::{self, counter_key, text, SHARDS};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::filter::{Comparison, Filter};
use tablescan_storage::table::query::Query;

/// One page of the scans list, newest first.
#[derive(Debug)]
pub struct ScanPage {
    pub scans: Vec<ScanRecord>,
    /// Where the next page starts (pass it back as `after`); `None` on the last page.
    pub next: Option<String>,
    /// Scans of the page whose record could not be read, with why: left out of `scans`, so
    /// that one damaged scan never hides the others.
    pub unreadable: Vec<Unreadable>,
}

/// A scan the list could not read: the API's type (`unreadableScans`).
pub use tablescan_api::answers::UnreadableScan as Unreadable;

/// How far a bounded removal got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub rows: u64,
    /// Whether rows are left for another call.
    pub more: bool,
}

impl Ledger {
    /// Up to `limit` scans, newest first, starting after the index key `after`.
    pub async fn scans_page(
        &self,
        limit: u16,
        after: Option<&str>,
    ) -> Result<ScanPage, LedgerError> {
        let mut filter = Filter::partition_key(Comparison::Eq, INDEX_PARTITION);
        if let Some(after) = after {
            filter = filter.and(Filter::row_key(Comparison::Gt, after));
        }
        let query = Query::filtered(filter).top(limit.clamp(1, 100));
        let page = match self.table().query_page(&query, None).await {
            Ok(page) => page,
            Err(e) if e.is_not_found() => {
                return Ok(ScanPage {
                    scans: Vec::new(),
                    next: None,
                    unreadable: Vec::new(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let full = page.entities.len() == usize::from(limit.clamp(1, 100));
        let next = if full {
            page.entities.last().map(|e| e.row_key.clone())
        } else {
            None
        };
        let mut scans = Vec::new();
        let mut unreadable = Vec::new();
        for entry in &page.entities {
            let Some(id) = text(entry, "scan") else {
                continue;
            };
            match self.scan(&id).await {
                Ok(Some(record)) => scans.push(record),
                // Removed, or written by an earlier ledger format: not listed.
                Ok(None) | Err(LedgerError::OldFormat(..)) => {}
                Err(e) => unreadable.push(Unreadable {
                    id,
                    error: e.to_string(),
                }),
            }
        }
        Ok(ScanPage {
            scans,
            next,
            unreadable,
        })
    }

    /// Deletes rows of scan `id`'s partition until `deadline`, and its `scan` row and counter
    /// shards last, in one transaction (after the scan's index and in-flight entries), so that
    /// a scan half removed still reads whole (its status, the list) and its removal is
    /// finished by calling again. The caller checks that the scan is finished.
    pub async fn remove_scan(
        &self,
        record: &ScanRecord,
        deadline: Instant,
    ) -> Result<Removed, LedgerError> {
        let id = record.id.as_str();
        let (counters_from, counters_to) = rows::counter_range();
        let kept_last = Filter::row_key(Comparison::Lt, &counters_from).or(Filter::row_key(
            Comparison::Ge,
            &counters_to,
        )
        .and(Filter::row_key(Comparison::Ne, rows::SCAN_ROW)));
        let everything_else = Filter::partition_key(Comparison::Eq, id).and(kept_last);
        let removed = self.remove_where(id, everything_else, deadline).await?;
        if removed.more {
            return Ok(removed);
        }
        for (partition, row) in [
            (
                INDEX_PARTITION.to_string(),
                index_key(id, record.created_at),
            ),
            (super::ledger::ACTIVE_PARTITION.to_string(), id.to_string()),
        ] {
            match self.table().delete(&partition, &row, &IfMatch::Any).await {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
        let last: Vec<String> = (0..SHARDS)
            .map(counter_key)
            .chain([rows::SCAN_ROW.to_string()])
            .collect();
        let deletes: Vec<Operation> = last
            .iter()
            .map(|row| Operation::Delete {
                partition_key: id.to_string(),
                row_key: row.clone(),
                if_match: IfMatch::Any,
            })
            .collect();
        match self.table().submit_transaction(&deletes).await {
            Ok(_) => {}
            // Some of them are gone already (a scan half removed by an earlier version, which
            // deleted the shards first): the rest one by one.
            Err(e) if e.is_not_found() => {
                for row in &last {
                    match self.table().delete(id, row, &IfMatch::Any).await {
                        Err(e) if !e.is_not_found() => return Err(e.into()),
                        _ => {}
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Removed {
            rows: removed.rows + last.len() as u64,
            more: false,
        })
    }

    /// Deletes the records of refused queue messages until `deadline`.
    pub async fn clear_rejected(&self, deadline: Instant) -> Result<Removed, LedgerError> {
        let filter = Filter::partition_key(Comparison::Eq, REJECTED_PARTITION);
        self.remove_where(REJECTED_PARTITION, filter, deadline)
            .await
    }

    /// Deletes the rows of `partition` that `filter` selects, a page at a time in transactions
    /// of 100, until none is left or `deadline` passes (after one transaction at least, so
    /// that every call makes progress).
    async fn remove_where(
        &self,
        partition: &str,
        filter: Filter,
        deadline: Instant,
    ) -> Result<Removed, LedgerError> {
        let query = Query::filtered(filter).select(["RowKey"]).top(1000);
        let mut rows = 0;
        loop {
            if rows > 0 && Instant::now() >= deadline {
                return Ok(Removed { rows, more: true });
            }
            let page = match self.table().query_page(&query, None).await {
                Ok(page) => page,
                Err(e) if e.is_not_found() => return Ok(Removed { rows, more: false }),
                Err(e) => return Err(e.into()),
            };
            if page.entities.is_empty() && page.continuation.is_none() {
                return Ok(Removed { rows, more: false });
            }
            for chunk in page.entities.chunks(100) {
                let deletes: Vec<Operation> = chunk
                    .iter()
                    .map(|e| Operation::Delete {
                        partition_key: partition.to_string(),
                        row_key: e.row_key.clone(),
                        if_match: IfMatch::Any,
                    })
                    .collect();
                match self.table().submit_transaction(&deletes).await {
                    Ok(_) => rows += chunk.len() as u64,
                    // Some row went meanwhile: the next page reads what is left.
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
                if Instant::now() >= deadline {
                    return Ok(Removed { rows, more: true });
                }
            }
        }
    }
}
