//! The work items the ledger stores and the queues carry: a table's key ranges, which the
//! engine reads, and an import's tasks, which the handler's import step runs.
//!
//! They live here because the ledger is the lowest layer that holds both: it records every
//! item pending, claimed, done or failed, and reads a failed item's message back to retry it.
//! The engine knows only its own [`ReadRange`]; the envelope (scan, depth, id, version) is the
//! engine's [`tablescan_engine::item::WorkItem`], here with a [`Task`] of either kind.
//!
//! A task is written exactly as the engine's `ReadRange` and the import's [`ImportTask`] write
//! themselves, each with its `kind` first: the same messages and the same ids as when one enum
//! held all four kinds. Reading dispatches on `kind` by hand, so that a message of an unknown
//! kind, or one that is not the kind it says, fails alone with serde's own words for it.

use serde::de::{Error as _, Unexpected};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use tablescan_engine::item::ReadRange;

/// A work item of any kind: what the ledger records and a queue message holds.
pub type WorkItem = tablescan_engine::item::WorkItem<Task>;

/// What a work item does: read a range of a table's keys, or a piece of an import.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Task {
    /// A range of a table's keys, run by the engine.
    Table(ReadRange),
    /// A piece of an import, run by the handler's import step.
    Import(ImportTask),
}

/// An import's task: a range of an export manifest's blobs, or of one blob's bytes. Serialised
/// with its `kind`, as the table's ranges are; the type's name appears in no message or row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum ImportTask {
    /// The blobs listed in part `part` of an export's manifest, from the `from`-th on (a step
    /// hands on the blobs past those it made into work items).
    #[serde(rename = "export-part")]
    ExportPart { part: u32, from: u32 },
    /// The rows of one data blob of an export, from byte `offset` (the start of a chunk) on,
    /// less the first `skip` rows of that chunk (written by an earlier step).
    #[serde(rename = "export-blob")]
    ExportBlob {
        name: String,
        /// The blob's size and SHA-256 (base64) as the manifest recorded them.
        bytes: u64,
        sha256: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        offset: u64,
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        skip: u32,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// The `kind`s of a table's ranges and of an import's tasks, as messages spell them.
const TABLE_KINDS: [&str; 2] = ["range", "partition"];
const IMPORT_KINDS: [&str; 2] = ["export-part", "export-blob"];
const KINDS: [&str; 4] = ["range", "partition", "export-part", "export-blob"];

impl Task {
    /// Whether the task reads an export's blobs rather than a table.
    pub fn is_import(&self) -> bool {
        matches!(self, Task::Import(_))
    }
}

impl From<ReadRange> for Task {
    fn from(range: ReadRange) -> Self {
        Task::Table(range)
    }
}

impl From<ImportTask> for Task {
    fn from(task: ImportTask) -> Self {
        Task::Import(task)
    }
}

impl Serialize for Task {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Task::Table(range) => range.serialize(serializer),
            Task::Import(task) => task.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Task {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let kind = kind_of(&value).map_err(|why| match why {
            NoKind::Missing => D::Error::missing_field("kind"),
            NoKind::NotAString(other) => {
                D::Error::invalid_type(unexpected(other), &"variant identifier")
            }
            NoKind::NotATask => D::Error::invalid_type(
                unexpected(&value),
                &"a work item's task (an object with its kind)",
            ),
        })?;
        if TABLE_KINDS.contains(&kind) {
            ReadRange::deserialize(value)
                .map(Task::Table)
                .map_err(D::Error::custom)
        } else if IMPORT_KINDS.contains(&kind) {
            ImportTask::deserialize(value)
                .map(Task::Import)
                .map_err(D::Error::custom)
        } else {
            Err(D::Error::unknown_variant(kind, &KINDS))
        }
    }
}

/// Why a task has no `kind` to dispatch on.
enum NoKind<'a> {
    Missing,
    NotAString(&'a serde_json::Value),
    NotATask,
}

/// The `kind` of a task: its field `kind`, or (as serde reads an internally tagged enum from a
/// sequence, and so did every version before this one) the first element of an array.
fn kind_of(value: &serde_json::Value) -> Result<&str, NoKind<'_>> {
    let tag = match value {
        serde_json::Value::Object(fields) => fields.get("kind"),
        serde_json::Value::Array(elements) => elements.first(),
        _ => return Err(NoKind::NotATask),
    };
    match tag {
        Some(serde_json::Value::String(kind)) => Ok(kind),
        Some(other) => Err(NoKind::NotAString(other)),
        None => Err(NoKind::Missing),
    }
}

/// What a JSON value is, in serde's words for an error.
fn unexpected(value: &serde_json::Value) -> Unexpected<'_> {
    match value {
        serde_json::Value::Null => Unexpected::Unit,
        serde_json::Value::Bool(b) => Unexpected::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (_, _, Some(f)) => Unexpected::Float(f),
            _ => Unexpected::Other("number"),
        },
        serde_json::Value::String(s) => Unexpected::Str(s),
        serde_json::Value::Array(_) => Unexpected::Seq,
        serde_json::Value::Object(_) => Unexpected::Map,
    }
}

#[cfg(test)]
mod tests;
