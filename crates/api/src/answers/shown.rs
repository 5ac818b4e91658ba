//! A scan's request as a status or the list shows it, read tolerantly by the CLI: every field
//! optional, the action's type and fields by name. The app writes the request from its own
//! [`crate::ScanSpec`] (whose derived reading is the ledger's stored form, not the form a
//! status shows, and refuses an action it does not know); a CLI reading an app of another
//! version must still say what a scan does, so it reads this.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{OlderThan, Scope};

/// A status's `spec`, as the CLI reads it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SpecShown {
    pub table: Option<String>,
    pub connection: Option<String>,
    pub scope: Option<Scope>,
    pub filter: Option<String>,
    pub older_than: Option<OlderThan>,
    pub max_rows_per_second: Option<u64>,
    pub dry_run: bool,
    pub action: ActionShown,
    pub import: Option<ImportShown>,
}

/// An action's fields as a request names them, each optional: a status's `spec.action`
/// (with its `type`) and a list entry's `target` (without; an update's `set` by names only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ActionShown {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_per_message: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<SetShown>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
}

/// An update's `set`: the properties with their values (a status), or their names (a list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SetShown {
    Values(Map<String, Value>),
    Names(Vec<String>),
}

impl SetShown {
    /// The names of the properties set, annotations (`N@odata.type`) left out.
    pub fn names(&self) -> Vec<&str> {
        let names: Vec<&str> = match self {
            SetShown::Values(set) => set.keys().map(String::as_str).collect(),
            SetShown::Names(names) => names.iter().map(String::as_str).collect(),
        };
        names
            .into_iter()
            .filter(|name| !name.contains('@'))
            .collect()
    }
}

/// An import's export: `container`, `prefix`, `connection`; in a status its `manifest` once
/// read, in a list entry the manifest's `rows`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImportShown {
    pub container: String,
    pub prefix: String,
    pub connection: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<ManifestShown>,
}

/// What the CLI reads of an import's manifest summary: its rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestShown {
    pub rows: Option<u64>,
}

impl SpecShown {
    /// The action's type (`?` when the app named none).
    pub fn kind(&self) -> &str {
        self.action.kind.as_deref().unwrap_or("?")
    }
}
