//! How many steps of a scan a process runs at once while its ledger partition is strained.
//!
//! Every step of a scan begins and finishes in the scan's one ledger partition, and a finish
//! adds its counts to a counter shard on the shard's etag (`Ledger::commit_counted`). A scan
//! whose steps each move little (partition-keys steps seek: a row per page) and that nothing
//! else limits runs as many steps as the platform gives it instances; their begins and
//! finishes overload the partition, a busier partition widens each finish's gap between its
//! read and its write, more finishes lose their shard and try again: a loop that ends with
//! items failing for good. The ledger counts, per scan, the shard conflicts and refusals its
//! finishes met in this process (`Ledger::strains`); this limit halves the scan's slots here
//! on new ones (at most once per [`CUT_EVERY`]) and gives one back per quiet [`RAISE_EVERY`],
//! from [`HIGHEST`] (no limit to a healthy scan) down to [`LOWEST`]. Steps beyond it are not
//! admitted: they are given back, and parked, so the platform does not scale out on them. A
//! capped scan's strains count only when they come often ([`STEPS_PER_STRAIN`]).
//!
//! Per process and scan: the partition and its shards are the scan's own, and each process
//! sees only its own finishes' strains, so each holds back its own steps of that scan; a
//! process's other scans, in other partitions, are not slowed by it.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The slots of a scan whose ledger partition is not strained: as many as the rate-bound
/// slots ever allow (`ScanPace::slots`), so that a healthy scan is not slowed.
pub const HIGHEST: usize = 64;
/// The slots a strained scan keeps in each process: its items go on, one at a time.
pub const LOWEST: usize = 1;
/// At most one cut per this long: the strains that one cut answers arrive over the finishes
/// running then (a finish tries again for up to about a second and a half).
pub const CUT_EVERY: Duration = Duration::from_secs(2);
/// A capped scan's strain halves the slots only while strains come at least one per this many
/// steps ended here: a busy partition widens every finish's gap between its read and its write,
/// and most finishes then lose their shard; in a healthy one a few collide by chance, the more
/// often the more steps finish a second (the small steps near a scan's end), and halving on each
/// of those left a capped scan's slice holders running 30 steps on slots for 180 while its last
/// pieces waited (the simulated Flex count of 35M rows capped at 50,000 entities/s). Only a
/// capped scan is forgiven: its cap bounds its steps, the slots follow the cap's rate. An
/// uncapped one has nothing else to hold its step count down; forgiven, the simulated
/// partition-keys scan of 35M rows on Consumption ran as fast on 61 instances instead of 38,
/// its ledger partition at 646 entities/s instead of 386.
pub const STEPS_PER_STRAIN: u64 = 4;
/// One slot back per this long without a new strain (1 s let the uncapped partition-keys-35m
/// simulation reach 1,212 ledger entities/s in its busiest 10 s, 2 s 656).
pub const RAISE_EVERY: Duration = Duration::from_secs(2);

/// The scan's slots in this process, as its ledger partition's strains allow.
pub struct LedgerHealth {
    state: Mutex<State>,
}

struct State {
    slots: usize,
    /// The ledger's count of the scan's strains when last judged.
    seen: u64,
    /// The steps ended here when the strains were last judged.
    ended_seen: u64,
    last_cut: Option<Instant>,
    /// Since when the slots have been raised for.
    raised_to: Instant,
}

impl Default for LedgerHealth {
    fn default() -> Self {
        LedgerHealth {
            state: Mutex::new(State {
                slots: HIGHEST,
                seen: 0,
                ended_seen: 0,
                last_cut: None,
                raised_to: Instant::now(),
            }),
        }
    }
}

impl LedgerHealth {
    /// The slots now, given the ledger's count of the scan's strains (`Ledger::strains`, which
    /// only grows) and the steps of the scan ended here (`ended`, which only grows): halved if
    /// the strains grew (for a `capped` scan, by one per [`STEPS_PER_STRAIN`] steps ended since
    /// they were last judged or more) and the last cut is [`CUT_EVERY`] old; else one more per
    /// [`RAISE_EVERY`] since the last cut or raise.
    pub fn slots(&self, strains: u64, ended: u64, capped: bool) -> usize {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let new = strains.saturating_sub(state.seen);
        let steps = ended.saturating_sub(state.ended_seen);
        if capped && new > 0 && new * STEPS_PER_STRAIN < steps {
            // Chance collisions: forgiven, judged afresh from here.
            state.seen = strains;
            state.ended_seen = ended;
        }
        if strains > state.seen {
            state.seen = strains;
            state.ended_seen = ended;
            if state.last_cut.is_none_or(|cut| now >= cut + CUT_EVERY) {
                state.slots = (state.slots / 2).max(LOWEST);
                state.last_cut = Some(now);
            }
            // A strain is not quiet time: the next slot back is earned from here.
            state.raised_to = now;
            return state.slots;
        }
        let quiet = now.saturating_duration_since(state.raised_to);
        let raises = (quiet.as_millis() / RAISE_EVERY.as_millis()) as u32;
        if raises > 0 {
            state.slots = (state.slots + raises as usize).min(HIGHEST);
            state.raised_to += RAISE_EVERY * raises;
        }
        state.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_capped_scans_strains_rarer_than_one_per_steps_per_strain_are_forgiven() {
        let health = LedgerHealth::default();
        // One strain over many more steps ended: chance collisions, no cut.
        assert_eq!(health.slots(1, STEPS_PER_STRAIN * 10, true), HIGHEST);
        tokio::time::advance(CUT_EVERY).await;
        assert_eq!(health.slots(2, STEPS_PER_STRAIN * 20, true), HIGHEST);
        // One per STEPS_PER_STRAIN steps or more: the partition is strained, a cut.
        tokio::time::advance(CUT_EVERY).await;
        assert_eq!(health.slots(12, STEPS_PER_STRAIN * 30, true), HIGHEST / 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_uncapped_scans_every_strain_cuts() {
        let health = LedgerHealth::default();
        assert_eq!(health.slots(1, STEPS_PER_STRAIN * 10, false), HIGHEST / 2);
        tokio::time::advance(CUT_EVERY).await;
        assert_eq!(health.slots(2, STEPS_PER_STRAIN * 20, false), HIGHEST / 4);
    }

    #[tokio::test(start_paused = true)]
    async fn halves_on_strains_at_most_once_per_interval_and_recovers_when_quiet() {
        let health = LedgerHealth::default();
        assert_eq!(health.slots(0, 0, false), HIGHEST);
        // The first strain halves; more within CUT_EVERY do not halve again.
        assert_eq!(health.slots(1, 0, false), HIGHEST / 2);
        assert_eq!(health.slots(5, 0, false), HIGHEST / 2);
        tokio::time::advance(CUT_EVERY).await;
        assert_eq!(health.slots(9, 0, false), HIGHEST / 4);
        // Strains that keep coming bring it to the floor, never under.
        for strains in 10..40 {
            tokio::time::advance(CUT_EVERY).await;
            assert!(health.slots(strains, 0, false) >= LOWEST);
        }
        assert_eq!(health.slots(39, 0, false), LOWEST);
        // Quiet: one slot back per RAISE_EVERY, up to HIGHEST.
        tokio::time::advance(RAISE_EVERY * 3).await;
        assert_eq!(health.slots(39, 0, false), LOWEST + 3);
        tokio::time::advance(RAISE_EVERY * 1000).await;
        assert_eq!(health.slots(39, 0, false), HIGHEST);
    }
}
