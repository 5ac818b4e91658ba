//! A scan's rate cap, shared by every process that runs the scan, with an accuracy that does not
//! depend on how many processes there are, at a cost that grows slowly with them.
//!
//! The cap is cut into [`SLICES`] equal slices. Each slice is one row in a store (the scan's
//! ledger partition, in the handler), leased by at most one process at a time for [`LEASE`]:
//! the row names its holder and the wall-clock time its lease ends. A process may use, per
//! second, the cap's share of the slices it holds, and nothing more; since leases are
//! exclusive (every write is conditional on the row's etag) the shares in use never add up to
//! more than the cap, whether 1 or 1,000 processes run the scan. Clocks of different machines
//! may disagree a little: a holder stops using a slice [`CLOCK_MARGIN_MS`] before its lease
//! ends by its own clock, and another process takes it only that long after, by its own.
//!
//! What it costs the store, per scan:
//! - holders renew all their slices in one write a [`RENEW_EVERY`], or a [`HAND_OVER_EVERY`]
//!   when they hold several (a slice asked for is handed over at its holder's next renewal):
//!   at most [`SLICES`] entities a second in all;
//! - a process that wants more than it holds looks at one slice at a time (a point read of one
//!   entity), no more often than [`PROBE_MIN`] and backing off to [`PROBE_MAX`] while every slice
//!   it looks at is taken; finding one held, it asks for it (a conditional write), which makes
//!   the holder's next renewal fail and read the slices again ([`SLICES`] entities) before it
//!   hands the slice over;
//! - a process that holds several slices and wants more also looks at one slice it does not
//!   hold every [`LOOK_EVERY`] for one come free (a point read; it asks only at its probes'
//!   pace): at most [`SLICES`] / 2 processes hold several, so 8 entities a second at most;
//! - joining reads every slice once ([`SLICES`] entities); leaving reads them and writes the held
//!   ones free or handed over.
//!
//! The test of 100 processes present at once, joining, leaving and crashing
//! (`tests/hundred_processes.rs`) measures the slices at about 130 entities a second, and about
//! 170 with each process's cancel checks and the scan's learning beside them (docs/scan.md).
//!
//! A process that holds more than it uses gives the surplus back after [`SURPLUS_AFTER`], so a
//! slice sits where the work is, keeping one spare over what its use needs (a quarter over it:
//! [`WANTS_MORE_AT`]); asked by a process that wants more, it hands over, at its next renewal,
//! everything its use does not need, whatever the asker holds (processes that all want more
//! hand over only to one holding two fewer, and so settle on even shares). One that crashes
//! holds its slices until their leases end.
//!
//! The other designs considered (presence rows with shares worked out by every process, a
//! share handed down the work-item tree, a budget handed out per step by one row) are compared
//! in the project's docs/scan.md.

mod clock;
mod share;
mod slice;
mod store;

pub use clock::{Clock, SystemClock, TokioClock};
pub use share::{Demand, ScanShare};
pub use slice::{
    SliceRow, CLOCK_MARGIN_MS, HAND_OVER_EVERY, LEASE, LOOK_EVERY, PROBE_MAX, PROBE_MIN,
    RENEW_EVERY, SLICES, SURPLUS_AFTER, WANTS_MORE_AT,
};
pub use store::{Counts, InMemorySlices, SliceStore, StoreError};
