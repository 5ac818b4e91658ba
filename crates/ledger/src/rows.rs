//! The ledger's rows as typed values: every row key and property name of a scan's partition is
//! written here and nowhere else.
//!
//! A scan's partition (PartitionKey = scan id) holds:
//! - `scan`: the request and the scan's dates ([`ScanRow`]);
//! - `counter:00` to `counter:15`: the scan's running totals, in [`SHARDS`] shards
//!   ([`Tallies`]), each updated inside the transaction that changes what it counts;
//! - `pending:<item>`: a work item not finished yet, with its queue message ([`PendingRow`]);
//! - `done:<item>`: a finished item, with its counts and its children's ids ([`DoneRow`]);
//! - `failed:<item>`: an item that failed for good, with the cause ([`FailedRow`]).
//! - `rows:<item>`: rows a step could not act on, and a dry run's sample (`job::notes`);
//! - `pace:00` to `pace:15`: the slices of a capped scan's cap, each leased by one handler
//!   process at a time, with what it used of it lately (see `job::slices`).

use time::OffsetDateTime;

use tablescan_storage::table::entity::{EdmDateTime, Entity, Value};
use tablescan_storage::table::filter::{Comparison, Filter};

/// The layout written by this version; a scan row without it was written by an earlier one.
pub const LEDGER_FORMAT: u64 = 2;
/// How many counter shards a scan has. Finishing steps spread their updates over them, so that
/// concurrent finishes rarely contend for one entity; a status read costs one query of this
/// many entities.
pub const SHARDS: u8 = 16;

pub const SCAN_ROW: &str = "scan";
/// The scan row's property of the last status read's re-drive look.
const REDRIVE_LOOKED_AT: &str = "redriveLookedAt";
const LEARNED_CAP: &str = "learnedCap";
const PAUSED_AT: &str = "pausedAt";
const RESUMED_AT: &str = "resumedAt";
const RESUME_FROM: &str = "resumeFrom";
const LEARN_ROUND_AT: &str = "learnRoundAt";
/// The row of a scan's rounds of learning its cap (see `job::learning`): outside the slices'
/// key range (`pace:00` to `pace:15`), so that reading the slices reads 16 rows at most.
pub const LEARN_ROW: &str = "pace~learn";
const PENDING: &str = "pending:";
const DONE: &str = "done:";
const FAILED: &str = "failed:";
const COUNTER: &str = "counter:";
const PACE: &str = "pace:";
const ROWS: &str = "rows:";
const BLOB: &str = "blob:";

/// The row key of a pending item.
pub fn pending_key(item: &str) -> String {
    format!("{PENDING}{item}")
}

/// The row key of a done item.
pub fn done_key(item: &str) -> String {
    format!("{DONE}{item}")
}

/// The row key of an item that failed for good.
pub fn failed_key(item: &str) -> String {
    format!("{FAILED}{item}")
}

/// The row key of counter shard `shard`.
pub fn counter_key(shard: u8) -> String {
    format!("{COUNTER}{shard:02}")
}

/// The row keys that start with `prefix` are those in `[prefix, prefix with its last
/// character's successor)`; the prefixes above all end in ':', whose successor is ';'.
pub fn key_range(prefix: &str) -> (String, String) {
    let stem = prefix.strip_suffix(':').unwrap_or(prefix);
    (prefix.to_string(), format!("{stem};"))
}

/// The rows of scan `scan` whose keys lie in `range` (one of the ranges below).
pub fn rows_of(scan: &str, (low, high): (String, String)) -> Filter {
    Filter::partition_key(Comparison::Eq, scan)
        .and(Filter::row_key(Comparison::Ge, &low))
        .and(Filter::row_key(Comparison::Lt, &high))
}

/// The row key of the rows a step noted.
pub fn rows_key(item: &str) -> String {
    format!("{ROWS}{item}")
}

/// The row key of the blob an export step wrote (see `job::exports`).
pub fn blob_key(item: &str) -> String {
    format!("{BLOB}{item}")
}

