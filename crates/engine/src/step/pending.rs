//! A page that has been read and is waiting for the sink, with everything the step learned
//! from it. Nothing about the page counts until the sink says how much of it it finished:
//! then either all of it counts, with the follow-ups that cover what lies after it, or only
//! the finished rows count and the rest of the page's task is handed on from the last of them.

use super::ReadMode;
use crate::item::ReadRange;
use crate::keys::{KeyRange, Lower};
use tablescan_storage::table::entity::Entity;

/// A page waiting for the sink.
pub struct PendingPage {
    /// The task whose read returned this page.
    pub task: ReadRange,
    /// For each row the sink gets: how many of the page's rows it accounts for, counted from
    /// the first, and how many new partitions those rows start.
    through: Vec<(u64, u64)>,
    /// The delivered rows' keys, to hand on from any of them.
    keys: KeyList,
    /// Rows in the page, and partitions the page starts.
    page_rows: u64,
    page_partitions: u64,
    /// Work items that cover what lies after the page (split pieces, the subdivided rest):
    /// valid only once the whole page is finished.
    pub after: Vec<ReadRange>,
}

/// What counts of a page once the sink is done with it.
#[derive(Debug, PartialEq)]
pub struct Settled {
    pub rows_read: u64,
    pub rows_delivered: u64,
    pub partitions_started: u64,
    /// Work items that cover exactly the part of the page's task not yet finished beyond the
    /// page (when it was finished whole) or beyond the last finished row (when it was not).
    pub follow_ups: Vec<ReadRange>,
    /// Whether the sink stopped before the end of the page.
    pub cut_short: bool,
}

impl PendingPage {
    /// Builds the bookkeeping for `page` (every row read, in order). In rows mode the sink gets
    /// every row; in partition-keys mode the first row of each partition, which stands for the
    /// partition's other rows on the page too. `previous_partition` is the PartitionKey of the
    /// row before the page.
    pub fn new(
        task: ReadRange,
        page: &[Entity],
        previous_partition: Option<&str>,
        mode: ReadMode,
    ) -> Self {
        let mut through = Vec::new();
        let mut keys = KeyList::for_page(page);
        let mut previous = previous_partition;
        let mut partitions = 0u64;
        for (i, row) in page.iter().enumerate() {
            let starts_partition = previous != Some(row.partition_key.as_str());
            if starts_partition {
                partitions += 1;
                previous = Some(row.partition_key.as_str());
            }
            let delivered = match mode {
                ReadMode::Rows => true,
                ReadMode::PartitionKeys => i == 0 || page[i - 1].partition_key != row.partition_key,
            };
            if delivered {
                keys.push(&row.partition_key, &row.row_key);
                through.push((i as u64 + 1, partitions));
            } else if let Some(last) = through.last_mut() {
                // A skipped row belongs to the delivered row of its partition.
                *last = (i as u64 + 1, partitions);
            }
        }
        PendingPage {
            task,
            through,
            keys,
            page_rows: page.len() as u64,
            page_partitions: partitions,
            after: Vec::new(),
        }
    }

    /// What counts once the sink finished the first `finished` delivered rows.
    pub fn settle(self, finished: usize, mode: ReadMode) -> Settled {
        if finished >= self.keys.len() {
            return Settled {
                rows_read: self.page_rows,
                rows_delivered: self.keys.len() as u64,
                partitions_started: self.page_partitions,
                follow_ups: self.after,
                cut_short: false,
            };
        }
        if finished == 0 {
            // Nothing of the page is done: its whole task is handed on as it was.
            return Settled {
                rows_read: 0,
                rows_delivered: 0,
                partitions_started: 0,
                follow_ups: vec![self.task],
                cut_short: true,
            };
        }
        let (rows_read, partitions_started) = self.through[finished - 1];
        let (pk, rk) = self.keys.get(finished - 1);
        Settled {
            rows_read,
            rows_delivered: finished as u64,
            partitions_started,
            follow_ups: rest_after(self.task, pk, rk, mode),
            cut_short: true,
        }
    }
}

/// The keys of a page's delivered rows, in one buffer: a page's thousand pairs of keys kept as
/// `String`s cost two thousand small allocations, a good part of a simulated scan's time.
struct KeyList {
    text: String,
    /// For each row, where its PartitionKey and its RowKey end in `text`.
    ends: Vec<(usize, usize)>,
}

impl KeyList {
    /// An empty list with room for every row of `page`.
    fn for_page(page: &[Entity]) -> Self {
        let bytes = page
            .iter()
            .map(|row| row.partition_key.len() + row.row_key.len())
            .sum();
        KeyList {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(page.len()),
        }
    }

    fn push(&mut self, partition_key: &str, row_key: &str) {
        self.text.push_str(partition_key);
        let partition_end = self.text.len();
        self.text.push_str(row_key);
        self.ends.push((partition_end, self.text.len()));
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// The keys of row `index`: (PartitionKey, RowKey).
    fn get(&self, index: usize) -> (&str, &str) {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before].1);
        let (partition_end, end) = self.ends[index];
        (
            &self.text[start..partition_end],
            &self.text[partition_end..end],
        )
    }
}

