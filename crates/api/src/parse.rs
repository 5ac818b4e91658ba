//! Reading a request: its JSON body taken field by field in a fixed order, then the checks that
//! need several fields at once. The first refusal found is the answer, naming its field.

use serde_json::{Map, Value};

use super::action::{export_prefix, parse_action};
use super::age::resolve_age;
use super::fields::{refuse, Fields, SpecError};
use super::rate::{requested_cap, DEFAULT_MAX_ROWS_PER_SECOND};
use super::scope::parse_scope;
use super::{
    ActionSpec, CopyMode, ImportSource, OlderThan, ScanSpec, Scope, SettingLookup, MAX_SELECT,
};
use tablescan_engine::step::Strategy;
use tablescan_storage::names::{validate_container_name, validate_table_name};
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
        let mut fields = Fields::new(request_object(body)?, "");
        let import = import_field(&mut fields)?;
        let (table, connection) = source_table(&mut fields, import.as_ref())?;
        let scope = match fields.take("scope") {
            None | Some(Value::Null) => Scope::default(),
            Some(Value::Object(scope)) => parse_scope(scope)?,
            Some(_) => return refuse("scope", "must be an object"),
        };
        let strategy = strategy_field(&mut fields)?;
        let page_size = fields
            .optional_whole("pageSize", 1..=1000)?
            .map_or(1000, |n| n as u16);
        let select = select_field(&mut fields)?;
        let action = action_field(&mut fields)?;
        let max_rows_per_second = requested_cap(&mut fields, default_cap)?;
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

/// The request's `import`, if it names one.
fn import_field(fields: &mut Fields) -> Result<Option<ImportSource>, SpecError> {
    match fields.take("import") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(import)) => Ok(Some(parse_import(import)?)),
        Some(_) => refuse(
            "import",
            "must be an object naming an export: {\"container\": ..., \"prefix\": ...}",
        ),
    }
}

/// The table the scan reads and its connection; for an import (which reads an export's blobs)
/// no table, and the import's connection.
fn source_table(
    fields: &mut Fields,
    import: Option<&ImportSource>,
) -> Result<(String, String), SpecError> {
    let Some(import) = import else {
        let table = fields.required_string("table")?;
        validate_table_name(&table).or_else(|e| refuse("table", e.to_string()))?;
        return Ok((table, fields.connection("connection")?));
    };
    for field in ["table", "connection"] {
        if fields.take(field).is_some() {
            return refuse(
                field,
                "an import reads the blobs of an export, not a table: leave it out \
                 (the target is the copy's action.table)",
            );
        }
    }
    Ok((String::new(), import.connection.clone()))
}

/// The request's `strategy`: `prefix` unless it says `serial`.
fn strategy_field(fields: &mut Fields) -> Result<Strategy, SpecError> {
    match fields.optional_string("strategy")?.as_deref() {
        None | Some("prefix") => Ok(Strategy::Prefix),
        Some("serial") => Ok(Strategy::Serial),
        Some(other) => refuse(
            "strategy",
            format!("must be \"prefix\" or \"serial\", not {other:?}"),
        ),
    }
}

/// The request's `select`, if it names one.
fn select_field(fields: &mut Fields) -> Result<Option<Vec<String>>, SpecError> {
    match fields.take("select") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(parse_select(items)?)),
        Some(_) => refuse("select", "must be an array of property names"),
    }
}

/// The request's `action`, which every request names.
fn action_field(fields: &mut Fields) -> Result<ActionSpec, SpecError> {
    match fields.take("action") {
        None | Some(Value::Null) => refuse("action", "is required (an object with a \"type\")"),
        Some(Value::Object(action)) => parse_action(action),
        Some(_) => refuse("action", "must be an object with a \"type\""),
    }
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

/// The names of `select`: at most [`MAX_SELECT`] valid property names, each once, the keys
/// left out (they are always read).
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