/// The row key of one slice of a scan's cap (see `job::slices`).
pub fn pace_key(slice: u16) -> String {
    format!("{PACE}{slice:02}")
}

/// The key range of the counter shards, of the pending rows, of the failed rows and of the
/// slices of the scan's cap.
pub fn counter_range() -> (String, String) {
    key_range(COUNTER)
}
pub fn pending_range() -> (String, String) {
    key_range(PENDING)
}
pub fn failed_range() -> (String, String) {
    key_range(FAILED)
}
pub fn pace_range() -> (String, String) {
    key_range(PACE)
}
pub fn rows_range() -> (String, String) {
    key_range(ROWS)
}
pub fn blob_range() -> (String, String) {
    key_range(BLOB)
}

/// The item id behind a pending, done or failed row key.
pub fn item_of(row_key: &str) -> Option<&str> {
    row_key
        .strip_prefix(PENDING)
        .or_else(|| row_key.strip_prefix(DONE))
        .or_else(|| row_key.strip_prefix(FAILED))
}

/// The shard an item's finish first tries to count in: spread evenly because item ids are
/// hashes.
pub fn shard_of(item: &str) -> u8 {
    item.bytes()
        .fold(0u8, |acc, b| acc.wrapping_mul(31).wrapping_add(b))
        % SHARDS
}

/// The shard a finish of `item` tries after losing `shard` to another finish for the
/// `conflict`th time: another one, chosen by the item and the count, so that the finishes
/// that lost one shard together scatter over the others instead of queueing on it (each
/// round of that queue let one of them through: a finish at a simulated scan's ramp lost its
/// shard up to 31 times in a row, about 2 s a round while the account was at its limit). Any
/// shard counts alike: a status sums them all.
pub fn next_shard(shard: u8, item: &str, conflict: u32) -> u8 {
    let mixed = item
        .bytes()
        .chain(conflict.to_le_bytes())
        .fold(2_166_136_261u32, |acc, b| {
            (acc ^ u32::from(b)).wrapping_mul(16_777_619)
        });
    let step = 1 + (mixed % u32::from(SHARDS - 1)) as u8;
    (shard + step) % SHARDS
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

pub(crate) fn date(entity: &Entity, name: &str) -> Option<OffsetDateTime> {
    match entity.properties.get(name) {
        Some(Value::DateTime(t)) => Some(t.time()),
        _ => None,
    }
}

pub(crate) fn date_value(time: OffsetDateTime) -> Value {
    Value::DateTime(EdmDateTime::new(time))
}

pub(crate) fn int(n: u64) -> Value {
    Value::Int64(n.min(i64::MAX as u64) as i64)
}

/// Milliseconds since the Unix epoch, the unit of the ledger's lease and re-drive times.
pub fn millis(time: OffsetDateTime) -> u64 {
    (time.unix_timestamp_nanos() / 1_000_000).max(0) as u64
}

/// Why an export's manifest could not be written (yet), on its scan row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ManifestTrouble {
    /// The last attempt's error.
    pub error: Option<String>,
    /// When the first failed attempt was.
    pub since: Option<OffsetDateTime>,
    /// When the scan gave up: attempts failed for longer than its outage window.
    pub gave_up_at: Option<OffsetDateTime>,
}

impl ManifestTrouble {
    fn from_entity(e: &Entity) -> Self {
        ManifestTrouble {
            error: text(e, "manifestError"),
            since: date(e, "manifestFailingSince"),
            // A retry clears it by writing the epoch (a merge cannot remove a property).
            gave_up_at: date(e, "manifestGaveUpAt").filter(|t| *t > OffsetDateTime::UNIX_EPOCH),
        }
    }

    /// The merge of the scan row that a retry writes: not given up, and attempts count their
    /// time again from `now`.
    pub fn cleared(scan: &str, now: OffsetDateTime) -> Entity {
        Entity::new(scan, SCAN_ROW)
            .with("manifestFailingSince", date_value(now))
            .with("manifestGaveUpAt", date_value(OffsetDateTime::UNIX_EPOCH))
    }

