//! tablescan: distributed scans of huge Azure Storage tables, run as an Azure Functions custom
//! handler. One crate per layer (docs/architecture.md, "Crates"); this facade re-exports them
//! under the module names they had before they became crates, for the Azurite tests, the
//! benches and the tools. Code of the project itself uses the crates directly.

/// What a scan does with the rows it reads (`crates/actions`).
pub use tablescan_actions as actions;
/// The Azure Functions custom handler (`crates/handler`).
pub use tablescan_handler as functions;
/// The ledger of a scan's work items (`crates/ledger`), with the API's scan request
/// (`crates/api`) as `job::spec`, where it was before.
pub mod job {
    pub use tablescan_api as spec;
    pub use tablescan_api::{ActionSpec, ScanSpec, SpecError};
    pub use tablescan_ledger::*;
}
/// The scan engine (`crates/engine`).
pub use tablescan_engine as scan;
/// The storage client (`crates/storage`).
pub use tablescan_storage as storage;
