//! The scan engine: prefix discovery over key ranges, one bounded step at a time.
//!
//! Pure logic over a [`reader::TableReader`], so it runs against an in-memory model, against
//! Azurite through the storage client, and inside the simulator alike. It knows keys, pages and
//! budgets; it knows nothing of HTTP, queues, Functions or what the rows are used for.
//!
//! May use: `tablescan-storage` (entities, filters, pages, errors). Must not use: the API, the
//! ledger, the actions or the handler (they are built on it). The in-memory model of a table
//! and the driver that runs a scan on it to its end are for tests, benches and the simulator:
//! behind the `model` feature, which the handler never turns on.

pub mod budget;
#[cfg(any(test, feature = "model"))]
pub mod driver;
pub mod item;
pub mod keys;
#[cfg(any(test, feature = "model"))]
pub mod model;
pub mod reader;
pub mod seek;
pub mod step;

pub use budget::{Budget, Clock, SystemClock};
pub use item::{ReadRange, WorkItem};
pub use keys::KeyRange;
pub use reader::TableReader;
pub use step::{
    run_step, ReadMode, RowSink, ScanOptions, SplitPolicy, StepError, StepReport, Strategy,
};
