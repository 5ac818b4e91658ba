//! tablescan's side of a case: what the scan does with its rows, its first work item, and the
//! engine's options as the flags set them. The scan itself runs in `engine`.

use std::time::Duration;

use tablescan::scan::item::WorkItem;
use tablescan::scan::{Budget, ScanOptions, Strategy};

use crate::params::Params;

/// What a scan does with its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Count,
    /// Copy to a table (in another account or the same one: the case decides).
    Copy,
    /// Delete every row read (in the source account).
    Delete,
    /// Write the rows to blobs (gzip JSON lines), one blob per step.
    Export,
}

pub struct Tablescan;

impl Tablescan {
    pub fn first() -> WorkItem {
        WorkItem::root("sim", tablescan::scan::keys::KeyRange::all(), "")
    }

    /// The engine's options: its defaults, with the flags' budget and page size.
    pub fn options(p: &Params) -> ScanOptions {
        ScanOptions {
            strategy: Strategy::Prefix,
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
}
