//! A request's `scope`: the PartitionKeys and RowKeys a scan covers, each bound a valid key,
//! and the bounds together holding at least one key.

use super::kinds::Text;
use super::refusal::{refuse, refuse_unknown, SpecError};
use super::shape::ScopeFields;
use super::Scope;
use tablescan_engine::keys::KeyRange;
use tablescan_storage::names::{validate_key, KeyKind};

/// A request's `scope`: each bound a valid key, and at least one key inside.
pub(super) fn checked_scope(fields: ScopeFields) -> Result<Scope, SpecError> {
    let key =
        |given: Option<Text>, name: &str, kind: KeyKind| -> Result<Option<String>, SpecError> {
            let value = given.map(|Text(key)| key);
            if let Some(key) = &value {
                validate_key(kind, key)
                    .or_else(|e| refuse(&format!("scope.{name}"), e.to_string()))?;
            }
            Ok(value)
        };
    let prefix = key(fields.prefix, "prefix", KeyKind::PartitionKey)?.unwrap_or_default();
    let after = key(fields.after, "after", KeyKind::PartitionKey)?;
    let before = key(fields.before, "before", KeyKind::PartitionKey)?;
    let row_prefix = key(fields.row_prefix, "rowPrefix", KeyKind::RowKey)?.unwrap_or_default();
    let row_after = key(fields.row_after, "rowAfter", KeyKind::RowKey)?;
    let row_before = key(fields.row_before, "rowBefore", KeyKind::RowKey)?;
    refuse_unknown(&fields.unknown, "scope.")?;
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
