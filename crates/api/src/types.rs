//! The scan request's types: a request as `POST /api/scans` takes it once validated, which is
//! also the form the ledger stores (through the derived serde: a stored spec is read back as it
//! was written, never validated again) and the form a status shows (`job::status`).

use serde::Serialize;
use serde_json::{Map, Value};

use tablescan_engine::keys::KeyRange;
use tablescan_engine::step::Strategy;

/// The app setting used when a request names no connection.
pub const DEFAULT_CONNECTION: &str = "AzureWebJobsStorage";
/// The most properties a `select` may name (the service's limit is 255 including keys).
pub const MAX_SELECT: usize = 252;

/// A validated scan request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScanSpec {
    pub table: String,
    pub connection: String,
    pub scope: Scope,
    pub strategy: Strategy,
    pub page_size: u16,
    /// Properties to read besides the keys; `None` for all of them.
    pub select: Option<Vec<String>>,
    pub action: ActionSpec,
    /// The most entities per second the scan may move, rows read plus rows written, summed
    /// over every instance that runs it; `None` for no cap of its own (then it goes as fast as
    /// the accounts take, backing off when they say they are busy). Resolved when the scan
    /// starts: a request that names none gets the app's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rows_per_second: Option<u32>,
    /// Reads and counts what the action would do, and writes nothing (see `functions::step`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// How many rows the action may fail on (each reported with its keys) before the scan ends
    /// `failed` rather than `succeeded`; `None` for no limit, 0 for none at all. The scan
    /// still runs to its end, so its counts say what was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_row_failures: Option<u64>,
    /// Only rows that satisfy this OData filter, as this client writes it (parsed and written
    /// back when the scan started; see `storage::table::filter_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Only rows last written before a moment, given as an age and resolved once when the scan
    /// started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<OlderThan>,
    /// An import: the rows come from an export's blobs, not from `table` (which then names
    /// the table that was exported, for the record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<ImportSource>,
}

/// `olderThan`: rows whose Timestamp (their last write) lies before `before`, which was `age`
/// before the scan started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OlderThan {
    /// As the request gave it: an ISO 8601 duration such as `P90D` or `PT12H`.
    pub age: String,
    /// The moment it was resolved to, in the form of the scan's dates.
    pub before: String,
}

/// Which rows a scan covers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct Scope {
    /// Only PartitionKeys that start with this.
    pub prefix: String,
    /// Only PartitionKeys after this one (exclusive).
    pub after: Option<String>,
    /// Only PartitionKeys before this one (exclusive).
    pub before: Option<String>,
    /// Only rows whose RowKey starts with this, after `rowAfter` and before `rowBefore`
    /// (exclusive): for tables whose RowKeys carry a time or a type. Applied by the service as
    /// a condition on every row it looks at (the scan still reads every partition in scope).
    #[serde(
        rename = "rowPrefix",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub row_prefix: String,
    #[serde(rename = "rowAfter", default, skip_serializing_if = "Option::is_none")]
    pub row_after: Option<String>,
    #[serde(rename = "rowBefore", default, skip_serializing_if = "Option::is_none")]
    pub row_before: Option<String>,
}

impl Scope {
    /// The RowKeys the scope allows.
    pub fn row_keys(&self) -> KeyRange {
        KeyRange::with_prefix(&self.row_prefix).intersect(&KeyRange::between(
            self.row_after.as_deref(),
            self.row_before.as_deref(),
        ))
    }
}

