//! Work items whose queue message was lost (expired, deleted by hand, dropped with a queue, or
//! never written because the host failed after the step) stay pending in the ledger for ever,
//! and their scan would never finish. The ledger knows every pending item and its message, so
//! whoever reads a scan's status looks for items that nobody has touched for a while and sends
//! their messages again (`functions::redrive`, which first checks that the queue is not merely
//! slow). A message sent twice is harmless: the second delivery finds the item claimed or done
//! (see `Ledger::begin`).
//!
//! A look judges one window of pending rows (`job::window`): at most [`STRANDED_WINDOW`]
//! entities scanned, whatever the scan's size (a filter on the last write would make the
//! service scan every pending row). The window is random, so a look sees a sample while many
//! items are pending, and all of them once few are: a stranded item is found at the latest
//! when the scan's other work has drained, which is when it would hold up completion.

use time::{Duration, OffsetDateTime};

use super::ledger::{Ledger, LedgerError};
use super::rows::{self, millis, PendingRow, Tallies};
use crate::storage::table::batch::IfMatch;
use crate::storage::table::entity::Entity;
use crate::storage::table::WriteMode;

/// How many pending rows one look judges.
pub const STRANDED_WINDOW: u16 = 200;

/// A pending work item that nobody has touched for a while.
#[derive(Debug, Clone, PartialEq)]
pub struct Stranded {
    pub row_key: String,
    /// The work item's queue message.
    pub message: String,
    /// When it was last touched (ms since the epoch): its message, if it was sent then and
    /// not lost, was put in the queue at about this time.
    pub touched_ms: u64,
    etag: String,
}

/// Whether a pending row is stranded at `now_ms`: not claimed now, and last touched (written
/// or sent again) at least `after_ms` ago.
pub fn is_stranded(row: &PendingRow, now_ms: u64, after_ms: u64) -> bool {
    row.is_free(now_ms) && now_ms.saturating_sub(row.last_touched_ms()) >= after_ms
}

impl Ledger {
    /// Scan `id`'s pending items stranded for `after`, among one window of its pending rows.
    pub async fn stranded(
        &self,
        id: &str,
        now: OffsetDateTime,
        after: Duration,
    ) -> Result<Vec<Stranded>, LedgerError> {
        if after >= Duration::MAX || after.is_negative() {
            return Ok(Vec::new());
        }
        let window = self.pending_window(id, STRANDED_WINDOW, None).await?;
        let now_ms = millis(now);
        let after_ms = after.whole_milliseconds().clamp(0, i128::from(u64::MAX)) as u64;
        Ok(window
            .rows
            .iter()
            .filter_map(|e| {
                let row = PendingRow::from_entity(e)?;
                is_stranded(&row, now_ms, after_ms).then(|| Stranded {
                    row_key: e.row_key.clone(),
                    touched_ms: row.last_touched_ms(),
                    message: row.message,
                    etag: row.etag.unwrap_or_default(),
                })
            })
            .collect())
    }

    /// Records that `item` is being sent again, unless it changed since it was read (claimed,
    /// finished, or sent again by another reader of the status): then `false`, and the caller
    /// leaves it alone.
    pub async fn mark_redriven(
        &self,
        id: &str,
        item: &Stranded,
        now: OffsetDateTime,
    ) -> Result<bool, LedgerError> {
        let mark = Entity::new(id, item.row_key.clone()).with("redrivenAt", rows::int(millis(now)));
        match self
            .table()
            .update(&mark, WriteMode::Merge, &IfMatch::Etag(item.etag.clone()))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.reason().is_gone_or_changed() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds `sent` to the count of messages sent again that the status shows: once per
    /// re-drive, not per item.
    pub async fn count_redriven(&self, id: &str, sent: u64) -> Result<(), LedgerError> {
        if sent == 0 {
            return Ok(());
        }
        self.add_to_totals(
            id,
            Tallies {
                redriven: sent,
                ..Tallies::default()
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(written: OffsetDateTime, lease_until_ms: u64, redriven_ms: u64) -> PendingRow {
        let mut row = PendingRow::new("m".into(), 0);
        row.written_at = Some(written);
        row.lease_until = lease_until_ms;
        row.redriven_at = redriven_ms;
        row
    }

    #[test]
    fn only_untouched_unclaimed_pending_items_are_stranded() {
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        let ms = millis;
        let after = 15 * 60 * 1000;
        let long_ago = now - Duration::minutes(20);
        let cases = [
            (pending(long_ago, 0, 0), true),
            // Written a minute ago: its message may just be waiting in the queue.
            (pending(now - Duration::minutes(1), 0, 0), false),
            // Sent again a minute ago.
            (pending(long_ago, 0, ms(now - Duration::minutes(1))), false),
            // Claimed by a running step.
            (pending(long_ago, ms(now + Duration::seconds(30)), 0), false),
            // A claim that ran out long ago (the step died) counts as untouched.
            (
                pending(long_ago, ms(long_ago + Duration::seconds(60)), 0),
                true,
            ),
        ];
        for (n, (row, stranded)) in cases.iter().enumerate() {
            assert_eq!(is_stranded(row, ms(now), after), *stranded, "case {n}");
        }
    }
}
