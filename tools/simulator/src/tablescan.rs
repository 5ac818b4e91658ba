//! tablescan's side of a case: what the scan does with its rows, its first work item, and the
//! engine's options as the flags set them. The scan itself runs in `engine`.

use std::collections::BTreeMap;
use std::time::Duration;

use tablescan::actions::Change;
use tablescan::scan::item::WorkItem;
use tablescan::scan::{Budget, ReadMode, ScanOptions, Strategy};
use tablescan::storage::table::entity::Value;

use crate::params::Params;

/// What a scan does with its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Count,
    /// Copy to a table (in another account or the same one: the case decides).
    Copy,
    /// Delete every row read (in the source account).
    Delete,
    /// Merge a property into every row read, in place (in the source account).
    Update,
    /// Write the rows to blobs (gzip JSON lines), one blob per step.
    Export,
    /// Read one row per distinct PartitionKey, seeking past the rest of each partition, and
    /// put one message per PartitionKey on an output queue.
    PartitionKeys,
}

impl Action {
    /// Whether the action writes rows into the table it reads (in the source account).
    pub fn writes_source(self) -> bool {
        matches!(self, Action::Delete | Action::Update)
    }

    /// Whether the action writes rows into a table at all.
    pub fn writes_rows(self) -> bool {
        matches!(self, Action::Copy | Action::Delete | Action::Update)
    }
}

pub struct Tablescan;

impl Tablescan {
    pub fn first() -> WorkItem {
        WorkItem::root("sim", tablescan::scan::keys::KeyRange::all(), "")
    }

    /// The engine's options for `action`: its defaults, with the flags' budget and page size,
    /// and a partition-keys scan read as the handler's `plan::scan_options` reads it
    /// (`ReadMode::PartitionKeys`, which seeks). The synthetic rows carry their keys only, so
    /// the columns asked for change nothing.
    pub fn options(p: &Params, action: Action) -> ScanOptions {
        let mode = match action {
            Action::PartitionKeys => ReadMode::PartitionKeys,
            _ => ReadMode::Rows,
        };
        ScanOptions {
            strategy: Strategy::Prefix,
            mode,
            page_size: p.page_size,
            budget: Budget {
                max_queries: p.max_queries,
                max_duration: Duration::from_secs_f64(p.max_seconds),
            },
            columns: None,
            fan_out: p.fan_out as usize,
            first_step_queries: p.first_step_queries,
            ..ScanOptions::default()
        }
    }

    /// The update the `update` cases make: one property set on every row (a merge, as an
    /// update without `remove` writes; conditional on the row's etag when it has one).
    pub fn change() -> Change {
        Change {
            set: BTreeMap::from([("Reviewed".to_string(), Value::Boolean(true))]),
            remove: Vec::new(),
        }
    }
}
