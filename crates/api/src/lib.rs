//! The API's scan request (`POST /api/scans`): its types, validated and normalised, shared by
//! the handler (which reads requests with [`ScanSpec::parse`]) and the ledger (which stores them).
//!
//! May use: `tablescan-storage` (names' rules, filters) and `tablescan-engine` (key ranges,
//! strategies). Must not use: the ledger, the actions or the handler (they are built on it).
//!
//! Every field is checked before anything is created, and a refusal names the field
//! (`action.table`, `scope.after`, ...). Connections are names of app settings, never raw
//! connection strings: a request can only reach the accounts the app is configured with.
//!
//! `types` holds the validated request (also the form the ledger stores, through its derived
//! serde). A request is read in two steps: serde reads its body into `shape` (every field a
//! request may give and the kind of value it takes, from `kinds`: a field of the wrong kind is
//! refused with its path), then `parse` checks each field and what needs several fields or
//! outside facts, with `scope`, `import`, `action` and `update`, `rate` (the cap) and `age`
//! (`olderThan`) for its parts; `refusal` is the refusal that names the field. `conditions`
//! joins the row conditions into the filter the service applies, and `summary` says what a
//! scan does in one line.
//!
//! `answers` holds the typed answers of the API (a status, the scans list, a start's and the
//! control routes' answers, a refusal), which the handler writes and the CLI reads.

mod action;
mod action_kind;
mod age;
pub mod answers;
mod conditions;
pub mod connections;
mod duplicate_keys;
mod import;
mod kinds;
mod parse;
mod rate;
mod refusal;
mod scope;
mod shape;
mod summary;
mod types;
mod update;

pub use action::MAX_EXPORT_PREFIX_CHARS;
pub use action_kind::ActionKind;
pub use age::iso_duration_seconds;
pub use rate::{
    parse_rate_cap, DEFAULT_MAX_ROWS_PER_SECOND, MAX_RATE_CAP, MAX_ROWS_PER_SECOND_SETTING,
};
pub use refusal::{is_connection_name, SpecError};
pub use types::{
    ActionSpec, Compression, CopyMode, Encoding, ImportSource, ManifestSummary, OlderThan, Per,
    ScanSpec, Scope, DEFAULT_CONNECTION, MAX_QUEUES, MAX_ROWS_PER_MESSAGE, MAX_SELECT,
};

/// Looks up app settings by name.
pub use tablescan_storage::SettingLookup;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod path_tests;

#[cfg(test)]
mod prop_tests;

#[cfg(test)]
mod stored_tests;

#[cfg(test)]
mod shape_tests;
