//! Partition keys without reading partitions: how a partition-keys scan sizes its queries, and
//! how a step of one runs several seek chains side by side.
//!
//! The account counts every entity a query scans. A partition-keys scan wants one row per
//! partition; after each page it skips the rest of the last partition it saw (the next query
//! starts at `PartitionKey gt 'L'`), but a page of 1,000 rows still reads every row of the
//! partitions before the last. Where partitions are large that is nearly all the cost: the
//! demo table's 100,000 rows in 3,957 partitions cost 98,424 entities. A query for the first
//! row after `L` with `$top=1` costs one entity, whatever the partition's size.
//!
//! [`KeysPace`] picks each query's `$top` from what the pages show. Pages whose rows fall in
//! partitions of two rows or more switch it to seeking: `$top=1`, one entity and one query per
//! partition, with every [`PROBE_EVERY`]th seek asking for two rows (a probe: two rows of one
//! partition say partitions are still large). A page or probe whose rows fall in partitions of
//! fewer than two rows switches it to paging, the page growing eightfold a query up to the
//! scan's page size, so a table of one-row partitions still costs one query per 1,000 rows.
//!
//! Seeks are short queries, one after the other within a range; [`chain_pieces`] cuts a fresh
//! range into a few pieces that a step reads side by side, so that a step keeps a handful of
//! queries in flight.

use super::item::ReadRange;
use super::keys::{cut_evenly, Lower, CUT_POINTS};

/// How many seeks (queries asking for fewer rows than `page_size / SEEKS_PER_QUERY`) count as
/// one query of the step's query budget: a step of a partition-keys scan that seeks makes up
/// to this many times its query budget in queries (and stays within its time budget).
pub const SEEKS_PER_QUERY: u32 = 25;
/// Every this many seeks, one asks for two rows instead of one (see [`KeysPace`]).
pub const PROBE_EVERY: u32 = 8;
/// How many pieces a step of a partition-keys scan reads side by side.
pub const CHAINS: usize = 4;
/// The rows per partition from which seeking costs fewer entities than reading pages.
const SEEK_FROM_ROWS_PER_PARTITION: usize = 2;
/// How much a page grows after a page of small partitions.
const GROWTH: u16 = 8;

/// The `$top` of a partition-keys scan's next query, adapted to what the pages show.
#[derive(Debug, Clone)]
pub struct KeysPace {
    page_size: u16,
    top: u16,
    seeking: bool,
    /// Seeks since the last probe.
    since_probe: u32,
}

impl KeysPace {
    /// Starts with a probe of two rows: one query tells large partitions from small ones.
    pub fn new(page_size: u16) -> Self {
        KeysPace {
            page_size,
            top: 2.min(page_size),
            seeking: false,
            since_probe: 0,
        }
    }

    /// The `$top` of the next query.
    pub fn top(&self) -> u16 {
        self.top
    }

    /// Whether the pages show partitions large enough to seek through.
    pub fn seeking(&self) -> bool {
        self.seeking
    }

    /// Learns from a page that asked for `asked` rows and returned `rows`, of which
    /// `partitions` distinct PartitionKeys. A page of fewer than two rows tells nothing (a seek,
    /// a short page, the range's end).
    pub fn observe(&mut self, asked: u16, rows: usize, partitions: usize) {
        let informative = asked >= 2 && rows >= 2 && partitions > 0;
        if informative {
            self.seeking = rows >= SEEK_FROM_ROWS_PER_PARTITION * partitions;
        }
        if self.seeking {
            self.since_probe = if asked >= 2 { 0 } else { self.since_probe + 1 };
            self.top = if self.since_probe + 1 >= PROBE_EVERY {
                2.min(self.page_size)
            } else {
                1
            };
        } else if informative {
            // Partitions of fewer than two rows: pages cost less than two rows each. They grow
            // a step at a time: a probe that met one small partition among large ones costs a
            // page of 16 rows, not of 1,000.
            self.top = self.top.max(2).saturating_mul(GROWTH).min(self.page_size);
        }
    }
}

/// How much of a step's query budget a query asking for `top` rows spends, in rows: a page is
/// `page_size`, a seek `page_size / SEEKS_PER_QUERY` (at least 1).
pub fn query_cost(top: u16, page_size: u16) -> u32 {
    let floor = (u32::from(page_size) / SEEKS_PER_QUERY).max(1);
    u32::from(top).max(floor)
}

/// The most queries a step of a partition-keys scan makes with a query budget of
/// `max_queries`: the budget spent a seek at a time, and up to two queries more for each piece
/// (its share rounded up, and the query that finds its share spent).
pub fn query_limit(max_queries: u32, page_size: u16) -> u32 {
    let floor = query_cost(1, page_size);
    (max_queries * u32::from(page_size)).div_ceil(floor) + 2 * CHAINS as u32
}

