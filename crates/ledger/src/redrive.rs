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
//!
//! A status read looks at most once per [`LOOK_EVERY`] per scan, however many processes serve
//! reads (the `RedriveScans` sweep looks at every run, every minute): the reader records
//! its turn on the scan row with the etag it read it with, so of the readers that saw the
//! same row one wins and the others skip the look. Nor does any reader look while the scan is
//! younger than the time an item takes to become stranded (its items are younger still).

use time::{Duration, OffsetDateTime};

use super::ledger::{Ledger, LedgerError};
use super::rows::{self, millis, PendingRow, ScanRow, Tallies};
use tablescan_api::answers::ScanStatus;
use tablescan_storage::table::batch::IfMatch;
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::WriteMode;

/// How many pending rows one look judges.
pub const STRANDED_WINDOW: u16 = 200;
/// How often, at most, status reads of one scan take the re-drive look: an item is stranded
/// after 15 minutes untouched by default, so a minute more before it is found costs little,
/// and the look's window (200 entities) is paid once a minute instead of on every poll.
pub const LOOK_EVERY: Duration = Duration::minutes(1);

/// Whether a status read at `now` should try for the scan's turn at the re-drive look: the
/// last turn was at least `every` ago (`looked_at`, none yet) and the scan, created at
/// `created_at`, is old enough for an item untouched for `after` to exist.
pub fn look_due(
    created_at: OffsetDateTime,
    looked_at: Option<OffsetDateTime>,
    now: OffsetDateTime,
    after: Duration,
    every: Duration,
) -> bool {
    now - created_at >= after && looked_at.is_none_or(|at| now - at >= every)
}

/// A pending work item that nobody has touched for a while.
#[derive(Debug, Clone, PartialEq)]
pub struct Stranded {
    pub row_key: String,
    /// The work item's queue message.
    pub message: String,
    /// When it was last touched (ms since the epoch): its message, if it was sent then and
    /// not lost, was put in the queue at about this time.
    pub touched_ms: u64,
    /// Its claim ran out without a finish or a failure recorded: the host that ran it died,
    /// and holds its message out of sight until its visibility timeout (10 minutes).
    pub abandoned: bool,
    etag: String,
}

/// How long after a claim's lease ran out it counts as abandoned: clocks of processes differ
/// a little, and a step renews its claim a third of the way through its lease.
pub const ABANDONED_AFTER_MS: u64 = 5_000;

/// Whether a pending row's claim was abandoned at `now_ms`: claimed, its lease over for
/// [`ABANDONED_AFTER_MS`], and not sent again since (a failed attempt releases its claim with
/// a lease of 0, and is not abandoned).
pub fn is_abandoned(row: &PendingRow, now_ms: u64) -> bool {
    row.lease_until > 0
        && row.lease_until.saturating_add(ABANDONED_AFTER_MS) <= now_ms
        && row.redriven_at < row.lease_until
}

/// Whether a pending row is stranded at `now_ms`: its claim abandoned, or not claimed now and
/// last touched (written or sent again) at least `after_ms` ago.
pub fn is_stranded(row: &PendingRow, now_ms: u64, after_ms: u64) -> bool {
    is_abandoned(row, now_ms)
        || (row.is_free(now_ms) && now_ms.saturating_sub(row.last_touched_ms()) >= after_ms)
}

/// How long a scan in flight may make no progress (no step finished) before its unclaimed
/// items count as stranded after a lease instead of `after`: when a host dies, the
/// messages it had taken but not started are held out of sight with the ones it was running,
/// and nothing in the ledger marks them. A scan with no live claim in its window and no step
/// finished for this long has nobody working on it (a live step renews its claim three times
/// a lease).
pub fn stall_after(lease: Duration) -> Duration {
    lease
}

/// How long scan `status` has made no progress at `now`: since its last step finished, or
/// since it started (or was created) if none has.
pub fn quiet_for(status: &ScanStatus, now: OffsetDateTime) -> Duration {
    let last = status
        .progress
        .last_step_at
        .as_deref()
        .or(status.started_at.as_deref())
        .unwrap_or(&status.created_at);
    tablescan_storage::table::entity::EdmDateTime::parse(last)
        .map(|at| now - at.time())
        .unwrap_or(Duration::ZERO)
}

