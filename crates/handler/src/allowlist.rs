//! Which connections scans may use, and how: the app setting `TABLESCAN_CONNECTIONS`.
//!
//! Any holder of a function key can start any scan, so without a list any configured
//! connection can be deleted from, updated or written into. The list names the connections
//! scans may use, each read-only (`ro`) or read-write (`rw`):
//!
//! ```text
//! TABLESCAN_CONNECTIONS=Orders:ro,Backup:rw
//! ```
//!
//! Entries are separated by commas, each `Name:ro` or `Name:rw` (spaces around either part are
//! ignored, the access in any case; a name is matched exactly, and may itself hold `:`, since
//! the access follows the last one). A delete, an update and the target of a copy (an import's
//! too), an export, an enqueue or a partition-keys scan need `rw`; everything else, and
//! everything of a dry run, reads. The app's own storage (`AzureWebJobsStorage`) is read-only
//! unless the list names it. Without the setting every connection is usable, as before the
//! list existed.
//!
//! A connection the list does not allow for what the scan does, one it lists that is not set,
//! and one whose setting cannot be read all get the same answer ([`NotUsable`], a 403): the
//! caller cannot tell from it which app settings exist. Why a listed connection cannot be used
//! is the operator's business, and goes to the log.
//!
//! The setting is read once, when the handler starts (`functions::config`); a value that cannot
//! be read is logged then, and every function answers with a 500 that names it until it is
//! mended: a broken list lets nothing through.

use std::collections::BTreeMap;

use crate::names::STORAGE_CONNECTION;
use tablescan_api::connections::Access;
use tablescan_api::{is_connection_name, ScanSpec, SpecError};
use tablescan_storage::SettingLookup;

/// The app setting that lists the connections scans may use.
pub const CONNECTIONS_SETTING: &str = "TABLESCAN_CONNECTIONS";

/// The connections scans may use, as the setting lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    listed: BTreeMap<String, Access>,
}

/// Why the setting's value cannot be read. Entries are named by their place, never by their
/// text unless it is a connection's name: a connection string pasted there by mistake must
/// not reach a log or an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error(
        "is empty: list the connections scans may use as Name:ro or Name:rw, separated by \
         commas (or remove the setting to let scans use every connection)"
    )]
    Empty,
    #[error("cannot be read: its entry {position} {problem}")]
    Entry {
        /// 1 for the text before the first comma.
        position: usize,
        problem: EntryProblem,
    },
}

/// What is wrong with one entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    #[error("gives no access: write Name:ro (read-only) or Name:rw (read-write)")]
    NoAccess,
    #[error("does not start with a connection's name (an app setting's name: letters, digits, '_', '.', ':', '-')")]
    NotAName,
    #[error("gives an access other than ro (read-only) or rw (read-write)")]
    UnknownAccess,
    #[error("names {0:?}, which an earlier entry names already")]
    Twice(String),
}

