//! A scan's life: the validated request, the ledger of its work items, exact progress,
//! completion and cancellation. Knows storage and the scan engine; nothing of Functions.

pub mod active;
pub mod activity;
pub mod cancel_drop;
pub mod connections;
mod duplicate_keys;
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
pub mod spec;
pub mod status;
pub mod store;
pub mod stored_size;
pub mod timetable;
pub mod window;

pub use ledger::{
    Begin, Claim, Created, FailureRecord, Finish, Ledger, LedgerError, ScanRecord, StepCounts,
};
pub use spec::{ActionSpec, ScanSpec, SpecError};
pub use status::{Activity, Pace, ScanStatus, State, StatusRead};
pub use store::LedgerTable;