impl Ledger {
    /// Scan `id`'s pending items stranded for `after` (or for `stalled`, when the scan is
    /// stalled and no claim in the window is live), among one window of its pending rows.
    /// While a resume's rounds are under way from `rounds_from` (see `job::pause`), the rows
    /// after it are theirs, not stranded: a pause longer than `after` leaves every item
    /// untouched for that long, and each would be sent now and again by its round.
    pub async fn stranded(
        &self,
        id: &str,
        now: OffsetDateTime,
        after: Duration,
        stalled: Option<Duration>,
        rounds_from: Option<&str>,
    ) -> Result<Vec<Stranded>, LedgerError> {
        if after.is_negative() {
            return Ok(Vec::new());
        }
        let window = self.pending_window(id, STRANDED_WINDOW, None).await?;
        let now_ms = millis(now);
        // The stall rule needs evidence that nobody works on the scan: no live claim among all
        // of its pending rows (a window of a larger scan may miss the running ones: a
        // throttled scan whose steps keep failing must not be flooded with copies), or a
        // claim abandoned by a host that died.
        let rows: Vec<PendingRow> = window
            .rows
            .iter()
            .filter_map(PendingRow::from_entity)
            .collect();
        let live = rows.iter().any(|row| !row.is_free(now_ms));
        let crashed = rows.iter().any(|row| is_abandoned(row, now_ms));
        let after = match stalled {
            Some(stalled) if crashed || (window.complete && !live) => after.min(stalled),
            _ => after,
        };
        let after_ms = after.whole_milliseconds().clamp(0, i128::from(u64::MAX)) as u64;
        Ok(window
            .rows
            .iter()
            .filter(|e| rounds_from.is_none_or(|from| e.row_key.as_str() <= from))
            .filter_map(|e| {
                let row = PendingRow::from_entity(e)?;
                is_stranded(&row, now_ms, after_ms).then(|| Stranded {
                    row_key: e.row_key.clone(),
                    touched_ms: row.last_touched_ms(),
                    abandoned: is_abandoned(&row, now_ms),
                    message: row.message,
                    etag: row.etag.unwrap_or_default(),
                })
            })
            .collect())
    }

    /// Takes scan `id`'s turn at the status read's re-drive look: records `now` on the scan row
    /// if it is still as read (`scan_etag`). `false` when another reader (or any writer of the
    /// row) came first: this reader skips the look. One request, one entity.
    pub async fn take_look_turn(
        &self,
        id: &str,
        scan_etag: &str,
        now: OffsetDateTime,
    ) -> Result<bool, LedgerError> {
        match self
            .table()
            .update(
                &ScanRow::redrive_looked(id, now),
                WriteMode::Merge,
                &IfMatch::Etag(scan_etag.to_string()),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.reason().is_gone_or_changed() => Ok(false),
            Err(e) => Err(e.into()),
        }
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
    fn the_look_is_due_once_a_minute_and_only_for_scans_old_enough() {
        let created = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        let after = Duration::minutes(15);
        let due = |now: OffsetDateTime, looked: Option<OffsetDateTime>| {
            look_due(created, looked, now, after, LOOK_EVERY)
        };
        assert!(!due(created + Duration::minutes(14), None), "too young");
        let now = created + Duration::minutes(20);
        assert!(due(now, None));
        assert!(!due(now, Some(now - Duration::seconds(1))));
        assert!(!due(now, Some(now - Duration::seconds(59))));
        assert!(due(now, Some(now - Duration::seconds(60))));
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
            // A claim that ran out ten seconds ago, written a minute ago: abandoned by a host
            // that died, stranded at once (its message is held by the dead host for 10
            // minutes). Failed before: not stranded until 15 minutes after its last write.
            (
                pending(
                    now - Duration::minutes(1),
                    ms(now - Duration::seconds(10)),
                    0,
                ),
                true,
            ),
            // ... but not within the few seconds' grace for clocks, nor once sent again.
            (
                pending(
                    now - Duration::minutes(1),
                    ms(now - Duration::seconds(2)),
                    0,
                ),
                false,
            ),
            (
                pending(
                    now - Duration::minutes(1),
                    ms(now - Duration::seconds(30)),
                    ms(now - Duration::seconds(20)),
                ),
                false,
            ),
        ];
        for (n, (row, stranded)) in cases.iter().enumerate() {
            assert_eq!(is_stranded(row, ms(now), after), *stranded, "case {n}");
        }
    }
}
