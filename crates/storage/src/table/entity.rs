//! Table entities with every EDM type kept exactly.
//!
//! A table copy reads entities with minimal metadata and writes them back; the copy must be
//! indistinguishable from the original. So every property keeps its EDM type (an `Int64` does not
//! become a string, a `Double` that happens to be integral does not become an `Int32`), doubles
//! keep NaN and the infinities, DateTime keeps its 100-ns ticks, and Binary its bytes.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use serde_json::{Map, Number, Value as Json};
use time::{format_description::well_known::Rfc3339, OffsetDateTime, UtcOffset};

/// A property value with its EDM type.
#[derive(Clone, Debug)]
pub enum Value {
    String(String),
    Int32(i32),
    Int64(i64),
    Double(f64),
    Boolean(bool),
    DateTime(EdmDateTime),
    Guid(uuid::Uuid),
    Binary(Vec<u8>),
}

/// Two values are equal when they have the same type and the same bits, so NaN equals NaN and
/// 0.0 differs from -0.0: this is the equality a copy must preserve.
impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (String(a), String(b)) => a == b,
            (Int32(a), Int32(b)) => a == b,
            (Int64(a), Int64(b)) => a == b,
            (Double(a), Double(b)) => a.to_bits() == b.to_bits(),
            (Boolean(a), Boolean(b)) => a == b,
            (DateTime(a), DateTime(b)) => a == b,
            (Guid(a), Guid(b)) => a == b,
            (Binary(a), Binary(b)) => a == b,
            _ => false,
        }
    }
}

impl Value {
    /// The EDM type name, as in `Edm.Int64`.
    pub fn edm_type(&self) -> &'static str {
        match self {
            Value::String(_) => "Edm.String",
            Value::Int32(_) => "Edm.Int32",
            Value::Int64(_) => "Edm.Int64",
            Value::Double(_) => "Edm.Double",
            Value::Boolean(_) => "Edm.Boolean",
            Value::DateTime(_) => "Edm.DateTime",
            Value::Guid(_) => "Edm.Guid",
            Value::Binary(_) => "Edm.Binary",
        }
    }
}

/// An `Edm.DateTime`: a UTC instant with the service's precision of 100 nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EdmDateTime(OffsetDateTime);

impl EdmDateTime {
    /// Truncates to 100 ns and converts to UTC.
    pub fn new(time: OffsetDateTime) -> Self {
        let time = time.to_offset(UtcOffset::UTC);
        let nanos = time.nanosecond() / 100 * 100;
        EdmDateTime(
            time.replace_nanosecond(nanos)
                .expect("truncated nanoseconds stay valid"),
        )
    }

    /// Parses the service's ISO 8601 form (`2008-07-10T00:00:00.1234567Z`; fewer digits too).
    pub fn parse(text: &str) -> Option<Self> {
        let time = OffsetDateTime::parse(text, &Rfc3339).ok()?;
        let exact = time.nanosecond() % 100 == 0;
        exact.then(|| EdmDateTime::new(time))
    }

    /// The instant.
    pub fn time(&self) -> OffsetDateTime {
        self.0
    }
}

impl fmt::Display for EdmDateTime {
    /// Always seven fractional digits, as the service writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.nanosecond() / 100
        )
    }
}

/// One table entity.
#[derive(Clone, Debug, PartialEq)]
pub struct Entity {
    pub partition_key: String,
    pub row_key: String,
    /// Set by the service on every write; never sent.
    pub timestamp: Option<EdmDateTime>,
    /// The entity's version, for conditional updates and deletes; never sent in the body.
    pub etag: Option<String>,
    /// The other properties, by name.
    pub properties: BTreeMap<String, Value>,
}

impl Entity {
    /// An entity with keys and no other properties.
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> Self {
        Entity {
            partition_key: partition_key.into(),
            row_key: row_key.into(),
            timestamp: None,
            etag: None,
            properties: BTreeMap::new(),
        }
    }

    /// Adds or replaces a property.
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Self {
        self.properties.insert(name.into(), value);
        self
    }

    /// The JSON body for a write: keys, properties and the type annotations that make the
    /// service store each property with its exact type. Timestamp and etag are not sent.
    pub fn to_json(&self) -> String {
        let mut map = Map::with_capacity(2 + self.properties.len() * 2);
        map.insert(
            "PartitionKey".into(),
            Json::String(self.partition_key.clone()),
        );
        map.insert("RowKey".into(), Json::String(self.row_key.clone()));
        for (name, value) in &self.properties {
            let (json, annotate) = encode_value(value);
            map.insert(name.clone(), json);
            if annotate {
                map.insert(
                    format!("{name}@odata.type"),
                    Json::String(value.edm_type().into()),
                );
            }
        }
        Json::Object(map).to_string()
    }

