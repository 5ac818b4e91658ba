//! The ledger: what a scan is and where each of its work items stands, in a table of the app's
//! own storage account. Its rows are described in `job::rows`.
//!
//! A step's end is one entity group transaction in the scan's partition: insert its children as
//! pending, delete its own pending row (on the etag of its claim), insert its done row, and add
//! its counts to one counter shard (on the shard's etag). So children are recorded exactly when
//! their parent is marked done, each item counts once however often its message is delivered,
//! and the counter shards always agree with the item rows. A status read sums the shards (a
//! few entities, whatever the scan's size); a scan is complete exactly when the shards, read
//! twice with no change between the reads, show no item unsettled (see `job::status`).
//!
//! A step claims its pending row before working (a lease, by etag), so a duplicate delivery
//! that arrives while the first is running backs off instead of acting twice.

use serde::Serialize;
use time::OffsetDateTime;

use super::exports::BlobEntry;
use super::history::{History, Sample};
use super::notes::RowNotes;
use super::rows::{
    self, counter_key, date, done_key, failed_key, millis, pending_key, shard_of, text, DoneRow,
    FailedRow, PendingRow, ScanRow, Tallies, LEDGER_FORMAT, SHARDS,
};
use super::spec::ScanSpec;
use super::store::LedgerTable;
use crate::scan::item::WorkItem;
use crate::storage::table::batch::{IfMatch, Operation};
use crate::storage::table::entity::{EdmDateTime, Entity, Value};
use crate::storage::table::filter::{Comparison, Filter};
use crate::storage::table::in_memory::InMemoryTable;
use crate::storage::table::query::Query;
use crate::storage::table::WriteMode;
use crate::storage::{ErrorKind, Reason, StorageError, TableClient};

/// The ledger table's name unless the `TABLESCAN_LEDGER_TABLE` setting says otherwise.
pub const DEFAULT_LEDGER_TABLE: &str = "tablescanledger";
pub(crate) const INDEX_PARTITION: &str = "~index";
pub(crate) const REJECTED_PARTITION: &str = "~rejected";
/// Room in a transaction (100 operations) for children, next to the step's own three: its
/// pending row's delete, its done row and its counter shard.
const CHILDREN_IN_FINISH: usize = 100 - 3;
/// How often a transaction is tried again when another finish updated its counter shard first.
const SHARD_CONFLICT_RETRIES: u32 = 30;

/// A failed ledger operation.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the ledger entry {0} is unreadable: {1}")]
    Corrupt(String, String),
    /// A write the ledger must refuse whatever the service says: it would record something
    /// wrong (a step that chose one child twice).
    #[error("{0}")]
    Refused(String),
    #[error("scan {0} was started by an earlier version of tablescan (ledger format {1}, this version reads {LEDGER_FORMAT}); finish or cancel it with that version")]
    OldFormat(String, u64),
}

impl LedgerError {
    pub fn is_transient(&self) -> bool {
        matches!(self, LedgerError::Storage(e) if e.is_transient())
    }

    /// Whether the ledger would refuse the same write the same way every time: a transaction
    /// the client refuses to send (an entity twice, over 100 operations or 4 MiB), one the
    /// service finds malformed (400), too large (413) or in conflict with a row that will not
    /// go away (409: a done row already there), or an unreadable ledger row. Trying again
    /// cannot help; a step whose finish is refused so fails for good with the cause. Not:
    /// throttling, timeouts, a lost connection, a conditional write that lost a race (412 or
    /// 404, for which the callers have their own answers).
    pub fn refused_for_good(&self) -> bool {
        match self {
            LedgerError::Corrupt(..) | LedgerError::OldFormat(..) | LedgerError::Refused(_) => true,
            LedgerError::Storage(e) => match e.kind() {
                ErrorKind::InvalidRequest(_) => true,
                ErrorKind::Batch { error, .. } => matches!(error.status, 400 | 409 | 413),
                ErrorKind::Service(error) => matches!(error.status, 400 | 413),
                _ => false,
            },
        }
    }
}

