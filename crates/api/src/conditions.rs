//! The condition a scan's rows must meet as the service applies it: the request's `filter`,
//! `olderThan` and the RowKey bounds of its scope, joined into one filter.

use super::ScanSpec;
use tablescan_engine::keys::KeyProperty;
use tablescan_storage::table::entity::EdmDateTime;
use tablescan_storage::table::filter::{Comparison, Filter, Literal, Property};
use tablescan_storage::table::filter_text::{parse_filter, MAX_USER_COMPARISONS};

impl ScanSpec {
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
}
