//! What one status read may spend in the ledger's account. A status read of a scan in flight is
//! paid on every poll of every watcher (the CLI's `--watch` reads once a second), so it is held
//! to a fixed allowance, [`STATUS_READ`], whatever the number of pending items or processes: the
//! reads that make the status (the scan row, the counter shards, the failures and noted rows
//! it lists) are charged first, and the figures that only explain the scan's pace (the claims
//! window, the queue counts, the pace) are read only if what is left still fits them.

/// Storage requests and table entities (as the Table service counts them against its targets:
/// each entity a query scanned, each one written).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCost {
    pub requests: u32,
    pub entities: u32,
}

impl ReadCost {
    pub const fn new(requests: u32, entities: u32) -> Self {
        ReadCost { requests, entities }
    }

    /// This cost and `other` together.
    pub fn plus(self, other: ReadCost) -> ReadCost {
        ReadCost::new(
            self.requests.saturating_add(other.requests),
            self.entities.saturating_add(other.entities),
        )
    }
}

/// The most one status read spends: 5 requests, 60 entities (docs/functions.md, "Costs").
pub const STATUS_READ: ReadCost = ReadCost::new(5, 60);

/// What is left of a read's allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBudget {
    left: ReadCost,
}

impl ReadBudget {
    /// The allowance `total` after `spent` (nothing left if `spent` went over it).
    pub fn after(total: ReadCost, spent: ReadCost) -> ReadBudget {
        ReadBudget {
            left: ReadCost::new(
                total.requests.saturating_sub(spent.requests),
                total.entities.saturating_sub(spent.entities),
            ),
        }
    }

    pub fn left(&self) -> ReadCost {
        self.left
    }

    /// Takes `cost` from what is left, if it fits; `false` (and nothing taken) if not.
    pub fn spend(&mut self, cost: ReadCost) -> bool {
        let fits = cost.requests <= self.left.requests && cost.entities <= self.left.entities;
        if fits {
            self.left = ReadBudget::after(self.left, cost).left;
        }
        fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_does_not_fit_is_not_spent() {
        let mut budget = ReadBudget::after(STATUS_READ, ReadCost::new(2, 17));
        assert!(budget.spend(ReadCost::new(1, 25)));
        assert!(!budget.spend(ReadCost::new(1, 19)), "18 entities left");
        assert!(!budget.spend(ReadCost::new(3, 0)), "2 requests left");
        assert!(budget.spend(ReadCost::new(1, 16)));
        assert_eq!(budget.left(), ReadCost::new(1, 2));
        let over = ReadBudget::after(STATUS_READ, ReadCost::new(6, 70));
        assert_eq!(over.left(), ReadCost::default());
    }
}
