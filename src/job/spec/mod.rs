//! A scan request, validated and normalised.
//!
//! Every field is checked before anything is created, and a refusal names the field
//! (`action.table`, `scope.after`, ...). Connections are names of app settings, never raw
//! connection strings: a request can only reach the accounts the app is configured with.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::scan::keys::{KeyProperty, KeyRange};
use crate::scan::step::Strategy;
use crate::storage::names::{
    first_dot_segment, validate_container_name, validate_key, validate_queue_name,
    validate_table_name, KeyKind,
};
use crate::storage::table::entity::{EdmDateTime, Entity};
use crate::storage::table::filter::{Comparison, Filter, Literal, Property};
use crate::storage::table::filter_text::{parse_filter, MAX_USER_COMPARISONS};

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

/// The cap of a scan whose request names none, unless the app setting
/// [`MAX_ROWS_PER_SECOND_SETTING`] says otherwise: none. A scan goes as fast as its accounts
/// take, backing off to just under where an account starts refusing (the storage client's
/// per-account back-off), as other bulk tools do; a cap is for those who want a hard limit.
pub const DEFAULT_MAX_ROWS_PER_SECOND: Option<u32> = None;
/// The app setting with the default cap: a whole number, or `unlimited`.
pub const MAX_ROWS_PER_SECOND_SETTING: &str = "TABLESCAN_MAX_ROWS_PER_SECOND";
/// The highest cap a request may name (far above what one account takes).
pub const MAX_RATE_CAP: u32 = 10_000_000;

/// A cap as the app setting gives it: a whole number from 1 to [`MAX_RATE_CAP`], or
/// `unlimited` (`None`).
pub fn parse_rate_cap(text: &str) -> Result<Option<u32>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_RATE_CAP).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "must be a whole number of entities per second from 1 to {MAX_RATE_CAP}, or \"unlimited\"; not {text:?}"
        )),
    }
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

/// A refused request: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

fn refuse<T>(field: &str, message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError {
        field: field.to_string(),
        message: message.into(),
    })
}

/// Looks up app settings by name.
pub use crate::storage::SettingLookup;

impl ScanSpec {
    /// One line saying what the scan does, for the log: the action and its target, the source,
    /// the scope and the cap; connections by setting name (never their value).
    pub fn summary(&self) -> String {
        let action = match &self.action {
            ActionSpec::Count => "count".to_string(),
            ActionSpec::Delete => "delete".to_string(),
            ActionSpec::Update { set, remove } => {
                let mut parts = Vec::new();
                let names: Vec<&str> = set
                    .keys()
                    .filter(|k| !k.contains('@'))
                    .map(String::as_str)
                    .collect();
                if !names.is_empty() {
                    parts.push(format!("set {}", names.join(", ")));
                }
                if !remove.is_empty() {
                    parts.push(format!("remove {}", remove.join(", ")));
                }
                format!("update ({})", parts.join("; "))
            }
            ActionSpec::Copy {
                table,
                connection,
                mode,
            } => format!(
                "copy ({}) into table {table:?} of {connection}",
                match mode {
                    CopyMode::Replace => "replace",
                    CopyMode::Merge => "merge",
                    CopyMode::Insert => "insert",
                }
            ),
            ActionSpec::Enqueue { connection, .. } => format!(
                "enqueue into {} of {connection}",
                quoted_list(&self.action.target_queues())
            ),
            ActionSpec::PartitionKeys {
                queue, connection, ..
            } => format!("partition-keys into queue {queue:?} of {connection}"),
            ActionSpec::Export {
                container,
                prefix,
                connection,
                ..
            } => format!("export into blobs {container}/{prefix}* of {connection}"),
        };
        if let Some(import) = &self.import {
            let dry_run = if self.dry_run { "DRY RUN of " } else { "" };
            return format!(
                "{dry_run}import of the export {}/{}* of {} ({}), {action}",
                import.container,
                import.prefix,
                import.connection,
                import
                    .manifest
                    .as_ref()
                    .map_or("manifest not read yet".to_string(), |m| {
                        format!("table {:?}, {} rows in {} blobs", m.table, m.rows, m.blobs)
                    }),
            );
        }
        let scope = &self.scope;
        let mut limits = Vec::new();
        if !scope.prefix.is_empty() {
            limits.push(format!("prefix {:?}", scope.prefix));
        }
        if let Some(after) = &scope.after {
            limits.push(format!("after {after:?}"));
        }
        if let Some(before) = &scope.before {
            limits.push(format!("before {before:?}"));
        }
        if !scope.row_prefix.is_empty() {
            limits.push(format!("RowKeys starting with {:?}", scope.row_prefix));
        }
        if let Some(after) = &scope.row_after {
            limits.push(format!("RowKeys after {after:?}"));
        }
        if let Some(before) = &scope.row_before {
            limits.push(format!("RowKeys before {before:?}"));
        }
        if let Some(older) = &self.older_than {
            limits.push(format!(
                "rows older than {} (before {})",
                older.age, older.before
            ));
        }
        if let Some(filter) = &self.filter {
            limits.push(format!("rows where {filter}"));
        }
        let scope = if limits.is_empty() {
            "every PartitionKey".to_string()
        } else {
            limits.join(", ")
        };
        let cap = self
            .max_rows_per_second
            .map_or("no cap".to_string(), |cap| {
                format!("at most {cap} entities/s")
            });
        let dry_run = if self.dry_run { "DRY RUN of " } else { "" };
        format!(
            "{dry_run}{action} over table {:?} of {}; {scope}; {cap}",
            self.table, self.connection
        )
    }

    /// Parses and validates a request body; a request that names no cap gets
    /// [`DEFAULT_MAX_ROWS_PER_SECOND`].
    pub fn parse(body: &str, settings: &dyn SettingLookup) -> Result<ScanSpec, SpecError> {
        Self::parse_with(body, settings, DEFAULT_MAX_ROWS_PER_SECOND)
    }

    /// Parses and validates a request body; a request that names no cap gets `default_cap`.
    pub fn parse_with(
        body: &str,
        settings: &dyn SettingLookup,
        default_cap: Option<u32>,
    ) -> Result<ScanSpec, SpecError> {
        Self::parse_at(body, settings, default_cap, time::OffsetDateTime::now_utc())
    }

    /// [`ScanSpec::parse_with`], resolving `olderThan` against `now`. Every connection the
    /// request names must be an app setting (or identity settings) that gives an account; a
    /// refusal says which and why, naming settings, never their values.
    pub fn parse_at(
        body: &str,
        settings: &dyn SettingLookup,
        default_cap: Option<u32>,
        now: time::OffsetDateTime,
    ) -> Result<ScanSpec, SpecError> {
        let spec = Self::parse_unresolved_at(body, default_cap, now)?;
        for used in spec.connection_uses() {
            if let Err(error) = crate::storage::connection::resolve(used.name, settings) {
                return refuse(used.field, error.to_string());
            }
        }
        Ok(spec)
    }

