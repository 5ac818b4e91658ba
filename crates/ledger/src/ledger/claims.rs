//! Claims: whether a delivered work item should run (or is done, dropped, paused, held by
//! another delivery...), and the lease on its pending row while it does, by etag and marked
//! with the claim's own token, so that a duplicate delivery backs off instead of acting twice.

use time::OffsetDateTime;

use super::{Ledger, LedgerError, ScanRecord};
use crate::rows::{
    self, done_key, failed_key, millis, pending_key, DoneRow, PendingRow, ScanRow, Tallies,
};
use crate::work_item::WorkItem;
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::WriteMode;
use tablescan_storage::ErrorKind;

/// How long a step's claim on its work item lasts unless the app sets another
/// (`TABLESCAN_STEP_LEASE_SECONDS`, the handler's `Config::lease`); a running step renews it
/// every third of it (`functions::step::run::run_claimed`). Here, beside [`Ledger::renew`], so
/// that what renewals cost the ledger can be measured apart from the handler
/// (`crates/pace/tests/hundred_processes.rs`).
pub const DEFAULT_STEP_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a step should do, according to the ledger.
#[derive(Debug)]
pub enum Begin {
    /// Work: the item is claimed until the lease ends.
    Run(Box<Claim>),
    /// Already done; these are its children's ids (to send again those not started, if the
    /// first answer's messages were lost).
    AlreadyDone(Vec<String>),
    /// The scan was cancelled: drop the item.
    Cancelled,
    /// The scan is paused: the message is dropped, the item stays pending (not claimed) and
    /// is sent again when the scan is resumed (see `job::pause`).
    Paused,
    /// Another delivery of the same item holds the claim for this much longer.
    Busy(std::time::Duration),
    /// This message was put before the item was sent again (its claim was abandoned), and the
    /// newer message's delivery holds the claim: this one is a leftover, to be dropped.
    Superseded,
    /// No scan with this id exists.
    UnknownScan,
    /// The scan exists but never recorded this item.
    UnknownItem,
    /// The item failed for good already (its cause is in the status): a duplicate delivery,
    /// with nothing to do.
    FailedForGood,
    /// A child written ahead of a finish that never completed with it (the step ran again and
    /// chose other children): dropped, it was never counted.
    Orphan,
}

/// A claimed work item.
#[derive(Debug, Clone)]
pub struct Claim {
    pub scan: ScanRecord,
    pub(super) etag: String,
    /// This claim's own mark on the pending row (and, once finished, on the done row): a
    /// write whose answer was lost is told from another delivery's by it.
    pub(super) token: String,
    /// How many times this item has been started, this time included.
    pub attempt: u32,
    /// When its current run of transient failures began (ms since the epoch), if it is in one.
    pub failing_since: Option<u64>,
}

/// Where a child written ahead of its parent's finish stands.
pub(crate) enum Ahead {
    /// The parent's done row lists it: an item like any other.
    Counted,
    /// The parent is still pending: its finish may yet list the child.
    ParentRunning,
    /// The parent finished (or failed, or was dropped) without it.
    Orphan,
}

impl Ledger {
    /// Decides whether a delivered work item should run, and claims it if so.
    pub async fn begin(
        &self,
        item: &WorkItem,
        now: OffsetDateTime,
        lease: time::Duration,
    ) -> Result<Begin, LedgerError> {
        self.begin_sent(item, None, now, lease).await
    }

