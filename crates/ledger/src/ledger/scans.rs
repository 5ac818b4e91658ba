//! A scan's own rows: its record (the request, and when it started, was cancelled, paused...),
//! its entry in the index of scans newest first, its listing among the scans in flight (read
//! and settled by `active`), and the refused messages the scans list shows.

use serde::Serialize;
use time::OffsetDateTime;

use super::{
    format_time, is_scan_id, Ledger, LedgerError, ACTIVE_PARTITION, INDEX_PARTITION,
    REJECTED_PARTITION,
};
use crate::rows::{
    self, date, pending_key, shard_of, text, PendingRow, ScanRow, Tallies, LEDGER_FORMAT, SHARDS,
};
use crate::work_item::WorkItem;
use tablescan_api::ScanSpec;
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::{Entity, Value};
use tablescan_storage::table::filter::{Comparison, Filter};
use tablescan_storage::table::query::Query;
use tablescan_storage::table::WriteMode;
use tablescan_storage::{ErrorKind, Reason};

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

impl ScanRecord {
    /// Whether the scan is paused: paused, and not resumed since.
    pub fn is_paused(&self) -> bool {
        rows::is_paused(self.paused_at, self.resumed_at)
    }
}

/// What `create_scan` did.
#[derive(Debug)]
pub enum Created {
    New,
    /// A scan with this id existed already; nothing was written.
    Existing(Box<ScanRecord>),
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

/// How stale a process's knowledge of a scan (its cap, whether it was cancelled) may be: a
/// cancel stops the steps of other processes within this long. One read of the scan row per
/// scan per process this often ([`Ledger::scan`]): 20 entities a second at 100 processes. Here,
/// beside the read, so that its cost can be measured apart from the handler
/// (`crates/pace/tests/hundred_processes.rs`); the handler names it
/// `functions::app::CANCEL_CHECK_EVERY`.
pub const CANCEL_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl Ledger {
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
        self.index_scan(id, created_at).await?;
        Ok(created)
    }

    /// Writes scan `id`'s row of the scans' index (newest first), the last write of a start:
    /// written again by a start retried after a crash, and by a schedule finishing the start
    /// of an interrupted occurrence.
    pub async fn index_scan(
        &self,
        id: &str,
        created_at: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let index = Entity::new(INDEX_PARTITION, index_key(id, created_at))
            .with("scan", Value::String(id.to_string()));
        self.table.upsert(&index, WriteMode::Replace).await?;
        Ok(())
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

    /// Lists scan `id` as in flight. Written before the scan itself, so that a scan can never
    /// exist unlisted; a listing whose scan was never created is dropped by the next sweep.
    pub(crate) async fn list_active(&self, id: &str) -> Result<(), LedgerError> {
        self.table()
            .upsert(&Entity::new(ACTIVE_PARTITION, id), WriteMode::Replace)
            .await?;
        Ok(())
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
            .filter(|c| !tablescan_storage::names::is_forbidden_key_char(*c))
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