    fn write_into(&self, e: &mut Entity) {
        if let Some(error) = &self.error {
            e.properties
                .insert("manifestError".into(), Value::String(error.clone()));
        }
        for (name, time) in [
            ("manifestFailingSince", self.since),
            ("manifestGaveUpAt", self.gave_up_at),
        ] {
            if let Some(time) = time {
                e.properties.insert(name.into(), date_value(time));
            }
        }
    }

    /// The merge of the scan row that records a failed attempt at `now`, given the trouble
    /// recorded so far: gives up once attempts have failed for `give_up_after`.
    pub fn failed_attempt(
        &self,
        scan: &str,
        error: &str,
        now: OffsetDateTime,
        give_up_after: time::Duration,
    ) -> Entity {
        let since = self.since.unwrap_or(now);
        let next = ManifestTrouble {
            error: Some(error.chars().take(2000).collect()),
            since: Some(since),
            gave_up_at: self
                .gave_up_at
                .or((now - since >= give_up_after).then_some(now)),
        };
        let mut e = Entity::new(scan, SCAN_ROW);
        next.write_into(&mut e);
        e
    }
}

/// The `scan` row.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanRow {
    /// The request, as JSON.
    pub spec: String,
    pub format: u64,
    pub created_at: Option<OffsetDateTime>,
    pub started_at: Option<OffsetDateTime>,
    pub cancelled_at: Option<OffsetDateTime>,
    /// When the scan was last paused and last resumed: paused while the pause is the later
    /// (see [`is_paused`]).
    pub paused_at: Option<OffsetDateTime>,
    pub resumed_at: Option<OffsetDateTime>,
    /// A resume's place among the scan's pending rows: the last row key whose message it sent
    /// (or the start of the pending rows), while messages are left to send; empty when none.
    pub resume_from: Option<String>,
    /// An export's: when its manifest was written.
    pub manifest_at: Option<OffsetDateTime>,
    /// An export's, while its manifest cannot be written: why, since when, and when the
    /// scan gave up on it (it is failed then).
    pub manifest_trouble: ManifestTrouble,
    /// When a status read last took its turn at the re-drive look (see `job::redrive`).
    pub redrive_looked_at: Option<OffsetDateTime>,
    /// The cap learned from the accounts' refusals, entities per second (see `job::learning`).
    pub learned_cap: Option<f64>,
    /// When the scan's last learning round opened (epoch ms; 0 before any): every process
    /// running the scan reads it with the scan and reports into the round.
    pub learn_round_ms: u64,
}

impl ScanRow {
    pub fn new(spec: String, created_at: OffsetDateTime) -> Self {
        ScanRow {
            spec,
            format: LEDGER_FORMAT,
            created_at: Some(created_at),
            started_at: None,
            cancelled_at: None,
            paused_at: None,
            resumed_at: None,
            resume_from: None,
            manifest_at: None,
            manifest_trouble: ManifestTrouble::default(),
            redrive_looked_at: None,
            learned_cap: None,
            learn_round_ms: 0,
        }
    }

    pub fn to_entity(&self, scan: &str) -> Entity {
        let mut e = Entity::new(scan, SCAN_ROW)
            .with("spec", Value::String(self.spec.clone()))
            .with("ledgerFormat", int(self.format));
        for (name, time) in [
            ("createdAt", self.created_at),
            ("startedAt", self.started_at),
            ("cancelledAt", self.cancelled_at),
            (PAUSED_AT, self.paused_at),
            (RESUMED_AT, self.resumed_at),
            ("manifestWrittenAt", self.manifest_at),
            (REDRIVE_LOOKED_AT, self.redrive_looked_at),
        ] {
            if let Some(time) = time {
                e.properties.insert(name.into(), date_value(time));
            }
        }
        if let Some(from) = &self.resume_from {
            e.properties
                .insert(RESUME_FROM.into(), Value::String(from.clone()));
        }
        self.manifest_trouble.write_into(&mut e);
        if let Some(cap) = self.learned_cap {
            e.properties.insert(LEARNED_CAP.into(), Value::Double(cap));
        }
        if self.learn_round_ms > 0 {
            e.properties
                .insert(LEARN_ROUND_AT.into(), int(self.learn_round_ms));
        }
        e
    }

