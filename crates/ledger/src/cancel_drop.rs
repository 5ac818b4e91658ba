//! Dropping the pending items of a cancelled scan that no step holds.
//!
//! A cancelled scan's items are dropped as their messages arrive (`Ledger::begin`). An item
//! whose message is gone (lost, expired, or never sent because the host died after the step)
//! would stay pending for ever: a cancelled scan is never re-driven, and more pending rows than
//! the status's claims window holds read as `cancelling`, so the scan could never end, nor be
//! removed. The re-drive sweep therefore drops them itself (`functions::redrive`): every
//! pending row of the scan that no step holds (a claim that lapsed counts as none), counted as
//! dropped exactly as a delivery would, a bounded number per sweep. A row under a live claim is
//! left to its step, which records what it did; a message that arrives after its row was
//! dropped finds the scan cancelled and does nothing.

use std::time::Instant;

use time::OffsetDateTime;

use super::ledger::{Ahead, Ledger, LedgerError};
use super::rows::{self, millis, number, text, Tallies};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::query::{Continuation, Query};
use tablescan_storage::ErrorKind;

/// How many pending rows of one cancelled scan a sweep looks at, at most: ten transactions of
/// drops, a few seconds; a scan with more waits for the next sweep.
pub const DROP_LOOKS_PER_SWEEP: usize = 1000;
/// Pending rows read (and dropped, in one transaction with the counter shard) at a time.
const DROP_PAGE: u16 = 99;

/// What one call of [`Ledger::drop_unclaimed`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Items dropped (and counted as dropped).
    pub dropped: u64,
    /// Pending rows seen and left: held by a live claim, or written ahead of a parent that
    /// is still pending.
    pub left: u64,
    /// Whether every pending row of the scan was looked at (none beyond the bound or the
    /// deadline).
    pub complete: bool,
}

impl Ledger {
    /// Drops the pending items of cancelled scan `id` that no step holds at `now`: looks at up
    /// to `limit` pending rows, and starts no request after `deadline` (one page at least).
    /// The caller checks that the scan is cancelled.
    pub async fn drop_unclaimed(
        &self,
        id: &str,
        now: OffsetDateTime,
        limit: usize,
        deadline: Instant,
    ) -> Result<Dropped, LedgerError> {
        let now_ms = millis(now);
        let mut done = Dropped::default();
        let mut looked = 0;
        let mut from: Option<Continuation> = None;
        loop {
            let top = limit
                .saturating_sub(looked)
                .clamp(1, usize::from(DROP_PAGE)) as u16;
            let query = Query::filtered(rows::rows_of(id, rows::pending_range()))
                .select(["leaseUntil", "parent"])
                .top(top);
            let page = self.table().query_page(&query, from.as_ref()).await?;
            looked += page.entities.len();
            let mut drops = Vec::new();
            for row in &page.entities {
                let etag = row.etag.clone().unwrap_or_default();
                if number(row, "leaseUntil") > now_ms {
                    done.left += 1;
                    continue;
                }
                if let Some(parent) = text(row, "parent") {
                    let Some(item) = rows::item_of(&row.row_key) else {
                        continue;
                    };
                    match self.written_ahead(id, &parent, item).await? {
                        Ahead::Counted => {}
                        Ahead::ParentRunning => {
                            done.left += 1;
                            continue;
                        }
                        // Never counted: deleted without a count, as a delivery does.
                        Ahead::Orphan => {
                            self.delete_quietly(id, &row.row_key, &etag).await?;
                            continue;
                        }
                    }
                }
                drops.push((row.row_key.clone(), etag));
            }
            done.dropped += self.drop_counted(id, drops).await?;
            from = page.continuation;
            if from.is_none() {
                done.complete = true;
                return Ok(done);
            }
            if looked >= limit || Instant::now() >= deadline {
                return Ok(done);
            }
        }
    }

    /// Deletes the pending rows `drops` (row key, etag as read) in one transaction that counts
    /// them as dropped; a row claimed or dropped since it was read is left out and the rest
    /// tried again. How many were dropped.
    async fn drop_counted(
        &self,
        id: &str,
        mut drops: Vec<(String, String)>,
    ) -> Result<u64, LedgerError> {
        while let Some((first, _)) = drops.first() {
            let first = first.clone();
            let operations = drops
                .iter()
                .map(|(row, etag)| Operation::Delete {
                    partition_key: id.to_string(),
                    row_key: row.clone(),
                    if_match: IfMatch::Etag(etag.clone()),
                })
                .collect();
            let delta = Tallies {
                dropped: drops.len() as u64,
                ..Tallies::default()
            };
            match self.commit_counted(id, &first, operations, delta).await {
                Ok(()) => return Ok(drops.len() as u64),
                Err(LedgerError::Storage(e)) => match e.kind() {
                    ErrorKind::Batch { index, error }
                        if *index < drops.len() && error.reason().is_gone_or_changed() =>
                    {
                        drops.remove(*index);
                    }
                    _ => return Err(LedgerError::Storage(e)),
                },
                Err(e) => return Err(e),
            }
        }
        Ok(0)
    }
}
