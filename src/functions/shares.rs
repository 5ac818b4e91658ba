//! How a scan's rate cap is divided among the processes running it, from what each wants.
//!
//! Each process publishes how many entities per second it wants (what it used lately with some
//! room to grow, or the whole cap while it is held back by its share) and every process works
//! out its own part from the same published wants with [`allocation`]: max-min fair, as a
//! water level; if the wants add up to less than the cap, each gets its want and an equal part
//! of what is left.
//!
//! Why every process may work this out on its own, from views of the others that are up to a
//! read period old, and the parts still add up to no more than the cap: a process's part never
//! grows when another's want grows or another process joins ([`allocation`] is monotone), so a
//! view that still shows another's *old, larger* want gives a smaller part than the truth; and
//! a process raises its own want only at a time it announced early enough for every other to
//! have read it (`functions::pacing`). Lowering a want takes effect at once, for its owner first.

use crate::job::presence::Presence;

/// How far apart the processes' clocks may be. A raise of a want takes effect for its owner
/// this much after its time, and the others count it this much before.
pub const CLOCK_MARGIN_MS: u64 = 100;
/// A process that uses at least this share of its part of the cap, or has steps waiting for a
/// slot, is held back by its part: it wants the whole cap.
const HUNGRY_USE: f64 = 0.9;
/// Otherwise it wants this much more than it used in the last second...
const HEADROOM: f64 = 1.5;
/// ...and at least this share of the cap: room for a step that starts.
const LEAST_WANT: f64 = 0.05;
/// A want falls by at most this share per renewal: a pause between two work items should not
/// cost a process its part, which takes 1.6 read periods to raise again.
const WANT_DECAY: f64 = 0.5;
/// A larger want is announced only when it is this much larger than the current one: smaller
/// growth fits in the cap's unwanted rest, which every process shares.
const RAISE_STEP: f64 = 1.25;

/// What one process wants of a scan's cap (entities per second), as its presence row says:
/// `want` until `from_ms` (epoch ms), `next` from then on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wants {
    pub want: f64,
    pub next: f64,
    pub from_ms: u64,
}

impl Wants {
    /// The first process of a scan, alone: the whole cap at once.
    pub fn alone(cap: f64, now_ms: u64) -> Wants {
        Wants {
            want: cap,
            next: cap,
            from_ms: now_ms.saturating_sub(CLOCK_MARGIN_MS),
        }
    }

    /// A process joining: nothing until `from_ms`, when every other will have read its row;
    /// `want` from then on (at least a twentieth of the cap). Not the whole cap: many a work
    /// item is a short one (an empty range, a small partition), and a process that asks for
    /// more than it uses holds the others back until it leaves; if it needs more, it is soon
    /// held back and raises its want.
    pub fn joining(cap: f64, want: f64, from_ms: u64) -> Wants {
        Wants {
            want: 0.0,
            next: want.max(cap * LEAST_WANT).min(cap),
            from_ms,
        }
    }

    /// What the process itself may use at `now_ms`: a raise from a little after its time.
    pub fn in_use(&self, now_ms: u64) -> f64 {
        if now_ms >= self.from_ms.saturating_add(CLOCK_MARGIN_MS) {
            self.next
        } else {
            self.want
        }
    }

    /// What the other processes count of `row` at `now_ms`: a raise from a little before its
    /// time.
    pub fn counted_of(row: &Presence, now_ms: u64) -> f64 {
        row.want_at(now_ms.saturating_add(CLOCK_MARGIN_MS))
    }