    pub fn from_entity(e: &Entity) -> Option<Self> {
        Some(ScanRow {
            spec: text(e, "spec")?,
            format: number(e, "ledgerFormat").max(1),
            created_at: date(e, "createdAt"),
            started_at: date(e, "startedAt"),
            cancelled_at: date(e, "cancelledAt"),
            paused_at: date(e, PAUSED_AT),
            resumed_at: date(e, RESUMED_AT),
            resume_from: text(e, RESUME_FROM).filter(|from| !from.is_empty()),
            manifest_at: date(e, "manifestWrittenAt"),
            manifest_trouble: ManifestTrouble::from_entity(e),
            redrive_looked_at: date(e, REDRIVE_LOOKED_AT),
            learned_cap: match e.properties.get(LEARNED_CAP) {
                Some(Value::Double(cap)) if cap.is_finite() && *cap >= 1.0 => Some(*cap),
                _ => None,
            },
            learn_round_ms: number(e, LEARN_ROUND_AT),
        })
    }

    /// The merge that tells every process running the scan that a learning round opened.
    pub fn learn_round(scan: &str, at_ms: u64) -> Entity {
        Entity::new(scan, SCAN_ROW).with(LEARN_ROUND_AT, int(at_ms))
    }

    /// The merge that records a cap learned from the accounts' refusals.
    pub fn learned(scan: &str, cap: f64) -> Entity {
        Entity::new(scan, SCAN_ROW).with(LEARNED_CAP, Value::Double(cap))
    }

    /// The merge that records the first step's start.
    pub fn started(scan: &str, at: OffsetDateTime) -> Entity {
        Entity::new(scan, SCAN_ROW).with("startedAt", date_value(at))
    }

    /// The merge that records a status read's turn at the re-drive look.
    pub fn redrive_looked(scan: &str, at: OffsetDateTime) -> Entity {
        Entity::new(scan, SCAN_ROW).with(REDRIVE_LOOKED_AT, date_value(at))
    }

    /// The merge that records a cancel.
    pub fn cancelled(scan: &str, at: OffsetDateTime) -> Entity {
        Entity::new(scan, SCAN_ROW).with("cancelledAt", date_value(at))
    }

    /// The merge that records a pause.
    pub fn paused(scan: &str, at: OffsetDateTime) -> Entity {
        Entity::new(scan, SCAN_ROW).with(PAUSED_AT, date_value(at))
    }

    /// The merge that records a resume, whose messages are sent from the first pending row.
    pub fn resumed(scan: &str, at: OffsetDateTime) -> Entity {
        Entity::new(scan, SCAN_ROW)
            .with(RESUMED_AT, date_value(at))
            .with(RESUME_FROM, Value::String(PENDING.to_string()))
    }

    /// The merge that records how far a resume has sent messages (`None`: all sent).
    pub fn resume_reached(scan: &str, from: Option<&str>) -> Entity {
        Entity::new(scan, SCAN_ROW).with(
            RESUME_FROM,
            Value::String(from.unwrap_or_default().to_string()),
        )
    }
}

/// Whether a scan paused at `paused_at` and resumed at `resumed_at` is paused now.
pub fn is_paused(paused_at: Option<OffsetDateTime>, resumed_at: Option<OffsetDateTime>) -> bool {
    match (paused_at, resumed_at) {
        (Some(paused), Some(resumed)) => paused > resumed,
        (paused, _) => paused.is_some(),
    }
}

