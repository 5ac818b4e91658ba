//! One slice of a scan's cap as stored, and the protocol's timings.

use std::time::Duration;

/// How many slices a cap is cut into. Enough that a few processes can share a cap finely and
/// one can take it whole, few enough that reading them all is cheap (the status reads them).
pub const SLICES: u16 = 16;
/// How long a lease lasts from its last write. A process that dies holding slices keeps them
/// unusable this long (plus the margin).
pub const LEASE: Duration = Duration::from_secs(10);
/// How often a holder of one slice renews it: a third of the lease, so that two renewals in a
/// row may fail (the store unreachable for a moment) before the slice is lost. A holder never
/// gives up its last slice, so nothing waits on its renewals but the lease.
pub const RENEW_EVERY: Duration = Duration::from_millis(3_300);
/// How often a holder of several slices renews them. A slice another process asks for is
/// handed over at its holder's next renewal, so this is how long a slice sits with a process
/// that cannot use it: renewing every 3.3 s, three devhost instances sharing a learned cap
/// moved 74-80% of it as slices followed their changing steps (one instance alone 91%); every
/// second, 95% (one run each of devhost's default count alone, 2026-11-27; command and code
/// in docs/scan.md, "Pacing"). Only holders of several slices renew this often
/// (at most [`SLICES`] / 2 of them): at 100 processes, each holding one slice or none, every
/// holder renewing each second cost the ledger 224 entities a second where 133 did before.
pub const HAND_OVER_EVERY: Duration = Duration::from_millis(1_000);

/// How long a process that asked for a slice must want no more before it takes its ask back
/// (`ScanShare::withdraw_ask`): longer than a want that comes and goes from one tick to the next,
/// so that a process whose steps come in bursts does not ask, take back and ask again (a read
/// and a write each time) every second.
pub const WITHDRAW_AFTER: Duration = Duration::from_secs(3);

/// How often a holder of several slices that wants more looks at one slice it does not hold,
/// for one come free, whatever its probes' back-off ([`PROBE_MAX`]): processes that run out of
/// work give their slices back free, and the one left with the work found them only at its next
/// probe, up to 8 s later (devhost's count of an account alone, three instances: its steps ran
/// on a third of the cap for 5 s, the scan at 84% of its cap from 30 s on, 2026-11-28). Only
/// holders of several look this often, and at most [`SLICES`] / 2 processes hold several: a
/// point read each a second, 8 entities a second at most, however many processes run. A look
/// that finds the slice held does not ask for it: asks stay at the probes' pace.
pub const LOOK_EVERY: Duration = Duration::from_millis(1_000);

/// How far apart two machines' clocks may be: a holder stops using a slice this long before
/// its lease ends, another takes it only this long after.
pub const CLOCK_MARGIN_MS: u64 = 500;
/// The shortest time between two looks at a slice by a process that wants more.
pub const PROBE_MIN: Duration = Duration::from_millis(500);
/// The longest: looks that find every slice taken double the time to the next up to this.
pub const PROBE_MAX: Duration = Duration::from_secs(8);
/// A process whose steps its share holds back wants more only while it uses more than this
/// share of what it holds; asked for a slice while it wants no more, it keeps slices enough for
/// its use at this share (a quarter over its use, one at least). One margin for both, so that a
/// process given down never wants more at once and asks back (with a fifth to spare when asked
/// and a half to want more, a process using 0.6 slices' worth was given down to one slice,
/// wanted more, and got it back, over and over). Under it, a process held back is so by
/// reservations of pages that come back partly empty (small partitions), which more slices
/// would not fill. Not lower: with a half (twice its use kept), devhost's capped copy moved 82%
/// of its cap, processes with a few steps keeping slices their use did not need.
pub const WANTS_MORE_AT: f64 = 0.8;
/// How long a process keeps slices it does not use before giving them back.
pub const SURPLUS_AFTER: Duration = Duration::from_secs(3);

