//! A request's `action`: what the scan does with each row. Its `type` says which fields it
//! has (`crate::shape`), and each kind's fields are checked here into the [`ActionSpec`].

use serde::Deserialize;
use serde_json::{Map, Value};

use super::kinds::{Described, Names, Text};
use super::refusal::{connection_name, refuse, refuse_unknown, SpecError};
use super::shape::{
    BareAction, CopyFields, EnqueueFields, ExportFields, PartitionKeysFields, Queues,
};
use super::{ActionKind, ActionSpec, Compression, CopyMode, Encoding, Per, MAX_QUEUES};
use tablescan_storage::names::{
    first_dot_segment, validate_container_name, validate_queue_name, validate_table_name,
};

impl ActionKind {
    /// The kind a request's `action.type` names, if it names one.
    pub(super) fn named_in(request: &Map<String, Value>) -> Option<ActionKind> {
        let kind = request.get("action")?.get("type")?;
        ActionKind::read(Some(kind)).ok()
    }

    /// The kind `type` names, or why it names none.
    fn read(kind: Option<&Value>) -> Result<ActionKind, SpecError> {
        let text = match kind {
            None | Some(Value::Null) => return refuse("action.type", "is required"),
            Some(Value::String(text)) => text,
            Some(_) => return refuse("action.type", "must be a string"),
        };
        match ActionKind::named(text) {
            Some(kind) => Ok(kind),
            None => refuse(
                "action.type",
                format!(
                    "must be one of count, copy, enqueue, delete, update, partition-keys, \
                     export; not {text:?}"
                ),
            ),
        }
    }
}

/// The fields of one kind of action, read by serde, and their checks.
pub(super) trait ActionFields: for<'de> Deserialize<'de> + Described {
    /// The action, each field checked, then any field the kind does not know refused.
    fn checked(self) -> Result<ActionSpec, SpecError>;
}

impl ActionFields for BareAction {
    fn checked(self) -> Result<ActionSpec, SpecError> {
        let action = match ActionKind::read(self.kind.as_ref())? {
            ActionKind::Count => ActionSpec::Count,
            ActionKind::Delete => ActionSpec::Delete,
            // Never: a request whose type names an action with fields is read with those.
            other => return refuse("action.type", format!("{other:?} has fields of its own")),
        };
        refuse_unknown(&self.unknown, "action.")?;
        Ok(action)
    }
}

/// A copy: the target table, its connection and what happens to a row it holds already.
impl ActionFields for CopyFields {
    fn checked(self) -> Result<ActionSpec, SpecError> {
        let Some(Text(table)) = self.table else {
            return refuse("action.table", "is required");
        };
        validate_table_name(&table).or_else(|e| refuse("action.table", e.to_string()))?;
        let connection = connection_name(self.connection.map(|Text(c)| c), "action.connection")?;
        refuse_unknown(&self.unknown, "action.")?;
        Ok(ActionSpec::Copy {
            table,
            connection,
            mode: self.mode.map_or(CopyMode::Replace, |mode| mode.0),
        })
    }
}

/// An enqueue: its queue or queues, one message per row or per partition, the encoding and how
/// many rows a message holds.
impl ActionFields for EnqueueFields {
    fn checked(self) -> Result<ActionSpec, SpecError> {
        let (queue, queues) = match self.queues {
            None => (
                required_queue(self.queue.value("action.queue")?)?,
                Vec::new(),
            ),
            Some(_) if self.queue.is_given() => {
                return refuse(
                    "action.queues",
                    "name either \"queue\" or \"queues\", not both",
                )
            }
            Some(names) => several_queues(names)?,
        };
        let connection = connection_name(self.connection.map(|Text(c)| c), "action.connection")?;
        refuse_unknown(&self.unknown, "action.")?;
        Ok(ActionSpec::Enqueue {
            queue,
            queues,
            connection,
            per: self.per.map_or(Per::Row, |per| per.0),
            encoding: self
                .encoding
                .map_or(Encoding::Base64, |encoding| encoding.0),
            rows_per_message: self.rows_per_message.map_or(1, |n| n.0 as u16),
        })
    }
}

/// A partition-keys action: the queue that gets one message per partition, and its encoding.
impl ActionFields for PartitionKeysFields {
    fn checked(self) -> Result<ActionSpec, SpecError> {
        let queue = required_queue(self.queue)?;
        let connection = connection_name(self.connection.map(|Text(c)| c), "action.connection")?;
        refuse_unknown(&self.unknown, "action.")?;
        Ok(ActionSpec::PartitionKeys {
            queue,
            connection,
            encoding: self
                .encoding
                .map_or(Encoding::Base64, |encoding| encoding.0),
        })
    }
}

/// An export: the container, the prefix its blobs' names start with, and their compression.
impl ActionFields for ExportFields {
    fn checked(self) -> Result<ActionSpec, SpecError> {
        let Some(Text(container)) = self.container else {
            return refuse("action.container", "is required");
        };
        validate_container_name(&container)
            .or_else(|e| refuse("action.container", e.to_string()))?;
        let prefix = export_prefix(self.prefix.map(|Text(p)| p), "action.prefix")?;
        let connection = connection_name(self.connection.map(|Text(c)| c), "action.connection")?;
        refuse_unknown(&self.unknown, "action.")?;
        Ok(ActionSpec::Export {
            container,
            prefix,
            connection,
            compression: self.compression.map_or(Compression::Gzip, |c| c.0),
        })
    }
}

/// The one `queue` an action names, a valid queue name.
fn required_queue(queue: Option<Text>) -> Result<String, SpecError> {
    let Some(Text(name)) = queue else {
        return refuse("action.queue", "is required");
    };
    validate_queue_name(&name).or_else(|e| refuse("action.queue", e.to_string()))?;
    Ok(name)
}

/// An enqueue's `queues` as the first of them and every one of them (none when there is only
/// one): 1 to [`MAX_QUEUES`] valid queue names, each once.
fn several_queues(queues: Names<Queues>) -> Result<(String, Vec<String>), SpecError> {
    let names = queues.names;
    if names.is_empty() || names.len() > MAX_QUEUES {
        return refuse(
            "action.queues",
            format!("must name 1 to {MAX_QUEUES} queues"),
        );
    }
    for (index, name) in names.iter().enumerate() {
        let field = format!("action.queues[{index}]");
        validate_queue_name(name).or_else(|e| refuse(&field, e.to_string()))?;
        if names[..index].contains(name) {
            return refuse(&field, format!("{name:?} is named twice"));
        }
    }
    let first = names[0].clone();
    let queues = if names.len() > 1 { names } else { Vec::new() };
    Ok((first, queues))
}

/// The longest export prefix: room is left for the names tablescan adds after it (`data/`, the
/// scan and item ids, the attempt), within the service's 1,024 characters.
pub const MAX_EXPORT_PREFIX_CHARS: usize = 900;

/// An export's prefix as given, ending in `/` unless empty (so the export's blobs sit in a
/// folder of their own: `backups/2026-11-25` and `backups/2026-11-25/` mean the same).
pub(super) fn export_prefix(prefix: Option<String>, field: &str) -> Result<String, SpecError> {
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