/// What of `task` lies after row (`pk`, `rk`), which it contains: the rest of that partition
/// and, for a range, the partitions after it. No cursor: the pieces start from keys.
pub fn rest_after(task: ReadRange, pk: &str, rk: &str, mode: ReadMode) -> Vec<ReadRange> {
    match task {
        ReadRange::Range {
            partition_keys,
            prefix,
            ..
        } => {
            let mut pieces = Vec::new();
            if mode == ReadMode::Rows {
                pieces.push(ReadRange::Partition {
                    partition_key: pk.to_string(),
                    row_keys: KeyRange::between(Some(rk), None),
                    prefix: String::new(),
                    cursor: None,
                    unstarted: false,
                });
            }
            let later = KeyRange {
                lower: Lower::Excluded(pk.to_string()),
                upper: partition_keys.upper,
            };
            if !later.is_empty() {
                pieces.push(ReadRange::Range {
                    partition_keys: later,
                    prefix,
                    cursor: None,
                    last_partition: None,
                });
            }
            pieces
        }
        ReadRange::Partition {
            partition_key,
            row_keys,
            prefix,
            ..
        } => {
            let later = KeyRange {
                lower: Lower::Excluded(rk.to_string()),
                upper: row_keys.upper,
            };
            if later.is_empty() {
                return Vec::new();
            }
            // Its row (`pk`, `rk`) was delivered: the partition is started.
            vec![ReadRange::Partition {
                partition_key,
                row_keys: later,
                prefix,
                cursor: None,
                unstarted: false,
            }]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Upper;

    fn page(keys: &[(&str, &str)]) -> Vec<Entity> {
        keys.iter().map(|(p, r)| Entity::new(*p, *r)).collect()
    }

    fn range() -> ReadRange {
        ReadRange::Range {
            partition_keys: KeyRange::all(),
            prefix: String::new(),
            cursor: None,
            last_partition: None,
        }
    }

    #[test]
    fn a_page_finished_whole_counts_whole_with_what_follows_it() {
        let rows = page(&[("a", "1"), ("a", "2"), ("b", "1")]);
        let mut pending = PendingPage::new(range(), &rows, Some("a"), ReadMode::Rows);
        pending.after.push(range());
        let settled = pending.settle(3, ReadMode::Rows);
        assert_eq!(
            (
                settled.rows_read,
                settled.rows_delivered,
                settled.partitions_started
            ),
            (3, 3, 1),
            "the partition begun before the page is not counted again"
        );
        assert_eq!(settled.follow_ups, vec![range()]);
        assert!(!settled.cut_short);
    }

    #[test]
    fn a_page_cut_short_counts_the_finished_rows_and_hands_on_from_the_last() {
        let rows = page(&[("a", "1"), ("b", "1"), ("b", "2"), ("c", "1")]);
        let mut pending = PendingPage::new(range(), &rows, None, ReadMode::Rows);
        pending.after.push(range());
        let settled = pending.settle(2, ReadMode::Rows);
        assert_eq!(
            (
                settled.rows_read,
                settled.rows_delivered,
                settled.partitions_started
            ),
            (2, 2, 2)
        );
        assert!(settled.cut_short);
        assert_eq!(
            settled.follow_ups,
            vec![
                ReadRange::Partition {
                    partition_key: "b".into(),
                    row_keys: KeyRange::between(Some("1"), None),
                    prefix: String::new(),
                    cursor: None,
                    unstarted: false,
                },
                ReadRange::Range {
                    partition_keys: KeyRange::between(Some("b"), None),
                    prefix: String::new(),
                    cursor: None,
                    last_partition: None,
                },
            ],
            "what followed the page is dropped: the range after b covers it"
        );
    }

    #[test]
    fn in_partition_keys_mode_a_delivered_row_stands_for_its_partition() {
        let rows = page(&[("a", "1"), ("a", "2"), ("b", "1"), ("c", "1"), ("c", "2")]);
        let pending = PendingPage::new(range(), &rows, None, ReadMode::PartitionKeys);
        let settled = pending.settle(2, ReadMode::PartitionKeys);
        assert_eq!(
            (
                settled.rows_read,
                settled.rows_delivered,
                settled.partitions_started
            ),
            (3, 2, 2)
        );
        assert_eq!(
            settled.follow_ups,
            vec![ReadRange::Range {
                partition_keys: KeyRange::between(Some("b"), None),
                prefix: String::new(),
                cursor: None,
                last_partition: None,
            }]
        );
    }

    #[test]
    fn the_key_list_gives_back_each_row_s_keys() {
        let rows = page(&[("a", "1"), ("", ""), ("bé", "22"), ("c", "")]);
        let mut keys = KeyList::for_page(&rows);
        for row in &rows {
            keys.push(&row.partition_key, &row.row_key);
        }
        assert_eq!(keys.len(), 4);
        let back: Vec<(&str, &str)> = (0..keys.len()).map(|i| keys.get(i)).collect();
        assert_eq!(back, vec![("a", "1"), ("", ""), ("bé", "22"), ("c", "")]);
    }

    #[test]
    fn a_partition_task_hands_on_the_rest_of_its_row_range() {
        let task = ReadRange::Partition {
            partition_key: "p".into(),
            row_keys: KeyRange::between(None, Some("m")),
            prefix: String::new(),
            cursor: None,
            unstarted: false,
        };
        let rest = rest_after(task, "p", "k", ReadMode::Rows);
        assert_eq!(
            rest,
            vec![ReadRange::Partition {
                partition_key: "p".into(),
                row_keys: KeyRange {
                    lower: Lower::Excluded("k".into()),
                    upper: Upper::Excluded("m".into()),
                },
                prefix: String::new(),
                cursor: None,
                unstarted: false,
            }]
        );
    }
}
