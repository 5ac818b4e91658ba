//! Finding a key given twice in one JSON object. JSON parsers, serde_json's among them, keep the
//! last of two equal keys silently, so `{"action": {"type": "count"}, "action": {"type":
//! "delete"}}` would start a delete; a request that says two things must be refused instead.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The path of the first key that appears twice in one object of `text` (`action.type`,
/// `select[2].x`), if any; `None` too when `text` is not JSON (the parser proper says why).
pub fn first_duplicate(text: &str) -> Option<String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let walk = Walk {
        path: String::new(),
    };
    walk.deserialize(&mut deserializer).unwrap_or_default()
}

/// Walks one value at `path`; yields the first duplicate's path.
struct Walk {
    path: String,
}

impl Walk {
    fn child(&self, key: &str) -> Walk {
        let path = if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        };
        Walk { path }
    }
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if found.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let child = self.child(&key);
            if !seen.insert(key) {
                found = Some(child.path);
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            found = map.next_value_seed(child)?;
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut index = 0;
        loop {
            if found.is_some() {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                continue;
            }
            let child = Walk {
                path: format!("{}[{index}]", self.path),
            };
            match seq.next_element_seed(child)? {
                Some(inner) => found = inner,
                None => break,
            }
            index += 1;
        }
        Ok(found)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_given_twice_is_named_with_its_path() {
        assert_eq!(first_duplicate(r#"{"a":1,"b":2}"#), None);
        assert_eq!(first_duplicate(r#"{"a":1,"a":2}"#), Some("a".into()));
        assert_eq!(
            first_duplicate(r#"{"action":{"type":"count","type":"delete"}}"#),
            Some("action.type".into())
        );
        assert_eq!(
            first_duplicate(r#"{"x":[{"k":1},{"k":1,"k":2}],"x2":{"y":1,"y":2}}"#),
            Some("x[1].k".into())
        );
        // Equal keys in different objects are fine.
        assert_eq!(first_duplicate(r#"{"a":{"k":1},"b":{"k":1}}"#), None);
        // Not JSON: the parser proper reports it.
        assert_eq!(first_duplicate("{"), None);
    }
}
