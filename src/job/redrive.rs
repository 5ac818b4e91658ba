//! Work items whose queue message was lost (expired, deleted by hand, dropped with a queue) stay
//! pending in the ledger for ever, and their scan would never finish. The ledger knows every
//! pending item and its message, so whoever reads a scan's status notices items that nobody
//! has touched for a while and sends their messages again. A message sent twice is harmless:
//! the second delivery finds the item claimed or done (see `Ledger::begin`).

use time::{Duration, OffsetDateTime};

use super::ledger::{int, is_pending, number, text, Ledger, LedgerError};
use crate::storage::table::batch::IfMatch;
use crate::storage::table::entity::Entity;
use crate::storage::table::WriteMode;

/// Row of the scan partition that counts the messages sent again.
const REDRIVEN_ROW: &str = "redriven";

/// A pending work item that nobody has touched for a while.
#[derive(Debug, Clone, PartialEq)]
pub struct Stranded {
    pub row_key: String,
    /// The work item's queue message.
    pub message: String,
    etag: String,
}

/// The pending items among a scan's ledger entries that are not claimed now and were last
/// written (created, claimed, released or sent again) at least `after` ago.
pub fn stranded_among(entries: &[Entity], now: OffsetDateTime, after: Duration) -> Vec<Stranded> {
    let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as u64;
    entries
        .iter()
        .filter(|e| is_pending(&e.row_key))
        .filter(|e| number(e, "leaseUntil") <= now_ms)
        .filter(|_| after < Duration::MAX)
        .filter(|e| {
            let written = e.timestamp.as_ref().map(|t| t.time());
            let redriven = number(e, "redrivenAt");
            let last_ms = written
                .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as u64)
                .unwrap_or(0)
                .max(redriven);
            now_ms.saturating_sub(last_ms)
                >= after.whole_milliseconds().clamp(0, i128::from(u64::MAX)) as u64
        })
        .filter_map(|e| {
            Some(Stranded {
                row_key: e.row_key.clone(),
                message: text(e, "message")?,
                etag: e.etag.clone()?,
            })
        })
        .collect()
}

impl Ledger {
    /// Records that `item` is being sent again, unless it changed since it was read (claimed,
    /// finished, or sent again by another reader of the status): then `false`, and the caller
    /// leaves it alone.
    pub async fn mark_redriven(
        &self,
        id: &str,
        item: &Stranded,
        now: OffsetDateTime,
    ) -> Result<bool, LedgerError> {
        let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as u64;
        let mark = Entity::new(id, item.row_key.clone()).with("redrivenAt", int(now_ms));
        match self
            .table()
            .update(&mark, WriteMode::Merge, &IfMatch::Etag(item.etag.clone()))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.status(), Some(404) | Some(412)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds `sent` to the count of messages sent again that the status shows: once per
    /// re-drive, not per item. A lost race between two re-drives only undercounts.
    pub async fn count_redriven(&self, id: &str, sent: u64) -> Result<(), LedgerError> {
        if sent == 0 {
            return Ok(());
        }
        let counter = self.table().get_entity(id, REDRIVEN_ROW).await?;
        let count = counter.as_ref().map_or(0, |c| number(c, "count")) + sent;
        let update = Entity::new(id, REDRIVEN_ROW).with("count", int(count));
        let written = match counter.and_then(|c| c.etag) {
            Some(etag) => {
                self.table()
                    .update(&update, WriteMode::Replace, &IfMatch::Etag(etag))
                    .await
            }
            None => self.table().insert(&update).await,
        };
        match written {
            Err(e) if !matches!(e.status(), Some(409) | Some(412)) => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// How many messages were sent again, from a scan's entries.
pub fn redriven_count(entries: &[Entity]) -> u64 {
    entries
        .iter()
        .find(|e| e.row_key == REDRIVEN_ROW)
        .map_or(0, |e| number(e, "count"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::table::entity::{EdmDateTime, Value};

    fn pending(row: &str, written: OffsetDateTime, lease_until_ms: u64) -> Entity {
        let mut e = Entity::new("s", row)
            .with("message", Value::String(format!("m-{row}")))
            .with("leaseUntil", int(lease_until_ms));
        e.timestamp = Some(EdmDateTime::new(written));
        e.etag = Some(format!("W/\"{row}\""));
        e
    }

    #[test]
    fn only_untouched_unclaimed_pending_items_are_stranded() {
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        let ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as u64;
        let long_ago = now - Duration::minutes(20);
        let mut redriven_recently = pending("pending:c", long_ago, 0);
        redriven_recently
            .properties
            .insert("redrivenAt".into(), int(ms(now - Duration::minutes(1))));
        let entries = vec![
            pending("pending:a", long_ago, 0),
            // Written a minute ago: its message may just be waiting in the queue.
            pending("pending:b", now - Duration::minutes(1), 0),
            redriven_recently,
            // Claimed by a running step.
            pending("pending:d", long_ago, ms(now + Duration::seconds(30))),
            // A claim that ran out long ago (the step died) counts as untouched.
            pending("pending:e", long_ago, ms(long_ago + Duration::seconds(60))),
            Entity::new("s", "done:f"),
        ];
        let stranded: Vec<String> = stranded_among(&entries, now, Duration::minutes(15))
            .into_iter()
            .map(|s| s.row_key)
            .collect();
        assert_eq!(stranded, ["pending:a", "pending:e"]);
    }
}