    /// [`ScanSpec::parse_at`] without looking the connections up: each is only checked to be
    /// a setting's name. For a caller that decides itself which connections may be used and
    /// what it tells the caller about the others (`functions::allowlist`).
    pub fn parse_unresolved_at(
        body: &str,
        default_cap: Option<u32>,
        now: time::OffsetDateTime,
    ) -> Result<ScanSpec, SpecError> {
        let value: Value = serde_json::from_str(body)
            .or_else(|e| refuse("body", format!("not valid JSON: {e}")))?;
        if let Some(path) = super::duplicate_keys::first_duplicate(body) {
            return refuse(
                &path,
                "is given twice; say it once (JSON parsers would silently keep the last)",
            );
        }
        let Value::Object(object) = value else {
            return refuse("body", "must be a JSON object");
        };
        let mut fields = Fields::new(object, "");
        let import = match fields.take("import") {
            None | Some(Value::Null) => None,
            Some(Value::Object(import)) => Some(parse_import(import)?),
            Some(_) => {
                return refuse(
                    "import",
                    "must be an object naming an export: {\"container\": ..., \"prefix\": ...}",
                )
            }
        };
        let (table, connection) = match &import {
            None => {
                let table = fields.required_string("table")?;
                validate_table_name(&table).or_else(|e| refuse("table", e.to_string()))?;
                (table, fields.connection("connection")?)
            }
            Some(import) => {
                for field in ["table", "connection"] {
                    if fields.take(field).is_some() {
                        return refuse(
                            field,
                            "an import reads the blobs of an export, not a table: leave it out \
                             (the target is the copy's action.table)",
                        );
                    }
                }
                (String::new(), import.connection.clone())
            }
        };
        let scope = match fields.take("scope") {
            None | Some(Value::Null) => Scope::default(),
            Some(Value::Object(scope)) => parse_scope(scope)?,
            Some(_) => return refuse("scope", "must be an object"),
        };
        let strategy = match fields.optional_string("strategy")?.as_deref() {
            None | Some("prefix") => Strategy::Prefix,
            Some("serial") => Strategy::Serial,
            Some(other) => {
                return refuse(
                    "strategy",
                    format!("must be \"prefix\" or \"serial\", not {other:?}"),
                )
            }
        };
        let page_size = fields
            .optional_whole("pageSize", 1..=1000)?
            .map_or(1000, |n| n as u16);
        let select = match fields.take("select") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(parse_select(items)?),
            Some(_) => return refuse("select", "must be an array of property names"),
        };
        let action = match fields.take("action") {
            None | Some(Value::Null) => {
                return refuse("action", "is required (an object with a \"type\")")
            }
            Some(Value::Object(action)) => parse_action(action)?,
            Some(_) => return refuse("action", "must be an object with a \"type\""),
        };
        let max_rows_per_second = match fields.take("maxRowsPerSecond") {
            None | Some(Value::Null) => default_cap,
            Some(Value::String(text)) if text == "unlimited" => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(cap) if (1..=u64::from(MAX_RATE_CAP)).contains(&cap) => Some(cap as u32),
                _ => {
                    return refuse(
                        "maxRowsPerSecond",
                        format!("must be a whole number from 1 to {MAX_RATE_CAP}, not {n}"),
                    )
                }
            },
            Some(_) => {
                return refuse(
                    "maxRowsPerSecond",
                    "must be a whole number of entities per second, or \"unlimited\"",
                )
            }
        };
        let dry_run = match fields.take("dryRun") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(dry_run)) => dry_run,
            Some(_) => return refuse("dryRun", "must be true or false"),
        };
        let max_row_failures = fields.optional_whole("maxRowFailures", 0..=u64::from(u32::MAX))?;
        let filter = fields.optional_string("filter")?;
        let older_than = fields
            .optional_string("olderThan")?
            .map(|age| resolve_age(&age, now))
            .transpose()?;
        fields.finish()?;
        if import.is_some() {
            check_import(&action, &scope, strategy, &select, &filter, &older_than)?;
        }
        let filter = match filter {
            None => None,
            Some(text) => Some(
                parse_filter(&text)
                    .or_else(|e| refuse("filter", e.to_string()))?
                    .as_str()
                    .to_string(),
            ),
        };
        let conditions = ScanSpec {
            filter: filter.clone(),
            older_than: older_than.clone(),
            scope: scope.clone(),
            ..ScanSpec::sample()
        };
        if let Err(why) = conditions.row_filter() {
            return refuse("filter", why);
        }
        if dry_run && action == ActionSpec::Count {
            return refuse(
                "dryRun",
                "a count writes nothing; it needs no dry run (leave dryRun out)",
            );
        }
        if let (
            Some(_),
            ActionSpec::Copy {
                mode: CopyMode::Replace,
                ..
            },
        ) = (&select, &action)
        {
            return refuse(
                "select",
                "with a copy in mode \"replace\" (the default) would replace each target row \
                 with the selected properties only, dropping the rest; use mode \"merge\" to \
                 update those properties and keep the others, or mode \"insert\" to write only \
                 rows the target lacks",
            );
        }
        if select.is_some() && matches!(action, ActionSpec::Update { .. }) {
            return refuse(
                "select",
                "does not apply to an update, which writes back whole rows when it removes \
                 properties; to see the rows it would change, run it with dryRun first",
            );
        }
        if select.is_some() && matches!(action, ActionSpec::Delete) {
            return refuse(
                "select",
                "does not apply to a delete, which removes whole rows; to see what a delete \
                 would take, run a count over the same scope first",
            );
        }
        Ok(ScanSpec {
            table,
            connection,
            scope,
            strategy,
            page_size,
            select,
            action,
            max_rows_per_second,
            dry_run,
            max_row_failures,
            filter,
            older_than,
            import,
        })
    }

    /// The condition a row must meet to be read: the request's `filter` and `olderThan`
    /// together; `None` for every row. An error only for a spec stored by a broken writer.
    pub fn row_filter(&self) -> Result<Option<Filter>, String> {
        let older = match &self.older_than {
            None => None,
            Some(older) => {
                let before = EdmDateTime::parse(&older.before)
                    .ok_or_else(|| format!("olderThan.before {:?} is not a date", older.before))?;
                Some(
                    Filter::compare(
                        Property::new("Timestamp").expect("a valid name"),
                        Comparison::Lt,
                        Literal::DateTime(before),
                    )
                    .expect("a date is a valid literal"),
                )
            }
        };
        let filter = match &self.filter {
            None => None,
            Some(text) => Some(parse_filter(text).map_err(|e| e.to_string())?),
        };
        let rows = self.scope.row_keys().filter(KeyProperty::RowKey);
        let both = Filter::all(rows.into_iter().chain(older).chain(filter));
        if let Some(both) = &both {
            if both.comparisons() > MAX_USER_COMPARISONS {
                return Err(format!(
                    "with olderThan and the RowKey bounds of the scope, the filter holds {} \
                     comparisons; at most {MAX_USER_COMPARISONS} are allowed",
                    both.comparisons()
                ));
            }
        }
        Ok(both)
    }

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

    /// A spec to build others from in checks.
    fn sample() -> ScanSpec {
        ScanSpec {
            table: String::new(),
            connection: String::new(),
            scope: Scope::default(),
            strategy: Strategy::Prefix,
            page_size: 1000,
            select: None,
            action: ActionSpec::Count,
            max_rows_per_second: None,
            dry_run: false,
            max_row_failures: None,
            filter: None,
            older_than: None,
            import: None,
        }
    }
}

/// The longest `olderThan` accepted: a little over 100 years.
const MAX_AGE_DAYS: i64 = 36_600;

/// Resolves an ISO 8601 duration of days, hours, minutes and seconds (`P90D`, `PT12H`,
/// `P1DT6H30M`) against `now`. Months and years are refused: their length depends on the
/// calendar, and a retention rule must mean one thing.
fn resolve_age(text: &str, now: time::OffsetDateTime) -> Result<OlderThan, SpecError> {
    let seconds = iso_duration_seconds(text).or_else(|why| refuse("olderThan", why))?;
    if seconds > MAX_AGE_DAYS * 86_400 {
        return refuse(
            "olderThan",
            format!(
                "is longer than 100 years; write an ISO 8601 duration such as \"P90D\", not \
                 {text:?}"
            ),
        );
    }
    let before = now - time::Duration::seconds(seconds);
    Ok(OlderThan {
        age: text.to_string(),
        before: EdmDateTime::new(before).to_string(),
    })
}