    /// [`Ledger::begin`] for a message put at `sent` (to the second): a message older than
    /// the item's re-drive finds it [`Begin::Superseded`] while another delivery holds it.
    pub async fn begin_sent(
        &self,
        item: &WorkItem,
        sent: Option<OffsetDateTime>,
        now: OffsetDateTime,
        lease: time::Duration,
    ) -> Result<Begin, LedgerError> {
        let Some(scan) = self.scan(&item.scan).await? else {
            return Ok(Begin::UnknownScan);
        };
        let id = item.id();
        let Some(entity) = self.table.get_entity(&item.scan, &pending_key(&id)).await? else {
            return self.begin_not_pending(&scan, &id).await;
        };
        let pending = PendingRow::from_entity(&entity)
            .ok_or_else(|| LedgerError::Corrupt(pending_key(&id), "no message".into()))?;
        if let Some(parent) = &pending.parent {
            if let Some(begin) = self
                .begin_written_ahead(&scan.id, parent, &id, &pending)
                .await?
            {
                return Ok(begin);
            }
        }
        let now_ms = millis(now);
        if scan.cancelled_at.is_some() {
            return self.begin_cancelled(&scan.id, &id, &pending, now_ms).await;
        }
        if scan.is_paused() {
            // Left pending, unclaimed, with its message: the resume sends it again.
            return Ok(Begin::Paused);
        }
        // Put more than a second (its time's precision) before the re-drive.
        let superseded = sent.is_some_and(|sent| millis(sent) + 1_000 < pending.redriven_at);
        if !pending.is_free(now_ms) && superseded {
            return Ok(Begin::Superseded);
        }
        if !pending.is_free(now_ms) {
            return Ok(Begin::Busy(std::time::Duration::from_millis(
                pending.lease_until - now_ms,
            )));
        }
        self.claim(scan, &id, pending, now, lease).await
    }

    /// What a delivery of item `id` finds when the item has no pending row: done (with the
    /// children to send again), dropped by a cancel, failed for good, or never recorded.
    async fn begin_not_pending(&self, scan: &ScanRecord, id: &str) -> Result<Begin, LedgerError> {
        match self.table.get_entity(&scan.id, &done_key(id)).await? {
            // While paused, its children not started wait for the resume, which sends them.
            Some(_) if scan.is_paused() => Ok(Begin::AlreadyDone(Vec::new())),
            Some(done) => Ok(Begin::AlreadyDone(
                DoneRow::children_of(&done).unwrap_or_default(),
            )),
            None if scan.cancelled_at.is_some() => Ok(Begin::Cancelled),
            None => match self.table.get_entity(&scan.id, &failed_key(id)).await? {
                Some(_) => Ok(Begin::FailedForGood),
                None => Ok(Begin::UnknownItem),
            },
        }
    }

    /// For an item written ahead of its parent's finish: `None` when it counts (it may run),
    /// else the answer (wait for the parent, or drop the orphan, whose row is deleted).
    async fn begin_written_ahead(
        &self,
        scan: &str,
        parent: &str,
        id: &str,
        pending: &PendingRow,
    ) -> Result<Option<Begin>, LedgerError> {
        match self.written_ahead(scan, parent, id).await? {
            Ahead::Counted => Ok(None),
            Ahead::ParentRunning => Ok(Some(Begin::Busy(std::time::Duration::from_secs(5)))),
            Ahead::Orphan => {
                let etag = pending.etag.clone().unwrap_or_default();
                self.delete_quietly(scan, &pending_key(id), &etag).await?;
                Ok(Some(Begin::Orphan))
            }
        }
    }

