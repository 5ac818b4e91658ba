//! Pausing a scan and resuming it where it stopped.
//!
//! A pause is a mark on the scan row (`pausedAt`). Steps running then stop at their next page
//! as a step whose time is up does: they finish the first row of the page, record what they
//! did, and leave the rest of their range as a pending child (`functions::step`), so the
//! counts stay exact. A delivery of a paused scan's item claims nothing and drops its message
//! (`Begin::Paused`): the item stays pending in the ledger, with its message, for the resume.
//! Nothing else changes: no row is deleted, and a cancel still ends a paused scan.
//!
//! A resume (`resumedAt`, later than the pause) sends the message of every pending item that
//! no step holds, in rounds of at most [`RESUME_ROWS_PER_ROUND`] pending rows in key order.
//! Where a round stopped is kept on the scan row (`resumeFrom`), so that the next round, from
//! the next resume call or from the re-drive sweep, goes on from there even if the caller went
//! away; only while the row still holds the resume the round started in, at the place it
//! started from (a round overtaken by a pause and a new resume writes nothing). Each item sent is first marked sent again (`redrivenAt`), in transactions of up to 100
//! rows, each conditional on the row as read: an item claimed, finished or sent by another
//! round meanwhile is left alone, and the re-drive does not count a freshly sent item as
//! stranded. A message sent twice is harmless (the second delivery finds its item claimed or
//! done).

use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError, ScanRecord};
use super::rows::{self, millis, PendingRow, ScanRow};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::filter::{Comparison, Filter};
use tablescan_storage::table::query::Query;
use tablescan_storage::table::WriteMode;
use tablescan_storage::ErrorKind;

/// How many pending rows one round of a resume looks at: a page of the ledger, ten
/// transactions of marks, and at most as many messages in one answer.
pub const RESUME_ROWS_PER_ROUND: u16 = 500;
/// Pending rows marked in one transaction (the service takes 100 operations).
const MARKS_PER_TRANSACTION: usize = 100;
/// How many times a scan-row write is tried again after another write changed the row first.
const ROW_RACES: u32 = 5;

/// What one round of a resume did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResumeRound {
    /// The messages of the items it marked sent again, to send now.
    pub messages: Vec<String>,
    /// Whether pending rows are left for another round.
    pub more: bool,
}

impl Ledger {
    /// Whether paused scan `record`'s pause is recent enough at `now` for a step that was
    /// running then to be running still (see [`Ledger::steps_stop_within`]).
    pub(crate) fn steps_may_run(&self, record: &ScanRecord, now: OffsetDateTime) -> bool {
        record
            .paused_at
            .is_some_and(|paused| now < paused + self.steps_stop_within())
    }

    /// Whether a step of paused scan `record` may still be running at `now` (what keeps it
    /// `pausing`): a live claim in the claims window, or, when the scan has more pending items
    /// than the window holds (so a running step's claim may be outside it), a pause younger
    /// than [`Ledger::steps_stop_within`]. Unlike a cancel's, a pause's pending rows stay: the
    /// window being short of them all says nothing about steps still running. One request of
    /// at most `job::activity::CLAIMS_WINDOW` entities.
    pub(crate) async fn any_stopping(
        &self,
        record: &ScanRecord,
        now: OffsetDateTime,
    ) -> Result<bool, LedgerError> {
        let now_ms = millis(now);
        let window = self
            .first_pending(&record.id, super::activity::CLAIMS_WINDOW, &["leaseUntil"])
            .await?;
        if window
            .rows
            .iter()
            .any(|row| rows::number(row, "leaseUntil") > now_ms)
        {
            return Ok(true);
        }
        Ok(!window.complete && self.steps_may_run(record, now))
    }