/// The seconds of an ISO 8601 duration of days, hours, minutes and seconds (`P90D`, `PT12H`,
/// `P1DT30M`), longer than zero; what is wrong with it otherwise, said for a user.
pub fn iso_duration_seconds(text: &str) -> Result<i64, String> {
    let bad = |why: &str| {
        Err(format!(
            "{why}; write an ISO 8601 duration of days, hours, minutes or seconds, such as \
             \"P90D\" (90 days) or \"PT12H\" (12 hours), not {text:?}"
        ))
    };
    let Some(rest) = text.strip_prefix('P') else {
        return bad("must start with P");
    };
    let (date, time_part) = match rest.split_once('T') {
        Some((date, time_part)) => (date, Some(time_part)),
        None => (rest, None),
    };
    let mut seconds: i64 = 0;
    let mut any = false;
    let mut read = |part: &str, units: &[(char, i64)]| -> Result<(), &'static str> {
        let mut number = String::new();
        let mut allowed = units.iter();
        for c in part.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            if matches!(c, 'Y' | 'W') || (c == 'M' && units[0].0 == 'D') {
                return Err("months, weeks and years are not accepted");
            }
            let Some((_, size)) = allowed.by_ref().find(|(unit, _)| *unit == c) else {
                return Err("has a unit out of place or unknown");
            };
            let n: i64 = number
                .parse()
                .map_err(|_| "needs a number before each unit")?;
            seconds = n
                .checked_mul(*size)
                .and_then(|s| seconds.checked_add(s))
                .ok_or("is too long")?;
            number.clear();
            any = true;
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err("ends with a number without a unit")
        }
    };
    if let Err(why) = read(date, &[('D', 86_400)]) {
        return bad(why);
    }
    if let Some(time_part) = time_part {
        if time_part.is_empty() {
            return bad("has nothing after T");
        }
        if let Err(why) = read(time_part, &[('H', 3_600), ('M', 60), ('S', 1)]) {
            return bad(why);
        }
    }
    if !any || seconds == 0 {
        return bad("must be longer than zero");
    }
    Ok(seconds)
}

/// `queue "a"`, or `queues "a", "b"`.
fn quoted_list<S: AsRef<str>>(names: &[S]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{:?}", n.as_ref())).collect();
    match quoted.len() {
        1 => format!("queue {}", quoted[0]),
        _ => format!("queues {}", quoted.join(", ")),
    }
}

fn parse_scope(object: Map<String, Value>) -> Result<Scope, SpecError> {
    let mut fields = Fields::new(object, "scope.");
    let mut key = |name: &str, kind: KeyKind| -> Result<Option<String>, SpecError> {
        let value = fields.optional_string(name)?;
        if let Some(key) = &value {
            validate_key(kind, key).or_else(|e| refuse(&format!("scope.{name}"), e.to_string()))?;
        }
        Ok(value)
    };
    let prefix = key("prefix", KeyKind::PartitionKey)?.unwrap_or_default();
    let after = key("after", KeyKind::PartitionKey)?;
    let before = key("before", KeyKind::PartitionKey)?;
    let row_prefix = key("rowPrefix", KeyKind::RowKey)?.unwrap_or_default();
    let row_after = key("rowAfter", KeyKind::RowKey)?;
    let row_before = key("rowBefore", KeyKind::RowKey)?;
    fields.finish()?;
    let rows_between = KeyRange::between(row_after.as_deref(), row_before.as_deref());
    if rows_between.is_empty() {
        return refuse(
            "scope.rowBefore",
            format!(
                "no RowKey lies after {:?} and before {:?}: `rowBefore` must come after \
                 `rowAfter`",
                row_after.unwrap_or_default(),
                row_before.unwrap_or_default()
            ),
        );
    }
    if KeyRange::with_prefix(&row_prefix)
        .intersect(&rows_between)
        .is_empty()
    {
        return refuse(
            "scope.rowPrefix",
            format!(
                "no RowKey starting with {row_prefix:?} lies between `rowAfter` and `rowBefore`"
            ),
        );
    }
    // A scope that holds no key is a mistake, not a scan of nothing: say so.
    let between = KeyRange::between(after.as_deref(), before.as_deref());
    if between.is_empty() {
        return refuse(
            "scope.before",
            format!(
                "no PartitionKey lies after {:?} and before {:?}: `before` must come after \
                 `after` (keys compare as the service does, by UTF-16 code units)",
                after.unwrap_or_default(),
                before.unwrap_or_default()
            ),
        );
    }
    if KeyRange::with_prefix(&prefix)
        .intersect(&between)
        .is_empty()
    {
        return refuse(
            "scope.prefix",
            format!("no PartitionKey starting with {prefix:?} lies between `after` and `before`"),
        );
    }
    Ok(Scope {
        prefix,
        after,
        before,
        row_prefix,
        row_after,
        row_before,
    })
}

