//! The Azure Functions custom handler: the invocation protocol (with the real host's quirks),
//! one handler per function, and the router.

pub mod account;
pub mod allowlist;
pub mod app;
pub mod config;
mod export_checks;
pub mod guard;
pub mod http;
mod http_body;
mod import;
pub mod manifest;
pub mod names;
pub mod pacing;
pub mod pause;
pub mod plan;
pub mod protocol;
pub mod reach;
mod record_reads;
pub mod redrive;
mod scans_list;
pub mod schedules;
mod schedules_http;
mod send;
mod ui;

pub mod step;

pub use app::{router, AppState, Settings};
