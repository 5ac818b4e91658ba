//! Work items: one independent piece of a scan, small enough for a queue message.
//!
//! A work item names its scan and an exact task, plus the service's continuation when it
//! resumes a query that is already under way. Its id is derived from exactly those, so a work
//! item reached twice (a redelivered message, a parent step run again after a crash) always has
//! the same id, and the ledger can tell it has already been done.
//!
//! The item is generic in its task: the engine's own are key ranges of a table ([`ReadRange`],
//! the default), and the layers above that queue other work in the same envelope give it a
//! task type of their own that holds a `ReadRange` among its kinds. The envelope's format
//! (its fields, version and id) is the same whatever the task.

use base64::Engine;
use ring::digest;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::keys::KeyRange;
use tablescan_storage::table::query::Continuation;

/// The format version written into every work item.
pub const WORK_ITEM_VERSION: u32 = 1;

/// One step's worth of work: by default, the engine's own, a range of a table's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkItem<T = ReadRange> {
    /// The format version, [`WORK_ITEM_VERSION`].
    pub v: u32,
    /// The scan this belongs to.
    pub scan: String,
    /// How many steps lie between the scan's first work item and this one.
    pub depth: u32,
    /// What to read (serialised as `task`, the name it has always had).
    pub task: T,
    /// How many times in a row a step gave this item back to its queue unrun because its
    /// scan's pace had no room (the handler's `step::admission`): each give-back waits longer, so
    /// that items of a paced scan waiting their turn cost a few invocations, not one every
    /// couple of seconds. Not part of the id; absent (0) in every message but a give-back's.
    #[serde(rename = "back", default, skip_serializing_if = "is_zero_u32")]
    pub given_back: u32,
}

/// The range a table's work item reads: a range of PartitionKeys, or of RowKeys within one
/// partition. Serialised with its `kind`; the type's name appears in no message or row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum ReadRange {
    /// Every row whose PartitionKey lies in `partition_keys`. Every such key starts with
    /// `prefix`, which is where prefix discovery continues from.
    #[serde(rename = "range")]
    Range {
        #[serde(rename = "pk")]
        partition_keys: KeyRange,
        prefix: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<Continuation>,
        /// With a cursor: the PartitionKey of the last row read before it, so the next step
        /// knows whether its first row continues that partition (exact partition counts).
        #[serde(rename = "lastpk", default, skip_serializing_if = "Option::is_none")]
        last_partition: Option<String>,
    },
    /// The rows of one partition whose RowKey lies in `row_keys`, all starting with `prefix`.
    #[serde(rename = "partition")]
    Partition {
        #[serde(rename = "pk")]
        partition_key: String,
        #[serde(rename = "rk")]
        row_keys: KeyRange,
        prefix: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<Continuation>,
        /// No row of this partition has been delivered before this item: its first row starts
        /// the partition (exact partition counts). Only a filtered scan makes such items, when
        /// a page came back empty in the middle of a partition. Never split while set: only the
        /// piece holding the partition's first matching row may count it.
        #[serde(rename = "new", default, skip_serializing_if = "std::ops::Not::not")]
        unstarted: bool,
    },
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// `value` as JSON with every object's keys in sorted order (serde_json's own map is ordered
/// by key unless its `preserve_order` feature is on, which this crate does not use).
fn canonical_json<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .expect("a task always serialises")
        .to_string()
}

/// Why a message is not a work item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the message is not JSON: {0}")]
    NotJson(String),
    #[error("the message has no numeric version field 'v'; it is not a tablescan work item")]
    NoVersion,
    #[error(
        "work item version {0} is not supported (this handler reads version {WORK_ITEM_VERSION})"
    )]
    UnsupportedVersion(u64),
    #[error("the work item is malformed: {0}")]
    Malformed(String),
}

impl<T> WorkItem<T> {
    /// The first work item of a scan over `partition_keys`, all of which start with `prefix`,
    /// as an item of any task type that holds a table's ranges.
    pub fn root(
        scan: impl Into<String>,
        partition_keys: KeyRange,
        prefix: impl Into<String>,
    ) -> Self
    where
        T: From<ReadRange>,
    {
        WorkItem {
            v: WORK_ITEM_VERSION,
            scan: scan.into(),
            depth: 0,
            task: T::from(ReadRange::Range {
                partition_keys,
                prefix: prefix.into(),
                cursor: None,
                last_partition: None,
            }),
            given_back: 0,
        }
    }

