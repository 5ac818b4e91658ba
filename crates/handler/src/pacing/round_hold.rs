//! While a scan learns its cap (its learning round is open, or over and not yet read by this
//! process), what holds it under what the account takes is each process's back-off alone. Two
//! things let bursts through then, seen through devhost beside an application (8.6% of the
//! application's requests refused in the 5 seconds before the scan's cap came, none after): a
//! process's back-off creeps up 8 s after a cut and is lifted at 12 (the round's cap comes 12
//! to 17 s after the cut: a report 4 s after it, a round of 8, the scan read every few
//! seconds), and a process that starts steps of the scan then meets the account with a back-off
//! that has heard nothing, so nothing limits it. So, until the cap comes or [`HOLD_PAST_ROUND`]
//! after the round's end: a process running the scan holds its back-off at its ceiling
//! (`Governor::hold_until`), and a process that joins the scan runs none of its steps (each is
//! given back at once, to come back when the cap may have come; not counted as a return for want
//! of room, so it neither waits longer each time nor parks). Every process in the scan closes
//! the round once it is over, the joiners too (they stay in the scan meanwhile): a round whose
//! reporters had all left would otherwise give no cap, and its joiners would all start at once
//! when the wait ran out.
//!
//! A process's back-off of an account is shared by every scan it runs on that account: one
//! scan's hold keeps it for all, and the lift that comes with one scan's cap ends it for all
//! (another scan still learning holds it again at its next tick, from the rate then).

use std::time::Duration;

use tablescan_ledger::learning::ROUND;

/// How long after its round is over a scan with no cap yet is still taken to be learning one:
/// time for a process to close the round (it looks every tenth of a second) and for every
/// process to read the scan with its cap (every few seconds, `app::CANCEL_CHECK_EVERY`). Past
/// it (every reporter gone before closing it), steps run as before a round.
pub const HOLD_PAST_ROUND: Duration = Duration::from_secs(8);

/// Until when (epoch ms, the lease clock, `now_ms` now) a scan whose last round opened at
/// `round_ms` (0: none) is taken to be learning its cap, if it has none; 0 when it is not.
/// Never later than a round's time and [`HOLD_PAST_ROUND`] from now: `round_ms` is another
/// process's clock, and one running ahead must not hold this one longer.
pub fn learning_until_ms(round_ms: u64, has_cap: bool, now_ms: u64) -> u64 {
    if has_cap || round_ms == 0 {
        return 0;
    }
    let learning = (ROUND + HOLD_PAST_ROUND).as_millis() as u64;
    let until = (round_ms + learning).min(now_ms + learning);
    if until <= now_ms {
        return 0;
    }
    until
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_is_learning_from_its_round_until_a_while_after_it() {
        assert_eq!(learning_until_ms(0, false, 2_000), 0);
        assert_eq!(learning_until_ms(1_000, true, 2_000), 0);
        assert_eq!(learning_until_ms(1_000, false, 2_000), 1_000 + 16_000);
        assert_eq!(learning_until_ms(1_000, false, 17_000), 0);
        // A round stamped ahead of this clock holds no longer than one stamped now.
        assert_eq!(learning_until_ms(60_000, false, 2_000), 2_000 + 16_000);
    }
}
