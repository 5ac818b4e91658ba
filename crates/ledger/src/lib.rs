//! A scan's life: the ledger of its work items, exact progress, completion and cancellation,
//! kept in a table (or an in-memory one in tests).
//!
//! May use: `tablescan-storage`, `tablescan-pace` (it stores the rate cap's slices),
//! `tablescan-engine` (work items, key ranges) and `tablescan-api` (the request it stores).
//! Must not use: the actions or the handler (nothing of HTTP or Functions).

pub mod active;
pub mod activity;
pub mod cancel_drop;
pub mod exports;
pub mod history;
pub mod housekeeping;
pub mod learning;
pub mod ledger;
pub mod notes;
pub mod pause;
#[cfg(test)]
mod races;
pub mod read_budget;
pub mod redrive;
pub mod rows;
pub mod schedules;
pub mod slices;
pub mod status;
pub mod store;
pub mod stored_size;
pub mod timetable;
pub mod window;

pub use ledger::{
    Begin, Claim, Created, FailureRecord, Finish, Ledger, LedgerError, ScanRecord, StepCounts,
};
pub use status::{Activity, Pace, ScanStatus, State, StatusRead};
pub use store::LedgerTable;
