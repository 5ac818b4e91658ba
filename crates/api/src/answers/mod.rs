//! The answers of the HTTP API, typed: a scan's status (`GET /api/scans/{id}`), the scans list
//! (`GET /api/scans`), the start's answer and the control routes' answers, and a refusal. The
//! handler builds its answers from these types and the CLI reads them into the same types, so
//! that neither re-derives the other's shapes.
//!
//! Written by the handler, every answer goes out through a `serde_json::Value` (its keys in
//! order), exactly as before these types were shared: the HTTP API did not change by a byte
//! (the handler's `scans_list` tests pin a status and a list entry).
//!
//! Read by the CLI, every answer is read tolerantly, because a CLI talks to apps of other
//! versions: fields it does not know are ignored (no `deny_unknown_fields`), fields an older
//! app may not send have defaults, and what a newer app may name differently (a scan's state,
//! its action) is read as the name it gives ([`StatusAnswer`], [`SpecShown`], [`ActionShown`]).

mod control;
mod list;
mod shown;
mod status;

pub use control::{
    ErrorAnswer, ErrorDetail, RejectedRemovalRound, RemovalRound, ResumeRound, Retried, Started,
    StateAnswer,
};
pub use list::{ListEntry, ScansPage, UnreadableScan, LISTED_COUNTS};
pub use shown::{ActionShown, ImportShown, ManifestShown, SetShown, SpecShown};
pub use status::{
    spec_as_requested, Activity, CountResult, ExportProgress, NotedRow, Pace, Progress,
    RateHistory, ScanStatus, ShowSpec, State, StepFailure,
};

/// A status as the CLI reads it: the spec as shown ([`SpecShown`]) and the state as named (a
/// newer app's new state is shown as it is, not refused).
pub type StatusAnswer = ScanStatus<SpecShown, String>;

#[cfg(test)]
mod tests;