/// A `pending:<item>` row.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingRow {
    /// The work item's queue message, to send it again.
    pub message: String,
    pub depth: u64,
    /// How many times a step has claimed it.
    pub attempts: u64,
    /// Until when (ms since the epoch) a step holds it; 0 when free.
    pub lease_until: u64,
    /// The last failed attempt's cause.
    pub last_error: Option<String>,
    /// When its message was last sent again by a re-drive (ms since the epoch).
    pub redriven_at: u64,
    /// Set on children written ahead of their parent's finishing transaction (a finish with
    /// more children than one transaction holds): such a row counts only once the parent's
    /// done row lists it. See `Ledger::finish`.
    pub parent: Option<String>,
    /// When its current run of transient failures began (ms since the epoch); cleared by an
    /// attempt that fails otherwise.
    pub failing_since: Option<u64>,
    /// The token of the delivery that claimed it last (see `Claim`): how a delivery whose
    /// write applied but whose answer was lost tells its own write from another's.
    pub claimed_by: Option<String>,
    /// The row's etag and last write, when read from storage.
    pub etag: Option<String>,
    pub written_at: Option<OffsetDateTime>,
}

impl PendingRow {
    pub fn new(message: String, depth: u64) -> Self {
        PendingRow {
            message,
            depth,
            attempts: 0,
            lease_until: 0,
            last_error: None,
            redriven_at: 0,
            parent: None,
            failing_since: None,
            claimed_by: None,
            etag: None,
            written_at: None,
        }
    }

    pub fn to_entity(&self, scan: &str, item: &str) -> Entity {
        let mut e = Entity::new(scan, pending_key(item))
            .with("message", Value::String(self.message.clone()))
            .with("depth", int(self.depth))
            .with("attempts", int(self.attempts))
            .with("leaseUntil", int(self.lease_until));
        if let Some(error) = &self.last_error {
            e.properties
                .insert("lastError".into(), Value::String(error.clone()));
        }
        if self.redriven_at > 0 {
            e.properties
                .insert("redrivenAt".into(), int(self.redriven_at));
        }
        if let Some(parent) = &self.parent {
            e.properties
                .insert("parent".into(), Value::String(parent.clone()));
        }
        if let Some(since) = self.failing_since {
            e.properties.insert("failingSince".into(), int(since));
        }
        if let Some(token) = &self.claimed_by {
            e.properties
                .insert("claimedBy".into(), Value::String(token.clone()));
        }
        e
    }

    pub fn from_entity(e: &Entity) -> Option<Self> {
        Some(PendingRow {
            message: text(e, "message")?,
            depth: number(e, "depth"),
            attempts: number(e, "attempts"),
            lease_until: number(e, "leaseUntil"),
            last_error: text(e, "lastError"),
            redriven_at: number(e, "redrivenAt"),
            parent: text(e, "parent"),
            failing_since: Some(number(e, "failingSince")).filter(|&t| t > 0),
            claimed_by: text(e, "claimedBy"),
            etag: e.etag.clone(),
            written_at: e.timestamp.as_ref().map(EdmDateTime::time),
        })
    }

    /// Whether no step holds it at `now_ms`.
    pub fn is_free(&self, now_ms: u64) -> bool {
        self.lease_until <= now_ms
    }

    /// When it was last touched: written (created, claimed, released) or sent again.
    pub fn last_touched_ms(&self) -> u64 {
        self.written_at
            .map(millis)
            .unwrap_or(0)
            .max(self.redriven_at)
    }
}

/// A `done:<item>` row.
#[derive(Debug, Clone, PartialEq)]
pub struct DoneRow {
    pub counts: super::step_counts::StepCounts,
    pub depth: u64,
    pub finished_at: OffsetDateTime,
    /// The ids of the children it recorded, so a redelivery can look for unstarted ones;
    /// `None` when there were too many to store.
    pub children: Option<Vec<String>>,
    /// The token of the claim whose finish wrote it (none in rows of older versions).
    pub finished_by: Option<String>,
}

/// Children ids are stored in string properties of at most this many bytes of JSON each...
const MAX_STORED_CHILDREN_BYTES: usize = 60 * 1024;
/// ...and at most this many properties (an entity holds 1 MiB).
const MAX_CHILDREN_PROPERTIES: usize = 15;

