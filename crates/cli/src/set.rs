//! The properties of `--set`, as the update action's `set` wants them, with the values whose
//! meaning the Table service's JSON rules would change made explicit or refused:
//!
//! - A whole number without a type annotation is an Edm.Int32 to the service, and one beyond
//!   Int32's range would be stored as an Edm.Double (1099511627776 as 1099511627776.0, a
//!   different type, and beyond 2^53 a different number): it is sent as an Edm.Int64.
//! - `null` writes nothing (an update merges properties in): it is refused, with a pointer to
//!   `--remove`, which takes a property away.
//! - A property named twice would keep only one of its values: refused.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

const ANNOTATION: &str = "@odata.type";

/// The `set` object of an update from the text of `--set`, or why not (naming the flag).
pub fn properties(text: &str) -> Result<Map<String, Value>, String> {
    let pairs = ordered_pairs(text)?;
    let annotated = |name: &str| {
        pairs
            .iter()
            .any(|(other, _)| other.strip_suffix(ANNOTATION) == Some(name))
    };
    let mut set = Map::new();
    for (name, raw) in &pairs {
        if set.contains_key(name) {
            return Err(format!(
                "--set names {name:?} twice; give each property once"
            ));
        }
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
        if value.is_null() {
            return Err(format!(
                "--set gives {name:?} the value null, which writes nothing; to take the property \
                 away, use --remove {name}"
            ));
        }
        if name.ends_with(ANNOTATION) || annotated(name) {
            set.insert(name.clone(), value);
            continue;
        }
        match whole_number(raw.get()) {
            Some(Whole::Int32) | None => {
                set.insert(name.clone(), value);
            }
            Some(Whole::Int64(n)) => {
                set.insert(name.clone(), Value::String(n.to_string()));
                set.insert(format!("{name}{ANNOTATION}"), Value::from("Edm.Int64"));
            }
            Some(Whole::TooLarge) => {
                return Err(format!(
                    "--set gives {name:?} the whole number {}, beyond Int64 (the largest whole \
                     number a table holds); for a Double, write it with a fraction or annotate \
                     it: \"{name}@odata.type\": \"Edm.Double\"",
                    raw.get()
                ))
            }
        }
    }
    Ok(set)
}

/// What a number written without a fraction or exponent holds.
enum Whole {
    Int32,
    Int64(i64),
    TooLarge,
}

/// The kind of whole number `literal` (a JSON value's text) is; `None` if it is not one.
fn whole_number(literal: &str) -> Option<Whole> {
    let digits = literal.strip_prefix('-').unwrap_or(literal);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(match literal.parse::<i64>() {
        Ok(n) if i32::try_from(n).is_ok() => Whole::Int32,
        Ok(n) => Whole::Int64(n),
        Err(_) => Whole::TooLarge,
    })
}

/// The members of the JSON object `text`, in order, duplicates kept, each value's own text.
fn ordered_pairs(text: &str) -> Result<Vec<(String, Box<RawValue>)>, String> {
    let not_an_object = |e: serde_json::Error| {
        format!(
            "--set must be a JSON object of properties, such as '{{\"Status\":\"archived\"}}' \
             ({e})"
        )
    };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let pairs = deserializer
        .deserialize_map(PairsVisitor)
        .map_err(not_an_object)?;
    deserializer.end().map_err(not_an_object)?;
    Ok(pairs)
}

struct PairsVisitor;

impl<'de> Visitor<'de> for PairsVisitor {
    type Value = Vec<(String, Box<RawValue>)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pairs = Vec::new();
        while let Some(pair) = map.next_entry::<String, Box<RawValue>>()? {
            pairs.push(pair);
        }
        Ok(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(text: &str) -> Result<Value, String> {
        properties(text).map(Value::Object)
    }

    #[test]
    fn whole_numbers_beyond_int32_are_sent_as_int64() {
        assert_eq!(
            set(r#"{"Big":1099511627776,"Small":3,"Low":-2147483649,"Edge":2147483647}"#).unwrap(),
            json!({"Big": "1099511627776", "Big@odata.type": "Edm.Int64", "Small": 3,
                   "Low": "-2147483649", "Low@odata.type": "Edm.Int64", "Edge": 2147483647})
        );
        // Numbers with a fraction or an exponent are Doubles, as written.
        assert_eq!(
            set(r#"{"D":1099511627776.0,"E":1e12}"#).unwrap(),
            json!({"D": 1099511627776.0, "E": 1e12})
        );
        // An annotation, before or after its value, is the user's word.
        assert_eq!(
            set(r#"{"D@odata.type":"Edm.Double","D":1099511627776}"#).unwrap(),
            json!({"D@odata.type": "Edm.Double", "D": 1099511627776u64})
        );
        let error = set(r#"{"Huge":123456789012345678901234567890}"#).unwrap_err();
        assert!(error.contains("beyond Int64"), "{error}");
    }

    #[test]
    fn null_is_refused_with_a_pointer_to_remove() {
        let error = set(r#"{"Status":null}"#).unwrap_err();
        assert!(
            error.starts_with("--set gives \"Status\" the value null")
                && error.contains("--remove Status"),
            "{error}"
        );
    }

    #[test]
    fn a_property_named_twice_or_text_that_is_not_an_object_is_refused() {
        let error = set(r#"{"A":1,"A":2}"#).unwrap_err();
        assert!(error.contains("\"A\" twice"), "{error}");
        for bad in ["{oops", "[1]", "3", r#"{"A":1} x"#] {
            let error = set(bad).unwrap_err();
            assert!(
                error.starts_with("--set must be a JSON object"),
                "{bad}: {error}"
            );
        }
        assert_eq!(
            set(r#"{"S":"archived","B":true}"#).unwrap(),
            json!({"S": "archived", "B": true})
        );
    }
}