    /// A follow-up of this item, one step deeper.
    pub fn follow_up(&self, task: impl Into<T>) -> Self {
        WorkItem {
            v: WORK_ITEM_VERSION,
            scan: self.scan.clone(),
            depth: self.depth + 1,
            task: task.into(),
            given_back: 0,
        }
    }

    /// This item with `task` in place of its own: the same scan, depth and give-backs. How a
    /// layer that queues several kinds of task hands a table's item to the engine and takes
    /// the engine's follow-ups back; the id is the same when `task` serialises the same.
    pub fn with_task<U>(&self, task: U) -> WorkItem<U> {
        WorkItem {
            v: self.v,
            scan: self.scan.clone(),
            depth: self.depth,
            task,
            given_back: self.given_back,
        }
    }

    /// This item with its task made into another type's (a table's range into a task of a
    /// layer that queues several kinds): the same scan, depth and give-backs.
    pub fn map_task<U>(self, into: impl FnOnce(T) -> U) -> WorkItem<U> {
        WorkItem {
            v: self.v,
            scan: self.scan,
            depth: self.depth,
            task: into(self.task),
            given_back: self.given_back,
        }
    }

    /// This item as it was first sent: the give-backs before a hand-on, a retry or a re-drive
    /// are over, and the message stays one a handler without the count can read.
    pub fn as_first_sent(&self) -> Self
    where
        T: Clone,
    {
        WorkItem {
            given_back: 0,
            ..self.clone()
        }
    }
}

impl<T: Serialize> WorkItem<T> {
    /// The deterministic id: a hash of the scan id and the exact task (range and cursor).
    /// The depth is not part of it: the same range is the same work, however it was reached.
    ///
    /// The task is hashed in canonical JSON (object keys sorted), so the id depends on the
    /// task's field names and values only: a version that declares the fields in another order
    /// computes the same ids, and finishes the scans in flight that an earlier one started.
    /// Renaming a serialised field or changing a value's form changes every id; such a change
    /// must come with a new work-item version (`v`), which earlier messages are refused by.
    pub fn id(&self) -> String {
        let task = canonical_json(&self.task);
        let mut context = digest::Context::new(&digest::SHA256);
        context.update(self.scan.as_bytes());
        context.update(&[0]);
        context.update(task.as_bytes());
        let hash = context.finish();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&hash.as_ref()[..18])
    }

    /// The JSON text of the work item.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a work item always serialises")
    }
}

