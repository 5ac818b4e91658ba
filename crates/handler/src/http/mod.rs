//! The HTTP-triggered functions: start, inspect, list and cancel scans.
//!
//! What every route answers with (a JSON body, a refusal naming the field) is `crate::answers`,
//! shared with the other HTTP functions; `start` starts a scan, after `provision` has checked
//! and made ready what it touches (`export_checks`: an export's or import's container and blobs);
//! `status_read` answers a status, with `activity` saying why a scan in flight waits;
//! `control` cancels a scan or retries its failed items; `housekeeping` lists scans and
//! removes finished ones.

mod activity;
mod control;
mod export_checks;
mod housekeeping;
mod provision;
mod start;
mod status_read;

pub use control::{cancel_scan, retry_scan, RETRY_PER_REQUEST};
pub use housekeeping::{clear_rejected, delete_scan, list_scans};
pub(super) use start::{finish_recorded, idempotent_scan_id, start_request, Started};
pub use start::{start_scan, IDEMPOTENCY_KEY, MAX_REQUEST_BYTES};
pub use status_read::get_scan;
