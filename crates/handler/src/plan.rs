//! From a scan's spec to what a step runs: the scan options and the action.

use super::app::AppState;
use tablescan_actions::{
    self as actions, Action, Change, CopyRows, DeleteRows, EnqueueRows, ExportRows, MessageBody,
    UpdateRows,
};
use tablescan_api::{ActionSpec, Compression, CopyMode, Encoding, Per, ScanSpec};
use tablescan_engine::keys::KeyRange;
use tablescan_engine::{Budget, ReadMode, ScanOptions};
use tablescan_storage::queue::MessageEncoding;
use tablescan_storage::table::entity::Entity;

/// The PartitionKey range and prefix a spec's scope covers.
pub fn scope_range(spec: &ScanSpec) -> (KeyRange, String) {
    let scope = &spec.scope;
    let range = KeyRange::with_prefix(&scope.prefix).intersect(&KeyRange::between(
        scope.after.as_deref(),
        scope.before.as_deref(),
    ));
    (range, scope.prefix.clone())
}

/// How the scan engine reads for this spec; an error only for a spec whose stored filter
/// cannot be read (written by a broken or later version).
pub fn scan_options(spec: &ScanSpec, budget: Budget) -> Result<ScanOptions, String> {
    let keys_only = spec.reads_partition_keys();
    let columns = match &spec.action {
        // Deleting, and an update that only sets properties, need the keys and the etag only;
        // an update that removes some writes the whole row back.
        ActionSpec::Delete | ActionSpec::Count => Some(Vec::new()),
        ActionSpec::Update { remove, .. } if remove.is_empty() => Some(Vec::new()),
        ActionSpec::Update { .. } => None,
        _ => spec.select.clone(),
    };
    let filter = spec
        .row_filter()
        .map_err(|why| format!("the scan's filter cannot be read: {why}"))?;
    Ok(ScanOptions {
        strategy: spec.strategy,
        mode: if keys_only {
            ReadMode::PartitionKeys
        } else {
            ReadMode::Rows
        },
        page_size: spec.page_size,
        columns,
        budget,
        filter,
        ..ScanOptions::default()
    })
}

fn copy_mode(mode: CopyMode) -> actions::CopyMode {
    match mode {
        CopyMode::Replace => actions::CopyMode::Replace,
        CopyMode::Merge => actions::CopyMode::Merge,
        CopyMode::Insert => actions::CopyMode::Insert,
    }
}

/// The export format's compression for the one a spec names.
pub fn compression(compression: Compression) -> actions::export::format::Compression {
    match compression {
        Compression::Gzip => actions::export::format::Compression::Gzip,
        Compression::None => actions::export::format::Compression::None,
    }
}

fn encoding(encoding: Encoding) -> MessageEncoding {
    match encoding {
        Encoding::Base64 => MessageEncoding::Base64,
        Encoding::None => MessageEncoding::Text,
    }
}

/// Whether the app's list of connections (`functions::allowlist`) allows what the scan does,
/// checked by every step and by the export's manifest before it touches a connection: a list
/// set or narrowed after the scan started applies to its remaining work.
pub fn permitted(state: &AppState, spec: &ScanSpec) -> Result<(), String> {
    if let Some(allowlist) = state.allowlist()? {
        allowlist
            .permits(spec)
            .map_err(|refused| refused.to_string())?;
    }
    Ok(())
}

/// The action a spec asks for, with its clients. Refused when the app's list of connections
/// (`functions::allowlist`) does not allow what the scan does, whenever the scan started.
pub fn action_for(state: &AppState, spec: &ScanSpec) -> Result<Action, String> {
    permitted(state, spec)?;
    Ok(match &spec.action {
        ActionSpec::Count => Action::Count,
        ActionSpec::Copy {
            table,
            connection,
            mode,
        } => Action::Copy(CopyRows::new(
            target_table(state, connection, table)?,
            copy_mode(*mode),
        )),
        ActionSpec::Update { set, remove } => Action::Update(UpdateRows::new(
            target_table(state, &spec.connection, &spec.table)?,
            change(set, remove)?,
        )),
        ActionSpec::Delete => Action::Delete(DeleteRows::new(target_table(
            state,
            &spec.connection,
            &spec.table,
        )?)),
        ActionSpec::Enqueue {
            queue,
            queues,
            connection,
            per,
            encoding: e,
            rows_per_message,
        } => {
            let body = match per {
                Per::Row => MessageBody::Row,
                Per::Partition => MessageBody::PartitionKey,
            };
            let spread = queues
                .iter()
                .map(|name| target_queue(state, connection, name))
                .collect::<Result<Vec<_>, _>>()?;
            Action::Enqueue(
                EnqueueRows::new(target_queue(state, connection, queue)?, body, encoding(*e))
                    .with_rows_per_message(*rows_per_message)
                    .spread_over(spread),
            )
        }
        ActionSpec::Export {
            container,
            connection,
            compression,
            ..
        } => {
            let container = state
                .clients(connection)?
                .blobs()?
                .container(container)
                .map_err(|e| e.to_string())?;
            Action::Export(ExportRows::new(container, self::compression(*compression)))
        }
        ActionSpec::PartitionKeys {
            queue,
            connection,
            encoding: e,
        } => Action::Enqueue(EnqueueRows::new(
            target_queue(state, connection, queue)?,
            MessageBody::PartitionKey,
            encoding(*e),
        )),
    })
}

