//! A step's end: its children recorded pending, itself done with its counts and its counts
//! added to a counter shard, in one transaction on the etag of its claim, so that children are
//! recorded exactly when their parent is marked done and each item counts once.

use time::OffsetDateTime;

use super::{Claim, Ledger, LedgerError};
use crate::exports::BlobEntry;
use crate::notes::RowNotes;
use crate::rows::{done_key, millis, pending_key, DoneRow, PendingRow, Tallies};
use crate::step_counts::StepCounts;
use crate::work_item::WorkItem;
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::ErrorKind;

/// Room in a transaction (100 operations) for children, next to the step's own three: its
/// pending row's delete, its done row and its counter shard.
const CHILDREN_IN_FINISH: usize = 100 - 3;

/// How recording a step's end went.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish {
    /// This delivery's finish is recorded (also when its transaction applied and its answer
    /// was lost: the done row carries this claim's token).
    Recorded,
    /// Another delivery of the item finished it first (after this one's lease ran out); this
    /// one's effects are not counted. These are the children that delivery recorded, whose
    /// messages its host may not have sent.
    FinishedByAnother(Vec<String>),
    /// This delivery's claim is gone and the item is not done: another delivery holds it now,
    /// or it was dropped by a cancel or failed for good. Nothing to record or send.
    ClaimLost,
}

impl Ledger {
    /// Records a finished step: its children pending, itself done with its counts, its counts
    /// added to its counter shard, atomically.
    ///
    /// Children beyond what one transaction holds are written first, marked with their parent;
    /// they count only once the parent's done row lists them (`begin` checks), so a step that
    /// dies between the transactions and chooses other children when it runs again leaves
    /// nothing that could act twice.
    pub async fn finish(
        &self,
        item: &WorkItem,
        claim: &Claim,
        counts: StepCounts,
        children: &[WorkItem],
        now: OffsetDateTime,
    ) -> Result<Finish, LedgerError> {
        self.finish_noting(
            item,
            claim,
            counts,
            &RowNotes::default(),
            None,
            children,
            now,
        )
        .await
    }

    /// [`Ledger::finish`], also storing the rows the step noted and the blob an export step
    /// wrote (in the same transaction, so they are stored exactly when the step counts).
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_noting(
        &self,
        item: &WorkItem,
        claim: &Claim,
        counts: StepCounts,
        notes: &RowNotes,
        blob: Option<&BlobEntry>,
        children: &[WorkItem],
        now: OffsetDateTime,
    ) -> Result<Finish, LedgerError> {
        let mut claim = claim.clone();
        // Once more if the first finish met its own claim under a new etag.
        for _ in 0..2 {
            match self
                .try_finish(item, &claim, counts, notes, blob, children, now)
                .await?
            {
                Ok(finish) => return Ok(finish),
                Err(etag) => claim.etag = etag,
            }
        }
        Ok(Finish::ClaimLost)
    }

    /// One try of [`Ledger::finish_noting`]: `Err` with the pending row's etag when it was
    /// refused but the claim is still this delivery's.
    #[allow(clippy::too_many_arguments)]
    async fn try_finish(
        &self,
        item: &WorkItem,
        claim: &Claim,
        counts: StepCounts,
        notes: &RowNotes,
        blob: Option<&BlobEntry>,
        children: &[WorkItem],
        now: OffsetDateTime,
    ) -> Result<Result<Finish, String>, LedgerError> {
        let id = item.id();
        refuse_repeated_child(&id, children)?;
        // The notes row and the blob row each take one of the transaction's places.
        let in_finish =
            CHILDREN_IN_FINISH - usize::from(!notes.is_empty()) - usize::from(blob.is_some());
        let child_ids: Vec<String> = children.iter().map(WorkItem::id).collect();
        let ahead = children.len().saturating_sub(in_finish);
        let early = pending_children(&item.scan, &children[..ahead], &child_ids, Some(&id));
        for chunk in early.chunks(100) {
            self.table.submit_transaction(chunk).await?;
        }
        let mut last = pending_children(&item.scan, &children[ahead..], &child_ids[ahead..], None);
        let delete_index = last.len();
        last.push(Operation::Delete {
            partition_key: item.scan.clone(),
            row_key: pending_key(&id),
            if_match: IfMatch::Etag(claim.etag.clone()),
        });
        let done = DoneRow {
            counts,
            depth: u64::from(item.depth),
            finished_at: now,
            children: Some(child_ids),
            finished_by: Some(claim.token.clone()),
        };
        last.push(Operation::Insert(done.to_entity(&item.scan, &id)));
        if !notes.is_empty() {
            last.push(Operation::UpsertReplace(notes.to_entity(&item.scan, &id)));
        }
        if let Some(blob) = blob {
            last.push(Operation::UpsertReplace(blob.to_entity(&item.scan, &id)));
        }
        let delta = finish_delta(counts, children.len(), blob, now);
        match self.commit_counted(&item.scan, &id, last, delta).await {
            Ok(()) => Ok(Ok(Finish::Recorded)),
            Err(LedgerError::Storage(e))
                if matches!(e.kind(), ErrorKind::Batch { index, error }
                    if *index == delete_index && error.reason().is_gone_or_changed()) =>
            {
                self.after_refused_finish(&item.scan, &id, &claim.token)
                    .await
            }
            Err(e) => Err(e),
        }
    }

