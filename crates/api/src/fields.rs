//! Reading a request's JSON object field by field, and the refusal that names the field at
//! fault by its path in the request (`action.table`, `scope.after`, ...).

use serde::Serialize;
use serde_json::{Map, Value};

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

/// Whether `name` can be a connection's name: an app setting's name of 1 to 256 letters,
/// digits, `_`, `.`, `:` and `-` (never a connection string, which holds `=` and `;`).
pub fn is_connection_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
}

/// The fields of one JSON object, taken one by one; whatever is left over is an unknown field.
pub(super) struct Fields {
    object: Map<String, Value>,
    path: &'static str,
}

impl Fields {
    pub(super) fn new(object: Map<String, Value>, path: &'static str) -> Self {
        Fields { object, path }
    }

    pub(super) fn name(&self, field: &str) -> String {
        format!("{}{field}", self.path)
    }

    pub(super) fn take(&mut self, field: &str) -> Option<Value> {
        self.object.remove(field)
    }

    pub(super) fn optional_string(&mut self, field: &str) -> Result<Option<String>, SpecError> {
        match self.take(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => refuse(&self.name(field), "must be a string"),
        }
    }

    /// A whole number in `range`, if given.
    pub(super) fn optional_whole(
        &mut self,
        field: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Option<u64>, SpecError> {
        let (low, high) = (range.start(), range.end());
        match self.take(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(value) if range.contains(&value) => Ok(Some(value)),
                _ => refuse(
                    &self.name(field),
                    format!("must be a whole number from {low} to {high}, not {n}"),
                ),
            },
            Some(_) => refuse(
                &self.name(field),
                format!("must be a number from {low} to {high}"),
            ),
        }
    }

    pub(super) fn required_string(&mut self, field: &str) -> Result<String, SpecError> {
        self.optional_string(field)?.ok_or_else(|| SpecError {
            field: self.name(field),
            message: "is required".into(),
        })
    }

    /// The name of an app setting, as a connection (the default one when absent). Whether it
    /// gives an account is checked once the whole request is read ([`super::ScanSpec::parse_at`]).
    pub(super) fn connection(&mut self, field: &str) -> Result<String, SpecError> {
        let name = self
            .optional_string(field)?
            .unwrap_or_else(|| DEFAULT_CONNECTION.to_string());
        let full = self.name(field);
        if !is_connection_name(&name) {
            return refuse(
                &full,
                "must be the name of an app setting (letters, digits, '_', '.', ':', '-')",
            );
        }
        Ok(name)
    }

    pub(super) fn finish(self) -> Result<(), SpecError> {
        match self.object.keys().next() {
            None => Ok(()),
            Some(unknown) => refuse(&format!("{}{unknown}", self.path), "is not a known field"),
        }
    }
}
