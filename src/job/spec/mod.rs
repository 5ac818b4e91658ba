//! A scan request, validated and normalised.
//!
//! Every field is checked before anything is created, and a refusal names the field
//! (`action.table`, `scope.after`, ...). Connections are names of app settings, never raw
//! connection strings: a request can only reach the accounts the app is configured with.
//!
//! `types` holds the request's types (also the form the ledger stores); `parse` reads a
//! request, with `fields` (field-by-field reading and the refusal), `scope`, `action`, `rate`
//! (the cap) and `age` (`olderThan`) for its parts; `conditions` joins the row conditions into
//! the filter the service applies, and `summary` says what a scan does in one line.

mod action;
mod age;
mod conditions;
mod fields;
mod parse;
mod rate;
mod scope;
mod summary;
mod types;

pub use action::MAX_EXPORT_PREFIX_CHARS;
pub use age::iso_duration_seconds;
pub use fields::{is_connection_name, SpecError};
pub use rate::{
    parse_rate_cap, DEFAULT_MAX_ROWS_PER_SECOND, MAX_RATE_CAP, MAX_ROWS_PER_SECOND_SETTING,
};
pub use types::{
    ActionSpec, Compression, CopyMode, Encoding, ImportSource, ManifestSummary, OlderThan, Per,
    ScanSpec, Scope, DEFAULT_CONNECTION, MAX_QUEUES, MAX_ROWS_PER_MESSAGE, MAX_SELECT,
};

/// Looks up app settings by name.
pub use crate::storage::SettingLookup;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod path_tests;