    /// The wants to write next, from what the process used in the last second (`used`,
    /// entities per second, what its steps waited for included), its part of the cap now
    /// (`part`) and whether steps wait for a slot (`held_back`). A smaller want takes effect
    /// at once; a larger one at `raise_at_ms`, and not while an earlier raise is pending.
    pub fn renewed(
        self,
        cap: f64,
        used: f64,
        part: f64,
        held_back: bool,
        now_ms: u64,
        raise_at_ms: u64,
    ) -> Wants {
        let current = self.in_use(now_ms);
        let hungry = held_back || used >= part * HUNGRY_USE;
        let target = if hungry {
            cap
        } else {
            (used * HEADROOM).max(cap * LEAST_WANT).min(cap)
        };
        if target < current {
            let lowered = target.max(current * WANT_DECAY);
            return Wants {
                want: lowered,
                next: lowered,
                from_ms: now_ms,
            };
        }
        let pending = self.next > current;
        if pending {
            return self;
        }
        if target > current * RAISE_STEP {
            return Wants {
                want: current,
                next: target,
                from_ms: raise_at_ms,
            };
        }
        Wants {
            want: current,
            next: current,
            from_ms: self.from_ms.min(now_ms),
        }
    }
}

/// This process's part of `cap` (entities per second) when it wants `mine` and the other
/// processes sharing the cap want `others` (each > 0; a want may be infinite: as much as it can
/// get).
pub fn allocation(cap: f64, mine: f64, others: &[f64]) -> f64 {
    let n = others.len() + 1;
    let total: f64 = others.iter().sum::<f64>() + mine;
    if total <= cap {
        // Everyone gets what it wants, and what is left is shared equally: a process whose
        // demand grows finds room at once, without waiting to announce a larger want.
        return mine + (cap - total) / n as f64;
    }
    mine.min(water_level(cap, mine, others))
}

