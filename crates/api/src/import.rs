//! A request's `import`: the export whose blobs a scan reads instead of a table, and what an
//! import may ask for.

use super::action::export_prefix;
use super::kinds::Text;
use super::refusal::{connection_name, refuse, refuse_unknown, SpecError};
use super::shape::ImportFields;
use super::{ActionSpec, ImportSource, OlderThan, Scope};
use tablescan_engine::step::Strategy;
use tablescan_storage::names::validate_container_name;

/// The `import` of a request: the container, prefix and connection of an export.
pub(super) fn checked_import(fields: ImportFields) -> Result<ImportSource, SpecError> {
    let Some(Text(container)) = fields.container else {
        return refuse("import.container", "is required");
    };
    validate_container_name(&container).or_else(|e| refuse("import.container", e.to_string()))?;
    // The manifest's own name names its export too.
    let prefix = fields.prefix.map(|Text(p)| {
        p.strip_suffix("manifest.json")
            .map_or(p.clone(), str::to_string)
    });
    let prefix = export_prefix(prefix, "import.prefix")?;
    let connection = connection_name(fields.connection.map(|Text(c)| c), "import.connection")?;
    refuse_unknown(&fields.unknown, "import.")?;
    Ok(ImportSource {
        container,
        prefix,
        connection,
        manifest: None,
    })
}

/// What an import may ask for: a copy into a table (or a count, which reads every blob and
/// checks it), over every row the export holds.
pub(super) fn check_import(
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