fn children_property(n: usize) -> String {
    if n == 0 {
        "children".to_string()
    } else {
        format!("children{n}")
    }
}

impl DoneRow {
    pub fn to_entity(&self, scan: &str, item: &str) -> Entity {
        let c = &self.counts;
        let mut e = Entity::new(scan, done_key(item))
            .with("rowsRead", int(c.rows_read))
            .with("rowsActed", int(c.rows_acted))
            .with("rowsSkipped", int(c.rows_skipped))
            .with("rowsFailed", int(c.rows_failed))
            .with("partitions", int(c.partitions))
            .with("queries", int(c.queries))
            .with("durationMs", int(c.duration_ms))
            .with("depth", int(self.depth))
            .with("finishedAt", date_value(self.finished_at));
        if let Some(token) = &self.finished_by {
            e.properties
                .insert("finishedBy".into(), Value::String(token.clone()));
        }
        if let Some(children) = &self.children {
            // In properties of at most 60 KiB each (a string property holds 64 KiB): enough
            // for some 30,000 children, far more than a step makes.
            let mut part = Vec::new();
            let mut parts = Vec::new();
            let mut size = 2;
            for child in children {
                if size + child.len() + 3 > MAX_STORED_CHILDREN_BYTES && !part.is_empty() {
                    parts.push(std::mem::take(&mut part));
                    size = 2;
                }
                size += child.len() + 3;
                part.push(child.as_str());
            }
            parts.push(part);
            if parts.len() <= MAX_CHILDREN_PROPERTIES {
                for (n, part) in parts.iter().enumerate() {
                    let json = serde_json::to_string(part).expect("strings serialise");
                    e.properties
                        .insert(children_property(n), Value::String(json));
                }
            }
        }
        e
    }

    /// The token of the claim whose finish wrote done row `e`.
    pub fn finished_by(e: &Entity) -> Option<String> {
        text(e, "finishedBy")
    }

    /// The children ids of a done row; `None` if it stored none.
    pub fn children_of(e: &Entity) -> Option<Vec<String>> {
        let mut children = Vec::new();
        for n in 0..MAX_CHILDREN_PROPERTIES {
            let Some(json) = text(e, &children_property(n)) else {
                return (n > 0).then_some(children);
            };
            children.extend(serde_json::from_str::<Vec<String>>(&json).ok()?);
        }
        Some(children)
    }
}

/// A `failed:<item>` row.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedRow {
    pub error: String,
    pub attempts: u64,
    pub message: String,
    pub finished_at: OffsetDateTime,
}

impl FailedRow {
    pub fn to_entity(&self, scan: &str, item: &str) -> Entity {
        Entity::new(scan, failed_key(item))
            .with("error", Value::String(self.error.clone()))
            .with("attempts", int(self.attempts))
            .with("message", Value::String(self.message.clone()))
            .with("finishedAt", date_value(self.finished_at))
    }

    pub fn from_entity(e: &Entity) -> Option<(String, Self)> {
        let item = e.row_key.strip_prefix(FAILED)?.to_string();
        Some((
            item,
            FailedRow {
                error: text(e, "error").unwrap_or_default(),
                attempts: number(e, "attempts"),
                message: text(e, "message").unwrap_or_default(),
                finished_at: date(e, "finishedAt").unwrap_or(OffsetDateTime::UNIX_EPOCH),
            },
        ))
    }
}

