//! A request's `action`: what the scan does with each row, one parser per kind of action.

use serde_json::{Map, Value};

use super::fields::{refuse, Fields, SpecError};
use super::{ActionSpec, Compression, CopyMode, Encoding, Per, MAX_QUEUES, MAX_ROWS_PER_MESSAGE};
use tablescan_storage::names::{
    first_dot_segment, validate_container_name, validate_queue_name, validate_table_name,
};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::filter::Property;

/// The `action` object of a request, by its `type`; every field it does not know is refused.
pub(super) fn parse_action(object: Map<String, Value>) -> Result<ActionSpec, SpecError> {
    let mut fields = Fields::new(object, "action.");
    let kind = fields.required_string("type")?;
    let action = match kind.as_str() {
        "count" => ActionSpec::Count,
        "delete" => ActionSpec::Delete,
        "update" => parse_update(&mut fields)?,
        "copy" => parse_copy(&mut fields)?,
        "enqueue" => parse_enqueue(&mut fields)?,
        "partition-keys" => parse_partition_keys(&mut fields)?,
        "export" => parse_export(&mut fields)?,
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

/// A copy: the target table, its connection and what happens to a row it holds already.
fn parse_copy(fields: &mut Fields) -> Result<ActionSpec, SpecError> {
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
    Ok(ActionSpec::Copy {
        table,
        connection,
        mode,
    })
}

/// An enqueue: its queue or queues, one message per row or per partition, the encoding and how
/// many rows a message holds.
fn parse_enqueue(fields: &mut Fields) -> Result<ActionSpec, SpecError> {
    let (queue, queues) = enqueue_targets(fields)?;
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
    let encoding = parse_encoding(fields)?;
    let rows_per_message = fields
        .optional_whole("rowsPerMessage", 1..=u64::from(MAX_ROWS_PER_MESSAGE))?
        .map_or(1, |n| n as u16);
    Ok(ActionSpec::Enqueue {
        queue,
        queues,
        connection,
        per,
        encoding,
        rows_per_message,
    })
}

/// An enqueue's `queue`, or its `queues` as the first of them and every one of them (none
/// when there is only one).
fn enqueue_targets(fields: &mut Fields) -> Result<(String, Vec<String>), SpecError> {
    match fields.take("queues") {
        None | Some(Value::Null) => Ok((parse_queue(fields)?, Vec::new())),
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
            Ok((first, queues))
        }
        Some(_) => refuse("action.queues", "must be an array of queue names"),
    }
}

/// A partition-keys action: the queue that gets one message per partition, and its encoding.
fn parse_partition_keys(fields: &mut Fields) -> Result<ActionSpec, SpecError> {
    let queue = parse_queue(fields)?;
    let connection = fields.connection("connection")?;
    let encoding = parse_encoding(fields)?;
    Ok(ActionSpec::PartitionKeys {
        queue,
        connection,
        encoding,
    })
}

/// An export: the container, the prefix its blobs' names start with, and their compression.
fn parse_export(fields: &mut Fields) -> Result<ActionSpec, SpecError> {
    let container = fields.required_string("container")?;
    validate_container_name(&container).or_else(|e| refuse("action.container", e.to_string()))?;
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
    Ok(ActionSpec::Export {
        container,
        prefix,
        connection,
        compression,
    })
}

/// The `encoding` of enqueued messages: base64 unless `"none"`.
fn parse_encoding(fields: &mut Fields) -> Result<Encoding, SpecError> {
    match fields.optional_string("encoding")?.as_deref() {
        None | Some("base64") => Ok(Encoding::Base64),
        Some("none") => Ok(Encoding::None),
        Some(other) => refuse(
            "action.encoding",
            format!("must be \"base64\" or \"none\", not {other:?}"),
        ),
    }
}

/// The one `queue` an action names, a valid queue name.
fn parse_queue(fields: &mut Fields) -> Result<String, SpecError> {
    let name = fields.required_string("queue")?;
    validate_queue_name(&name).or_else(|e| refuse("action.queue", e.to_string()))?;
    Ok(name)
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