impl Allowlist {
    /// Reads the setting's value. Empty entries (`A:ro,,B:rw,`) are skipped; a value without
    /// any entry is refused, so that a list cleared by mistake does not open every connection.
    pub fn parse(text: &str) -> Result<Allowlist, AllowlistError> {
        let mut listed = BTreeMap::new();
        for (index, entry) in text.split(',').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let fail = |problem| AllowlistError::Entry {
                position: index + 1,
                problem,
            };
            let Some((name, access)) = entry.rsplit_once(':') else {
                return Err(fail(if is_connection_name(entry) {
                    EntryProblem::NoAccess
                } else {
                    EntryProblem::NotAName
                }));
            };
            let name = name.trim();
            if !is_connection_name(name) {
                return Err(fail(EntryProblem::NotAName));
            }
            let access = match access.trim().to_ascii_lowercase().as_str() {
                "ro" => Access::Read,
                "rw" => Access::Write,
                "" => return Err(fail(EntryProblem::NoAccess)),
                _ => return Err(fail(EntryProblem::UnknownAccess)),
            };
            if listed.insert(name.to_string(), access).is_some() {
                return Err(fail(EntryProblem::Twice(name.to_string())));
            }
        }
        if listed.is_empty() {
            return Err(AllowlistError::Empty);
        }
        Ok(Allowlist { listed })
    }

    /// How scans may use `connection`: as listed; the app's own storage read-only when the
    /// list leaves it out; `None` when not at all.
    pub fn access(&self, connection: &str) -> Option<Access> {
        self.listed
            .get(connection)
            .copied()
            .or_else(|| (connection == STORAGE_CONNECTION).then_some(Access::Read))
    }

    /// Whether scans may use `connection` for `needed`.
    pub fn allows(&self, connection: &str, needed: Access) -> bool {
        self.access(connection)
            .is_some_and(|access| access >= needed)
    }

    /// The first connection `spec` uses that the list does not allow for what the scan does
    /// through it. Steps check this too, so a scan started before the list was set stops at
    /// the list's edge.
    pub fn permits(&self, spec: &ScanSpec) -> Result<(), NotUsable> {
        match spec
            .connection_uses()
            .into_iter()
            .find(|used| !self.allows(used.name, used.access))
        {
            None => Ok(()),
            Some(used) => Err(NotUsable::new(used.field, used.name, used.access)),
        }
    }

    /// [`Allowlist::permits`], and every connection gives an account: a listed one that is not
    /// set, or whose setting cannot be read, is refused in the same words as one the list
    /// leaves out (its reason is logged for the operator, naming settings only).
    pub fn check(&self, spec: &ScanSpec, settings: &dyn SettingLookup) -> Result<(), NotUsable> {
        self.permits(spec)?;
        // Resolved only to be checked: token credentials of their own, never used.
        for used in spec.connection_uses() {
            if let Err(error) = tablescan_storage::connection::resolve(
                used.name,
                settings,
                &tablescan_storage::token::TokenCredentials::default(),
            ) {
                tracing::warn!(
                    "connection {:?} is listed in {CONNECTIONS_SETTING} but cannot be used: \
                     {error}",
                    used.name
                );
                return Err(NotUsable::new(used.field, used.name, used.access));
            }
        }
        Ok(())
    }
}

/// A connection scans may not use for what the request asks. Its words depend on the request
/// alone (the field, the name it gave, whether the scan writes), never on the app's settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct NotUsable {
    pub field: &'static str,
    pub connection: String,
    pub access: Access,
}

impl NotUsable {
    fn new(field: &'static str, connection: &str, access: Access) -> NotUsable {
        NotUsable {
            field,
            connection: connection.to_string(),
            access,
        }
    }

    fn message(&self) -> String {
        let rule = format!(
            "the app setting {CONNECTIONS_SETTING} lists the connections scans may use, each \
             read-only (ro) or read-write (rw)"
        );
        match self.access {
            Access::Read => format!(
                "connection {:?} is not one this app's scans may use: {rule}",
                self.connection
            ),
            Access::Write => format!(
                "connection {:?} is not one this app's scans may write to: {rule}; a delete, \
                 an update, and the target of a copy, an import, an export, an enqueue or a \
                 partition-keys scan need rw (a dry run only reads)",
                self.connection
            ),
        }
    }
}

/// Why a start's request is refused before anything is looked at.
#[derive(Debug)]
pub enum Refused {
    /// The request itself (a 400 naming the field).
    Request(SpecError),
    /// A connection scans may not use for it (a 403 naming the field).
    NotUsable(NotUsable),
    /// The setting cannot be read (a 500 naming it).
    Setting(String),
}

impl Refused {
    /// The answer to the caller: status, the field at fault, and why.
    pub fn answer(self) -> (axum::http::StatusCode, Option<String>, String) {
        use axum::http::StatusCode;
        match self {
            Refused::Request(SpecError { field, message }) => {
                (StatusCode::BAD_REQUEST, Some(field), message)
            }
            Refused::NotUsable(refused) => (
                StatusCode::FORBIDDEN,
                Some(refused.field.to_string()),
                refused.to_string(),
            ),
            Refused::Setting(why) => (StatusCode::INTERNAL_SERVER_ERROR, None, why),
        }
    }
}

#[cfg(test)]
#[path = "allowlist_tests.rs"]
mod tests;