/// A scan's running totals: one counter shard, or the sum of all of them.
///
/// Every field only grows, so a sum read from a consistent set of shards is the scan's state
/// at one moment. `created - done - failed - dropped` is the number of items not settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tallies {
    /// Items recorded pending: the root and every child of a finish.
    pub created: u64,
    pub done: u64,
    pub failed: u64,
    /// Items dropped unrun because the scan was cancelled.
    pub dropped: u64,
    pub rows_read: u64,
    pub rows_acted: u64,
    pub rows_skipped: u64,
    /// Rows the action could not act on (see `job::notes`).
    pub rows_failed: u64,
    pub partitions: u64,
    pub queries: u64,
    /// Attempts that failed and were tried again.
    pub attempts_failed: u64,
    /// Messages sent again by re-drives.
    pub redriven: u64,
    /// Failed items made pending again by a retry (each counted in `failed` before).
    pub retried: u64,
    /// Storage requests of steps answered "too busy" (503, or 500 Operation Timed Out),
    /// retried or not.
    pub throttled: u64,
    /// The longest step (the maximum, not a sum).
    pub longest_step_ms: u64,
    /// The latest finish (the maximum), ms since the epoch.
    pub last_finished_ms: u64,
    /// Blobs an export's steps wrote, and their bytes.
    pub blobs: u64,
    pub blob_bytes: u64,
}

const TALLY_FIELDS: [&str; 16] = [
    "created",
    "done",
    "failed",
    "dropped",
    "rowsRead",
    "rowsActed",
    "rowsSkipped",
    "rowsFailed",
    "partitions",
    "queries",
    "attemptsFailed",
    "redriven",
    "retried",
    "requestsThrottled",
    "blobs",
    "blobBytes",
];

impl Tallies {
    fn sums(&mut self) -> [&mut u64; 16] {
        [
            &mut self.created,
            &mut self.done,
            &mut self.failed,
            &mut self.dropped,
            &mut self.rows_read,
            &mut self.rows_acted,
            &mut self.rows_skipped,
            &mut self.rows_failed,
            &mut self.partitions,
            &mut self.queries,
            &mut self.attempts_failed,
            &mut self.redriven,
            &mut self.retried,
            &mut self.throttled,
            &mut self.blobs,
            &mut self.blob_bytes,
        ]
    }

    /// Adds `other` in: sums, and maxima for the longest step and the latest finish.
    pub fn add(&mut self, mut other: Tallies) {
        for (mine, theirs) in self.sums().into_iter().zip(other.sums()) {
            *mine = mine.saturating_add(*theirs);
        }
        self.longest_step_ms = self.longest_step_ms.max(other.longest_step_ms);
        self.last_finished_ms = self.last_finished_ms.max(other.last_finished_ms);
    }

    /// Items recorded but neither done, failed nor dropped (a retried item counts again).
    pub fn unsettled(&self) -> u64 {
        (self.created + self.retried).saturating_sub(self.done + self.failed + self.dropped)
    }

    /// Items failed for good and not retried since.
    pub fn failed_now(&self) -> u64 {
        self.failed.saturating_sub(self.retried)
    }

    pub fn to_entity(&self, scan: &str, shard: u8) -> Entity {
        let mut copy = *self;
        let mut e = Entity::new(scan, counter_key(shard));
        for (name, value) in TALLY_FIELDS.iter().zip(copy.sums()) {
            e.properties.insert((*name).into(), int(*value));
        }
        e.with("longestStepMs", int(self.longest_step_ms))
            .with("lastFinishedMs", int(self.last_finished_ms))
    }

