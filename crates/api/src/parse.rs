//! Reading a request: its JSON body read by serde into the request's shape (`crate::shape`),
//! which refuses a field of the wrong kind; then each field checked in a fixed order, then the
//! checks that need several fields at once. The first refusal found is the answer, naming its
//! field.

use serde_json::{Map, Value};

use super::action::ActionFields;
use super::age::resolve_age;
use super::import::{check_import, checked_import};
use super::kinds::{Given, Names, Object, Text};
use super::rate::{Cap, DEFAULT_MAX_ROWS_PER_SECOND};
use super::refusal::{connection_name, refuse, refuse_unknown, SpecError};
use super::scope::checked_scope;
use super::shape::{
    self, BareAction, CopyFields, EnqueueFields, ExportFields, PartitionKeysFields, Request,
    Selected, UpdateFields,
};
use super::ActionKind;
use super::{ActionSpec, CopyMode, ImportSource, ScanSpec, Scope, SettingLookup, MAX_SELECT};
use tablescan_storage::names::validate_table_name;
use tablescan_storage::table::filter::Property;
use tablescan_storage::table::filter_text::parse_filter;

impl ScanSpec {
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
        // Resolved only to be checked: token credentials of their own, never used.
        for used in spec.connection_uses() {
            if let Err(error) = tablescan_storage::connection::resolve(
                used.name,
                settings,
                &tablescan_storage::token::TokenCredentials::default(),
            ) {
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
        let object = request_object(body)?;
        let read = Reading { default_cap, now };
        match ActionKind::named_in(&object) {
            Some(ActionKind::Copy) => read.spec(shape::read::<CopyFields>(object)?),
            Some(ActionKind::Enqueue) => read.spec(shape::read::<EnqueueFields>(object)?),
            Some(ActionKind::PartitionKeys) => {
                read.spec(shape::read::<PartitionKeysFields>(object)?)
            }
            Some(ActionKind::Export) => read.spec(shape::read::<ExportFields>(object)?),
            Some(ActionKind::Update) => read.spec(shape::read::<UpdateFields>(object)?),
            Some(ActionKind::Count | ActionKind::Delete) | None => {
                read.spec(shape::read::<BareAction>(object)?)
            }
        }
    }
}

/// The request's JSON object: valid JSON, no field given twice, an object.
fn request_object(body: &str) -> Result<Map<String, Value>, SpecError> {
    let value: Value =
        serde_json::from_str(body).or_else(|e| refuse("body", format!("not valid JSON: {e}")))?;
    if let Some(path) = crate::duplicate_keys::first_duplicate(body) {
        return refuse(
            &path,
            "is given twice; say it once (JSON parsers would silently keep the last)",
        );
    }
    let Value::Object(object) = value else {
        return refuse("body", "must be a JSON object");
    };
    Ok(object)
}

/// What a request is read against: the app's default cap, and the moment `olderThan` counts
/// back from.
struct Reading {
    default_cap: Option<u32>,
    now: time::OffsetDateTime,
}

impl Reading {
    /// The spec a request of the right shape asks for: each field checked, in the order of the
    /// request's fields, then what needs several of them.
    fn spec<A: ActionFields>(&self, request: Request<A>) -> Result<ScanSpec, SpecError> {
        let import = request
            .import
            .map(|Object(i)| checked_import(i))
            .transpose()?;
        let (table, connection) = source_table(request.table, request.connection, &import)?;
        let scope = match request.scope {
            None => Scope::default(),
            Some(Object(scope)) => checked_scope(scope)?,
        };
        let strategy = request.strategy.map(|s| s.0).unwrap_or_default();
        let page_size = request.page_size.map_or(1000, |n| n.0 as u16);
        let select = request.select.map(checked_select).transpose()?;
        let Some(Object(action)) = request.action else {
            return refuse("action", "is required (an object with a \"type\")");
        };
        let action = action.checked()?;
        let max_rows_per_second = Cap::or_default(request.max_rows_per_second, self.default_cap);
        let dry_run = request.dry_run.is_some_and(|flag| flag.0);
        let max_row_failures = request.max_row_failures.map(|n| n.0);
        let filter = request.filter.map(|Text(filter)| filter);
        let older_than = request
            .older_than
            .map(|Text(age)| resolve_age(&age, self.now))
            .transpose()?;
        refuse_unknown(&request.unknown, "")?;
        if import.is_some() {
            check_import(&action, &scope, strategy, &select, &filter, &older_than)?;
        }
        let filter = filter.map(|text| written_filter(&text)).transpose()?;
        let spec = ScanSpec {
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
        };
        if let Err(why) = spec.row_filter() {
            return refuse("filter", why);
        }
        check_action_fits(&spec)?;
        Ok(spec)
    }
}

/// The table the scan reads and its connection; for an import (which reads an export's blobs)
/// no table, and the import's connection.
fn source_table(
    table: Given<Text>,
    connection: Given<Text>,
    import: &Option<ImportSource>,
) -> Result<(String, String), SpecError> {
    if let Some(import) = import {
        for (field, given) in [
            ("table", table.is_given()),
            ("connection", connection.is_given()),
        ] {
            if given {
                return refuse(
                    field,
                    "an import reads the blobs of an export, not a table: leave it out \
                     (the target is the copy's action.table)",
                );
            }
        }
        return Ok((String::new(), import.connection.clone()));
    }
    let Some(Text(table)) = table.value("table")? else {
        return refuse("table", "is required");
    };
    validate_table_name(&table).or_else(|e| refuse("table", e.to_string()))?;
    let connection = connection_name(
        connection.value("connection")?.map(|Text(c)| c),
        "connection",
    )?;
    Ok((table, connection))
}

/// The names of `select`: at most [`MAX_SELECT`] valid property names, each once, the keys
/// left out (they are always read).
fn checked_select(select: Names<Selected>) -> Result<Vec<String>, SpecError> {
    if select.names.len() > MAX_SELECT {
        return refuse(
            "select",
            format!("may name at most {MAX_SELECT} properties"),
        );
    }
    let mut names = Vec::with_capacity(select.names.len());
    for (index, name) in select.names.into_iter().enumerate() {
        Property::new(&name).or_else(|e| refuse(&format!("select[{index}]"), e.to_string()))?;
        if matches!(name.as_str(), "PartitionKey" | "RowKey") {
            continue;
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// A `filter` as it will be sent: parsed, and written back as this client writes it.
fn written_filter(text: &str) -> Result<String, SpecError> {
    Ok(parse_filter(text)
        .or_else(|e| refuse("filter", e.to_string()))?
        .as_str()
        .to_string())
}

/// Refuses what the action cannot do with the rest of the request: a dry run of a count, and a
/// `select` where writing the selected properties only would lose the others.
fn check_action_fits(spec: &ScanSpec) -> Result<(), SpecError> {
    let (select, action) = (&spec.select, &spec.action);
    if spec.dry_run && *action == ActionSpec::Count {
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
    ) = (select, action)
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
    Ok(())
}
