//! Rows a step noted: those its action could not act on, with why, and in a dry run some of
//! those it would have acted on. Stored per step in a `rows:<item>` row of the scan's
//! partition, written by the same transaction as the step's finish (so a step redone after a
//! crash notes its rows once), and read a few at a time by the status (`Ledger::row_notes`, in
//! `status`): the counts are exact in the counter shards, these are samples. Only the rows'
//! form is here, below the ledger's operations, which write and read it.

use super::rows::{rows_key, text};
use tablescan_storage::table::entity::{Entity, Value};

/// How many rows of each kind a status lists.
pub const ROWS_LISTED: usize = 20;
/// How many steps' notes a status reads to list them (each holds up to 10 of each kind).
pub(crate) const STEPS_READ: u16 = 4;
/// The longest JSON text stored per kind, in UTF-16 code units: a string property holds
/// 64 KiB, that is 32,768 of them.
const MAX_STORED_UNITS: usize = 30_000;

/// One noted row: its keys, and why it failed (`None` in a dry run's sample). The API's type:
/// a status shows noted rows as they are stored.
pub use tablescan_api::answers::NotedRow;

/// What one step noted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowNotes {
    /// Rows the action could not act on.
    pub failed: Vec<NotedRow>,
    /// In a dry run, rows the action would have acted on.
    pub sample: Vec<NotedRow>,
}

impl RowNotes {
    pub fn is_empty(&self) -> bool {
        self.failed.is_empty() && self.sample.is_empty()
    }

    /// The `rows:<item>` row holding these notes.
    pub fn to_entity(&self, scan: &str, item: &str) -> Entity {
        Entity::new(scan, rows_key(item))
            .with("failed", Value::String(stored_json(&self.failed)))
            .with("sample", Value::String(stored_json(&self.sample)))
    }

    pub fn from_entity(entity: &Entity) -> RowNotes {
        let list = |name: &str| -> Vec<NotedRow> {
            text(entity, name)
                .and_then(|json| serde_json::from_str(&json).ok())
                .unwrap_or_default()
        };
        RowNotes {
            failed: list("failed"),
            sample: list("sample"),
        }
    }

    /// Adds `other`'s rows, keeping at most [`ROWS_LISTED`] of each kind.
    pub(crate) fn add(&mut self, other: RowNotes) {
        for (mine, theirs) in [
            (&mut self.failed, other.failed),
            (&mut self.sample, other.sample),
        ] {
            let room = ROWS_LISTED.saturating_sub(mine.len());
            mine.extend(theirs.into_iter().take(room));
        }
    }
}

/// The rows as JSON, as many from the first as fit one string property.
fn stored_json(noted: &[NotedRow]) -> String {
    let mut kept = noted.len();
    loop {
        let json = serde_json::to_string(&noted[..kept]).expect("noted rows serialise");
        if kept == 0 || json.encode_utf16().count() <= MAX_STORED_UNITS {
            return json;
        }
        kept -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noted(n: usize, key_len: usize) -> Vec<NotedRow> {
        (0..n)
            .map(|i| NotedRow {
                partition_key: format!("{i}{}", "\u{1}".repeat(key_len)),
                row_key: "r".into(),
                reason: Some("too large".into()),
            })
            .collect()
    }

    #[test]
    fn notes_round_trip_and_always_fit_a_property() {
        let notes = RowNotes {
            failed: noted(3, 1),
            sample: Vec::new(),
        };
        assert_eq!(RowNotes::from_entity(&notes.to_entity("s", "i")), notes);
        // Ten rows of 1 KiB keys of control characters (six characters each in JSON).
        let huge = RowNotes {
            failed: noted(10, 1000),
            sample: noted(10, 1000),
        };
        let entity = huge.to_entity("s", "i");
        let back = RowNotes::from_entity(&entity);
        assert!(!back.failed.is_empty() && back.failed.len() < 10);
        assert_eq!(back.failed[..], huge.failed[..back.failed.len()]);
        for name in ["failed", "sample"] {
            let stored = text(&entity, name).unwrap();
            assert!(stored.encode_utf16().count() <= MAX_STORED_UNITS);
        }
    }

    #[test]
    fn a_status_lists_a_bounded_number() {
        let mut all = RowNotes::default();
        for _ in 0..5 {
            all.add(RowNotes {
                failed: noted(10, 1),
                sample: noted(10, 1),
            });
        }
        assert_eq!(all.failed.len(), ROWS_LISTED);
        assert_eq!(all.sample.len(), ROWS_LISTED);
    }
}
