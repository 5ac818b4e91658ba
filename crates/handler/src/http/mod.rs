//! The HTTP-triggered functions: start, inspect, list and cancel scans.
//!
//! `answers` holds what every route answers with (a JSON body, a refusal naming the field);
//! `start` starts a scan, after `provision` has checked and made ready what it touches;
//! `status_read` answers a status, with `activity` saying why a scan in flight waits;
//! `control` cancels a scan or retries its failed items; `housekeeping` lists scans and
//! removes finished ones.

mod activity;
mod answers;
mod control;
mod housekeeping;
mod provision;
mod start;
mod status_read;

pub(super) use answers::{answer, error, refusal, request, scan_target, HttpError};
pub use control::{cancel_scan, retry_scan, RETRY_PER_REQUEST};
pub use housekeeping::{clear_rejected, delete_scan, list_scans};
pub(super) use provision::{account_for, probe_for, refused, within};
pub(super) use start::start_request;
pub use start::{start_scan, IDEMPOTENCY_KEY, MAX_REQUEST_BYTES};
pub use status_read::get_scan;