/// A slice's row: who holds it, until when, and what the holder used of it lately.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceRow {
    pub index: u16,
    /// The holding process, empty when free.
    pub holder: String,
    /// When the lease ends, in epoch milliseconds; 0 when free.
    pub until_ms: u64,
    /// Entities per second its holder used of it at its last renewal (for the status).
    pub used: f64,
    /// When another process that wants more asked for it (epoch ms; 0 when nobody did): its
    /// holder gives it up at its next renewal unless it is the only slice it holds.
    pub wanted_ms: u64,
    /// The process that asked for it: its holder hands it over when it gives it up.
    pub wanted_by: String,
    /// How many slices the process that asked held then: a holder that wants more itself
    /// gives a slice up only to a process holding at least two fewer than itself, so that
    /// processes that all want more settle on even shares instead of handing slices back and
    /// forth (each hand-over leaves the slice unused for a look's while); one that wants no
    /// more gives whatever its use does not need, to any asker.
    pub wanted_holds: u16,
    /// The row's version as last read or written; `None` for a row not stored yet.
    pub etag: Option<String>,
}

impl SliceRow {
    /// A slice nobody has held yet.
    pub fn unwritten(index: u16) -> Self {
        SliceRow {
            index,
            holder: String::new(),
            until_ms: 0,
            used: 0.0,
            wanted_ms: 0,
            wanted_by: String::new(),
            wanted_holds: 0,
            etag: None,
        }
    }

    /// Whether another process may take it at `now_ms`: free, or its lease over by more than
    /// the clocks' margin.
    pub fn is_free(&self, now_ms: u64) -> bool {
        self.holder.is_empty() || self.until_ms.saturating_add(CLOCK_MARGIN_MS) < now_ms
    }

    /// Whether `process` holds it and may still use it at `now_ms` (its lease has more than the
    /// margin left).
    pub fn usable_by(&self, process: &str, now_ms: u64) -> bool {
        self.holder == process && self.until_ms > now_ms.saturating_add(CLOCK_MARGIN_MS)
    }

    /// The same slice held by `process` until `until_ms`, reporting `used`.
    pub fn held(&self, process: &str, until_ms: u64, used: f64) -> Self {
        SliceRow {
            holder: process.to_string(),
            until_ms,
            used,
            wanted_ms: 0,
            wanted_by: String::new(),
            wanted_holds: 0,
            ..self.clone()
        }
    }

    /// The same slice, asked for at `now_ms` by `process`, which wants more and holds `holds`.
    pub fn wanted(&self, process: &str, holds: usize, now_ms: u64) -> Self {
        SliceRow {
            wanted_ms: now_ms.max(1),
            wanted_by: process.to_string(),
            wanted_holds: holds.min(usize::from(u16::MAX)) as u16,
            ..self.clone()
        }
    }

    /// What its holder writes when it gives it up: handed over to the process that asked for
    /// it (leased to it from `now_ms`), or free.
    pub fn given_up(&self, now_ms: u64) -> Self {
        if self.wanted_ms > 0 && !self.wanted_by.is_empty() {
            let asker = self.wanted_by.clone();
            self.held(&asker, now_ms + LEASE.as_millis() as u64, 0.0)
        } else {
            self.freed()
        }
    }

    /// The same slice with nobody's ask on it (an asker that wants no more takes its ask back).
    pub fn unasked(&self) -> Self {
        SliceRow {
            wanted_ms: 0,
            wanted_by: String::new(),
            wanted_holds: 0,
            ..self.clone()
        }
    }

    /// The same slice given back.
    pub fn freed(&self) -> Self {
        SliceRow {
            holder: String::new(),
            until_ms: 0,
            used: 0.0,
            wanted_ms: 0,
            wanted_by: String::new(),
            wanted_holds: 0,
            ..self.clone()
        }
    }
}

/// How long after a renewal (or a first take) a holder of `held` slices renews them next.
pub fn renew_gap(held: usize) -> Duration {
    if held > 1 {
        HAND_OVER_EVERY
    } else {
        RENEW_EVERY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_usable_to_its_margin_and_free_past_it() {
        let row = SliceRow::unwritten(3).held("p", 10_000, 0.0);
        assert!(row.usable_by("p", 9_000));
        assert!(
            !row.usable_by("p", 9_500),
            "the holder stops a margin early"
        );
        assert!(!row.usable_by("q", 9_000));
        assert!(!row.is_free(10_000));
        assert!(!row.is_free(10_500), "others wait a margin past the end");
        assert!(row.is_free(10_501));
        assert!(row.freed().is_free(0));
        assert!(SliceRow::unwritten(0).is_free(0));
    }
}
