//! Parked work items: messages of a paced scan's items that found no room again and again, kept
//! in the scan's partition instead of the queue (whose length, visible or not, makes the
//! platform add instances). See `tablescan_handler::pacing::park` for when.
//!
//! A parked row is `parked:<ms since the epoch, 20 digits>:<item id>`, holding the item's
//! message as first sent (the queues' format: any handler version reads it). The keys sort by
//! time, so one range query with `$top` reads the oldest, at a cost of what it returns.
//!
//! - [`Ledger::park`] writes the row and touches the item's pending row (`redrivenAt`) in one
//!   transaction: the re-drive's look then sees the item as just sent, not as stranded, while
//!   its message is parked (a parked row lives about a minute at most, the look waits 15).
//! - [`Ledger::unpark`] reads the oldest rows and deletes them in one transaction, each on its
//!   etag: if another unparker took one first, the whole transaction fails and this one sends
//!   nothing (delete, then send: a message is never sent by two unparkers). If the sender then
//!   fails to send, the item's pending row stays, and the re-drive's look sends it again.

use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError};
use super::rows::{self, int, millis, pending_key, text};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::{Entity, Value};
use tablescan_storage::table::query::Query;
use tablescan_storage::{ErrorKind, Reason};

const PARKED: &str = "parked:";

/// The most rows one [`Ledger::unpark`] takes: a transaction holds 100 operations.
pub const UNPARK_PAGE: u16 = 99;

/// The row key of item `item` parked at `at_ms`.
pub fn parked_key(at_ms: u64, item: &str) -> String {
    format!("{PARKED}{at_ms:020}:{item}")
}

/// The key range of the parked rows.
pub fn parked_range() -> (String, String) {
    rows::key_range(PARKED)
}

/// When the row keyed `key` was parked, from its key (`parked_key`).
fn parked_at_ms(key: &str) -> Option<u64> {
    key.strip_prefix(PARKED)?.get(..20)?.parse().ok()
}

/// The parked rows put before `at_ms`: from the first to the first key of that millisecond.
fn parked_before(at_ms: u64) -> (String, String) {
    (PARKED.to_string(), parked_key(at_ms, ""))
}

impl Ledger {
    /// Parks the message `message` of scan `scan`'s item `item` at `now`: `true` once its row is
    /// written; `false` if the item is no longer pending (finished, dropped, or the scan
    /// removed): the caller gives it back to the queue as before, whose delivery finds out
    /// what to do. One transaction of two entities.
    pub async fn park(
        &self,
        scan: &str,
        item: &str,
        message: &str,
        now: OffsetDateTime,
    ) -> Result<bool, LedgerError> {
        let now_ms = millis(now);
        let row = Entity::new(scan, parked_key(now_ms, item))
            .with("message", Value::String(message.to_string()));
        let touch = Entity::new(scan, pending_key(item)).with("redrivenAt", int(now_ms));
        let operations = vec![
            Operation::Insert(row),
            Operation::Merge(touch, IfMatch::Any),
        ];
        match self.table().submit_transaction(&operations).await {
            Ok(_) => Ok(true),
            Err(e) => match e.kind() {
                // The pending row is gone; or a row of the same millisecond and item exists
                // (the same message parked twice: one is enough).
                ErrorKind::Batch { index: 1, error } if error.reason().is_gone_or_changed() => {
                    Ok(false)
                }
                ErrorKind::Batch { index: 0, error } if error.reason() == Reason::AlreadyExists => {
                    Ok(true)
                }
                _ => Err(e.into()),
            },
        }
    }

    /// When scan `scan`'s oldest parked item was parked (milliseconds since the epoch, from its
    /// key), `None` if none is: what a status read shows of parking. One query of `$top=1`
    /// selecting the key alone: one request, at most one entity.
    pub async fn oldest_parked_ms(&self, scan: &str) -> Result<Option<u64>, LedgerError> {
        let query = Query::filtered(rows::rows_of(scan, parked_range()))
            .select(["RowKey"])
            .top(1);
        let page = self.table().query_page(&query, None).await?;
        Ok(page
            .entities
            .first()
            .and_then(|row| parked_at_ms(&row.row_key)))
    }

    /// Takes up to `top` of scan `scan`'s oldest parked rows (only those parked before `before`,
    /// if given): their messages, to send now. Empty when none is parked or another unparker
    /// took one of them first. One query (what it returns, or one request if nothing), then one
    /// transaction of the deletes.
    pub async fn unpark(
        &self,
        scan: &str,
        top: u16,
        before: Option<OffsetDateTime>,
    ) -> Result<Vec<String>, LedgerError> {
        let range = match before {
            Some(before) => parked_before(millis(before)),
            None => parked_range(),
        };
        let query = Query::filtered(rows::rows_of(scan, range))
            .select(["message"])
            .top(top.clamp(1, UNPARK_PAGE));
        let page = self.table().query_page(&query, None).await?;
        if page.entities.is_empty() {
            return Ok(Vec::new());
        }
        let operations: Vec<Operation> = page
            .entities
            .iter()
            .map(|row| Operation::Delete {
                partition_key: scan.to_string(),
                row_key: row.row_key.clone(),
                if_match: IfMatch::Etag(row.etag.clone().unwrap_or_default()),
            })
            .collect();
        match self.table().submit_transaction(&operations).await {
            Ok(_) => Ok(page
                .entities
                .iter()
                .filter_map(|row| text(row, "message"))
                .collect()),
            Err(e) => match e.kind() {
                // Another unparker (or the sweep) took one of them first: the transaction
                // deleted nothing, so this call sends nothing; the rows the other did not take
                // stay parked for the next look.
                ErrorKind::Batch { error, .. } if error.reason().is_gone_or_changed() => {
                    Ok(Vec::new())
                }
                _ => Err(e.into()),
            },
        }
    }
}

#[cfg(test)]
mod tests;