impl<T: DeserializeOwned> WorkItem<T> {
    /// Reads a work item, refusing other versions and anything that is not one.
    pub fn decode(text: &str) -> Result<Self, DecodeError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| DecodeError::NotJson(e.to_string()))?;
        let version = value
            .get("v")
            .and_then(serde_json::Value::as_u64)
            .ok_or(DecodeError::NoVersion)?;
        if version != u64::from(WORK_ITEM_VERSION) {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        serde_json::from_value(value).map_err(|e| DecodeError::Malformed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{Lower, Upper};

    fn big_item() -> WorkItem {
        // The largest a work item gets: every key field at the 1 KiB limit, in the characters
        // that take the most bytes to encode.
        let key = "\u{FFFF}".repeat(512);
        let root = WorkItem::root("s".repeat(64), KeyRange::all(), "");
        root.follow_up(ReadRange::Partition {
            partition_key: key.clone(),
            row_keys: KeyRange {
                lower: Lower::Excluded(key.clone()),
                upper: Upper::Excluded(key.clone()),
            },
            prefix: key.clone(),
            cursor: Some(Continuation {
                next_partition_key: "1!".repeat(700),
                next_row_key: Some("1!".repeat(700)),
            }),
            unstarted: false,
        })
    }

    /// Pins work-item ids: a change here strands every scan in flight (see `WorkItem::id`).
    #[test]
    fn work_item_ids_are_pinned() {
        let scan = "0123456789abcdef0123456789abcdef";
        let root: WorkItem = WorkItem::root(scan, KeyRange::all(), "");
        let child = root.follow_up(ReadRange::Partition {
            partition_key: "p1".into(),
            row_keys: KeyRange {
                lower: Lower::Excluded("r0019".into()),
                upper: Upper::Unbounded,
            },
            prefix: "r".into(),
            cursor: Some(Continuation {
                next_partition_key: "1!8!cDE-".into(),
                next_row_key: Some("1!8!cjA-".into()),
            }),
            unstarted: false,
        });
        assert_eq!(root.id(), "EH4i0xkuu7jzSyIxR2Lc-JSt");
        assert_eq!(child.id(), "DoRoYMfPHvYXE-OMpWBfKn-Q");
    }

    /// A later version that declares the task's fields in another order computes the same ids.
    #[test]
    fn ids_do_not_depend_on_the_order_fields_are_declared_in() {
        #[derive(Serialize)]
        struct Reordered<'a> {
            cursor: Option<&'a Continuation>,
            prefix: &'a str,
            #[serde(rename = "rk")]
            row_keys: &'a KeyRange,
            #[serde(rename = "pk")]
            partition_key: &'a str,
        }
        #[derive(Serialize)]
        #[serde(tag = "kind")]
        enum Later<'a> {
            #[serde(rename = "partition")]
            Partition(Reordered<'a>),
        }
        let cursor = Continuation {
            next_partition_key: "a".into(),
            next_row_key: None,
        };
        let row_keys = KeyRange::all();
        let task = ReadRange::Partition {
            partition_key: "p".into(),
            row_keys: row_keys.clone(),
            prefix: "x".into(),
            cursor: Some(cursor.clone()),
            unstarted: false,
        };
        let later = Later::Partition(Reordered {
            cursor: Some(&cursor),
            prefix: "x",
            row_keys: &row_keys,
            partition_key: "p",
        });
        assert_ne!(
            serde_json::to_string(&task).unwrap(),
            serde_json::to_string(&later).unwrap(),
            "the declaration orders differ"
        );
        assert_eq!(canonical_json(&task), canonical_json(&later));
    }

    #[test]
    fn the_largest_work_item_fits_a_base64_queue_message_with_room_to_spare() {
        let text = big_item().encode();
        assert!(text.len() < 12 * 1024, "{} bytes", text.len());
        assert!(text.len() * 4 / 3 < tablescan_storage::queue::MAX_MESSAGE_TEXT_BYTES / 4);
    }

    #[test]
    fn items_round_trip_and_ids_depend_on_range_not_depth() {
        let item = big_item();
        let back = WorkItem::decode(&item.encode()).unwrap();
        assert_eq!(back, item);
        let mut deeper = item.clone();
        deeper.depth += 5;
        assert_eq!(deeper.id(), item.id());
        let other_scan = WorkItem {
            scan: "t".into(),
            ..item.clone()
        };
        assert_ne!(other_scan.id(), item.id());
        let root: WorkItem = WorkItem::root("s", KeyRange::all(), "");
        let narrower: WorkItem = WorkItem::root("s", KeyRange::with_prefix("a"), "a");
        assert_ne!(root.id(), narrower.id());
        assert_eq!(root.id().len(), 24);
    }

    #[test]
    fn a_given_back_count_travels_in_the_message_but_not_in_the_id_and_is_absent_when_zero() {
        let item: WorkItem = WorkItem::root("s", KeyRange::all(), "");
        assert!(!item.encode().contains("back"), "{}", item.encode());
        let again = WorkItem {
            given_back: 3,
            ..item.clone()
        };
        assert!(again.encode().contains(r#""back":3"#), "{}", again.encode());
        assert_eq!(WorkItem::decode(&again.encode()).unwrap(), again);
        assert_eq!(again.id(), item.id());
        // Children start afresh.
        assert_eq!(again.follow_up(item.task.clone()).given_back, 0);
    }

    #[test]
    fn foreign_and_future_messages_are_refused_with_a_reason() {
        type WorkItem = super::WorkItem<ReadRange>;
        assert!(matches!(
            WorkItem::decode("hello"),
            Err(DecodeError::NotJson(_))
        ));
        assert_eq!(WorkItem::decode("{\"x\":1}"), Err(DecodeError::NoVersion));
        assert_eq!(
            WorkItem::decode("{\"v\":2}"),
            Err(DecodeError::UnsupportedVersion(2))
        );
        assert!(matches!(
            WorkItem::decode("{\"v\":1,\"scan\":\"s\"}"),
            Err(DecodeError::Malformed(_))
        ));
        let mut json: serde_json::Value = serde_json::from_str(&big_item().encode()).unwrap();
        json["extra"] = 1.into();
        assert!(matches!(
            WorkItem::decode(&json.to_string()),
            Err(DecodeError::Malformed(_))
        ));
        // A lone surrogate cannot be a key.
        let lone = r#"{"v":1,"scan":"s","depth":0,"task":{"kind":"range","pk":{"lo":"min","hi":"max"},"prefix":"\ud800"}}"#;
        assert!(WorkItem::decode(lone).is_err());
    }
}
