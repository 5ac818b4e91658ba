//! The ledger: what a scan is and where each of its work items stands, in a table of the app's
//! own storage account.
//!
//! One partition per scan (PartitionKey = scan id) holds the scan record (`scan`) and one entity
//! per work item: `pending:<id>` until it is done, then `done:<id>` with its counts, or
//! `failed:<id>` when it failed for good. A step's end is one entity group transaction: insert
//! its children as pending, delete its own pending entity (on the etag of its claim), insert its
//! done entity. So children are recorded exactly when their parent is marked done, a scan is
//! complete exactly when it has no pending entity, and counts summed over done entities are exact
//! however often a message is delivered.
//!
//! A step claims its pending entity before working (a lease, by etag), so a duplicate delivery
//! that arrives while the first is running backs off instead of acting twice.

use serde::Serialize;
use time::OffsetDateTime;

use super::spec::ScanSpec;
use crate::scan::item::WorkItem;
use crate::storage::table::batch::{IfMatch, Operation};
use crate::storage::table::entity::{EdmDateTime, Entity, Value};
use crate::storage::table::filter::{Comparison, Filter};
use crate::storage::table::query::Query;
use crate::storage::table::WriteMode;
use crate::storage::{ErrorKind, StorageError, TableClient};

/// The ledger table's name unless the `TABLESCAN_LEDGER_TABLE` setting says otherwise.
pub const DEFAULT_LEDGER_TABLE: &str = "tablescanledger";
const SCAN_ROW: &str = "scan";
const INDEX_PARTITION: &str = "~index";
const REJECTED_PARTITION: &str = "~rejected";
const PENDING: &str = "pending:";
const DONE: &str = "done:";
const FAILED: &str = "failed:";
/// Children's messages are kept with the done entity (to send them again if the first answer was
/// lost) while they fit one string property comfortably.
const MAX_STORED_CHILDREN_BYTES: usize = 60 * 1024;

/// A failed ledger operation.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the ledger entry {0} is unreadable: {1}")]
    Corrupt(String, String),
}

impl LedgerError {
    pub fn is_transient(&self) -> bool {
        matches!(self, LedgerError::Storage(e) if e.is_transient())
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
}

/// What a step should do, according to the ledger.
#[derive(Debug)]
pub enum Begin {
    /// Work: the item is claimed until the lease ends.
    Run(Box<Claim>),
    /// Already done; these are the messages of its children, to send again.
    AlreadyDone(Vec<String>),
    /// The scan was cancelled: drop the item.
    Cancelled,
    /// Another delivery of the same item holds the claim for this much longer.
    Busy(std::time::Duration),
    /// No scan with this id exists.
    UnknownScan,
    /// The scan exists but never recorded this item (or it failed for good already).
    UnknownItem,
}

/// A claimed work item.
#[derive(Debug, Clone)]
pub struct Claim {
    pub scan: ScanRecord,
    etag: String,
    /// How many times this item has been started, this time included.
    pub attempt: u32,
}

/// What a finished step contributes to the scan's progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCounts {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    pub partitions: u64,
    pub queries: u64,
    /// How long the step took (the longest is reported, not the sum).
    pub duration_ms: u64,
}

/// How recording a step's end went.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish {
    Recorded,
    /// Another delivery finished the item first; this one's effects are not counted.
    AlreadyFinished,
}

/// The ledger of every scan.
#[derive(Clone)]
pub struct Ledger {
    table: TableClient,
}