    /// A delivery of a cancelled scan's pending item: a free item is dropped, and counted as
    /// dropped so that the scan's unsettled count falls to zero; a claimed one is left to the
    /// step that runs it.
    async fn begin_cancelled(
        &self,
        scan: &str,
        id: &str,
        pending: &PendingRow,
        now_ms: u64,
    ) -> Result<Begin, LedgerError> {
        if !pending.is_free(now_ms) {
            // A step runs it: that step stops at its next page and records what it did
            // (or, if it dies, the re-drive sweep drops the item once its claim lapses).
            return Ok(Begin::Cancelled);
        }
        let drop = vec![Operation::Delete {
            partition_key: scan.to_string(),
            row_key: pending_key(id),
            if_match: IfMatch::Etag(pending.etag.clone().unwrap_or_default()),
        }];
        let delta = Tallies {
            dropped: 1,
            ..Tallies::default()
        };
        match self.commit_counted(scan, id, drop, delta).await {
            Ok(()) => {}
            // Dropped or claimed by another delivery meanwhile.
            Err(LedgerError::Storage(e))
                if matches!(e.kind(), ErrorKind::Batch { index: 0, .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(Begin::Cancelled)
    }

    /// Claims a free pending item until `now + lease`, marking the row with a new token, and
    /// records the scan started if it was not yet.
    async fn claim(
        &self,
        scan: ScanRecord,
        id: &str,
        pending: PendingRow,
        now: OffsetDateTime,
        lease: time::Duration,
    ) -> Result<Begin, LedgerError> {
        let etag = pending.etag.clone().unwrap_or_default();
        let attempt = pending.attempts + 1;
        let failing_since = pending.failing_since;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut claimed = pending;
        claimed.lease_until = millis(now) + lease.whole_milliseconds().max(0) as u64;
        claimed.attempts = attempt;
        claimed.claimed_by = Some(token.clone());
        let etag = match self
            .table
            .update(
                &claimed.to_entity(&scan.id, id),
                WriteMode::Replace,
                &IfMatch::Etag(etag),
            )
            .await
        {
            Ok(etag) => etag,
            // Another delivery claimed it between our read and our write, or ours applied and
            // its retry met it: the row says whose claim it is.
            Err(e) if e.reason().is_gone_or_changed() => {
                match self.own_pending(&scan.id, id, &token).await? {
                    Some(etag) => etag,
                    None => return Ok(Begin::Busy(lease.unsigned_abs())),
                }
            }
            Err(e) => return Err(e.into()),
        };
        if scan.started_at.is_none() {
            self.table
                .update(
                    &ScanRow::started(&scan.id, now),
                    WriteMode::Merge,
                    &IfMatch::Any,
                )
                .await?;
        }
        Ok(Begin::Run(Box::new(Claim {
            scan,
            etag,
            token,
            attempt: attempt.min(u64::from(u32::MAX)) as u32,
            failing_since,
        })))
    }

    /// Extends a claim to `now + lease`, keeping the claim's etag current. `false` when the
    /// claim was lost (another delivery took the item after the lease ran out, or it is
    /// finished): the step must stop acting, its finish will not count.
    pub async fn renew(
        &self,
        item: &WorkItem,
        claim: &mut Claim,
        now: OffsetDateTime,
        lease: time::Duration,
    ) -> Result<bool, LedgerError> {
        let id = item.id();
        let until = millis(now) + lease.whole_milliseconds().max(0) as u64;
        let extended =
            Entity::new(item.scan.clone(), pending_key(&id)).with("leaseUntil", rows::int(until));
        // A second try when the row changed under a claim that is still ours: an earlier
        // renewal that applied but answered an error, or a re-drive's mark on a lapsed claim.
        for _ in 0..2 {
            match self
                .table
                .update(
                    &extended,
                    WriteMode::Merge,
                    &IfMatch::Etag(claim.etag.clone()),
                )
                .await
            {
                Ok(etag) => {
                    claim.etag = etag;
                    return Ok(true);
                }
                Err(e) if e.reason().is_gone_or_changed() => {
                    match self.own_pending(&item.scan, &id, &claim.token).await? {
                        Some(etag) => claim.etag = etag,
                        None => return Ok(false),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    /// The etag of item `id`'s pending row if the claim marked `token` still holds it: no
    /// other delivery claimed it since (a claim replaces the mark) and it is not finished.
    pub(super) async fn own_pending(
        &self,
        scan: &str,
        id: &str,
        token: &str,
    ) -> Result<Option<String>, LedgerError> {
        let Some(entity) = self.table.get_entity(scan, &pending_key(id)).await? else {
            return Ok(None);
        };
        let row = PendingRow::from_entity(&entity);
        Ok(row
            .filter(|row| row.claimed_by.as_deref() == Some(token))
            .and_then(|row| row.etag))
    }

    /// Whether a child written ahead of its parent's finish (see `finish`) belongs to the scan.
    pub(crate) async fn written_ahead(
        &self,
        scan: &str,
        parent: &str,
        child: &str,
    ) -> Result<Ahead, LedgerError> {
        if let Some(done) = self.table.get_entity(scan, &done_key(parent)).await? {
            let listed = DoneRow::children_of(&done)
                .is_some_and(|children| children.iter().any(|c| c == child));
            return Ok(if listed {
                Ahead::Counted
            } else {
                Ahead::Orphan
            });
        }
        Ok(
            match self.table.get_entity(scan, &pending_key(parent)).await? {
                Some(_) => Ahead::ParentRunning,
                None => Ahead::Orphan,
            },
        )
    }

    pub(crate) async fn delete_quietly(
        &self,
        scan: &str,
        row: &str,
        etag: &str,
    ) -> Result<(), LedgerError> {
        match self
            .table
            .delete(scan, row, &IfMatch::Etag(etag.to_string()))
            .await
        {
            Err(e) if !e.reason().is_gone_or_changed() => Err(e.into()),
            _ => Ok(()),
        }
    }
}