/// What a scan does with each row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ActionSpec {
    Count,
    Copy {
        table: String,
        connection: String,
        /// What happens to a row the target holds already.
        #[serde(default, skip_serializing_if = "CopyMode::is_replace")]
        mode: CopyMode,
    },
    Enqueue {
        /// The queue, or the first of `queues`.
        queue: String,
        /// Every queue, when the rows are spread over several (empty for one): each row goes to
        /// the queue picked by a hash of its PartitionKey, so that the queues' ~2,000 messages
        /// per second each add up.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        queues: Vec<String>,
        connection: String,
        per: Per,
        encoding: Encoding,
        /// 1: each message holds one row as a JSON object. More: each holds a JSON array of
        /// up to this many rows (fewer where the 64 KiB message limit comes first), so that a
        /// queue's ~2,000 messages per second carry that many times more rows.
        #[serde(
            rename = "rowsPerMessage",
            default = "one_row_per_message",
            skip_serializing_if = "is_one_row_per_message"
        )]
        rows_per_message: u16,
    },
    Delete,
    /// Changes every row in place, each only if unchanged since it was read.
    Update {
        /// Properties to write, in the entity JSON form the enqueue action writes (values, with
        /// `Name@odata.type` annotations where JSON cannot tell the type).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        set: Map<String, Value>,
        /// Properties to take away (the row is then replaced by itself without them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remove: Vec<String>,
    },
    PartitionKeys {
        queue: String,
        connection: String,
        encoding: Encoding,
    },
    /// Writes every row into blobs of a container, one blob per step, and a manifest listing
    /// them once the scan succeeds (see `actions::export` and `functions::manifest`).
    Export {
        container: String,
        /// Where in the container: every blob's name starts with it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        prefix: String,
        connection: String,
        #[serde(default, skip_serializing_if = "is_gzip")]
        compression: Compression,
    },
}

fn is_gzip(compression: &Compression) -> bool {
    compression.is_gzip()
}

/// How an export's data blobs are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    /// gzip, a member per page (the default: table rows compress five to ten times).
    #[default]
    Gzip,
    /// Plain newline-delimited JSON.
    None,
}

impl Compression {
    /// The data blobs' name ending.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::Gzip => "ndjson.gz",
            Compression::None => "ndjson",
        }
    }

    pub fn is_gzip(&self) -> bool {
        *self == Compression::Gzip
    }
}

/// Where an import reads from: an export written by the export action, as its manifest
/// describes it (read when the import starts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ImportSource {
    pub container: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    pub connection: String,
    /// What the manifest said when the import started; `None` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<ManifestSummary>,
}

/// The parts of an export's manifest an import needs to plan and to report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestSummary {
    /// The table that was exported, and the scan that exported it.
    pub table: String,
    pub scan: String,
    pub rows: u64,
    pub blobs: u64,
    /// How many manifest parts list the blobs (each a work item of the import's first steps).
    pub parts: u32,
    pub compression: Compression,
}

/// What a copy does with a row the target table holds already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyMode {
    /// Replaces it whole (the copy's row, nothing else).
    #[default]
    Replace,
    /// Merges the copied properties into it; properties only the target has are kept.
    Merge,
    /// Keeps it as it is; only rows the target lacks are written.
    Insert,
}

impl CopyMode {
    fn is_replace(&self) -> bool {
        *self == CopyMode::Replace
    }
}

/// The most queues an enqueue may spread its rows over.
pub const MAX_QUEUES: usize = 64;

/// The most rows one enqueued message may hold (a page).
pub const MAX_ROWS_PER_MESSAGE: u16 = 1000;

fn one_row_per_message() -> u16 {
    1
}

fn is_one_row_per_message(rows: &u16) -> bool {
    *rows == 1
}

/// One message per row or per partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Per {
    Row,
    Partition,
}

/// How enqueued messages are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    /// Base64, what a Functions queue trigger expects by default.
    Base64,
    /// The JSON text as it is.
    None,
}

impl ScanSpec {
    /// Whether the scan wants one row per partition (and reads keys only).
    pub fn reads_partition_keys(&self) -> bool {
        matches!(
            self.action,
            ActionSpec::PartitionKeys { .. }
                | ActionSpec::Enqueue {
                    per: Per::Partition,
                    ..
                }
        )
    }
}

impl ActionSpec {
    /// The queues an enqueue or partition-keys action writes to, first to last.
    pub fn target_queues(&self) -> Vec<&str> {
        match self {
            ActionSpec::Enqueue { queue, queues, .. } if queues.is_empty() => vec![queue],
            ActionSpec::Enqueue { queues, .. } => queues.iter().map(String::as_str).collect(),
            ActionSpec::PartitionKeys { queue, .. } => vec![queue],
            _ => Vec::new(),
        }
    }
}

impl ScanSpec {
    /// Whether `other` is the same request: equal, but for the moment `olderThan` was resolved
    /// to (a start retried later resolves it again).
    pub fn same_request(&self, other: &ScanSpec) -> bool {
        let age_only = |spec: &ScanSpec| ScanSpec {
            older_than: spec.older_than.as_ref().map(|o| OlderThan {
                age: o.age.clone(),
                before: String::new(),
            }),
            ..spec.clone()
        };
        age_only(self) == age_only(other)
    }
}
