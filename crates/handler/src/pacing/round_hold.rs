//! While a scan learns its cap (its learning round is open, or over and not yet read by this
//! process), what holds it under what the account takes is each process's back-off alone. Two
//! things let bursts through then, seen through devhost beside an application (8.6% of the
//! application's requests refused in the 5 seconds before the scan's cap came, none after): a
//! process's back-off creeps up 8 s after a cut and is lifted at 12 (the round's cap comes 12
//! to 17 s after the cut: a report 4 s after it, a round of 8, the scan read every few
//! seconds), and a process that starts steps of the scan then meets the account with a back-off
//! that has heard nothing, so nothing limits it. So, until the cap comes or [`HOLD_PAST_ROUND`]
//! after the round's end: a process running the scan holds its back-off at its ceiling
//! (`Governor::hold_until`), and a process that joins the scan runs none of its steps (they are
//! given back, as a capped scan's are while the process holds no slice of the cap).

use std::time::Duration;

use tablescan_ledger::learning::ROUND;

/// How long after its round is over a scan with no cap yet is still taken to be learning one:
/// time for a process to close the round (it looks every tenth of a second) and for every
/// process to read the scan with its cap (every few seconds, `app::CANCEL_CHECK_EVERY`). Past
/// it (every reporter gone before closing it), steps run as before a round.
pub const HOLD_PAST_ROUND: Duration = Duration::from_secs(8);

/// Until when (epoch ms, the lease clock) a scan whose last round opened at `round_ms` (0:
/// none) is taken to be learning its cap, if it has none; 0 when it is not.
pub fn learning_until_ms(round_ms: u64, has_cap: bool) -> u64 {
    if has_cap || round_ms == 0 {
        return 0;
    }
    round_ms + (ROUND + HOLD_PAST_ROUND).as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_is_learning_from_its_round_until_a_while_after_it() {
        assert_eq!(learning_until_ms(0, false), 0);
        assert_eq!(learning_until_ms(1_000, true), 0);
        assert_eq!(learning_until_ms(1_000, false), 1_000 + 16_000);
    }
}