pub(crate) fn text(entity: &Entity, name: &str) -> Option<String> {
    match entity.properties.get(name) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

pub(crate) fn number(entity: &Entity, name: &str) -> u64 {
    match entity.properties.get(name) {
        Some(Value::Int64(n)) => (*n).max(0) as u64,
        Some(Value::Int32(n)) => (*n).max(0) as u64,
        _ => 0,
    }
}

fn date(entity: &Entity, name: &str) -> Option<OffsetDateTime> {
    match entity.properties.get(name) {
        Some(Value::DateTime(t)) => Some(t.time()),
        _ => None,
    }
}

fn date_value(time: OffsetDateTime) -> Value {
    Value::DateTime(EdmDateTime::new(time))
}

pub(crate) fn int(n: u64) -> Value {
    Value::Int64(n.min(i64::MAX as u64) as i64)
}

impl Ledger {
    pub fn new(table: TableClient) -> Self {
        Ledger { table }
    }

    pub fn table(&self) -> &TableClient {
        &self.table
    }

    /// Creates the ledger table if it does not exist yet.
    pub async fn ensure(&self) -> Result<(), LedgerError> {
        self.table.create_if_missing().await?;
        Ok(())
    }

    /// Records a new scan and its first work item.
    pub async fn create_scan(
        &self,
        spec: &ScanSpec,
        root: &WorkItem,
        now: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let id = &root.scan;
        let record = Entity::new(id.clone(), SCAN_ROW)
            .with(
                "spec",
                Value::String(serde_json::to_string(spec).expect("a spec serialises")),
            )
            .with("createdAt", date_value(now));
        self.list_active(id).await?;
        self.table
            .submit_transaction(&[
                Operation::Insert(record),
                Operation::Insert(pending_entity(root)),
            ])
            .await?;
        // Newest first: the RowKey counts down with time.
        let inverted = i64::MAX - (now.unix_timestamp_nanos() / 1_000_000) as i64;
        let index = Entity::new(INDEX_PARTITION, format!("{inverted:019}-{id}"))
            .with("scan", Value::String(id.clone()));
        self.table.upsert(&index, WriteMode::Replace).await?;
        Ok(())
    }

    /// Reads a scan record.
    pub async fn scan(&self, id: &str) -> Result<Option<ScanRecord>, LedgerError> {
        if !is_scan_id(id) {
            return Ok(None);
        }
        match self.table.get_entity(id, SCAN_ROW).await? {
            Some(entity) => record_from(id, &entity).map(Some),
            None => Ok(None),
        }
    }

    /// Marks a scan cancelled; its remaining work items are dropped as they arrive.
    pub async fn cancel(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<ScanRecord>, LedgerError> {
        let Some(mut record) = self.scan(id).await? else {
            return Ok(None);
        };
        if record.cancelled_at.is_none() {
            let update = Entity::new(id, SCAN_ROW).with("cancelledAt", date_value(now));
            self.table
                .update(&update, WriteMode::Merge, &IfMatch::Any)
                .await?;
            record.cancelled_at = Some(now);
        }
        Ok(Some(record))
    }

    /// Decides whether a delivered work item should run, and claims it if so.
    pub async fn begin(
        &self,
        item: &WorkItem,
        now: OffsetDateTime,
        lease: time::Duration,
    ) -> Result<Begin, LedgerError> {
        let Some(scan) = self.scan(&item.scan).await? else {
            return Ok(Begin::UnknownScan);
        };
        let id = item.id();
        let Some(pending) = self
            .table
            .get_entity(&item.scan, &format!("{PENDING}{id}"))
            .await?
        else {
            return match self
                .table
                .get_entity(&item.scan, &format!("{DONE}{id}"))
                .await?
            {
                Some(done) => Ok(Begin::AlreadyDone(stored_children(&done))),
                None if scan.cancelled_at.is_some() => Ok(Begin::Cancelled),
                None => Ok(Begin::UnknownItem),
            };
        };
        if scan.cancelled_at.is_some() {
            // Drop the item so the scan's pending count falls to zero.
            match self
                .table
                .delete(&item.scan, &format!("{PENDING}{id}"), &IfMatch::Any)
                .await
            {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Begin::Cancelled);
        }
        let lease_until = number(&pending, "leaseUntil");
        let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as u64;
        if lease_until > now_ms {
            return Ok(Begin::Busy(std::time::Duration::from_millis(
                lease_until - now_ms,
            )));
        }
        let attempt = number(&pending, "attempts") as u32 + 1;
        let mut claimed = pending.clone();
        claimed.properties.insert(
            "leaseUntil".into(),
            int(now_ms + lease.whole_milliseconds().max(0) as u64),
        );
        claimed
            .properties
            .insert("attempts".into(), int(u64::from(attempt)));
        let etag = IfMatch::Etag(pending.etag.clone().unwrap_or_default());
        let etag = match self.table.update(&claimed, WriteMode::Replace, &etag).await {
            Ok(etag) => etag,
            // Another delivery claimed it between our read and our write.
            Err(e) if matches!(e.status(), Some(412) | Some(404)) => {
                return Ok(Begin::Busy(lease.unsigned_abs()))
            }
            Err(e) => return Err(e.into()),
        };
        if scan.started_at.is_none() {
            let started =
                Entity::new(item.scan.clone(), SCAN_ROW).with("startedAt", date_value(now));
            self.table
                .update(&started, WriteMode::Merge, &IfMatch::Any)
                .await?;
        }
        Ok(Begin::Run(Box::new(Claim {
            scan,
            etag,
            attempt,
        })))
    }

    /// Records a finished step: its children pending, itself done with its counts, atomically.
    pub async fn finish(
        &self,
        item: &WorkItem,
        claim: &Claim,
        counts: StepCounts,
        children: &[WorkItem],
        now: OffsetDateTime,
    ) -> Result<Finish, LedgerError> {
        let id = item.id();
        let messages: Vec<String> = children.iter().map(WorkItem::encode).collect();
        let stored = serde_json::to_string(&messages).expect("strings serialise");
        let mut done = Entity::new(item.scan.clone(), format!("{DONE}{id}"))
            .with("rowsRead", int(counts.rows_read))
            .with("rowsActed", int(counts.rows_acted))
            .with("rowsSkipped", int(counts.rows_skipped))
            .with("partitions", int(counts.partitions))
            .with("queries", int(counts.queries))
            .with("durationMs", int(counts.duration_ms))
            .with("depth", int(u64::from(item.depth)))
            .with("finishedAt", date_value(now));
        if stored.len() <= MAX_STORED_CHILDREN_BYTES {
            done.properties
                .insert("children".into(), Value::String(stored));
        }
        // Children are upserted (repeating a partly recorded finish is harmless: no child can
        // have started before its parent is done). Any that do not fit the last transaction go
        // in earlier ones; the last always holds the step's own two entities, so the item is
        // marked done only once every child is recorded.
        let mut children: Vec<Operation> = children
            .iter()
            .map(|c| Operation::UpsertReplace(pending_entity(c)))
            .collect();
        let own_room = 100 - 2;
        let tail_start = children.len().saturating_sub(own_room);
        let tail: Vec<Operation> = children.split_off(tail_start);
        for chunk in children.chunks(100) {
            self.table.submit_transaction(chunk).await?;
        }
        let delete_index = tail.len();
        let mut last = tail;
        last.push(Operation::Delete {
            partition_key: item.scan.clone(),
            row_key: format!("{PENDING}{id}"),
            if_match: IfMatch::Etag(claim.etag.clone()),
        });
        last.push(Operation::Insert(done));
        if let Err(e) = self.table.submit_transaction(&last).await {
            let lost_claim = matches!(e.kind(), ErrorKind::Batch { index, error }
                if *index == delete_index && matches!(error.status, 404 | 412));
            if lost_claim {
                return Ok(Finish::AlreadyFinished);
            }
            return Err(e.into());
        }
        Ok(Finish::Recorded)
    }

    /// Records a failed attempt: the error for the status, the lease released. On the final
    /// attempt (the message goes to the poison queue) the item is marked failed for good.
    pub async fn fail(
        &self,
        item: &WorkItem,
        claim: &Claim,
        error: &str,
        final_attempt: bool,
        now: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let id = item.id();
        let pending_key = format!("{PENDING}{id}");
        let error: String = error.chars().take(2000).collect();
        if final_attempt {
            let failed = Entity::new(item.scan.clone(), format!("{FAILED}{id}"))
                .with("error", Value::String(error))
                .with("attempts", int(u64::from(claim.attempt)))
                .with("message", Value::String(item.encode()))
                .with("finishedAt", date_value(now));
            let operations = [
                Operation::Delete {
                    partition_key: item.scan.clone(),
                    row_key: pending_key,
                    if_match: IfMatch::Etag(claim.etag.clone()),
                },
                Operation::Insert(failed),
            ];
            match self.table.submit_transaction(&operations).await {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.kind(), ErrorKind::Batch { index: 0, .. }) => Ok(()),
                Err(e) => Err(e.into()),
            }
        } else {
            let released = Entity::new(item.scan.clone(), pending_key)
                .with("leaseUntil", int(0))
                .with("lastError", Value::String(error));
            match self
                .table
                .update(
                    &released,
                    WriteMode::Merge,
                    &IfMatch::Etag(claim.etag.clone()),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.status(), Some(404) | Some(412)) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
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
        .with("at", date_value(now));
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
                if let Some(record) = self.scan(&id).await? {
                    records.push(record);
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

    /// Every entry of a scan's partition: its record and work items.
    pub(crate) async fn entries(&self, id: &str) -> Result<Vec<Entity>, LedgerError> {
        Ok(self
            .table
            .query_all(&Query::filtered(Filter::partition_key(Comparison::Eq, id)))
            .await?)
    }
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

/// Whether a ledger row is a pending work item.
pub(crate) fn is_pending(row_key: &str) -> bool {
    row_key.starts_with(PENDING)
}

fn pending_entity(item: &WorkItem) -> Entity {
    Entity::new(item.scan.clone(), format!("{PENDING}{}", item.id()))
        .with("message", Value::String(item.encode()))
        .with("depth", int(u64::from(item.depth)))
        .with("attempts", int(0))
        .with("leaseUntil", int(0))
}

fn stored_children(done: &Entity) -> Vec<String> {
    text(done, "children")
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default()
}

fn record_from(id: &str, entity: &Entity) -> Result<ScanRecord, LedgerError> {
    let spec = text(entity, "spec")
        .ok_or_else(|| LedgerError::Corrupt(format!("scan {id}"), "no spec".into()))?;
    let spec: ScanSpec = serde_json::from_str(&spec)
        .map_err(|e| LedgerError::Corrupt(format!("scan {id}"), e.to_string()))?;
    Ok(ScanRecord {
        id: id.to_string(),
        spec,
        created_at: date(entity, "createdAt").unwrap_or(OffsetDateTime::UNIX_EPOCH),
        started_at: date(entity, "startedAt"),
        cancelled_at: date(entity, "cancelledAt"),
    })
}

/// Sorts a scan's entries into counts and errors (used by the status).
pub(crate) struct Tally {
    pub counts: StepCounts,
    pub done: u64,
    pub pending: u64,
    pub failed: u64,
    pub retrying: u64,
    pub errors: Vec<(String, String, u64)>,
    pub last_finished: Option<OffsetDateTime>,
}

pub(crate) fn tally(entries: &[Entity]) -> Tally {
    let mut t = Tally {
        counts: StepCounts::default(),
        done: 0,
        pending: 0,
        failed: 0,
        retrying: 0,
        errors: Vec::new(),
        last_finished: None,
    };
    for e in entries {
        let finished = date(e, "finishedAt");
        if let Some(id) = e.row_key.strip_prefix(DONE) {
            let _ = id;
            t.done += 1;
            t.counts.rows_read += number(e, "rowsRead");
            t.counts.rows_acted += number(e, "rowsActed");
            t.counts.rows_skipped += number(e, "rowsSkipped");
            t.counts.partitions += number(e, "partitions");
            t.counts.queries += number(e, "queries");
            t.counts.duration_ms = t.counts.duration_ms.max(number(e, "durationMs"));
        } else if let Some(id) = e.row_key.strip_prefix(FAILED) {
            t.failed += 1;
            t.errors.push((
                id.to_string(),
                text(e, "error").unwrap_or_default(),
                number(e, "attempts"),
            ));
        } else if e.row_key.starts_with(PENDING) {
            t.pending += 1;
            if text(e, "lastError").is_some() {
                t.retrying += 1;
            }
            continue;
        } else {
            continue;
        }
        if finished > t.last_finished {
            t.last_finished = finished;
        }
    }
    t
}