    pub fn from_entity(e: &Entity) -> Self {
        let mut t = Tallies::default();
        for (name, value) in TALLY_FIELDS.iter().zip(t.sums()) {
            *value = number(e, name);
        }
        t.longest_step_ms = number(e, "longestStepMs");
        t.last_finished_ms = number(e, "lastFinishedMs");
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_entities() {
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let mut scan = ScanRow::new("{}".into(), now);
        scan.cancelled_at = Some(now);
        scan.paused_at = Some(now);
        scan.resumed_at = Some(now + time::Duration::SECOND);
        scan.resume_from = Some("pending:x".into());
        assert_eq!(ScanRow::from_entity(&scan.to_entity("s")), Some(scan));

        let mut pending = PendingRow::new("m".into(), 3);
        pending.parent = Some("p".into());
        pending.last_error = Some("e".into());
        pending.redriven_at = 7;
        pending.failing_since = Some(9);
        assert_eq!(
            PendingRow::from_entity(&pending.to_entity("s", "i")),
            Some(pending)
        );

        let tallies = Tallies {
            created: 1,
            done: 2,
            failed: 3,
            dropped: 4,
            rows_read: 5,
            rows_acted: 6,
            rows_skipped: 7,
            rows_failed: 16,
            partitions: 8,
            queries: 9,
            attempts_failed: 10,
            redriven: 11,
            retried: 14,
            throttled: 15,
            longest_step_ms: 12,
            last_finished_ms: 13,
            blobs: 17,
            blob_bytes: 18,
        };
        assert_eq!(Tallies::from_entity(&tallies.to_entity("s", 3)), tallies);

        let failed = FailedRow {
            error: "e".into(),
            attempts: 5,
            message: "m".into(),
            finished_at: now,
        };
        assert_eq!(
            FailedRow::from_entity(&failed.to_entity("s", "i")),
            Some(("i".to_string(), failed))
        );
    }

    #[test]
    fn many_children_are_stored_across_properties() {
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        for count in [0, 1, 5000] {
            let children: Vec<String> = (0..count).map(|n| format!("{n:024}")).collect();
            let done = DoneRow {
                counts: Default::default(),
                depth: 1,
                finished_at: now,
                children: Some(children.clone()),
                finished_by: None,
            };
            let entity = done.to_entity("s", "i");
            assert!(entity.json_len_upper_bound() < 1024 * 1024);
            assert_eq!(DoneRow::children_of(&entity), Some(children), "{count}");
        }
    }

    #[test]
    fn key_ranges_hold_exactly_their_rows() {
        let (low, high) = pending_range();
        for key in [pending_key("a"), pending_key("~~~"), pending_key("")] {
            assert!(low <= key && key < high, "{key}");
        }
        for key in [
            done_key("a"),
            failed_key("a"),
            counter_key(0),
            SCAN_ROW.into(),
        ] {
            assert!(!(low <= key && key < high), "{key}");
        }
        let (low, high) = counter_range();
        assert!((0..SHARDS).all(|s| low <= counter_key(s) && counter_key(s) < high));
    }

    #[test]
    fn shards_spread_item_ids() {
        let mut seen = [0u32; SHARDS as usize];
        for n in 0..1600u32 {
            let id = base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                ring::digest::digest(&ring::digest::SHA256, &n.to_le_bytes()).as_ref(),
            );
            seen[shard_of(&id) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (50..150).contains(&n)), "{seen:?}");
    }

    #[test]
    fn finishes_that_lost_one_shard_together_scatter_over_the_others() {
        let ids: Vec<String> = (0..4000u32)
            .map(|n| {
                base64::Engine::encode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    ring::digest::digest(&ring::digest::SHA256, &n.to_le_bytes()).as_ref(),
                )
            })
            .filter(|id| shard_of(id) == 3)
            .collect();
        assert!(ids.len() > 150, "{}", ids.len());
        for conflict in 0..3 {
            let mut seen = [0u32; SHARDS as usize];
            for id in &ids {
                let next = next_shard(3, id, conflict);
                assert!(next < SHARDS && next != 3, "{next}");
                seen[next as usize] += 1;
            }
            // Every other shard takes some, none more than a quarter.
            let most = ids.len() as u32 / 4;
            assert!(
                seen.iter().enumerate().all(|(s, &n)| if s == 3 {
                    n == 0
                } else {
                    n > 0 && n < most
                }),
                "{seen:?}"
            );
        }
    }

    #[test]
    fn unsettled_counts_what_is_neither_done_failed_nor_dropped() {
        let mut t = Tallies {
            created: 10,
            done: 6,
            failed: 1,
            dropped: 1,
            longest_step_ms: 5,
            ..Tallies::default()
        };
        assert_eq!(t.unsettled(), 2);
        t.add(Tallies {
            done: 2,
            longest_step_ms: 3,
            ..Tallies::default()
        });
        assert_eq!(t.unsettled(), 0);
        assert_eq!(t.longest_step_ms, 5);
    }
}
