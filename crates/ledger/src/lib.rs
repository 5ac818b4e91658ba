//! A scan's life: the ledger of its work items, exact progress, completion and cancellation,
//! kept in a table (or an in-memory one in tests).
//!
//! May use: `tablescan-storage`, `tablescan-pace` (it stores the rate cap's slices),
//! `tablescan-engine` (the work-item envelope, key ranges) and `tablescan-api` (the request it
//! stores).
//! Must not use: the actions or the handler (nothing of HTTP or Functions).
//!
//! Its modules are layered; each uses only those of the layers below it (its tests included;
//! `crates/handler/tests/module_cycles.rs` checks that no two import each other):
//!
//! 1. Values and forms, which know no [`Ledger`]: `store` (the table), `read_budget`,
//!    `stored_size`, `timetable`, `history`, `step_counts`, `work_item` (the work items it
//!    records and the queues carry, a table's or an import's); then `rows` (every row's form), and
//!    on it `notes` and `exports` (the forms of a step's noted rows and of an export's blobs).
//! 2. `ledger`: the handle and the core of a scan's life (its rows, claims, finishes, failures,
//!    counter shards), on the forms alone.
//! 3. Operations added to the handle, each on `ledger` and the forms: `window`, `active`,
//!    `cancel_drop`, `export_records`, `housekeeping`, `learning`, `parked`, `slices`, `schedules`; then
//!    `activity` and `redrive` (on `window`), and `pause` (on `activity`).
//! 4. `status`, the one that reads through the others (activity, pause, re-drive, notes,
//!    exports, history).
//!
//! A new operation goes in the lowest layer that has what it needs; a form the core writes goes
//! below `ledger`, never beside the operations that read it.

pub mod active;
pub mod activity;
pub mod cancel_drop;
pub mod export_records;
pub mod exports;
pub mod history;
pub mod housekeeping;
pub mod learning;
pub mod ledger;
pub mod notes;
pub mod parked;
pub mod pause;
#[cfg(test)]
mod races;
pub mod read_budget;
pub mod redrive;
pub mod rows;
pub mod schedules;
pub mod slices;
pub mod status;
pub mod step_counts;
pub mod store;
pub mod stored_size;
pub mod timetable;
pub mod window;
pub mod work_item;

pub use ledger::{
    Begin, Claim, Created, FailureRecord, Finish, Ledger, LedgerError, ScanRecord, StepCounts,
    CANCEL_CHECK_EVERY, DEFAULT_STEP_LEASE,
};
pub use status::{Activity, Pace, ScanStatus, State, StatusRead};
pub use store::LedgerTable;
pub use work_item::{ImportTask, ReadRange, Task, WorkItem};
