//! tablescan: distributed scans of huge Azure Storage tables, run as an Azure Functions custom
//! handler. See `docs/architecture.md` for the layers; each is a module here, and lower layers
//! never use higher ones.

pub mod actions;
pub mod functions;
pub mod job;
pub mod scan;
/// The storage client, a crate of its own (`crates/storage`) so that it cannot reach up.
pub use tablescan_storage as storage;