/// The level L at which the wants, each cut to L, add up to `cap` (the wants add up to more).
fn water_level(cap: f64, mine: f64, others: &[f64]) -> f64 {
    let mut wants: Vec<f64> = others.iter().copied().chain([mine]).collect();
    wants.sort_by(f64::total_cmp);
    let mut left = cap;
    let mut above = wants.len();
    for want in wants {
        let level = left / above as f64;
        if want >= level {
            return level;
        }
        left -= want;
        above -= 1;
    }
    // Unreachable when the wants add up to more than the cap; harmless otherwise.
    f64::INFINITY
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn equal_wants_split_the_cap_equally() {
        let all = f64::INFINITY;
        assert_eq!(allocation(3_000.0, all, &[all, all]), 1_000.0);
        assert_eq!(allocation(3_000.0, 3_000.0, &[3_000.0, 3_000.0]), 1_000.0);
        assert_eq!(allocation(3_000.0, all, &[]), 3_000.0);
    }

    #[test]
    fn what_a_light_process_leaves_goes_to_the_hungry_ones() {
        let all = f64::INFINITY;
        // One process wants 200 of 2,000: the two held back share the other 1,800.
        assert_eq!(allocation(2_000.0, all, &[200.0, all]), 900.0);
        assert_eq!(allocation(2_000.0, 200.0, &[all, all]), 200.0);
        // Wants under the cap: each its want and a third of the 1,400 left.
        let part = allocation(2_000.0, 100.0, &[200.0, 300.0]);
        assert!((part - (100.0 + 1_400.0 / 3.0)).abs() < 1e-9, "{part}");
    }

    #[test]
    fn a_raise_is_used_late_and_counted_early_and_a_cut_is_at_once() {
        let row = |w: Wants| Presence {
            process: "p".into(),
            until_ms: u64::MAX,
            want: w.want,
            next_want: w.next,
            from_ms: w.from_ms,
            rate: 0.0,
        };
        let joining = Wants::joining(2_000.0, 5_000.0, 10_000);
        assert_eq!(joining.in_use(10_099), 0.0);
        assert_eq!(joining.in_use(10_100), 2_000.0);
        assert_eq!(Wants::counted_of(&row(joining), 9_899), 0.0);
        assert_eq!(Wants::counted_of(&row(joining), 9_900), 2_000.0);
        assert_eq!(Wants::alone(2_000.0, 10_000).in_use(10_000), 2_000.0);

        let settled = Wants::alone(2_000.0, 0);
        // Using 300/s of a part of 1,000: it wants 450 (and no less than a twentieth of the
        // cap), at once, but falls by half a renewal at most.
        let light = settled.renewed(2_000.0, 300.0, 1_000.0, false, 20_000, 30_000);
        assert_eq!((light.in_use(20_000), light.next), (1_000.0, 1_000.0));
        let lighter = light.renewed(2_000.0, 300.0, 1_000.0, false, 21_000, 31_000);
        assert_eq!(lighter.in_use(21_000), 500.0);
        let floor = lighter
            .renewed(2_000.0, 0.0, 500.0, false, 22_000, 32_000)
            .renewed(2_000.0, 0.0, 500.0, false, 23_000, 33_000)
            .renewed(2_000.0, 0.0, 500.0, false, 24_000, 34_000);
        assert_eq!(floor.in_use(24_000), 100.0);
        // Held back again: the whole cap, from the time given, and only then.
        let raised = floor.renewed(2_000.0, 95.0, 100.0, false, 25_000, 27_000);
        assert_eq!(
            (raised.in_use(25_000), raised.in_use(27_100)),
            (100.0, 2_000.0)
        );
        // A pending raise is left alone...
        assert_eq!(
            raised.renewed(2_000.0, 95.0, 100.0, true, 26_000, 28_000),
            raised
        );
        // ...unless the want falls meanwhile: that cancels it.
        let raised = lighter.renewed(2_000.0, 480.0, 500.0, false, 25_000, 27_000);
        let fallen = raised.renewed(2_000.0, 10.0, 500.0, false, 26_000, 28_000);
        assert_eq!(
            (fallen.in_use(26_000), fallen.in_use(40_000)),
            (250.0, 250.0)
        );
    }

    fn wants() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(prop_oneof![1.0..5_000.0f64, Just(f64::INFINITY)], 1..12)
    }

    proptest! {
        /// With one view, the parts add up to the cap at most (to all of it when anyone wants
        /// more than it gets).
        #[test]
        fn parts_add_up_to_the_cap_at_most(cap in 1.0..50_000.0f64, wants in wants()) {
            let parts: Vec<f64> = (0..wants.len())
                .map(|i| {
                    let others: Vec<f64> = wants.iter().enumerate()
                        .filter(|(j, _)| *j != i).map(|(_, w)| *w).collect();
                    allocation(cap, wants[i], &others)
                })
                .collect();
            let sum: f64 = parts.iter().sum();
            prop_assert!(sum <= cap * (1.0 + 1e-9), "{sum} > {cap}");
            prop_assert!(sum >= cap * (1.0 - 1e-9), "{sum} < {cap}: part of the cap unused");
        }

        /// A larger want or one more process elsewhere never enlarges this process's part:
        /// what makes a view that is behind the others' decreases safe.
        #[test]
        fn others_wanting_more_never_enlarges_a_part(
            cap in 1.0..50_000.0f64,
            mine in prop_oneof![1.0..5_000.0f64, Just(f64::INFINITY)],
            others in wants(),
            which in any::<prop::sample::Index>(),
            more in 0.0..5_000.0f64,
            newcomer in 1.0..5_000.0f64,
        ) {
            let before = allocation(cap, mine, &others);
            let mut grown = others.clone();
            let i = which.index(grown.len());
            grown[i] += more;
            prop_assert!(allocation(cap, mine, &grown) <= before * (1.0 + 1e-12));
            let mut joined = others.clone();
            joined.push(newcomer);
            prop_assert!(allocation(cap, mine, &joined) <= before * (1.0 + 1e-12));
        }

        /// Wanting less never gives more.
        #[test]
        fn a_smaller_want_never_gives_a_larger_part(
            cap in 1.0..50_000.0f64, mine in 1.0..5_000.0f64, less in 0.0..1.0f64, others in wants(),
        ) {
            let smaller = mine * less;
            prop_assume!(smaller > 0.0);
            prop_assert!(allocation(cap, smaller, &others) <= allocation(cap, mine, &others) * (1.0 + 1e-12));
        }
    }
}
