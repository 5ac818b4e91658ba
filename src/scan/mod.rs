//! The scan engine: prefix discovery over key ranges, one bounded step at a time.
//!
//! Pure logic over a [`reader::TableReader`], so it runs against an in-memory model, against
//! Azurite through the storage client, and inside the simulator alike. It knows keys, pages and
//! budgets; it knows nothing of HTTP, queues, Functions or what the rows are used for.

pub mod budget;
pub mod driver;
pub mod item;
pub mod keys;
pub mod model;
mod pending;
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
