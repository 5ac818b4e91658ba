//! The request's shape: every field a request may give, and the kind of value each takes,
//! read by serde in one pass. A field of the wrong kind, or an object or list that is not one,
//! is refused with its path (`serde_path_to_error`); what needs several fields or outside
//! facts is checked afterwards (`crate::parse`, `crate::scope`, `crate::import`,
//! `crate::action`). A field the request does not know is kept to be refused by name after the
//! known ones are checked, as the request's parser always has.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::kinds::{
    Described, Flag, Given, NameList, Named, Names, Object, OneOf, Properties, Text, Whole,
};
use super::rate::Cap;
use super::refusal::SpecError;
use super::{Compression, CopyMode, Encoding, Per, MAX_ROWS_PER_MESSAGE};
use tablescan_engine::step::Strategy;

/// A scan request as its body gives it; `A` is its action's fields, by the action's `type`
/// (`crate::action`).
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "A: Deserialize<'de> + Described")
)]
pub(crate) struct Request<A> {
    pub import: Option<Object<ImportFields>>,
    #[serde(default)]
    pub table: Given<Text>,
    #[serde(default)]
    pub connection: Given<Text>,
    pub scope: Option<Object<ScopeFields>>,
    pub strategy: Option<OneOf<Strategy>>,
    pub page_size: Option<Whole<1, 1000>>,
    pub select: Option<Names<Selected>>,
    pub action: Option<Object<A>>,
    pub max_rows_per_second: Option<Cap>,
    pub dry_run: Option<Flag>,
    pub max_row_failures: Option<Whole<0, { u32::MAX as u64 }>>,
    pub filter: Option<Text>,
    pub older_than: Option<Text>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// Reads `object` as a request whose action has the fields `A`.
pub(crate) fn read<A>(object: Map<String, Value>) -> Result<Request<A>, SpecError>
where
    A: for<'de> Deserialize<'de> + Described,
{
    serde_path_to_error::deserialize(Value::Object(object)).map_err(SpecError::of_shape)
}

/// A request's `scope`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScopeFields {
    pub prefix: Option<Text>,
    pub after: Option<Text>,
    pub before: Option<Text>,
    pub row_prefix: Option<Text>,
    pub row_after: Option<Text>,
    pub row_before: Option<Text>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

impl Described for ScopeFields {
    const NOT_AN_OBJECT: &'static str = "must be an object";
}

/// A request's `import`.
#[derive(Deserialize)]
pub(crate) struct ImportFields {
    pub container: Option<Text>,
    pub prefix: Option<Text>,
    pub connection: Option<Text>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

impl Described for ImportFields {
    const NOT_AN_OBJECT: &'static str =
        "must be an object naming an export: {\"container\": ..., \"prefix\": ...}";
}

/// The fields of an action without fields of its own (a count, a delete), or of one whose
/// `type` names no action (then its `type` is refused).
#[derive(Deserialize)]
pub(crate) struct BareAction {
    #[serde(rename = "type")]
    pub kind: Option<Value>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// A copy's fields.
#[derive(Deserialize)]
pub(crate) struct CopyFields {
    #[serde(rename = "type")]
    _kind: Option<Value>,
    pub table: Option<Text>,
    pub connection: Option<Text>,
    pub mode: Option<OneOf<CopyMode>>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// An enqueue's fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnqueueFields {
    #[serde(rename = "type")]
    _kind: Option<Value>,
    #[serde(default)]
    pub queue: Given<Text>,
    pub queues: Option<Names<Queues>>,
    pub connection: Option<Text>,
    pub per: Option<OneOf<Per>>,
    pub encoding: Option<OneOf<Encoding>>,
    pub rows_per_message: Option<Whole<1, { MAX_ROWS_PER_MESSAGE as u64 }>>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// A partition-keys action's fields.
#[derive(Deserialize)]
pub(crate) struct PartitionKeysFields {
    #[serde(rename = "type")]
    _kind: Option<Value>,
    pub queue: Option<Text>,
    pub connection: Option<Text>,
    pub encoding: Option<OneOf<Encoding>>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// An export's fields.
#[derive(Deserialize)]
pub(crate) struct ExportFields {
    #[serde(rename = "type")]
    _kind: Option<Value>,
    pub container: Option<Text>,
    pub prefix: Option<Text>,
    pub connection: Option<Text>,
    pub compression: Option<OneOf<Compression>>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// An update's fields.
#[derive(Deserialize)]
pub(crate) struct UpdateFields {
    #[serde(rename = "type")]
    _kind: Option<Value>,
    pub set: Option<Properties>,
    pub remove: Option<Names<Removed>>,
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

/// Every action's fields are an object with a `type`.
macro_rules! described_as_actions {
    ($($fields:ty),*) => {
        $(impl Described for $fields {
            const NOT_AN_OBJECT: &'static str = "must be an object with a \"type\"";
        })*
    };
}

described_as_actions!(
    BareAction,
    CopyFields,
    EnqueueFields,
    PartitionKeysFields,
    ExportFields,
    UpdateFields
);

/// The names of `select`.
pub(crate) enum Selected {}

impl NameList for Selected {
    const NOT_A_LIST: &'static str = "must be an array of property names";
    const NOT_A_NAME: &'static str = "must be a string";
}

/// The names of an enqueue's `queues`.
pub(crate) enum Queues {}

impl NameList for Queues {
    const NOT_A_LIST: &'static str = "must be an array of queue names";
    const NOT_A_NAME: &'static str = "must be a queue name";
}

/// The names of an update's `remove`.
pub(crate) enum Removed {}

impl NameList for Removed {
    const NOT_A_LIST: &'static str = "must be an array of property names";
    const NOT_A_NAME: &'static str = "must be a property name";
}

impl Named for Strategy {
    const NAMES: &'static [(&'static str, Self)] =
        &[("prefix", Strategy::Prefix), ("serial", Strategy::Serial)];
}

impl Named for CopyMode {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("replace", CopyMode::Replace),
        ("merge", CopyMode::Merge),
        ("insert", CopyMode::Insert),
    ];
}

impl Named for Per {
    const NAMES: &'static [(&'static str, Self)] =
        &[("row", Per::Row), ("partition", Per::Partition)];
}

impl Named for Encoding {
    const NAMES: &'static [(&'static str, Self)] =
        &[("base64", Encoding::Base64), ("none", Encoding::None)];
}

impl Named for Compression {
    const NAMES: &'static [(&'static str, Self)] =
        &[("gzip", Compression::Gzip), ("none", Compression::None)];
}
