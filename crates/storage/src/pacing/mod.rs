//! Pacing what a process sends to storage: a token bucket that paces by pre-payment
//! ([`TokenBucket`]), and per storage target a rate that backs off when the target says it is
//! busy ([`Governor`]), and a record of the last second's use that holds the rate over every
//! window of whole seconds ([`RecentUse`]). The scan's own cap, shared by all its instances, is built on the bucket
//! in the functions layer.

mod bucket;
mod governor;
pub mod queue;
mod window;

pub use bucket::{Place, Rate, TokenBucket};
pub use governor::{Governor, Governors, MIN_RATE};
pub use window::{RecentUse, Ticket};