fn parse_select(items: Vec<Value>) -> Result<Vec<String>, SpecError> {
    if items.len() > MAX_SELECT {
        return refuse(
            "select",
            format!("may name at most {MAX_SELECT} properties"),
        );
    }
    let mut names = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let field = format!("select[{index}]");
        let Value::String(name) = item else {
            return refuse(&field, "must be a string");
        };
        Property::new(&name).or_else(|e| refuse(&field, e.to_string()))?;
        if matches!(name.as_str(), "PartitionKey" | "RowKey") {
            continue;
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// The names of `queues`: 1 to [`MAX_QUEUES`] valid queue names, each once.
fn parse_queues(items: Vec<Value>) -> Result<Vec<String>, SpecError> {
    if items.is_empty() || items.len() > MAX_QUEUES {
        return refuse(
            "action.queues",
            format!("must name 1 to {MAX_QUEUES} queues"),
        );
    }
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let field = format!("action.queues[{index}]");
        let Value::String(name) = item else {
            return refuse(&field, "must be a queue name");
        };
        validate_queue_name(&name).or_else(|e| refuse(&field, e.to_string()))?;
        if names.contains(&name) {
            return refuse(&field, format!("{name:?} is named twice"));
        }
        names.push(name);
    }
    Ok(names)
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

fn parse_action(object: Map<String, Value>) -> Result<ActionSpec, SpecError> {
    let mut fields = Fields::new(object, "action.");
    let kind = fields.required_string("type")?;
    let encoding = |fields: &mut Fields| -> Result<Encoding, SpecError> {
        match fields.optional_string("encoding")?.as_deref() {
            None | Some("base64") => Ok(Encoding::Base64),
            Some("none") => Ok(Encoding::None),
            Some(other) => refuse(
                "action.encoding",
                format!("must be \"base64\" or \"none\", not {other:?}"),
            ),
        }
    };
    let queue = |fields: &mut Fields| -> Result<String, SpecError> {
        let name = fields.required_string("queue")?;
        validate_queue_name(&name).or_else(|e| refuse("action.queue", e.to_string()))?;
        Ok(name)
    };
    let action = match kind.as_str() {
        "count" => ActionSpec::Count,
        "delete" => ActionSpec::Delete,
        "update" => parse_update(&mut fields)?,
        "copy" => {
            let table = fields.required_string("table")?;
            validate_table_name(&table).or_else(|e| refuse("action.table", e.to_string()))?;
            let connection = fields.connection("connection")?;
            let mode = match fields.optional_string("mode")?.as_deref() {
                None | Some("replace") => CopyMode::Replace,
                Some("merge") => CopyMode::Merge,
                Some("insert") => CopyMode::Insert,
                Some(other) => {
                    return refuse(
                        "action.mode",
                        format!("must be \"replace\", \"merge\" or \"insert\", not {other:?}"),
                    )
                }
            };
            ActionSpec::Copy {
                table,
                connection,
                mode,
            }
        }
        "enqueue" => {
            let (queue, queues) = match fields.take("queues") {
                None | Some(Value::Null) => (queue(&mut fields)?, Vec::new()),
                Some(Value::Array(items)) => {
                    if fields.take("queue").is_some() {
                        return refuse(
                            "action.queues",
                            "name either \"queue\" or \"queues\", not both",
                        );
                    }
                    let names = parse_queues(items)?;
                    let first = names[0].clone();
                    let queues = if names.len() > 1 { names } else { Vec::new() };
                    (first, queues)
                }
                Some(_) => return refuse("action.queues", "must be an array of queue names"),
            };
            let connection = fields.connection("connection")?;
            let per = match fields.optional_string("per")?.as_deref() {
                None | Some("row") => Per::Row,
                Some("partition") => Per::Partition,
                Some(other) => {
                    return refuse(
                        "action.per",
                        format!("must be \"row\" or \"partition\", not {other:?}"),
                    )
                }
            };
            let encoding = encoding(&mut fields)?;
            let rows_per_message = fields
                .optional_whole("rowsPerMessage", 1..=u64::from(MAX_ROWS_PER_MESSAGE))?
                .map_or(1, |n| n as u16);
            ActionSpec::Enqueue {
                queue,
                queues,
                connection,
                per,
                encoding,
                rows_per_message,
            }
        }
        "partition-keys" => {
            let queue = queue(&mut fields)?;
            let connection = fields.connection("connection")?;
            let encoding = encoding(&mut fields)?;
            ActionSpec::PartitionKeys {
                queue,
                connection,
                encoding,
            }
        }
        "export" => {
            let container = fields.required_string("container")?;
            validate_container_name(&container)
                .or_else(|e| refuse("action.container", e.to_string()))?;
            let prefix = export_prefix(fields.optional_string("prefix")?, "action.prefix")?;
            let connection = fields.connection("connection")?;
            let compression = match fields.optional_string("compression")?.as_deref() {
                None | Some("gzip") => Compression::Gzip,
                Some("none") => Compression::None,
                Some(other) => {
                    return refuse(
                        "action.compression",
                        format!("must be \"gzip\" or \"none\", not {other:?}"),
                    )
                }
            };
            ActionSpec::Export {
                container,
                prefix,
                connection,
                compression,
            }
        }
        other => {
            return refuse(
                "action.type",
                format!(
                    "must be one of count, copy, enqueue, delete, update, partition-keys, \
                     export; not {other:?}"
                ),
            )
        }
    };
    fields.finish()?;
    Ok(action)
}

/// The longest export prefix: room is left for the names tablescan adds after it (`data/`, the
/// scan and item ids, the attempt), within the service's 1,024 characters.
pub const MAX_EXPORT_PREFIX_CHARS: usize = 900;

/// An export's prefix as given, ending in `/` unless empty (so the export's blobs sit in a
/// folder of their own: `backups/2026-11-25` and `backups/2026-11-25/` mean the same).
fn export_prefix(prefix: Option<String>, field: &str) -> Result<String, SpecError> {
    let mut prefix = prefix.unwrap_or_default();
    if prefix.chars().count() > MAX_EXPORT_PREFIX_CHARS {
        return refuse(
            field,
            format!("is longer than {MAX_EXPORT_PREFIX_CHARS} characters"),
        );
    }
    if prefix.chars().any(char::is_control) {
        return refuse(field, "may not contain control characters");
    }
    if prefix.starts_with('/') {
        return refuse(field, "may not start with '/'");
    }
    if let Some(segment) = first_dot_segment(&prefix) {
        return refuse(
            field,
            format!(
                "may not hold a '.' or '..' segment (here {segment:?}): URL parsing removes \
                 those, so the blobs would land outside the container; name the folder as it is"
            ),
        );
    }
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    Ok(prefix)
}

/// The `import` of a request: the container, prefix and connection of an export.
fn parse_import(object: Map<String, Value>) -> Result<ImportSource, SpecError> {
    let mut fields = Fields::new(object, "import.");
    let container = fields.required_string("container")?;
    validate_container_name(&container).or_else(|e| refuse("import.container", e.to_string()))?;
    // The manifest's own name names its export too.
    let prefix = fields.optional_string("prefix")?.map(|p| {
        p.strip_suffix("manifest.json")
            .map_or(p.clone(), str::to_string)
    });
    let prefix = export_prefix(prefix, "import.prefix")?;
    let connection = fields.connection("connection")?;
    fields.finish()?;
    Ok(ImportSource {
        container,
        prefix,
        connection,
        manifest: None,
    })
}

/// What an import may ask for: a copy into a table (or a count, which reads every blob and
/// checks it), over every row the export holds.
fn check_import(
    action: &ActionSpec,
    scope: &Scope,
    strategy: Strategy,
    select: &Option<Vec<String>>,
    filter: &Option<String>,
    older_than: &Option<OlderThan>,
) -> Result<(), SpecError> {
    if !matches!(action, ActionSpec::Copy { .. } | ActionSpec::Count) {
        return refuse(
            "action.type",
            "an import copies the export's rows into a table (\"copy\") or counts them \
             (\"count\", which reads and checks every blob)",
        );
    }
    let whole = "an import restores every row of the export; to restore part of it, import \
                 into a new table and copy the part from there";
    if *scope != Scope::default() {
        return refuse("scope", whole);
    }
    if filter.is_some() {
        return refuse("filter", whole);
    }
    if older_than.is_some() {
        return refuse("olderThan", whole);
    }
    if select.is_some() {
        return refuse("select", whole);
    }
    if strategy != Strategy::Prefix {
        return refuse(
            "strategy",
            "an import reads blobs, not a table: leave it out",
        );
    }
    Ok(())
}

/// The `set` and `remove` of an update: at least one change, no key or system property, typed
/// values that read as the entity JSON form reads, no property both set and removed.
fn parse_update(fields: &mut Fields) -> Result<ActionSpec, SpecError> {
    let set = match fields.take("set") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(set)) => set,
        Some(_) => return refuse("action.set", "must be an object of properties and values"),
    };
    for name in set.keys() {
        let property = name.strip_suffix("@odata.type").unwrap_or(name);
        let field = format!("action.set.{property}");
        if matches!(property, "PartitionKey" | "RowKey" | "Timestamp")
            || property.starts_with("odata.")
        {
            return refuse(
                &field,
                "is a key or a system property; an update cannot change it",
            );
        }
        Property::new(property).or_else(|e| refuse(&field, e.to_string()))?;
    }
    let mut typed = set.clone();
    typed.insert("PartitionKey".into(), Value::String(String::new()));
    typed.insert("RowKey".into(), Value::String(String::new()));
    Entity::from_json(typed).or_else(|why| refuse("action.set", why))?;
    let remove = match fields.take("remove") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for (index, item) in items.into_iter().enumerate() {
                let field = format!("action.remove[{index}]");
                let Value::String(name) = item else {
                    return refuse(&field, "must be a property name");
                };
                if matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp") {
                    return refuse(
                        &field,
                        "is a key or a system property; it cannot be removed",
                    );
                }
                Property::new(&name).or_else(|e| refuse(&field, e.to_string()))?;
                if set.contains_key(&name) {
                    return refuse(&field, format!("{name:?} is both set and removed"));
                }
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            names
        }
        Some(_) => return refuse("action.remove", "must be an array of property names"),
    };
    if set.is_empty() && remove.is_empty() {
        return refuse(
            "action.set",
            "an update needs properties to set or to remove",
        );
    }
    Ok(ActionSpec::Update { set, remove })
}

