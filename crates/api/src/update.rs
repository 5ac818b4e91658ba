//! An update's `set` and `remove`: at least one change, no key or system property, typed
//! values that read as the entity JSON form reads, no property both set and removed.

use serde_json::{Map, Value};

use super::action::ActionFields;
use super::refusal::{refuse, refuse_unknown, SpecError};
use super::shape::UpdateFields;
use super::ActionSpec;
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::filter::Property;

impl ActionFields for UpdateFields {
    fn checked(self) -> Result<ActionSpec, SpecError> {
        let set = self.set.map_or_else(Map::new, |set| set.0);
        check_set(&set)?;
        let remove = removed(self.remove.map_or_else(Vec::new, |names| names.names), &set)?;
        if set.is_empty() && remove.is_empty() {
            return refuse(
                "action.set",
                "an update needs properties to set or to remove",
            );
        }
        refuse_unknown(&self.unknown, "action.")?;
        Ok(ActionSpec::Update { set, remove })
    }
}

/// The properties of `set`: no key or system property, and values of the entity JSON form.
fn check_set(set: &Map<String, Value>) -> Result<(), SpecError> {
    for name in set.keys() {
        let property = name.strip_suffix("@odata.type").unwrap_or(name);
        let field = format!("action.set.{property}");
        if matches!(property, "PartitionKey" | "RowKey" | "Timestamp")
            || property.starts_with("odata.")
        {
            return refuse(
                &field,
                "is a key or a system property; an update cannot change it",
            );
        }
        Property::new(property).or_else(|e| refuse(&field, e.to_string()))?;
    }
    let mut typed = set.clone();
    typed.insert("PartitionKey".into(), Value::String(String::new()));
    typed.insert("RowKey".into(), Value::String(String::new()));
    Entity::from_json(typed).or_else(|why| refuse("action.set", why))?;
    Ok(())
}

/// The names of `remove`, each once: no key or system property, none that `set` also sets.
fn removed(names: Vec<String>, set: &Map<String, Value>) -> Result<Vec<String>, SpecError> {
    let mut removed = Vec::new();
    for (index, name) in names.into_iter().enumerate() {
        let field = format!("action.remove[{index}]");
        if matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp") {
            return refuse(
                &field,
                "is a key or a system property; it cannot be removed",
            );
        }
        Property::new(&name).or_else(|e| refuse(&field, e.to_string()))?;
        if set.contains_key(&name) {
            return refuse(&field, format!("{name:?} is both set and removed"));
        }
        if !removed.contains(&name) {
            removed.push(name);
        }
    }
    Ok(removed)
}