/// A scan as recorded when it was started.
#[derive(Debug, Clone)]
pub struct ScanRecord {
    pub id: String,
    pub spec: ScanSpec,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub cancelled_at: Option<OffsetDateTime>,
    /// When the scan was last paused and resumed (see [`ScanRecord::is_paused`]), and how far
    /// a resume has sent the paused items' messages (see `job::pause`).
    pub paused_at: Option<OffsetDateTime>,
    pub resumed_at: Option<OffsetDateTime>,
    pub resume_from: Option<String>,
    /// An export's: when its manifest was written (its scan succeeds then, not before).
    pub manifest_at: Option<OffsetDateTime>,
    /// An export's: why its manifest could not be written, if it could not.
    pub manifest_trouble: rows::ManifestTrouble,
    /// When a status read last took its turn at the re-drive look (`job::redrive`).
    pub redrive_looked_at: Option<OffsetDateTime>,
    /// The cap learned from the accounts' refusals, if any (see `job::learning`).
    pub learned_cap: Option<f64>,
    /// When the scan's last learning round opened (epoch ms; 0 before any).
    pub learn_round_ms: u64,
}

/// What `create_scan` did.
#[derive(Debug)]
pub enum Created {
    New,
    /// A scan with this id existed already; nothing was written.
    Existing(Box<ScanRecord>),
}

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
    etag: String,
    /// This claim's own mark on the pending row (and, once finished, on the done row): a
    /// write whose answer was lost is told from another delivery's by it.
    token: String,
    /// How many times this item has been started, this time included.
    pub attempt: u32,
    /// When its current run of transient failures began (ms since the epoch), if it is in one.
    pub failing_since: Option<u64>,
}

/// What a finished step contributes to the scan's progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCounts {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    /// Rows the action could not act on.
    pub rows_failed: u64,
    pub partitions: u64,
    pub queries: u64,
    /// Its storage requests answered "too busy" (see `storage::throttled`).
    pub requests_throttled: u64,
    /// How long the step took (the longest is reported, not the sum).
    pub duration_ms: u64,
}

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

/// How a failed attempt is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureRecord {
    /// The item stays pending for another attempt; `failing_since` (ms since the epoch) is when
    /// its current run of transient failures began, `None` if this failure is not transient.
    Retry { failing_since: Option<u64> },
    /// The item is failed for good; the scan will end failed.
    Final,
}

/// The ledger of every scan.
#[derive(Clone)]
pub struct Ledger {
    table: LedgerTable,
    /// See [`Ledger::steps_stop_within`] (`job::pause`).
    pub(super) steps_stop_within: time::Duration,
}

impl Ledger {
    /// The ledger in a table of a storage account.
    pub fn new(table: TableClient) -> Self {
        Ledger {
            table: LedgerTable::Storage(table),
            steps_stop_within: super::pause::STEPS_STOP_WITHIN,
        }
    }

    /// The ledger in a table held in memory (race tests and the in-memory benchmark).
    pub fn in_memory(table: InMemoryTable) -> Self {
        Ledger {
            table: LedgerTable::Memory(table),
            steps_stop_within: super::pause::STEPS_STOP_WITHIN,
        }
    }

    pub fn table(&self) -> &LedgerTable {
        &self.table
    }

    /// Creates the ledger table if it does not exist yet.
    pub async fn ensure(&self) -> Result<(), LedgerError> {
        self.table.create_if_missing().await?;
        Ok(())
    }

