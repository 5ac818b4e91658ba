//! What an action reports about a page: how many rows it acted on, left alone or could not
//! act on, and which rows failed (a sample, the count exact).

/// How many failed rows one page's report keeps, with their keys and why (the count is exact).
pub const FAILURES_KEPT: usize = 10;
/// The longest reason kept for a failed row, in characters.
const REASON_CHARS: usize = 300;

/// What an action did with one batch of rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionCounts {
    /// Rows the action applied to (copied, enqueued, deleted, counted).
    pub acted: u64,
    /// Rows it left alone on purpose (a delete whose row changed since it was read, a copy
    /// in `insert` mode whose row the target holds already, different).
    pub skipped: u64,
    /// Rows it could not act on (a row too large for a queue message, a row the target
    /// refused as invalid): reported, and the rest of the page goes on.
    pub failed: u64,
}

impl std::ops::AddAssign for ActionCounts {
    fn add_assign(&mut self, other: Self) {
        self.acted += other.acted;
        self.skipped += other.skipped;
        self.failed += other.failed;
    }
}

/// A row an action could not act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFailure {
    pub partition_key: String,
    pub row_key: String,
    /// Why, in a sentence (the service's answer, or the limit the row breaks).
    pub reason: String,
}

impl RowFailure {
    pub fn new(partition_key: &str, row_key: &str, reason: impl Into<String>) -> Self {
        let reason: String = reason.into();
        RowFailure {
            partition_key: partition_key.to_string(),
            row_key: row_key.to_string(),
            reason: reason.chars().take(REASON_CHARS).collect(),
        }
    }
}

/// What an action did with one page: its counts, how many rows, from the first, it finished
/// (all of them unless it was told to stop starting new writes), and up to [`FAILURES_KEPT`]
/// of the rows it could not act on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub counts: ActionCounts,
    pub finished: usize,
    pub failures: Vec<RowFailure>,
}

impl Applied {
    /// Every one of `finished` rows acted on.
    pub fn all_acted(finished: usize) -> Self {
        Applied {
            counts: ActionCounts {
                acted: finished as u64,
                ..ActionCounts::default()
            },
            finished,
            failures: Vec::new(),
        }
    }

    /// Adds what another part of the same page did (its `finished` is not added).
    pub fn absorb(&mut self, other: Applied) {
        self.counts += other.counts;
        let room = FAILURES_KEPT.saturating_sub(self.failures.len());
        self.failures.extend(other.failures.into_iter().take(room));
    }

    /// Adds a failed row: counted always, kept while fewer than [`FAILURES_KEPT`] are.
    pub fn fail(&mut self, failure: RowFailure) {
        self.counts.failed += 1;
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push(failure);
        }
    }
}

/// Asked before each write is started: whether to go on. An action always starts its first
/// write, so it finishes at least one row.
pub type GoOn<'a> = &'a (dyn Fn() -> bool + Sync);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_all_counted_and_a_few_kept_with_short_reasons() {
        let mut applied = Applied::all_acted(3);
        for n in 0..25 {
            applied.fail(RowFailure::new("p", &n.to_string(), "x".repeat(1000)));
        }
        assert_eq!(applied.counts.failed, 25);
        assert_eq!(applied.failures.len(), FAILURES_KEPT);
        assert_eq!(applied.failures[0].reason.chars().count(), REASON_CHARS);
        assert_eq!(applied.counts.acted, 3);
    }
}