/// Whether `name` can be a connection's name: an app setting's name of 1 to 256 letters,
/// digits, `_`, `.`, `:` and `-` (never a connection string, which holds `=` and `;`).
pub fn is_connection_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
}

/// The fields of one JSON object, taken one by one; whatever is left over is an unknown field.
struct Fields {
    object: Map<String, Value>,
    path: &'static str,
}

impl Fields {
    fn new(object: Map<String, Value>, path: &'static str) -> Self {
        Fields { object, path }
    }

    fn name(&self, field: &str) -> String {
        format!("{}{field}", self.path)
    }

    fn take(&mut self, field: &str) -> Option<Value> {
        self.object.remove(field)
    }

    fn optional_string(&mut self, field: &str) -> Result<Option<String>, SpecError> {
        match self.take(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => refuse(&self.name(field), "must be a string"),
        }
    }

    /// A whole number in `range`, if given.
    fn optional_whole(
        &mut self,
        field: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Option<u64>, SpecError> {
        let (low, high) = (range.start(), range.end());
        match self.take(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(value) if range.contains(&value) => Ok(Some(value)),
                _ => refuse(
                    &self.name(field),
                    format!("must be a whole number from {low} to {high}, not {n}"),
                ),
            },
            Some(_) => refuse(
                &self.name(field),
                format!("must be a number from {low} to {high}"),
            ),
        }
    }

    fn required_string(&mut self, field: &str) -> Result<String, SpecError> {
        self.optional_string(field)?.ok_or_else(|| SpecError {
            field: self.name(field),
            message: "is required".into(),
        })
    }

    /// The name of an app setting, as a connection (the default one when absent). Whether it
    /// gives an account is checked once the whole request is read ([`ScanSpec::parse_at`]).
    fn connection(&mut self, field: &str) -> Result<String, SpecError> {
        let name = self
            .optional_string(field)?
            .unwrap_or_else(|| DEFAULT_CONNECTION.to_string());
        let full = self.name(field);
        if !is_connection_name(&name) {
            return refuse(
                &full,
                "must be the name of an app setting (letters, digits, '_', '.', ':', '-')",
            );
        }
        Ok(name)
    }