/// Up to `pieces` disjoint ranges that together cover a fresh range item (no cursor), cut at
/// PartitionKeys `prefix + c` for evenly chosen characters `c` inside it: a partition lies in
/// one piece whole. Anything else, or a range no cut point falls inside, stays whole.
pub fn chain_pieces(task: &ReadRange, pieces: usize) -> Vec<ReadRange> {
    let ReadRange::Range {
        partition_keys,
        prefix,
        cursor: None,
        ..
    } = task
    else {
        return vec![task.clone()];
    };
    let candidates: Vec<String> = CUT_POINTS
        .chars()
        .map(|c| format!("{prefix}{c}"))
        .filter(|key| {
            partition_keys.contains(key)
                && !matches!(&partition_keys.lower, Lower::Included(low) if low == key)
        })
        .collect();
    let Some(ranges) = cut_evenly(partition_keys, &candidates, pieces) else {
        return vec![task.clone()];
    };
    ranges
        .into_iter()
        .map(|partition_keys| ReadRange::Range {
            partition_keys,
            prefix: prefix.clone(),
            cursor: None,
            last_partition: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyRange;

    #[test]
    fn large_partitions_are_sought_with_a_probe_every_eighth_query() {
        let mut pace = KeysPace::new(1000);
        assert_eq!(pace.top(), 2);
        // Two rows of one partition: seek.
        pace.observe(2, 2, 1);
        let tops: Vec<u16> = (0..16)
            .map(|_| {
                let top = pace.top();
                let rows = usize::from(top);
                pace.observe(top, rows, 1);
                top
            })
            .collect();
        assert_eq!(tops.iter().filter(|t| **t == 2).count(), 2, "{tops:?}");
        assert!(tops.iter().all(|t| *t <= 2), "{tops:?}");
        // A probe finding two one-row partitions: back to pages, growing.
        while pace.top() != 2 {
            pace.observe(1, 1, 1);
        }
        pace.observe(2, 2, 2);
        assert_eq!(pace.top(), 16);
        pace.observe(16, 16, 16);
        assert_eq!(pace.top(), 128);
        pace.observe(128, 128, 120);
        assert_eq!(pace.top(), 1000);
        pace.observe(1000, 1000, 990);
        assert_eq!(pace.top(), 1000);
        // Pages of 25-row partitions: seek again.
        pace.observe(1000, 1000, 40);
        assert_eq!(pace.top(), 1);
    }

    #[test]
    fn short_pages_and_small_page_sizes_tell_nothing_and_break_nothing() {
        let mut pace = KeysPace::new(1);
        assert_eq!(pace.top(), 1);
        pace.observe(1, 1, 1);
        assert_eq!(pace.top(), 1);
        let mut pace = KeysPace::new(5);
        pace.observe(2, 1, 1);
        assert_eq!(pace.top(), 2, "one row of two asked tells nothing");
        pace.observe(2, 2, 2);
        assert_eq!(pace.top(), 5);
    }

    #[test]
    fn seeks_cost_a_twenty_fifth_of_a_query() {
        assert_eq!(query_cost(1000, 1000), 1000);
        assert_eq!(query_cost(1, 1000), 40);
        assert_eq!(query_cost(2, 1000), 40);
        assert_eq!(query_cost(1, 1), 1);
        assert_eq!(query_cost(3, 5), 3);
    }

    #[test]
    fn pieces_cover_the_range_at_partition_boundaries() {
        let task = ReadRange::Range {
            partition_keys: KeyRange::all(),
            prefix: String::new(),
            cursor: None,
            last_partition: None,
        };
        let pieces = chain_pieces(&task, 4);
        assert_eq!(pieces.len(), 4);
        let ranges: Vec<KeyRange> = pieces
            .iter()
            .map(|p| match p {
                ReadRange::Range { partition_keys, .. } => partition_keys.clone(),
                _ => unreachable!(),
            })
            .collect();
        for key in [
            "",
            "0",
            "A",
            "Microsoft.Extensions",
            "f",
            "zz",
            "\u{FFFF}",
            "😀",
        ] {
            let holding = ranges.iter().filter(|r| r.contains(key)).count();
            assert_eq!(holding, 1, "{key:?} lies in exactly one piece");
        }
        // A range under a prefix is cut under it; one without room for a cut stays whole.
        let narrow = ReadRange::Range {
            partition_keys: KeyRange::with_prefix("ab"),
            prefix: "ab".into(),
            cursor: None,
            last_partition: None,
        };
        assert!(chain_pieces(&narrow, 4)
            .iter()
            .all(|p| matches!(p, ReadRange::Range { prefix, .. } if prefix == "ab")));
        let tiny = ReadRange::Range {
            partition_keys: KeyRange::between(Some("a"), Some("a0")),
            prefix: String::new(),
            cursor: None,
            last_partition: None,
        };
        assert_eq!(chain_pieces(&tiny, 4), vec![tiny.clone()]);
    }
}