    /// Records a new scan, its counter shards and its first work item, in one transaction.
    /// If a scan with this id exists already (a start retried with the same idempotency key),
    /// nothing is written and that scan is returned, so the caller can compare requests; its
    /// index row is written again in case the first attempt stopped before it.
    pub async fn create_scan(
        &self,
        spec: &ScanSpec,
        root: &WorkItem,
        now: OffsetDateTime,
    ) -> Result<Created, LedgerError> {
        let id = &root.scan;
        let spec = serde_json::to_string(spec).expect("a spec serialises");
        let root_id = root.id();
        let mut operations = vec![
            Operation::Insert(ScanRow::new(spec, now).to_entity(id)),
            Operation::Insert(
                PendingRow::new(root.encode(), u64::from(root.depth)).to_entity(id, &root_id),
            ),
        ];
        for shard in 0..SHARDS {
            let mut tallies = Tallies::default();
            if shard == shard_of(&root_id) {
                tallies.created = 1;
            }
            operations.push(Operation::Insert(tallies.to_entity(id, shard)));
        }
        self.list_active(id).await?;
        let created = match self.table.submit_transaction(&operations).await {
            Ok(_) => Created::New,
            Err(e) if matches!(e.kind(), ErrorKind::Batch { index: 0, error } if error.reason() == Reason::AlreadyExists) => {
                match self.scan(id).await? {
                    Some(existing) => Created::Existing(Box::new(existing)),
                    None => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let created_at = match &created {
            Created::New => now,
            Created::Existing(existing) => existing.created_at,
        };
        let index = Entity::new(INDEX_PARTITION, index_key(id, created_at))
            .with("scan", Value::String(id.clone()));
        self.table.upsert(&index, WriteMode::Replace).await?;
        Ok(created)
    }

    /// Whether a scan's root item is still waiting for its first step (pending and never
    /// claimed): a start retried after a crash sends its message again.
    pub async fn root_unstarted(&self, root: &WorkItem) -> Result<bool, LedgerError> {
        Ok(
            match self
                .table
                .get_entity(&root.scan, &pending_key(&root.id()))
                .await?
            {
                Some(entity) => {
                    PendingRow::from_entity(&entity).is_some_and(|row| row.attempts == 0)
                }
                None => false,
            },
        )
    }

    /// Reads a scan record.
    pub async fn scan(&self, id: &str) -> Result<Option<ScanRecord>, LedgerError> {
        Ok(self.scan_and_etag(id).await?.map(|(record, _)| record))
    }

    /// Reads a scan record with its row's etag (for a write that must not cross another).
    pub(crate) async fn scan_and_etag(
        &self,
        id: &str,
    ) -> Result<Option<(ScanRecord, String)>, LedgerError> {
        if !is_scan_id(id) {
            return Ok(None);
        }
        match self.table.get_entity(id, rows::SCAN_ROW).await? {
            Some(entity) => {
                let etag = entity.etag.clone().unwrap_or_default();
                record_from(id, &entity).map(|record| Some((record, etag)))
            }
            None => Ok(None),
        }
    }

    /// Marks a scan cancelled; its remaining work items are dropped as they arrive, or by the
    /// re-drive sweep if their messages are gone (the scan is listed in flight again for it:
    /// a scan cancelled before the sweep dropped items may have left the list already).
    pub async fn cancel(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<ScanRecord>, LedgerError> {
        let Some(mut record) = self.scan(id).await? else {
            return Ok(None);
        };
        self.list_active(id).await?;
        if record.cancelled_at.is_none() {
            self.table
                .update(
                    &ScanRow::cancelled(id, now),
                    WriteMode::Merge,
                    &IfMatch::Any,
                )
                .await?;
            record.cancelled_at = Some(now);
        }
        Ok(Some(record))
    }

    /// Submits `operations` together with `delta` added to counter shard `shard`, reading the
    /// shard and trying again while other finishes update it first. A failure of one of
    /// `operations` comes back as it is (its index is its index in `operations`).
    pub(crate) async fn commit_counted(
        &self,
        scan: &str,
        shard: u8,
        operations: Vec<Operation>,
        delta: Tallies,
    ) -> Result<(), LedgerError> {
        let shard_index = operations.len();
        let mut batch = operations;
        for conflict in 0.. {
            let Some(current) = self.table.get_entity(scan, &counter_key(shard)).await? else {
                return Err(LedgerError::Corrupt(
                    format!("scan {scan}"),
                    format!("counter shard {shard} is missing"),
                ));
            };
            let mut next = Tallies::from_entity(&current);
            next.add(delta);
            // The shard's rate history (`job::history`) goes along in the same write.
            let mut history = History::from_entity(&current);
            let at_ms = match delta.last_finished_ms {
                0 => millis(OffsetDateTime::now_utc()),
                at => at,
            };
            history.record(
                at_ms,
                Sample {
                    rows_read: delta.rows_read,
                    rows_acted: delta.rows_acted,
                    throttled: delta.throttled,
                },
            );
            let mut entity = next.to_entity(scan, shard);
            history.write_into(&mut entity);
            let etag = IfMatch::Etag(current.etag.clone().unwrap_or_default());
            batch.truncate(shard_index);
            batch.push(Operation::Update(entity, etag));
            match self.table.submit_transaction(&batch).await {
                Ok(_) => return Ok(()),
                Err(e)
                    if conflict < SHARD_CONFLICT_RETRIES
                        && matches!(e.kind(), ErrorKind::Batch { index, error }
                            if *index == shard_index && error.reason() == Reason::PreconditionFailed) =>
                {
                    // Another finish took the shard between our read and our write.
                    tokio::time::sleep(conflict_pause(conflict)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the loop returns")
    }

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
            return match self.table.get_entity(&item.scan, &done_key(&id)).await? {
                // While paused, its children not started wait for the resume, which sends them.
                Some(_) if scan.is_paused() => Ok(Begin::AlreadyDone(Vec::new())),
                Some(done) => Ok(Begin::AlreadyDone(
                    DoneRow::children_of(&done).unwrap_or_default(),
                )),
                None if scan.cancelled_at.is_some() => Ok(Begin::Cancelled),
                None => match self.table.get_entity(&item.scan, &failed_key(&id)).await? {
                    Some(_) => Ok(Begin::FailedForGood),
                    None => Ok(Begin::UnknownItem),
                },
            };
        };
        let pending = PendingRow::from_entity(&entity)
            .ok_or_else(|| LedgerError::Corrupt(pending_key(&id), "no message".into()))?;
        let etag = pending.etag.clone().unwrap_or_default();
        if let Some(parent) = &pending.parent {
            match self.written_ahead(&item.scan, parent, &id).await? {
                Ahead::Counted => {}
                Ahead::ParentRunning => return Ok(Begin::Busy(std::time::Duration::from_secs(5))),
                Ahead::Orphan => {
                    self.delete_quietly(&item.scan, &pending_key(&id), &etag)
                        .await?;
                    return Ok(Begin::Orphan);
                }
            }
        }
        let now_ms = millis(now);
        if scan.cancelled_at.is_some() {
            if !pending.is_free(now_ms) {
                // A step runs it: that step stops at its next page and records what it did
                // (or, if it dies, the re-drive sweep drops the item once its claim lapses).
                return Ok(Begin::Cancelled);
            }
            // Dropped, and counted as dropped so that the scan's unsettled count falls to zero.
            let drop = vec![Operation::Delete {
                partition_key: item.scan.clone(),
                row_key: pending_key(&id),
                if_match: IfMatch::Etag(etag),
            }];
            let delta = Tallies {
                dropped: 1,
                ..Tallies::default()
            };
            match self
                .commit_counted(&item.scan, shard_of(&id), drop, delta)
                .await
            {
                Ok(()) => {}
                // Dropped or claimed by another delivery meanwhile.
                Err(LedgerError::Storage(e))
                    if matches!(e.kind(), ErrorKind::Batch { index: 0, .. }) => {}
                Err(e) => return Err(e),
            }
            return Ok(Begin::Cancelled);
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
        let attempt = pending.attempts + 1;
        let failing_since = pending.failing_since;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut claimed = pending;
        claimed.lease_until = now_ms + lease.whole_milliseconds().max(0) as u64;
        claimed.attempts = attempt;
        claimed.claimed_by = Some(token.clone());
        let etag = match self
            .table
            .update(
                &claimed.to_entity(&item.scan, &id),
                WriteMode::Replace,
                &IfMatch::Etag(etag),
            )
            .await
        {
            Ok(etag) => etag,
            // Another delivery claimed it between our read and our write, or ours applied and
            // its retry met it: the row says whose claim it is.
            Err(e) if e.reason().is_gone_or_changed() => {
                match self.own_pending(&item.scan, &id, &token).await? {
                    Some(etag) => etag,
                    None => return Ok(Begin::Busy(lease.unsigned_abs())),
                }
            }
            Err(e) => return Err(e.into()),
        };
        if scan.started_at.is_none() {
            self.table
                .update(
                    &ScanRow::started(&item.scan, now),
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
    async fn own_pending(
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
        // Two children of one id would be one pending row counted twice (children beyond
        // one transaction are written in earlier ones, where nothing refuses a repeat): the
        // item's unsettled count would never reach zero. Refused before anything is written.
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = children
            .iter()
            .map(WorkItem::id)
            .find(|c| !seen.insert(c.clone()))
        {
            return Err(LedgerError::Refused(format!(
                "step {id} chose child {twice} twice (a manifest part listing a blob twice?)"
            )));
        }
        // The notes row and the blob row each take one of the transaction's places.
        let in_finish =
            CHILDREN_IN_FINISH - usize::from(!notes.is_empty()) - usize::from(blob.is_some());
        let child_ids: Vec<String> = children.iter().map(WorkItem::id).collect();
        let pending = |child: &WorkItem, child_id: &str, parent: Option<&str>| {
            let mut row = PendingRow::new(child.encode(), u64::from(child.depth));
            row.parent = parent.map(str::to_string);
            Operation::UpsertReplace(row.to_entity(&item.scan, child_id))
        };
        let ahead = children.len().saturating_sub(in_finish);
        let early: Vec<Operation> = children[..ahead]
            .iter()
            .zip(&child_ids)
            .map(|(c, cid)| pending(c, cid, Some(&id)))
            .collect();
        for chunk in early.chunks(100) {
            self.table.submit_transaction(chunk).await?;
        }
        let mut last: Vec<Operation> = children[ahead..]
            .iter()
            .zip(&child_ids[ahead..])
            .map(|(c, cid)| pending(c, cid, None))
            .collect();
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
        let delta = Tallies {
            created: children.len() as u64,
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
        };
        match self
            .commit_counted(&item.scan, shard_of(&id), last, delta)
            .await
        {
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
                    message: item.encode(),
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
        self.commit_counted(&item.scan, shard_of(&id), operations, delta)
            .await
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
            match self
                .commit_counted(scan, shard_of(&item), operations, delta)
                .await
            {
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

    /// Adds `delta` to a scan's totals outside a step (the re-drive's count of messages sent).
    pub(crate) async fn add_to_totals(
        &self,
        scan: &str,
        delta: Tallies,
    ) -> Result<(), LedgerError> {
        self.commit_counted(scan, 0, Vec::new(), delta).await
    }

    /// The scan's totals, summed over its counter shards from one query, with each shard's
    /// etag (two reads with equal etags saw the same state) and the sum of their rate
    /// histories (`job::history`).
    pub(crate) async fn totals(
        &self,
        scan: &str,
    ) -> Result<(Tallies, Vec<String>, History), LedgerError> {
        let query = Query::filtered(rows::rows_of(scan, rows::counter_range()));
        let shards = self.table.query_all(&query).await?;
        if shards.len() != usize::from(SHARDS) {
            return Err(LedgerError::Corrupt(
                format!("scan {scan}"),
                format!("{} counter shards instead of {SHARDS}", shards.len()),
            ));
        }
        let mut sum = Tallies::default();
        let mut history = History::default();
        let mut etags = Vec::with_capacity(shards.len());
        for shard in &shards {
            sum.add(Tallies::from_entity(shard));
            history.add(History::from_entity(shard));
            etags.push(shard.etag.clone().unwrap_or_default());
        }
        Ok((sum, etags, history))
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

    /// Remembers a queue message that is not a valid work item, for the scans list.
    pub async fn reject(
        &self,
        message_id: &str,
        error: &str,
        sample: &str,
        now: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let key: String = message_id
            .chars()
            .filter(|c| !crate::storage::names::is_forbidden_key_char(*c))
            .take(200)
            .collect();
        let entity = Entity::new(
            REJECTED_PARTITION,
            if key.is_empty() {
                "unknown".to_string()
            } else {
                key
            },
        )
        .with("error", Value::String(error.chars().take(2000).collect()))
        .with("sample", Value::String(sample.chars().take(200).collect()))
        .with("at", rows::date_value(now));
        match self.table.upsert(&entity, WriteMode::Replace).await {
            // A message can be refused before the first scan created the ledger.
            Err(e) if e.is_not_found() => {
                self.ensure().await?;
                self.table.upsert(&entity, WriteMode::Replace).await?;
            }
            other => {
                other?;
            }
        }
        Ok(())
    }

    /// The most recent scans, newest first.
    pub async fn recent(&self, limit: u16) -> Result<Vec<ScanRecord>, LedgerError> {
        let query = Query::filtered(Filter::partition_key(Comparison::Eq, INDEX_PARTITION))
            .top(limit.clamp(1, 1000));
        let page = self.table.query_page(&query, None).await?;
        let mut records = Vec::new();
        for entry in page.entities {
            if let Some(id) = text(&entry, "scan") {
                match self.scan(&id).await {
                    Ok(Some(record)) => records.push(record),
                    Ok(None) | Err(LedgerError::OldFormat(..)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(records)
    }

    /// Messages that were refused because they are not work items.
    pub async fn rejected(&self, limit: u16) -> Result<Vec<Rejected>, LedgerError> {
        let query = Query::filtered(Filter::partition_key(Comparison::Eq, REJECTED_PARTITION))
            .top(limit.clamp(1, 1000));
        let page = self.table.query_page(&query, None).await?;
        Ok(page
            .entities
            .iter()
            .map(|e| Rejected {
                message_id: e.row_key.clone(),
                error: text(e, "error").unwrap_or_default(),
                sample: text(e, "sample").unwrap_or_default(),
                at: date(e, "at").map(format_time),
            })
            .collect())
    }
}

/// A scan's row key in the `~index` partition: newest first, because it counts down with time.
pub(crate) fn index_key(id: &str, created_at: OffsetDateTime) -> String {
    let inverted = i64::MAX - (created_at.unix_timestamp_nanos() / 1_000_000) as i64;
    format!("{inverted:019}-{id}")
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

/// A short, growing, slightly uneven pause after losing a counter shard to another finish, so
/// that the finishes that collided do not collide again.
fn conflict_pause(conflict: u32) -> std::time::Duration {
    let spread = u64::from(std::process::id() ^ conflict.wrapping_mul(2_654_435_761)) % 20;
    std::time::Duration::from_millis(5 + 10 * u64::from(conflict.min(10)) + spread)
}

fn record_from(id: &str, entity: &Entity) -> Result<ScanRecord, LedgerError> {
    let row = ScanRow::from_entity(entity)
        .ok_or_else(|| LedgerError::Corrupt(format!("scan {id}"), "no spec".into()))?;
    if row.format != LEDGER_FORMAT {
        return Err(LedgerError::OldFormat(id.to_string(), row.format));
    }
    let spec: ScanSpec = serde_json::from_str(&row.spec)
        .map_err(|e| LedgerError::Corrupt(format!("scan {id}"), e.to_string()))?;
    Ok(ScanRecord {
        id: id.to_string(),
        spec,
        created_at: row.created_at.unwrap_or(OffsetDateTime::UNIX_EPOCH),
        started_at: row.started_at,
        cancelled_at: row.cancelled_at,
        paused_at: row.paused_at,
        resumed_at: row.resumed_at,
        resume_from: row.resume_from,
        manifest_at: row.manifest_at,
        manifest_trouble: row.manifest_trouble,
        redrive_looked_at: row.redrive_looked_at,
        learned_cap: row.learned_cap,
        learn_round_ms: row.learn_round_ms,
    })
}

/// A message refused because it is not a work item.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    pub message_id: String,
    pub error: String,
    pub sample: String,
    pub at: Option<String>,
}

/// Scan ids are 32 lowercase hex digits; anything else cannot name a scan (and is never used as
/// a key, so a request cannot reach the ledger's other partitions through an id).
pub fn is_scan_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A new scan id.
pub fn new_scan_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

pub(crate) fn format_time(time: OffsetDateTime) -> String {
    EdmDateTime::new(time).to_string()
}
