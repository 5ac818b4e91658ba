//! The Azure Functions custom handler: the invocation protocol (with the real host's quirks),
//! one handler per function, the router, the settings and the steps that run a scan's work
//! items; its binary (`src/bin/handler.rs`) is the `handler` the function app runs.
//!
//! May use every crate below it: `tablescan-storage`, `tablescan-pace`, `tablescan-engine`,
//! `tablescan-api`, `tablescan-ledger` and `tablescan-actions`. None of them may use it, and
//! neither may the CLI (a client of the HTTP API only).
//!
//! Its modules are layered as its crates are: `app` (the shared state) and the modules below it
//! use no function's module, and `routes` (the router) is the only one that names them all;
//! none imports a module that imports it back (docs/architecture.md, `tests/module_cycles.rs`).

pub mod account;
pub mod allowlist;
mod answers;
pub mod app;
pub mod config;
pub mod guard;
pub mod http;
mod http_body;
pub mod manifest;
pub mod names;
pub mod pacing;
pub mod pause;
pub mod plan;
pub mod protocol;
pub mod reach;
mod record_reads;
pub mod redrive;
mod routes;
mod scans_list;
pub mod schedules;
mod schedules_http;
mod send;
mod ui;

pub mod step;

pub use app::{AppState, Settings};
pub use routes::router;