    /// An upper bound of `to_json().len()`, computed without building the JSON: what batching
    /// needs to stay under the 4 MiB limit, at a fraction of the cost.
    pub fn json_len_upper_bound(&self) -> usize {
        // A character's UTF-8 bytes and its JSON bytes agree but for quotes, backslashes (one
        // more each) and control characters (`\u00XX`, five more), all single bytes: counted
        // over the bytes, not decoded as characters: this runs for every row a copy writes.
        let string = |s: &str| {
            2 + s.len()
                + s.bytes()
                    .map(|b| match b {
                        b'"' | b'\\' => 1,
                        b if b < 0x20 => 5,
                        _ => 0,
                    })
                    .sum::<usize>()
        };
        // Braces, the two keys, commas.
        let mut total = 2
            + string("PartitionKey")
            + 1
            + string(&self.partition_key)
            + 1
            + string("RowKey")
            + 1
            + string(&self.row_key);
        for (name, value) in &self.properties {
            let value_len = match value {
                Value::String(s) => string(s),
                Value::Int32(_) => 11,
                Value::Boolean(_) => 5,
                Value::Int64(_) => 22,
                Value::Double(_) => 26,
                Value::DateTime(_) => 30,
                Value::Guid(_) => 38,
                Value::Binary(bytes) => 2 + bytes.len().div_ceil(3) * 4,
            };
            // `,"name":value` and, for typed values, `,"name@odata.type":"Edm.Xxx"`.
            total += 2 + string(name) + value_len + string(name) + 11 + 18;
        }
        total
    }

    /// Reads one entity of a minimal-metadata (or no-metadata) response.
    pub fn from_json(object: Map<String, Json>) -> Result<Self, String> {
        Self::from_fields(object.into_iter().collect())
    }

    /// Reads one entity from its JSON fields in the order they came.
    pub fn from_fields(object: Vec<(String, Json)>) -> Result<Self, String> {
        // Annotations may come before or after their property; a short list is quicker to
        // search than a map is to build.
        let mut annotations: Vec<(&str, &str)> = Vec::new();
        for (name, value) in &object {
            if let Some(property) = name.strip_suffix("@odata.type") {
                let edm = value
                    .as_str()
                    .ok_or_else(|| format!("type annotation of {property} is not a string"))?;
                annotations.push((property, edm));
            }
        }
        let annotations: Vec<(String, String)> = annotations
            .into_iter()
            .map(|(p, e)| (p.to_string(), e.to_string()))
            .collect();
        let mut entity = Entity::new("", "");
        let (mut has_pk, mut has_rk) = (false, false);
        for (name, value) in object {
            if name.contains('@') {
                continue;
            }
            match name.as_str() {
                "PartitionKey" | "RowKey" => {
                    let key = match value {
                        Json::String(s) => s,
                        _ => return Err(format!("{name} is not a string")),
                    };
                    if name == "PartitionKey" {
                        entity.partition_key = key;
                        has_pk = true;
                    } else {
                        entity.row_key = key;
                        has_rk = true;
                    }
                }
                "Timestamp" => {
                    let text = value.as_str().ok_or("Timestamp is not a string")?;
                    entity.timestamp =
                        Some(EdmDateTime::parse(text).ok_or("Timestamp is not a valid date")?);
                }
                "odata.etag" => entity.etag = value.as_str().map(str::to_string),
                _ if name.starts_with("odata.") => {}
                _ => {
                    if value.is_null() {
                        continue;
                    }
                    let edm = annotations
                        .iter()
                        .find(|(p, _)| *p == name)
                        .map(|(_, e)| e.as_str());
                    let decoded = decode_value(&value, edm)
                        .map_err(|why| format!("property {name}: {why}"))?;
                    entity.properties.insert(name, decoded);
                }
            }
        }
        if !has_pk || !has_rk {
            return Err("the entity has no PartitionKey or RowKey".into());
        }
        Ok(entity)
    }
}

/// The fields of one JSON object in the order they came, read without building a map.
pub struct Fields(pub Vec<(String, Json)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an entity object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(12));
                while let Some(entry) = map.next_entry::<String, Json>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// Decodes a query page body (`{"value": [entities...]}`, minimal metadata).
pub fn decode_page(body: &[u8]) -> Result<Vec<Entity>, String> {
    #[derive(serde::Deserialize)]
    struct PageBody {
        value: Vec<Fields>,
    }
    let page: PageBody =
        serde_json::from_slice(body).map_err(|e| format!("the page is not valid JSON: {e}"))?;
    page.value
        .into_iter()
        .map(|f| Entity::from_fields(f.0))
        .collect()
}