    /// Pauses scan `id` (`None` if there is no such scan). Pausing a paused scan changes
    /// nothing; the caller refuses scans that ended. The pause is written later than the last
    /// resume, whatever the clocks of the processes that wrote them say.
    pub async fn pause(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<ScanRecord>, LedgerError> {
        self.write_scan_row(id, |record| {
            if record.is_paused() || record.cancelled_at.is_some() {
                return None;
            }
            let at = later_than(now, record.resumed_at);
            record.paused_at = Some(at);
            Some(ScanRow::paused(&record.id, at))
        })
        .await
        .map(|written| written.map(|(record, _)| record))
    }

    /// Resumes paused scan `id`: records the resume and that its items' messages are to be
    /// sent from the first pending row (see [`Ledger::resume_round`]). A scan that is not
    /// paused is returned as it is.
    pub async fn resume(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<ScanRecord>, LedgerError> {
        let written = self
            .write_scan_row(id, |record| {
                if !record.is_paused() {
                    return None;
                }
                let at = later_than(now, record.paused_at);
                record.resumed_at = Some(at);
                record.resume_from = Some(rows::pending_range().0);
                Some(ScanRow::resumed(&record.id, at))
            })
            .await?;
        if let Some((_, true)) = written {
            // Keeps the scan in the sweep's list, which goes on with the rounds.
            self.list_active(id).await?;
        }
        Ok(written.map(|(record, _)| record))
    }

    /// Reads the scan row, lets `change` decide the merge to write (none: nothing to do), and
    /// writes it conditional on the row as read, reading again if another write came first.
    /// The record as changed, and whether anything was written.
    async fn write_scan_row(
        &self,
        id: &str,
        change: impl Fn(&mut ScanRecord) -> Option<Entity>,
    ) -> Result<Option<(ScanRecord, bool)>, LedgerError> {
        for _ in 0..ROW_RACES {
            let Some((mut record, etag)) = self.scan_and_etag(id).await? else {
                return Ok(None);
            };
            let Some(merge) = change(&mut record) else {
                return Ok(Some((record, false)));
            };
            match self
                .table()
                .update(&merge, WriteMode::Merge, &IfMatch::Etag(etag))
                .await
            {
                Ok(_) => return Ok(Some((record, true))),
                Err(e) if e.reason().is_gone_or_changed() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LedgerError::Corrupt(
            format!("scan {id}"),
            "its row kept changing while it was paused or resumed; try again".into(),
        ))
    }

    /// One round of resumed scan `id`: marks up to `limit` (at most 1,000; the API's rounds
    /// take [`RESUME_ROWS_PER_ROUND`]) of its pending rows that no step holds as sent again, from where the last round stopped, records where
    /// this one stopped, and returns their messages. Nothing when the scan is paused again,
    /// cancelled, or has no round left.
    pub async fn resume_round(
        &self,
        id: &str,
        now: OffsetDateTime,
        limit: u16,
    ) -> Result<ResumeRound, LedgerError> {
        let limit = limit.clamp(1, 1000);
        let Some((record, etag)) = self.scan_and_etag(id).await? else {
            return Ok(ResumeRound::default());
        };
        let Some(from) = record.resume_from.clone() else {
            return Ok(ResumeRound::default());
        };
        if record.is_paused() || record.cancelled_at.is_some() {
            return Ok(ResumeRound::default());
        }
        let (_, high) = rows::pending_range();
        let filter = Filter::partition_key(Comparison::Eq, id)
            .and(Filter::row_key(Comparison::Gt, &from))
            .and(Filter::row_key(Comparison::Lt, &high));
        let mut rows_looked = Vec::new();
        let mut continuation = None;
        loop {
            let top = limit - rows_looked.len() as u16;
            let page = self
                .table()
                .query_page(
                    &Query::filtered(filter.clone()).top(top),
                    continuation.as_ref(),
                )
                .await?;
            rows_looked.extend(page.entities);
            continuation = page.continuation;
            if continuation.is_none() || rows_looked.len() >= usize::from(limit) {
                break;
            }
        }
        let more = continuation.is_some();
        let now_ms = millis(now);
        let free: Vec<(Entity, String)> = rows_looked
            .iter()
            .filter_map(|entity| {
                let row = PendingRow::from_entity(entity)?;
                row.is_free(now_ms)
                    .then(|| (entity.clone(), row.message.clone()))
            })
            .collect();
        let mut messages = Vec::new();
        for chunk in free.chunks(MARKS_PER_TRANSACTION) {
            messages.extend(self.mark_sent(id, chunk, now_ms).await?);
        }
        let reached = match (more, rows_looked.last()) {
            (true, Some(last)) => Some(last.row_key.as_str()),
            _ => None,
        };
        let more = match self.write_reached(&record, etag, &from, reached).await {
            Ok(()) => more,
            // The items are marked sent: their messages go out all the same. The next round
            // goes on from where this one stopped if the write applied (its answer lost), or
            // sends them again if it did not.
            Err(e) if !messages.is_empty() => {
                tracing::warn!(
                    scan = id,
                    "a resume round could not record where it stopped: {e}"
                );
                true
            }
            Err(e) => return Err(e),
        };
        Ok(ResumeRound { messages, more })
    }

    /// Records that the round of `record`'s resume that started at `from` reached `reached`,
    /// only while the scan row still holds that resume at `from`: conditional on the row as
    /// read (`etag`), and, when another write came first, on the row read again. A round
    /// overtaken by a pause and a new resume (which sent the rounds back to the first pending
    /// row), or by another round of the same resume that went on from `from`, writes nothing:
    /// its write would send the new rounds past items whose messages nobody sent since.
    async fn write_reached(
        &self,
        record: &ScanRecord,
        mut etag: String,
        from: &str,
        reached: Option<&str>,
    ) -> Result<(), LedgerError> {
        let merge = ScanRow::resume_reached(&record.id, reached);
        for _ in 0..ROW_RACES {
            match self
                .table()
                .update(&merge, WriteMode::Merge, &IfMatch::Etag(etag))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.reason().is_gone_or_changed() => {}
                Err(e) => return Err(e.into()),
            }
            let Some((now, now_etag)) = self.scan_and_etag(&record.id).await? else {
                return Ok(());
            };
            let same_round = now.resumed_at == record.resumed_at
                && now.resume_from.as_deref() == Some(from)
                && !now.is_paused()
                && now.cancelled_at.is_none();
            if !same_round {
                // Moved on by another round or a new resume (or this very write, applied with
                // its answer lost), paused or cancelled since.
                return Ok(());
            }
            etag = now_etag;
        }
        Err(LedgerError::Corrupt(
            format!("scan {}", record.id),
            "its row kept changing while a resume round wrote where it stopped; try again".into(),
        ))
    }

    /// Marks `rows` sent again at `now_ms` in one transaction, each conditional on the row as
    /// read; a row that changed meanwhile (claimed, finished, sent by another round) is left
    /// out and the rest tried again. The messages of the rows marked.
    async fn mark_sent(
        &self,
        id: &str,
        rows: &[(Entity, String)],
        now_ms: u64,
    ) -> Result<Vec<String>, LedgerError> {
        let mut left: Vec<&(Entity, String)> = rows.iter().collect();
        while !left.is_empty() {
            let operations: Vec<Operation> = left
                .iter()
                .map(|(entity, _)| {
                    let mark = Entity::new(id, entity.row_key.clone())
                        .with("redrivenAt", rows::int(now_ms));
                    Operation::Merge(mark, IfMatch::Etag(entity.etag.clone().unwrap_or_default()))
                })
                .collect();
            match self.table().submit_transaction(&operations).await {
                Ok(_) => break,
                Err(e) => match e.kind() {
                    ErrorKind::Batch { index, error }
                        if *index < left.len() && error.reason().is_gone_or_changed() =>
                    {
                        // The whole transaction applied with its answer lost (a retry met
                        // its own marks): every row is marked.
                        let row_key = &left[*index].0.row_key;
                        let now = self.table().get_entity(id, row_key).await?;
                        let ours = now
                            .as_ref()
                            .and_then(PendingRow::from_entity)
                            .is_some_and(|row| row.redriven_at == now_ms);
                        if ours {
                            break;
                        }
                        left.remove(*index);
                    }
                    _ => return Err(e.into()),
                },
            }
        }
        Ok(left.iter().map(|(_, message)| message.clone()).collect())
    }
}

/// `now`, or a millisecond after `other` when that is later: a pause and a resume written by
/// processes whose clocks differ still come in the order they were made.
fn later_than(now: OffsetDateTime, other: Option<OffsetDateTime>) -> OffsetDateTime {
    match other {
        Some(other) if other >= now => other + time::Duration::milliseconds(1),
        _ => now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn a_scan_is_paused_while_its_pause_is_later_than_its_resume() {
        assert!(!rows::is_paused(None, None));
        assert!(rows::is_paused(Some(at(1)), None));
        assert!(!rows::is_paused(Some(at(1)), Some(at(2))));
        assert!(rows::is_paused(Some(at(3)), Some(at(2))));
        assert!(!rows::is_paused(None, Some(at(2))));
    }

    #[test]
    fn a_pause_or_resume_comes_after_the_other_whatever_the_clock_says() {
        assert_eq!(later_than(at(5), None), at(5));
        assert_eq!(later_than(at(5), Some(at(4))), at(5));
        assert_eq!(
            later_than(at(5), Some(at(7))),
            at(7) + time::Duration::milliseconds(1)
        );
        assert_eq!(
            later_than(at(5), Some(at(5))),
            at(5) + time::Duration::milliseconds(1)
        );
    }
}