    /// Why a finish's delete of its pending row found it gone or changed: this very finish
    /// applied and its answer was lost (the done row carries this claim's token), another
    /// delivery finished the item, or the claim is still this delivery's under a new etag
    /// (`Err` with that etag: the finish is tried again with it).
    async fn after_refused_finish(
        &self,
        scan: &str,
        id: &str,
        token: &str,
    ) -> Result<Result<Finish, String>, LedgerError> {
        if let Some(done) = self.table.get_entity(scan, &done_key(id)).await? {
            return Ok(Ok(
                if DoneRow::finished_by(&done).as_deref() == Some(token) {
                    Finish::Recorded
                } else {
                    Finish::FinishedByAnother(DoneRow::children_of(&done).unwrap_or_default())
                },
            ));
        }
        Ok(match self.own_pending(scan, id, token).await? {
            Some(etag) => Err(etag),
            None => Ok(Finish::ClaimLost),
        })
    }

    /// The messages of those of `children` that are pending and not claimed: after a finished
    /// item's redelivery, the ones whose first messages may have been lost. Done and running
    /// children are skipped, so a duplicate never re-walks a finished subtree.
    pub async fn unstarted(
        &self,
        scan: &str,
        children: &[String],
        now: OffsetDateTime,
    ) -> Result<Vec<String>, LedgerError> {
        let now_ms = millis(now);
        let mut messages = Vec::new();
        for child in children {
            if let Some(entity) = self.table.get_entity(scan, &pending_key(child)).await? {
                if let Some(row) = PendingRow::from_entity(&entity) {
                    if row.is_free(now_ms) {
                        messages.push(row.message);
                    }
                }
            }
        }
        Ok(messages)
    }
}

/// Refuses a step that chose two children of one id, before anything is written: they would be
/// one pending row counted twice (children beyond one transaction are written in earlier ones,
/// where nothing refuses a repeat), and the item's unsettled count would never reach zero.
fn refuse_repeated_child(id: &str, children: &[WorkItem]) -> Result<(), LedgerError> {
    let mut seen = std::collections::HashSet::new();
    match children
        .iter()
        .map(WorkItem::id)
        .find(|c| !seen.insert(c.clone()))
    {
        Some(twice) => Err(LedgerError::Refused(format!(
            "step {id} chose child {twice} twice (a manifest part listing a blob twice?)"
        ))),
        None => Ok(()),
    }
}

/// The writes of `children`'s pending rows (ids `child_ids`, in order), each marked with
/// `parent` when written ahead of the parent's finish.
fn pending_children(
    scan: &str,
    children: &[WorkItem],
    child_ids: &[String],
    parent: Option<&str>,
) -> Vec<Operation> {
    children
        .iter()
        .zip(child_ids)
        .map(|(child, child_id)| {
            let mut row = PendingRow::new(child.encode(), u64::from(child.depth));
            row.parent = parent.map(str::to_string);
            Operation::UpsertReplace(row.to_entity(scan, child_id))
        })
        .collect()
}

/// What a finished step adds to its counter shard: itself done, its children created, its
/// counts, and the blob an export step wrote.
fn finish_delta(
    counts: StepCounts,
    children: usize,
    blob: Option<&BlobEntry>,
    now: OffsetDateTime,
) -> Tallies {
    Tallies {
        created: children as u64,
        done: 1,
        rows_read: counts.rows_read,
        rows_acted: counts.rows_acted,
        rows_skipped: counts.rows_skipped,
        rows_failed: counts.rows_failed,
        partitions: counts.partitions,
        queries: counts.queries,
        throttled: counts.requests_throttled,
        longest_step_ms: counts.duration_ms,
        last_finished_ms: millis(now),
        blobs: u64::from(blob.is_some()),
        blob_bytes: blob.map_or(0, |b| b.bytes),
        ..Tallies::default()
    }
}