/// The JSON value of a property, and whether it needs a type annotation to keep its type.
fn encode_value(value: &Value) -> (Json, bool) {
    match value {
        Value::String(s) => (Json::String(s.clone()), false),
        Value::Int32(n) => (Json::Number((*n).into()), false),
        Value::Boolean(b) => (Json::Bool(*b), false),
        Value::Int64(n) => (Json::String(n.to_string()), true),
        Value::Double(d) => {
            let json = match Number::from_f64(*d) {
                Some(number) => Json::Number(number),
                None if d.is_nan() => Json::String("NaN".into()),
                None if *d > 0.0 => Json::String("Infinity".into()),
                None => Json::String("-Infinity".into()),
            };
            // Annotated always: an integral double written as `1.0` may come back as `1`.
            (json, true)
        }
        Value::DateTime(t) => (Json::String(t.to_string()), true),
        Value::Guid(g) => (Json::String(g.hyphenated().to_string()), true),
        Value::Binary(bytes) => (
            Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            true,
        ),
    }
}

/// Decodes a property from its JSON value and optional `@odata.type`.
fn decode_value(value: &Json, edm: Option<&str>) -> Result<Value, String> {
    let text = || {
        value
            .as_str()
            .ok_or_else(|| format!("{} value is not a string", edm.unwrap_or("typed")))
    };
    match edm {
        None => infer_value(value),
        Some("Edm.String") => Ok(Value::String(text()?.to_string())),
        Some("Edm.Int32") => value
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Value::Int32)
            .ok_or_else(|| "Edm.Int32 value is not a 32-bit integer".into()),
        Some("Edm.Int64") => match value {
            Json::String(s) => s
                .parse()
                .map(Value::Int64)
                .map_err(|_| "Edm.Int64 value is not an integer".into()),
            Json::Number(n) => n
                .as_i64()
                .map(Value::Int64)
                .ok_or_else(|| "Edm.Int64 value is not an integer".into()),
            _ => Err("Edm.Int64 value is not an integer".into()),
        },
        Some("Edm.Double") => match value {
            Json::Number(n) => n
                .as_f64()
                .map(Value::Double)
                .ok_or_else(|| "Edm.Double is not a number".into()),
            Json::String(s) => match s.as_str() {
                "NaN" => Ok(Value::Double(f64::NAN)),
                "Infinity" | "INF" => Ok(Value::Double(f64::INFINITY)),
                "-Infinity" | "-INF" => Ok(Value::Double(f64::NEG_INFINITY)),
                other => other
                    .parse()
                    .map(Value::Double)
                    .map_err(|_| "Edm.Double is not a number".into()),
            },
            _ => Err("Edm.Double is not a number".into()),
        },
        Some("Edm.Boolean") => value
            .as_bool()
            .map(Value::Boolean)
            .ok_or_else(|| "Edm.Boolean is not a boolean".into()),
        Some("Edm.DateTime") => EdmDateTime::parse(text()?)
            .map(Value::DateTime)
            .ok_or_else(|| "Edm.DateTime is not a valid date".into()),
        Some("Edm.Guid") => uuid::Uuid::parse_str(text()?)
            .map(Value::Guid)
            .map_err(|_| "Edm.Guid is not a valid GUID".into()),
        Some("Edm.Binary") => base64::engine::general_purpose::STANDARD
            .decode(text()?)
            .map(Value::Binary)
            .map_err(|_| "Edm.Binary is not valid base64".into()),
        Some(other) => Err(format!("unknown type {other}")),
    }
}