/// The client of `table` in the account `connection` names (the scan's own table for an
/// update or a delete, the target of a copy).
fn target_table(
    state: &AppState,
    connection: &str,
    table: &str,
) -> Result<tablescan_storage::TableClient, String> {
    state
        .clients(connection)?
        .tables()?
        .table(table)
        .map_err(|e| e.to_string())
}

/// An update's change: the properties to set, typed as an entity's (the JSON of the request,
/// with its `@odata.type` annotations), and those to remove.
fn change(
    set: &serde_json::Map<String, serde_json::Value>,
    remove: &[String],
) -> Result<Change, String> {
    let mut typed = set.clone();
    typed.insert(
        "PartitionKey".into(),
        serde_json::Value::String(String::new()),
    );
    typed.insert("RowKey".into(), serde_json::Value::String(String::new()));
    let set = Entity::from_json(typed)
        .map_err(|why| format!("the scan's update cannot be read: {why}"))?
        .properties;
    Ok(Change {
        set,
        remove: remove.to_vec(),
    })
}

fn target_queue(
    state: &AppState,
    connection: &str,
    queue: &str,
) -> Result<tablescan_storage::QueueClient, String> {
    state
        .clients(connection)?
        .queues()?
        .queue(queue)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::{NotUsable, Refused, CONNECTIONS_SETTING};
    use crate::Settings;
    use tablescan_api::connections::Access;
    use tablescan_api::SpecError;

    const DEV: &str = "UseDevelopmentStorage=true";

    fn spec(body: &str) -> ScanSpec {
        ScanSpec::parse_unresolved_at(body, None, time::OffsetDateTime::now_utc()).unwrap()
    }

    fn state(extra: &[(&str, &str)]) -> std::sync::Arc<AppState> {
        let mut pairs = vec![
            ("AzureWebJobsStorage".to_string(), DEV.to_string()),
            ("Orders".to_string(), DEV.to_string()),
        ];
        pairs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        AppState::new(Settings::from_pairs(pairs))
    }

    /// Parsed once, at start; a start and a step both go by it.
    #[test]
    fn starts_and_steps_go_by_the_list_read_at_start() {
        let delete = r#"{"table":"tab1","connection":"Orders","action":{"type":"delete"}}"#;
        let count = r#"{"table":"tab1","connection":"Orders","action":{"type":"count"}}"#;

        // Unset: every configured connection, as before.
        let open = state(&[]);
        assert!(open.parse_start(delete, None).is_ok());
        assert!(action_for(&open, &spec(delete)).is_ok());
        assert!(matches!(
            open.parse_start(r#"{"table":"tab1","connection":"Nowhere","action":{"type":"count"}}"#, None),
            Err(Refused::Request(SpecError { ref field, ref message })) if field == "connection" && message.contains("no app setting")
        ));

        let listed = state(&[(CONNECTIONS_SETTING, "Orders:ro")]);
        assert!(listed.parse_start(count, None).is_ok());
        assert!(matches!(
            listed.parse_start(delete, None),
            Err(Refused::NotUsable(NotUsable {
                field: "connection",
                access: Access::Write,
                ..
            }))
        ));
        // A delete recorded before the list was set is stopped at its steps.
        let why = action_for(&listed, &spec(delete)).err().expect("refused");
        assert!(why.contains(CONNECTIONS_SETTING), "{why}");

        // A value that cannot be read refuses starts and steps, naming the setting.
        let broken = state(&[(CONNECTIONS_SETTING, "Orders")]);
        assert!(matches!(
            broken.parse_start(count, None),
            Err(Refused::Setting(ref why)) if why.contains(CONNECTIONS_SETTING)
        ));
        let why = action_for(&broken, &spec(count)).err().expect("refused");
        assert!(why.contains(CONNECTIONS_SETTING), "{why}");
    }
}
