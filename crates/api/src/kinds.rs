//! The kinds of value a request's fields take, each read by serde and refused in the words a
//! user reads (`must be a string`, `must be a whole number from 1 to 1000, not 2.5`). Each
//! refusal is raised while serde reads that field, so `serde_path_to_error` knows the field's
//! path; the request's types (`crate::shape`) are built from these.
//!
//! `null` is as if the field were absent (each is read as an `Option`), but for [`Given`], whose
//! kind is checked where it is used.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{
    self, Deserialize, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess,
    Visitor,
};
use serde_json::{Map, Value};

use super::refusal::{refuse, SpecError};

/// A string.
#[derive(Debug)]
pub(crate) struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(Text(text)),
            _ => Err(de::Error::custom("must be a string")),
        }
    }
}

/// A whole number from `LOW` to `HIGH`.
#[derive(Debug)]
pub(crate) struct Whole<const LOW: u64, const HIGH: u64>(pub u64);

impl<'de, const LOW: u64, const HIGH: u64> Deserialize<'de> for Whole<LOW, HIGH> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Number(n) => match n.as_u64() {
                Some(value) if (LOW..=HIGH).contains(&value) => Ok(Whole(value)),
                _ => Err(de::Error::custom(format!(
                    "must be a whole number from {LOW} to {HIGH}, not {n}"
                ))),
            },
            _ => Err(de::Error::custom(format!(
                "must be a number from {LOW} to {HIGH}"
            ))),
        }
    }
}

/// `true` or `false`.
#[derive(Debug)]
pub(crate) struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Bool(flag) => Ok(Flag(flag)),
            _ => Err(de::Error::custom("must be true or false")),
        }
    }
}

/// A type whose values a request names by words (`"prefix"`, `"merge"`, ...).
pub(crate) trait Named: Copy + 'static {
    /// Each word and the value it names, in the order a refusal lists them.
    const NAMES: &'static [(&'static str, Self)];
}

/// One of the words of `T`.
#[derive(Debug)]
pub(crate) struct OneOf<T>(pub T);

impl<'de, T: Named> Deserialize<'de> for OneOf<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Value::String(word) = Value::deserialize(deserializer)? else {
            return Err(de::Error::custom("must be a string"));
        };
        match T::NAMES.iter().find(|(name, _)| *name == word) {
            Some((_, value)) => Ok(OneOf(*value)),
            None => Err(de::Error::custom(format!(
                "must be {}, not {word:?}",
                choices(T::NAMES.iter().map(|(name, _)| *name))
            ))),
        }
    }
}

/// `"a"`, `"b"` or `"c"`.
fn choices<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let count = names.len();
    let mut text = String::new();
    for (index, name) in names.enumerate() {
        if index > 0 {
            text.push_str(if index + 1 == count { " or " } else { ", " });
        }
        text.push_str(&format!("{name:?}"));
    }
    text
}

/// What a list of names is refused with: the list, and one of its items.
pub(crate) trait NameList {
    const NOT_A_LIST: &'static str;
    const NOT_A_NAME: &'static str;
}

/// A JSON array of strings, each refused at its index (`select[2]`) when it is not one.
#[derive(Debug)]
pub(crate) struct Names<K> {
    pub names: Vec<String>,
    kind: PhantomData<K>,
}

impl<'de, K: NameList> Deserialize<'de> for Names<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NamesVisitor(PhantomData))
    }
}

struct NamesVisitor<K>(PhantomData<K>);

/// One item of a [`Names`].
struct NameSeed<K>(PhantomData<K>);

impl<'de, K: NameList> DeserializeSeed<'de> for NameSeed<K> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(name) => Ok(name),
            _ => Err(de::Error::custom(K::NOT_A_NAME)),
        }
    }
}

/// Refuses every kind of value but the one a visitor is for, with `$message`.
macro_rules! refuse_scalars {
    ($message:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom($message))
        }
    };
}

impl<'de, K: NameList> Visitor<'de> for NamesVisitor<K> {
    type Value = Names<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(K::NOT_A_LIST)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names<K>, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element_seed(NameSeed::<K>(PhantomData))? {
            names.push(name);
        }
        Ok(Names {
            names,
            kind: PhantomData,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Names<K>, A::Error> {
        Err(de::Error::custom(K::NOT_A_LIST))
    }

    refuse_scalars!(K::NOT_A_LIST);
}

/// What a part of the request that is an object is refused with when it is not one.
pub(crate) trait Described {
    const NOT_AN_OBJECT: &'static str;
}

/// A JSON object read as `T` (never an array, which serde would read as `T`'s fields in
/// order), its fields' paths under this one's.
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de> + Described> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjectVisitor(PhantomData))
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + Described> Visitor<'de> for ObjectVisitor<T> {
    type Value = Object<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::NOT_AN_OBJECT)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Object<T>, A::Error> {
        Err(de::Error::custom(T::NOT_AN_OBJECT))
    }

    refuse_scalars!(T::NOT_AN_OBJECT);
}

/// An object of any fields, as JSON gives it (an update's `set`: its names and values are
/// checked as an entity's).
#[derive(Debug)]
pub(crate) struct Properties(pub Map<String, Value>);

impl<'de> Deserialize<'de> for Properties {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Object(properties) => Ok(Properties(properties)),
            _ => Err(de::Error::custom(
                "must be an object of properties and values",
            )),
        }
    }
}

/// A field whose kind is checked only where it is used, since another field decides whether it
/// may be given at all (a `table` beside an import, a `queue` beside `queues`: "leave it out"
/// says more than "must be a string"); there `null` counts as given too. Read with
/// `#[serde(default)]`.
#[derive(Debug, Default)]
pub(crate) enum Given<T> {
    #[default]
    Absent,
    Null,
    Value(T),
    /// Given, but not of its kind: why.
    Wrong(String),
}

impl<T> Given<T> {
    pub(crate) fn is_given(&self) -> bool {
        !matches!(self, Given::Absent)
    }

    /// The value (`None` when absent or `null`), or the refusal of `field` if it is not of its
    /// kind.
    pub(crate) fn value(self, field: &str) -> Result<Option<T>, SpecError> {
        match self {
            Given::Value(value) => Ok(Some(value)),
            Given::Absent | Given::Null => Ok(None),
            Given::Wrong(why) => refuse(field, why),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Given<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(deserializer)? {
            Value::Null => Given::Null,
            value => match T::deserialize(value) {
                Ok(value) => Given::Value(value),
                Err(why) => Given::Wrong(why.to_string()),
            },
        })
    }
}