/// The type of an unannotated value, by the rules of the JSON payload format: strings are
/// `Edm.String`, integers `Edm.Int32`, numbers with a fraction or exponent `Edm.Double`.
fn infer_value(value: &Json) -> Result<Value, String> {
    match value {
        Json::String(s) => Ok(Value::String(s.clone())),
        Json::Bool(b) => Ok(Value::Boolean(*b)),
        Json::Number(n) => {
            if let Some(int) = n.as_i64().and_then(|i| i32::try_from(i).ok()) {
                Ok(Value::Int32(int))
            } else {
                n.as_f64()
                    .map(Value::Double)
                    .ok_or_else(|| "number out of range".into())
            }
        }
        _ => Err("unsupported JSON value (array or object)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> Entity {
        Entity::new("pk", "rk")
            .with("s", Value::String("text \"quoted\" é 😀".into()))
            .with("i32", Value::Int32(-42))
            .with("i64", Value::Int64(i64::MIN))
            .with("d", Value::Double(1.0))
            .with("nan", Value::Double(f64::NAN))
            .with("inf", Value::Double(f64::INFINITY))
            .with("ninf", Value::Double(f64::NEG_INFINITY))
            .with("tiny", Value::Double(5e-324))
            .with("b", Value::Boolean(false))
            .with(
                "dt",
                Value::DateTime(EdmDateTime::parse("2008-07-10T01:02:03.1234567Z").unwrap()),
            )
            .with(
                "g",
                Value::Guid(uuid::Uuid::parse_str("4185404a-5818-48c3-b9be-f217df0dba6f").unwrap()),
            )
            .with("bin", Value::Binary(vec![0, 1, 2, 255]))
    }

    fn reparse(json: &str) -> Entity {
        match serde_json::from_str(json).unwrap() {
            Json::Object(map) => Entity::from_json(map).unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_json_length_bound_holds() {
        let tricky = every_type()
            .with("quotes", Value::String("\"\\\u{1}\u{1f}é😀".repeat(10)))
            .with("empty", Value::Binary(Vec::new()));
        for entity in [every_type(), tricky, Entity::new("", "")] {
            let exact = entity.to_json().len();
            let bound = entity.json_len_upper_bound();
            assert!(bound >= exact, "{bound} < {exact}");
            assert!(bound <= exact * 2 + 64, "{bound} is far above {exact}");
        }
    }

    #[test]
    fn every_type_survives_a_json_round_trip() {
        let entity = every_type();
        assert_eq!(reparse(&entity.to_json()), entity);
    }

    #[test]
    fn typed_values_carry_annotations() {
        let json: Json = serde_json::from_str(&every_type().to_json()).unwrap();
        assert_eq!(json["i64"], "-9223372036854775808");
        assert_eq!(json["i64@odata.type"], "Edm.Int64");
        assert_eq!(json["d@odata.type"], "Edm.Double");
        assert_eq!(json["nan"], "NaN");
        assert_eq!(json["ninf"], "-Infinity");
        assert_eq!(json["dt"], "2008-07-10T01:02:03.1234567Z");
        assert_eq!(json["bin"], "AAEC/w==");
        assert!(json.get("i32@odata.type").is_none());
        assert!(json.get("s@odata.type").is_none());
    }

    #[test]
    fn unannotated_numbers_are_inferred_by_the_payload_rules() {
        let e =
            reparse(r#"{"PartitionKey":"p","RowKey":"r","a":1,"b":1.5,"c":1e3,"d":true,"n":null}"#);
        assert_eq!(e.properties["a"], Value::Int32(1));
        assert_eq!(e.properties["b"], Value::Double(1.5));
        assert_eq!(e.properties["c"], Value::Double(1000.0));
        assert_eq!(e.properties["d"], Value::Boolean(true));
        assert!(!e.properties.contains_key("n"), "nulls are not stored");
    }

    #[test]
    fn metadata_fields_become_etag_and_timestamp() {
        let e = reparse(
            r#"{"odata.etag":"W/\"x\"","odata.metadata":"m","Timestamp":"2026-11-21T19:13:51.5179751Z","PartitionKey":"","RowKey":""}"#,
        );
        assert_eq!(e.etag.as_deref(), Some("W/\"x\""));
        assert_eq!(
            e.timestamp.unwrap().to_string(),
            "2026-11-21T19:13:51.5179751Z"
        );
        assert!(e.properties.is_empty());
        assert_eq!((e.partition_key.as_str(), e.row_key.as_str()), ("", ""));
    }

    #[test]
    fn dates_keep_seven_digits_and_reject_finer_precision() {
        assert_eq!(
            EdmDateTime::parse("2008-07-10T00:00:00Z")
                .unwrap()
                .to_string(),
            "2008-07-10T00:00:00.0000000Z"
        );
        assert!(EdmDateTime::parse("2008-07-10T00:00:00.123456789Z").is_none());
        assert!(EdmDateTime::parse("yesterday").is_none());
    }

    #[test]
    fn malformed_entities_are_errors_not_panics() {
        for bad in [
            r#"{"RowKey":"r"}"#,
            r#"{"PartitionKey":1,"RowKey":"r"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","x":"abc","x@odata.type":"Edm.Int64"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","x":"abc","x@odata.type":"Edm.Binary"}"#,
            r#"{"PartitionKey":"p","RowKey":"r","x":[1]}"#,
            r#"{"PartitionKey":"p","RowKey":"r","x":1,"x@odata.type":"Edm.Unknown"}"#,
        ] {
            let map = match serde_json::from_str(bad).unwrap() {
                Json::Object(m) => m,
                _ => unreachable!(),
            };
            assert!(Entity::from_json(map).is_err(), "{bad}");
        }
    }

    #[test]
    fn value_equality_is_bitwise_for_doubles() {
        assert_eq!(Value::Double(f64::NAN), Value::Double(f64::NAN));
        assert_ne!(Value::Double(0.0), Value::Double(-0.0));
        assert_ne!(Value::Int32(1), Value::Int64(1));
    }
}