    fn finish(self) -> Result<(), SpecError> {
        match self.object.keys().next() {
            None => Ok(()),
            Some(unknown) => refuse(&format!("{}{unknown}", self.path), "is not a known field"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "UseDevelopmentStorage=true";

    fn settings(name: &str) -> Option<String> {
        match name {
            "AzureWebJobsStorage" | "Other" => Some(DEV.into()),
            "Broken" => Some("AccountName=a;AccountKey=!!notbase64!!".into()),
            _ => None,
        }
    }

    fn parse(body: &str) -> Result<ScanSpec, SpecError> {
        ScanSpec::parse(body, &settings)
    }

    #[test]
    fn exports_name_a_container_and_a_prefix_that_ends_in_a_slash() {
        let spec = parse(
            r#"{"table":"orders","action":{"type":"export","container":"backups",
                "prefix":"orders/2026-11-25","connection":"Other"}}"#,
        )
        .unwrap();
        assert_eq!(
            spec.action,
            ActionSpec::Export {
                container: "backups".into(),
                prefix: "orders/2026-11-25/".into(),
                connection: "Other".into(),
                compression: Compression::Gzip,
            }
        );
        assert!(spec
            .summary()
            .contains("export into blobs backups/orders/2026-11-25/*"));
        let plain = parse(
            r#"{"table":"orders","action":{"type":"export","container":"backups","compression":"none"}}"#,
        )
        .unwrap();
        assert!(matches!(
            plain.action,
            ActionSpec::Export { compression: Compression::None, ref prefix, .. } if prefix.is_empty()
        ));
        for (body, field) in [
            (
                r#"{"table":"orders","action":{"type":"export"}}"#,
                "action.container",
            ),
            (
                r#"{"table":"orders","action":{"type":"export","container":"No"}}"#,
                "action.container",
            ),
            (
                r#"{"table":"orders","action":{"type":"export","container":"ok1","compression":"zip"}}"#,
                "action.compression",
            ),
            (
                r#"{"table":"orders","action":{"type":"export","container":"ok1","prefix":"/abs"}}"#,
                "action.prefix",
            ),
            (
                r#"{"table":"orders","action":{"type":"export","container":"ok1","prefix":"a\u0001"}}"#,
                "action.prefix",
            ),
            (
                r#"{"table":"orders","action":{"type":"export","container":"ok1","connection":"Missing"}}"#,
                "action.connection",
            ),
        ] {
            assert_eq!(parse(body).unwrap_err().field, field, "{body}");
        }
        let long = format!(
            r#"{{"table":"orders","action":{{"type":"export","container":"ok1","prefix":"{}"}}}}"#,
            "a".repeat(MAX_EXPORT_PREFIX_CHARS + 1)
        );
        assert_eq!(parse(&long).unwrap_err().field, "action.prefix");
    }

    #[test]
    fn imports_read_an_export_into_a_copy_or_a_count_of_every_row() {
        let spec = parse(
            r#"{"import":{"container":"backups","prefix":"orders"},
                "action":{"type":"copy","table":"restored","mode":"insert"}}"#,
        )
        .unwrap();
        let import = spec.import.as_ref().unwrap();
        assert_eq!(import.prefix, "orders/");
        assert_eq!(import.connection, DEFAULT_CONNECTION);
        assert_eq!(import.manifest, None);
        assert!(spec
            .summary()
            .contains("import of the export backups/orders/*"));
        // Stored and read back as the ledger does.
        let stored: ScanSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(stored, spec);
        assert!(parse(r#"{"import":{"container":"backups"},"action":{"type":"count"}}"#).is_ok());
        let by_manifest = parse(
            r#"{"import":{"container":"backups","prefix":"orders/manifest.json"},"action":{"type":"count"}}"#,
        )
        .unwrap();
        assert_eq!(by_manifest.import.unwrap().prefix, "orders/");
        for (body, field) in [
            (
                r#"{"import":{"container":"bk1"},"table":"t","action":{"type":"count"}}"#,
                "table",
            ),
            (
                r#"{"import":{"container":"bk1"},"connection":"Other","action":{"type":"count"}}"#,
                "connection",
            ),
            (
                r#"{"import":{"container":"bk1"},"action":{"type":"delete"}}"#,
                "action.type",
            ),
            (
                r#"{"import":{"container":"bk1"},"action":{"type":"export","container":"bk2"}}"#,
                "action.type",
            ),
            (
                r#"{"import":{"container":"bk1"},"scope":{"prefix":"a"},"action":{"type":"count"}}"#,
                "scope",
            ),
            (
                r#"{"import":{"container":"bk1"},"filter":"n eq 1","action":{"type":"count"}}"#,
                "filter",
            ),
            (
                r#"{"import":{"container":"bk1"},"olderThan":"P1D","action":{"type":"count"}}"#,
                "olderThan",
            ),
            (
                r#"{"import":{"container":"bk1"},"strategy":"serial","action":{"type":"count"}}"#,
                "strategy",
            ),
            (
                r#"{"import":{"container":"bk1"},"select":["a"],"action":{"type":"copy","table":"target2","mode":"merge"}}"#,
                "select",
            ),
            (
                r#"{"import":{"container":"B"},"action":{"type":"count"}}"#,
                "import.container",
            ),
            (
                r#"{"import":{"container":"bk1","extra":1},"action":{"type":"count"}}"#,
                "import.extra",
            ),
            (r#"{"import":"b1","action":{"type":"count"}}"#, "import"),
        ] {
            assert_eq!(parse(body).unwrap_err().field, field, "{body}");
        }
    }

    #[test]
    fn a_minimal_request_gets_defaults() {
        let spec = parse(r#"{"table":"orders","action":{"type":"count"}}"#).unwrap();
        assert_eq!(spec.connection, "AzureWebJobsStorage");
        assert_eq!(spec.strategy, Strategy::Prefix);
        assert_eq!(spec.page_size, 1000);
        assert_eq!(spec.scope, Scope::default());
        assert_eq!(spec.action, ActionSpec::Count);
        let normalised = serde_json::to_value(&spec).unwrap();
        assert_eq!(normalised["action"]["type"], "count");
        assert_eq!(normalised["pageSize"], 1000);
    }

    #[test]
    fn the_rate_cap_is_the_default_a_number_or_unlimited() {
        let with = |extra: &str| {
            parse(&format!(
                r#"{{"table":"things","action":{{"type":"count"}}{extra}}}"#
            ))
        };
        assert_eq!(
            with("").unwrap().max_rows_per_second,
            DEFAULT_MAX_ROWS_PER_SECOND
        );
        assert_eq!(DEFAULT_MAX_ROWS_PER_SECOND, None, "unlimited unless asked");
        assert_eq!(
            with(r#","maxRowsPerSecond":2000"#)
                .unwrap()
                .max_rows_per_second,
            Some(2000)
        );
        assert_eq!(
            with(r#","maxRowsPerSecond":"unlimited""#)
                .unwrap()
                .max_rows_per_second,
            None
        );
        for bad in ["0", "-5", "1.5", "\"fast\"", "true", "20000000"] {
            let e = with(&format!(r#","maxRowsPerSecond":{bad}"#)).unwrap_err();
            assert_eq!(e.field, "maxRowsPerSecond", "{bad}");
        }
        let settings =
            |name: &str| (name == DEFAULT_CONNECTION).then(|| "UseDevelopmentStorage=true".into());
        // The app's own default (TABLESCAN_MAX_ROWS_PER_SECOND) applies to requests naming none.
        let spec = ScanSpec::parse_with(
            r#"{"table":"things","action":{"type":"count"}}"#,
            &settings,
            Some(4_000),
        )
        .unwrap();
        assert_eq!(spec.max_rows_per_second, Some(4_000));
        // Shown in the stored spec when set; a spec stored without it reads as uncapped.
        let stored = serde_json::to_value(with(r#","maxRowsPerSecond":2000"#).unwrap()).unwrap();
        assert_eq!(stored["maxRowsPerSecond"], 2000);
        let mut old = stored.clone();
        old.as_object_mut().unwrap().remove("maxRowsPerSecond");
        let old: ScanSpec = serde_json::from_value(old).unwrap();
        assert_eq!(old.max_rows_per_second, None);
    }

    #[test]
    fn the_default_cap_setting_is_a_number_or_unlimited() {
        assert_eq!(parse_rate_cap(" 2500 "), Ok(Some(2500)));
        assert_eq!(parse_rate_cap("Unlimited"), Ok(None));
        for bad in ["", "0", "fast", "1e4", "99999999999"] {
            assert!(
                parse_rate_cap(bad).unwrap_err().contains("unlimited"),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_enqueue_names_one_queue_or_several() {
        let spec = |action: &str| {
            parse(&format!(
                r#"{{"table":"things","action":{{"type":"enqueue",{action}}}}}"#
            ))
        };
        let one = spec(r#""queues":["only"]"#).unwrap();
        assert_eq!(one.action.target_queues(), ["only"]);
        assert!(serde_json::to_value(&one).unwrap()["action"]
            .get("queues")
            .is_none());
        let three = spec(r#""queues":["q-a","q-b","q-c"]"#).unwrap();
        assert_eq!(three.action.target_queues(), ["q-a", "q-b", "q-c"]);
        let stored = serde_json::to_value(&three).unwrap();
        assert_eq!(stored["action"]["queue"], "q-a");
        assert_eq!(
            stored["action"]["queues"],
            serde_json::json!(["q-a", "q-b", "q-c"])
        );
        let back: ScanSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(back, three);
        for (bad, field) in [
            (r#""queues":[]"#, "action.queues"),
            (r#""queues":"q-a""#, "action.queues"),
            (r#""queues":["q-a","q-a"]"#, "action.queues[1]"),
            (r#""queues":["q-a","Bad_Name"]"#, "action.queues[1]"),
            (r#""queues":["q-a"],"queue":"q-b""#, "action.queues"),
        ] {
            assert_eq!(spec(bad).unwrap_err().field, field, "{bad}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("\"q{i:03}\"")).collect();
        let e = spec(&format!(r#""queues":[{}]"#, many.join(","))).unwrap_err();
        assert_eq!(e.field, "action.queues");
    }

    #[test]
    fn rows_per_message_is_a_whole_number_up_to_a_page() {
        let enqueue = |extra: &str| {
            parse(&format!(
                r#"{{"table":"orders","action":{{"type":"enqueue","queue":"out-q"{extra}}}}}"#
            ))
        };
        let rows_of = |spec: ScanSpec| match spec.action {
            ActionSpec::Enqueue {
                rows_per_message, ..
            } => rows_per_message,
            other => panic!("{other:?}"),
        };
        assert_eq!(rows_of(enqueue(r#","rowsPerMessage":50"#).unwrap()), 50);
        for bad in ["0", "1001", "2.5", "\"5\"", "-1", "true"] {
            let e = enqueue(&format!(r#","rowsPerMessage":{bad}"#)).unwrap_err();
            assert_eq!(e.field, "action.rowsPerMessage", "{bad}");
        }
        // One row per message by default, and then not written into the normalised request
        // (which scans started before the field existed recorded without it).
        let plain = enqueue("").unwrap();
        let normalised = serde_json::to_value(&plain).unwrap();
        assert!(normalised["action"].get("rowsPerMessage").is_none());
        let read_back: ScanSpec = serde_json::from_value(normalised).unwrap();
        assert_eq!(rows_of(read_back), 1);
        let batched = serde_json::to_value(enqueue(r#","rowsPerMessage":7"#).unwrap()).unwrap();
        assert_eq!(batched["action"]["rowsPerMessage"], 7);
    }

    #[test]
    fn every_action_parses() {
        let spec = parse(
            r#"{"table":"orders","connection":"Other","scope":{"prefix":"a","after":"a1","before":"a9"},
                "strategy":"serial","pageSize":5,"select":["x","PartitionKey","x"],
                "action":{"type":"enqueue","queue":"out-q","per":"partition","encoding":"none"}}"#,
        )
        .unwrap();
        assert_eq!(spec.select, Some(vec!["x".to_string()]));
        assert_eq!(
            spec.action,
            ActionSpec::Enqueue {
                queue: "out-q".into(),
                queues: Vec::new(),
                connection: "AzureWebJobsStorage".into(),
                per: Per::Partition,
                encoding: Encoding::None,
                rows_per_message: 1,
            }
        );
        assert!(matches!(
            parse(r#"{"table":"t12","action":{"type":"copy","table":"t13"}}"#)
                .unwrap()
                .action,
            ActionSpec::Copy { .. }
        ));
        assert!(matches!(
            parse(r#"{"table":"t12","action":{"type":"delete"}}"#)
                .unwrap()
                .action,
            ActionSpec::Delete
        ));
        assert!(matches!(
            parse(r#"{"table":"t12","action":{"type":"partition-keys","queue":"keys"}}"#)
                .unwrap()
                .action,
            ActionSpec::PartitionKeys {
                encoding: Encoding::Base64,
                ..
            }
        ));
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            ("not json", "body"),
            ("[1]", "body"),
            (r#"{"action":{"type":"count"}}"#, "table"),
            (r#"{"table":5,"action":{"type":"count"}}"#, "table"),
            (r#"{"table":"no-dash","action":{"type":"count"}}"#, "table"),
            (r#"{"table":"orders"}"#, "action"),
            (r#"{"table":"orders","action":"count"}"#, "action"),
            (r#"{"table":"orders","action":{}}"#, "action.type"),
            (
                r#"{"table":"orders","action":{"type":"explode"}}"#,
                "action.type",
            ),
            (
                r#"{"table":"orders","action":{"type":"copy"}}"#,
                "action.table",
            ),
            (
                r#"{"table":"orders","action":{"type":"copy","table":"x"}}"#,
                "action.table",
            ),
            (
                r#"{"table":"orders","action":{"type":"enqueue","queue":"Bad_Q"}}"#,
                "action.queue",
            ),
            (
                r#"{"table":"orders","action":{"type":"enqueue","queue":"q12","per":"cell"}}"#,
                "action.per",
            ),
            (
                r#"{"table":"orders","action":{"type":"enqueue","queue":"q12","encoding":"hex"}}"#,
                "action.encoding",
            ),
            (
                r#"{"table":"orders","action":{"type":"count","extra":1}}"#,
                "action.extra",
            ),
            (
                r#"{"table":"orders","connection":"Missing","action":{"type":"count"}}"#,
                "connection",
            ),
            (
                r#"{"table":"orders","connection":"Broken","action":{"type":"count"}}"#,
                "connection",
            ),
            (
                r#"{"table":"orders","connection":"DefaultEndpointsProtocol=https;AccountName=x","action":{"type":"count"}}"#,
                "connection",
            ),
            (
                r#"{"table":"orders","strategy":"fast","action":{"type":"count"}}"#,
                "strategy",
            ),
            (
                r#"{"table":"orders","pageSize":0,"action":{"type":"count"}}"#,
                "pageSize",
            ),
            (
                r#"{"table":"orders","pageSize":1001,"action":{"type":"count"}}"#,
                "pageSize",
            ),
            (
                r#"{"table":"orders","pageSize":2.5,"action":{"type":"count"}}"#,
                "pageSize",
            ),
            (
                r#"{"table":"orders","pageSize":"10","action":{"type":"count"}}"#,
                "pageSize",
            ),
            (
                r#"{"table":"orders","select":"a","action":{"type":"count"}}"#,
                "select",
            ),
            (
                r#"{"table":"orders","select":["a b"],"action":{"type":"count"}}"#,
                "select[0]",
            ),
            (
                r#"{"table":"orders","select":[1],"action":{"type":"count"}}"#,
                "select[0]",
            ),
            (
                r#"{"table":"orders","scope":"a","action":{"type":"count"}}"#,
                "scope",
            ),
            (
                r#"{"table":"orders","scope":{"prefix":"a/b"},"action":{"type":"count"}}"#,
                "scope.prefix",
            ),
            (
                r#"{"table":"orders","scope":{"after":"x","from":"y"},"action":{"type":"count"}}"#,
                "scope.from",
            ),
            (
                r#"{"table":"orders","action":{"type":"count"},"unknown":true}"#,
                "unknown",
            ),
            (
                r#"{"table":"orders","scope":{"after":"B","before":"A"},"action":{"type":"count"}}"#,
                "scope.before",
            ),
            (
                r#"{"table":"orders","scope":{"after":"A","before":"A"},"action":{"type":"count"}}"#,
                "scope.before",
            ),
            (
                r#"{"table":"orders","scope":{"prefix":"m","before":"k"},"action":{"type":"count"}}"#,
                "scope.prefix",
            ),
            (
                r#"{"table":"orders","scope":{"prefix":"m","after":"n"},"action":{"type":"count"}}"#,
                "scope.prefix",
            ),
            (
                r#"{"table":"orders","select":["Name"],"action":{"type":"delete"}}"#,
                "select",
            ),
            (
                r#"{"table":"orders","action":{"type":"count"},"action":{"type":"delete"}}"#,
                "action",
            ),
            (
                r#"{"table":"orders","action":{"type":"count","type":"delete"}}"#,
                "action.type",
            ),
        ];
        for (body, field) in cases {
            let err = parse(body).unwrap_err();
            assert_eq!(err.field, field, "{body}: {err}");
        }
        let too_long = format!(
            r#"{{"table":"orders","scope":{{"before":"{}"}},"action":{{"type":"count"}}}}"#,
            "k".repeat(513)
        );
        assert_eq!(parse(&too_long).unwrap_err().field, "scope.before");
    }

    #[test]
    fn a_summary_says_what_where_and_how_fast() {
        let spec = parse(
            r#"{"table":"orders","scope":{"prefix":"m","after":"m1"},"maxRowsPerSecond":900,
                "action":{"type":"copy","table":"backup"}}"#,
        )
        .unwrap();
        assert_eq!(
            spec.summary(),
            r#"copy (replace) into table "backup" of AzureWebJobsStorage over table "orders" of AzureWebJobsStorage; prefix "m", after "m1"; at most 900 entities/s"#
        );
        let spec = parse(r#"{"table":"orders","dryRun":true,"action":{"type":"delete"}}"#).unwrap();
        assert!(
            spec.summary().starts_with("DRY RUN of delete over"),
            "{}",
            spec.summary()
        );
        let spec = parse(
            r#"{"table":"orders","maxRowsPerSecond":"unlimited",
                "action":{"type":"enqueue","queues":["qqq1","qqq2"]}}"#,
        )
        .unwrap();
        let summary = spec.summary();
        assert!(
            summary
                .starts_with(r#"enqueue into queues "qqq1", "qqq2" of AzureWebJobsStorage over"#),
            "{summary}"
        );
        assert!(summary.ends_with("every PartitionKey; no cap"), "{summary}");
    }

    #[test]
    fn scopes_that_hold_keys_are_accepted() {
        for scope in [
            r#"{"after":"a","before":"b"}"#,
            r#"{"prefix":"m","after":"m5"}"#,
            r#"{"prefix":"m","after":"l","before":"n"}"#,
            r#"{"prefix":"m","before":"m0"}"#,
            r#"{"after":"a","before":"a0"}"#,
        ] {
            let body =
                format!(r#"{{"table":"orders","scope":{scope},"action":{{"type":"count"}}}}"#);
            assert!(parse(&body).is_ok(), "{scope}: {:?}", parse(&body).err());
        }
    }

    #[test]
    fn connection_errors_never_echo_the_setting_value() {
        let err = parse(r#"{"table":"orders","connection":"Broken","action":{"type":"count"}}"#)
            .unwrap_err();
        assert!(!err.message.contains("notbase64"), "{err}");
    }

    #[test]
    fn copy_modes_dry_runs_and_row_failure_limits_are_parsed_and_stored() {
        let spec = parse(
            r#"{"table":"orders","select":["Name"],"dryRun":true,"maxRowFailures":0,
                "action":{"type":"copy","table":"backup","mode":"merge"}}"#,
        )
        .unwrap();
        assert!(spec.dry_run);
        assert_eq!(spec.max_row_failures, Some(0));
        assert!(matches!(
            spec.action,
            ActionSpec::Copy {
                mode: CopyMode::Merge,
                ..
            }
        ));
        let stored = serde_json::to_value(&spec).unwrap();
        assert_eq!(stored["action"]["mode"], "merge");
        assert_eq!(stored["dryRun"], true);
        assert_eq!(stored["maxRowFailures"], 0);
        // A spec stored before these fields existed reads as a plain copy that replaces.
        let old: ScanSpec = serde_json::from_value(serde_json::json!({
            "table": "orders", "connection": "AzureWebJobsStorage", "scope": {"prefix": "",
            "after": null, "before": null}, "strategy": "prefix", "pageSize": 1000,
            "select": null, "action": {"type": "copy", "table": "b",
            "connection": "AzureWebJobsStorage"}
        }))
        .unwrap();
        assert!(!old.dry_run);
        assert_eq!(old.max_row_failures, None);
        assert!(matches!(
            old.action,
            ActionSpec::Copy {
                mode: CopyMode::Replace,
                ..
            }
        ));
        let plain =
            parse(r#"{"table":"orders","action":{"type":"copy","table":"backup"}}"#).unwrap();
        let stored = serde_json::to_value(&plain).unwrap();
        assert!(stored["action"].get("mode").is_none());
        assert!(stored.get("dryRun").is_none());
    }

    #[test]
    fn bad_modes_dry_runs_and_limits_name_their_field() {
        let refused = |body: &str| parse(body).unwrap_err();
        let e = refused(
            r#"{"table":"things","select":["A"],"action":{"type":"copy","table":"backup"}}"#,
        );
        assert_eq!(e.field, "select");
        assert!(e.message.contains("\"merge\""), "{e}");
        let e = refused(
            r#"{"table":"things","select":["A"],"action":{"type":"copy","table":"backup","mode":"replace"}}"#,
        );
        assert_eq!(e.field, "select");
        let e = refused(
            r#"{"table":"things","action":{"type":"copy","table":"backup","mode":"upsert"}}"#,
        );
        assert_eq!(e.field, "action.mode");
        let e = refused(r#"{"table":"things","dryRun":"yes","action":{"type":"delete"}}"#);
        assert_eq!(e.field, "dryRun");
        let e = refused(r#"{"table":"things","dryRun":true,"action":{"type":"count"}}"#);
        assert_eq!(e.field, "dryRun");
        for bad in ["-1", "1.5", "\"all\"", "99999999999"] {
            let e = refused(&format!(
                r#"{{"table":"things","maxRowFailures":{bad},"action":{{"type":"delete"}}}}"#
            ));
            assert_eq!(e.field, "maxRowFailures", "{bad}");
        }
        // Insert mode may select: it writes new rows with those properties only, on purpose.
        parse(r#"{"table":"things","select":["A"],"action":{"type":"copy","table":"backup","mode":"insert"}}"#)
            .unwrap();
    }

    #[test]
    fn a_filter_is_checked_and_stored_as_it_will_be_sent() {
        let spec = parse(
            r#"{"table":"logs","filter":"Level eq 'Debug'  and Size gt 10","action":{"type":"delete"}}"#,
        )
        .unwrap();
        assert_eq!(
            spec.filter.as_deref(),
            Some("Level eq 'Debug' and Size gt 10")
        );
        assert_eq!(
            spec.row_filter().unwrap().unwrap().as_str(),
            "Level eq 'Debug' and Size gt 10"
        );
        let e = parse(r#"{"table":"logs","filter":"Level eq Debug","action":{"type":"count"}}"#)
            .unwrap_err();
        assert_eq!(e.field, "filter");
        assert!(e.message.starts_with("at character 10:"), "{e}");
        assert!(parse(r#"{"table":"logs","action":{"type":"count"}}"#)
            .unwrap()
            .row_filter()
            .unwrap()
            .is_none());
    }

    #[test]
    fn older_than_is_resolved_once_and_joins_the_filter() {
        let now = time::macros::datetime!(2026-11-24 12:00:00 UTC);
        let at = |body: &str| ScanSpec::parse_at(body, &settings, None, now);
        let spec = at(
            r#"{"table":"logs","olderThan":"P90D","filter":"Level eq 'Debug'","action":{"type":"delete"}}"#,
        )
        .unwrap();
        let older = spec.older_than.clone().unwrap();
        assert_eq!(older.age, "P90D");
        assert_eq!(older.before, "2026-08-26T12:00:00.0000000Z");
        assert_eq!(
            spec.row_filter().unwrap().unwrap().as_str(),
            "Timestamp lt datetime'2026-08-26T12:00:00.0000000Z' and Level eq 'Debug'"
        );
        for (age, before) in [
            ("PT12H", "2026-11-24T00:00:00.0000000Z"),
            ("P1DT6H30M", "2026-11-23T05:30:00.0000000Z"),
            ("PT90S", "2026-11-24T11:58:30.0000000Z"),
        ] {
            let spec = at(&format!(
                r#"{{"table":"logs","olderThan":"{age}","action":{{"type":"count"}}}}"#
            ))
            .unwrap();
            assert_eq!(spec.older_than.unwrap().before, before, "{age}");
        }
        for bad in [
            "90D",
            "P3M",
            "P1Y",
            "P2W",
            "PT",
            "P0D",
            "P",
            "P5",
            "PT5D",
            "P1H",
            "P99999999D",
            "-P1D",
        ] {
            let e = at(&format!(
                r#"{{"table":"logs","olderThan":"{bad}","action":{{"type":"count"}}}}"#
            ))
            .unwrap_err();
            assert_eq!(e.field, "olderThan", "{bad}");
            assert!(e.message.contains("P90D"), "{bad}: {e}");
        }
        // A start retried a minute later is the same request.
        let later = ScanSpec::parse_at(
            r#"{"table":"logs","olderThan":"P90D","filter":"Level eq 'Debug'","action":{"type":"delete"}}"#,
            &settings,
            None,
            now + time::Duration::MINUTE,
        )
        .unwrap();
        assert_ne!(later, spec);
        assert!(later.same_request(&spec));
        let other = at(r#"{"table":"logs","olderThan":"P91D","filter":"Level eq 'Debug'","action":{"type":"delete"}}"#).unwrap();
        assert!(!other.same_request(&spec));
        // With olderThan, the filter leaves room for its comparison.
        let ten = (0..11)
            .map(|n| format!("A eq {n}"))
            .collect::<Vec<_>>()
            .join(" or ");
        let e = at(&format!(
            r#"{{"table":"logs","olderThan":"P1D","filter":"{ten}","action":{{"type":"count"}}}}"#
        ))
        .unwrap_err();
        assert_eq!(e.field, "filter");
    }

    #[test]
    fn row_key_bounds_become_conditions_on_every_row() {
        let spec = parse(
            r#"{"table":"events","scope":{"prefix":"dev","rowPrefix":"2025-","rowBefore":"2025-07"},
                "filter":"Level eq 'Error'","action":{"type":"count"}}"#,
        )
        .unwrap();
        assert_eq!(spec.scope.row_prefix, "2025-");
        assert_eq!(
            spec.row_filter().unwrap().unwrap().as_str(),
            "(RowKey ge '2025-' and RowKey lt '2025-07') and Level eq 'Error'"
        );
        let stored = serde_json::to_value(&spec).unwrap();
        assert_eq!(stored["scope"]["rowPrefix"], "2025-");
        assert_eq!(stored["scope"]["rowBefore"], "2025-07");
        assert!(stored["scope"].get("rowAfter").is_none());
        for (scope, field) in [
            (r#"{"rowAfter":"b","rowBefore":"a"}"#, "scope.rowBefore"),
            (r#"{"rowPrefix":"z","rowBefore":"m"}"#, "scope.rowPrefix"),
            (r#"{"rowPrefix":"a/b"}"#, "scope.rowPrefix"),
        ] {
            let e = parse(&format!(
                r#"{{"table":"events","scope":{scope},"action":{{"type":"count"}}}}"#
            ))
            .unwrap_err();
            assert_eq!(e.field, field, "{scope}");
        }
    }
}

#[cfg(test)]
mod path_tests;
