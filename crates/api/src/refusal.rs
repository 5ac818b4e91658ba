//! The refusal of a request: the field at fault, by its path in the request (`action.table`,
//! `scope.after`, `select[2]`), and why; and the rule every connection's name follows.

use serde::Serialize;

use super::DEFAULT_CONNECTION;

/// A refused request: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

pub(super) fn refuse<T>(field: &str, message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError {
        field: field.to_string(),
        message: message.into(),
    })
}

impl SpecError {
    /// A field of the wrong kind, as serde found it: the field is the path serde was reading
    /// (`body` if it was at the top, which a request's object never is), the message the one
    /// the field's kind gives (`crate::kinds`).
    pub(super) fn of_shape(error: serde_path_to_error::Error<serde_json::Error>) -> SpecError {
        let path = error.path();
        let field = if path.iter().next().is_none() {
            "body".to_string()
        } else {
            path.to_string()
        };
        SpecError {
            field,
            message: error.into_inner().to_string(),
        }
    }
}

/// Whether `name` can be a connection's name: an app setting's name of 1 to 256 letters,
/// digits, `_`, `.`, `:` and `-` (never a connection string, which holds `=` and `;`).
pub fn is_connection_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
}

/// A request's connection at `field`: the name of an app setting (the default one when
/// absent). Whether it gives an account is checked once the whole request is read
/// ([`super::ScanSpec::parse_at`]).
pub(super) fn connection_name(given: Option<String>, field: &str) -> Result<String, SpecError> {
    let name = given.unwrap_or_else(|| DEFAULT_CONNECTION.to_string());
    if !is_connection_name(&name) {
        return refuse(
            field,
            "must be the name of an app setting (letters, digits, '_', '.', ':', '-')",
        );
    }
    Ok(name)
}

/// Refuses the first field of `unknown` (what a part of the request holds beyond the fields it
/// knows), naming it under `path` (`""`, `"action."`, ...).
pub(super) fn refuse_unknown(
    unknown: &serde_json::Map<String, serde_json::Value>,
    path: &str,
) -> Result<(), SpecError> {
    match unknown.keys().next() {
        None => Ok(()),
        Some(name) => refuse(&format!("{path}{name}"), "is not a known field"),
    }
}
