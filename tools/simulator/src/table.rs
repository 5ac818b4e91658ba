//! A compact synthetic table: partitions with a row count each, RowKeys generated as
//! zero-padded row numbers. 35 million rows take a few tens of MB instead of gigabytes.

use std::sync::Arc;

use tablescan::scan::keys::{compare, KeyRange, Lower, Upper};
use tablescan::scan::reader::ReadScope;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Continuation;

/// A synthetic table: a cheap handle on its partitions, which a process builds once for all
/// the cases of the same table (building 25 million sorted PartitionKeys for a 350M-row table
/// takes a while).
#[derive(Clone)]
pub struct SyntheticTable(Arc<Partitions>);

/// The partitions of a synthetic table.
pub struct Partitions {
    /// PartitionKeys in the service's order.
    keys: PackedKeys,
    /// Rows in each partition.
    counts: Vec<u32>,
    /// Rows before each partition (prefix sums), for partition-server ranges.
    before: Vec<u64>,
    width: usize,
}

impl std::ops::Deref for SyntheticTable {
    type Target = Partitions;

    fn deref(&self) -> &Partitions {
        &self.0
    }
}

/// Strings one after another in one buffer: a `String` each would take twice the memory
/// (a 350M-row table has 25 million PartitionKeys).
struct PackedKeys {
    text: String,
    /// Where each key ends in `text`.
    ends: Vec<usize>,
}

impl PackedKeys {
    fn get(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start..self.ends[index]]
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// Which table a process built last, to hand the same one to the next case that asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Built {
    Catalog { rows: u64, seed: u64 },
    Ids { rows: u64, seed: u64, factor: usize },
    OnePartition { rows: u64 },
}

thread_local! {
    /// The table built last: a run's cases come size by size, so one is enough, and it is
    /// dropped before the next is built.
    static LAST_BUILT: std::cell::RefCell<Option<(Built, SyntheticTable)>> =
        const { std::cell::RefCell::new(None) };
}

/// The table `what` names: the one built last if it is that one, or built by `build`.
fn built(what: Built, build: impl FnOnce() -> SyntheticTable) -> SyntheticTable {
    LAST_BUILT.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((built, table)) = last.as_ref() {
            if *built == what {
                return table.clone();
            }
        }
        *last = None;
        let table = build();
        *last = Some((what, table.clone()));
        table
    })
}

/// One page as the table returns it, before any latency is applied.
pub struct RawPage {
    pub rows: Vec<Entity>,
    pub continuation: Option<Continuation>,
    /// (partition index, rows read from it), for per-partition throughput.
    pub partitions: Vec<(usize, u32)>,
}

impl RawPage {
    /// The partition this page reads most of, by its hash, if it reads enough of it (100 rows)
    /// to come near the partition's target; smaller slices are never tracked.
    pub fn hottest_partition(&self, table: &SyntheticTable) -> Option<usize> {
        self.partitions
            .iter()
            .filter(|(_, rows)| *rows >= 100)
            .max_by_key(|(_, rows)| *rows)
            .map(|(index, _)| partition_hash(table.key(*index)))
    }
}

impl SyntheticTable {
    /// A NuGet-like table shaped like the catalog the published scan copied: package ids with
    /// about 3.4 versions each on average, generated as the engine's model tables are.
    pub fn nuget_like(rows: u64, seed: u64) -> Self {
        use tablescan::scan::model::{nuget_partitions, Versions};
        built(Built::Catalog { rows, seed }, || {
            Self::new(nuget_partitions(rows, seed, Versions::Catalog))
        })
    }

    /// The catalog shape with `factor` times the versions per package id (ids of the catalog
    /// table taken `factor` at a time into one partition): about 13.6 rows per partition for 4.
    pub fn nuget_ids(rows: u64, seed: u64, factor: usize) -> Self {
        built(Built::Ids { rows, seed, factor }, || {
            Self::new(ids_taken_together(rows, seed, factor.max(1)))
        })
    }

    /// The PartitionKey of partition `index`.
    pub fn key(&self, index: usize) -> &str {
        self.keys.get(index)
    }

    /// The index of the partition `key`, if the table has it.
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.partition_index(key).ok()
    }

    /// Characters of every RowKey.
    pub fn row_key_width(&self) -> usize {
        self.width
    }

    /// One partition of `rows` rows.
    pub fn one_partition(rows: u64) -> Self {
        built(Built::OnePartition { rows }, || {
            Self::new(vec![("huge".to_string(), rows as u32)])
        })
    }

    fn new(mut partitions: Vec<(String, u32)>) -> Self {
        partitions.sort_by(|a, b| compare(&a.0, &b.0));
        partitions.dedup_by(|a, b| a.0 == b.0);
        let width = partitions
            .iter()
            .map(|p| p.1)
            .max()
            .unwrap_or(1)
            .max(1)
            .saturating_sub(1)
            .to_string()
            .len();
        let mut before = Vec::with_capacity(partitions.len());
        let mut sum = 0u64;
        for p in &partitions {
            before.push(sum);
            sum += u64::from(p.1);
        }
        let text_len = partitions.iter().map(|p| p.0.len()).sum();
        let mut keys = PackedKeys {
            text: String::with_capacity(text_len),
            ends: Vec::with_capacity(partitions.len()),
        };
        let mut counts = Vec::with_capacity(partitions.len());
        for (key, count) in partitions {
            keys.text.push_str(&key);
            keys.ends.push(keys.text.len());
            counts.push(count);
        }
        SyntheticTable(Arc::new(Partitions {
            keys,
            counts,
            before,
            width,
        }))
    }

    pub fn rows(&self) -> u64 {
        self.before.last().copied().unwrap_or(0) + self.counts.last().copied().map_or(0, u64::from)
    }

    pub fn partitions(&self) -> usize {
        self.keys.len()
    }

    /// Rows of the largest partition.
    pub fn largest_partition(&self) -> u64 {
        self.counts.iter().copied().max().map_or(0, u64::from)
    }

    fn row_key(&self, row: u32) -> String {
        let mut key = String::with_capacity(self.width.max(10));
        self.write_row_key(row, &mut key);
        key
    }

    /// Appends row `row`'s RowKey to `out`: the row number zero-padded to the table's width
    /// (as `format!("{row:0width$}")`, without the formatter's cost on every row read).
    fn write_row_key(&self, row: u32, out: &mut String) {
        tablescan::scan::model::push_decimal(out, u64::from(row), self.width);
    }

    /// The first row index of partition `p` whose RowKey `holds` is false for, when `holds` is
    /// true for a first run of rows and false after (RowKeys are zero-padded numbers: their
    /// order is numeric order).
    fn first_row_not(&self, p: usize, holds: impl Fn(&str) -> bool) -> u32 {
        let count = self.counts[p];
        let mut key = String::with_capacity(self.width.max(10));
        let (mut lo, mut hi) = (0u32, count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            key.clear();
            self.write_row_key(mid, &mut key);
            if holds(&key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first row index of partition `p` that lies in `range` (a RowKey range).
    fn first_row(&self, p: usize, range: &KeyRange) -> u32 {
        self.first_row_not(p, |key| !range.above_lower(key))
    }

    /// `Ok(index)` of partition `key`, or `Err(index)` where it would be (the keys are sorted
    /// and distinct, so this is what `binary_search` answers).
    fn partition_index(&self, key: &str) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.keys.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if compare(self.keys.get(mid), key) == std::cmp::Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo < self.keys.len() && self.keys.get(lo) == key {
            Ok(lo)
        } else {
            Err(lo)
        }
    }

    /// The first partition at or past `range`'s lower bound.
    fn first_partition(&self, range: &KeyRange) -> usize {
        match &range.lower {
            Lower::Unbounded => 0,
            Lower::Included(k) => self.partition_index(k).unwrap_or_else(|i| i),
            Lower::Excluded(k) => self.partition_index(k).map_or_else(|i| i, |i| i + 1),
        }
    }

    /// Where continuation `c` points: (partition, row).
    fn position_of(&self, c: &Continuation) -> (usize, u32) {
        let cp = self
            .partition_index(&c.next_partition_key)
            .unwrap_or_else(|i| i);
        let cr: u32 = c
            .next_row_key
            .as_deref()
            .and_then(|k| k.parse().ok())
            .unwrap_or(0);
        (cp, cr)
    }

    /// Where a read of `scope` starts, and what bounds it; `None` when it names a partition the
    /// table does not have.
    fn start_of<'a>(&self, scope: ReadScope<'a>) -> Option<ReadStart<'a>> {
        match scope {
            ReadScope::Range(range) => Some(ReadStart {
                partition: self.first_partition(range),
                row: 0,
                partition_keys: Some(range),
                row_keys: None,
                single: None,
            }),
            ReadScope::Partition {
                partition_key,
                row_keys,
            } => {
                let p = self.partition_index(partition_key).ok()?;
                Some(ReadStart {
                    partition: p,
                    row: self.first_row(p, row_keys),
                    partition_keys: None,
                    row_keys: Some(row_keys),
                    single: Some(p),
                })
            }
        }
    }

    /// Reads one page.
    pub fn read(
        &self,
        scope: ReadScope<'_>,
        top: u16,
        cursor: Option<&Continuation>,
        server_range_rows: u64,
    ) -> RawPage {
        self.read_reusing(scope, top, cursor, server_range_rows, Vec::new())
    }

    /// Reads one page into `spare`, a page's rows done with: its entities are overwritten
    /// rather than allocated again (building a thousand `Entity` values a page was much of a
    /// simulated scan's time). The page is the same as [`read`](Self::read)'s.
    pub fn read_reusing(
        &self,
        scope: ReadScope<'_>,
        top: u16,
        cursor: Option<&Continuation>,
        server_range_rows: u64,
        spare: Vec<Entity>,
    ) -> RawPage {
        let mut rows = spare;
        let Some(start) = self.start_of(scope) else {
            rows.clear();
            return RawPage {
                rows,
                continuation: None,
                partitions: Vec::new(),
            };
        };
        let (mut p, mut r) = (start.partition, start.row);
        let (pk_range, single) = (start.partition_keys, start.single);
        if let Some(c) = cursor {
            (p, r) = (p, r).max(self.position_of(c));
        }
        let in_pk = |p: usize| match pk_range {
            Some(range) => range.below_upper(self.key(p)),
            None => Some(p) == single,
        };
        let row_end = self.row_end(&start);
        let below_rk = |p: usize, r: u32| single != Some(p) || r < row_end;
        let boundary = self.server_range_end(p, r, server_range_rows);
        let mut filled = 0;
        let mut partitions: Vec<(usize, u32)> = Vec::new();
        // The partition last found in the scope: whether one is depends on it alone.
        let mut in_scope = None;
        while p < self.keys.len() {
            if in_scope != Some(p) {
                if !in_pk(p) {
                    break;
                }
                in_scope = Some(p);
            }
            if r >= self.counts[p] {
                p += 1;
                r = 0;
                continue;
            }
            if !below_rk(p, r) {
                break;
            }
            if filled == usize::from(top) || self.before[p] + u64::from(r) >= boundary {
                rows.truncate(filled);
                return RawPage {
                    rows,
                    continuation: Some(Continuation {
                        next_partition_key: self.key(p).to_string(),
                        next_row_key: Some(self.row_key(r)),
                    }),
                    partitions,
                };
            }
            // Keys only: what the engine and the actions look at (a property per row doubled
            // the simulator's time in allocation).
            self.put_row(&mut rows, filled, p, r);
            filled += 1;
            match partitions.last_mut() {
                Some((last, n)) if *last == p => *n += 1,
                _ => partitions.push((p, 1)),
            }
            r += 1;
        }
        rows.truncate(filled);
        RawPage {
            rows,
            continuation: None,
            partitions,
        }
    }

    /// The first global row past the partition-server range that row `r` of partition `p`
    /// lies in: a page stops there.
    fn server_range_end(&self, p: usize, r: u32, server_range_rows: u64) -> u64 {
        let start_global = if p < self.keys.len() {
            self.before[p] + u64::from(r)
        } else {
            0
        };
        (start_global / server_range_rows + 1) * server_range_rows
    }

    /// Where a read within one partition ends: the first row at or past its RowKeys' upper
    /// bound (`u32::MAX` when unbounded).
    fn row_end(&self, start: &ReadStart<'_>) -> u32 {
        match (start.row_keys, start.single) {
            (Some(range), Some(p)) if matches!(range.upper, Upper::Excluded(_)) => {
                self.first_row_not(p, |key| range.below_upper(key))
            }
            _ => u32::MAX,
        }
    }

    /// Row `r` of partition `p` as entity `index` of `rows`: written over the entity there, or
    /// a new one.
    fn put_row(&self, rows: &mut Vec<Entity>, index: usize, p: usize, r: u32) {
        let Some(entity) = rows.get_mut(index) else {
            rows.push(Entity::new(self.key(p).to_string(), self.row_key(r)));
            return;
        };
        entity.partition_key.clear();
        entity.partition_key.push_str(self.key(p));
        entity.row_key.clear();
        self.write_row_key(r, &mut entity.row_key);
        entity.timestamp = None;
        entity.etag = None;
        entity.properties.clear();
    }
}

/// The partitions of the catalog table's ids taken `factor` at a time: each named by the first
/// of its ids, with all their versions. Only the ids kept are written out.
fn ids_taken_together(rows: u64, seed: u64, factor: usize) -> Vec<(String, u32)> {
    use tablescan::scan::model::{nuget_ids, Versions};
    let mut partitions = Vec::new();
    let mut ids = nuget_ids(rows, seed, Versions::Catalog);
    while let Some((first, versions)) = ids.next() {
        let mut partition_rows = versions;
        for _ in 1..factor {
            match ids.next() {
                Some((_, more)) => partition_rows += more,
                None => break,
            }
        }
        let mut key = String::with_capacity(32);
        first.write_to(&mut key);
        partitions.push((key, partition_rows));
    }
    partitions
}

/// A stable 64-bit hash of a PartitionKey (FNV-1a), naming a partition for its rate limit.
pub fn partition_hash(key: &str) -> usize {
    key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) as usize
}

impl std::fmt::Debug for SyntheticTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SyntheticTable({} rows, {} partitions)",
            self.rows(),
            self.partitions()
        )
    }
}

/// Where a read starts (partition index, row index) and the ranges that end it.
struct ReadStart<'a> {
    partition: usize,
    row: u32,
    /// A read of a range of partitions: the range.
    partition_keys: Option<&'a KeyRange>,
    /// A read within one partition: its RowKeys.
    row_keys: Option<&'a KeyRange>,
    /// A read within one partition: its index.
    single: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_the_table_in_order_and_stop_at_server_ranges() {
        let table = SyntheticTable::nuget_like(10_000, 3);
        assert_eq!(table.rows(), 10_000);
        let all = KeyRange::all();
        let mut cursor = None;
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let page = table.read(ReadScope::Range(&all), 1000, cursor.as_ref(), 2_500);
            seen += page.rows.len();
            pages += 1;
            assert!(page.rows.len() <= 1000);
            match page.continuation {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, 10_000);
        assert!((10..=14).contains(&pages), "{pages}");
    }

    #[test]
    fn the_ids_shape_has_four_times_the_rows_per_partition() {
        let catalog = SyntheticTable::nuget_like(100_000, 1);
        let ids = SyntheticTable::nuget_ids(100_000, 1, 4);
        assert_eq!(ids.rows(), 100_000);
        let ratio = catalog.partitions() as f64 / ids.partitions() as f64;
        assert!((3.9..4.1).contains(&ratio), "{ratio}");
    }

    #[test]
    fn a_table_asked_for_again_is_the_one_built_and_finds_its_keys() {
        let first = SyntheticTable::nuget_ids(50_000, 7, 4);
        let again = SyntheticTable::nuget_ids(50_000, 7, 4);
        assert!(Arc::ptr_eq(&first.0, &again.0));
        let other = SyntheticTable::nuget_ids(50_000, 8, 4);
        assert!(!Arc::ptr_eq(&first.0, &other.0));
        let keys: Vec<&str> = (0..first.partitions()).map(|i| first.key(i)).collect();
        assert!(keys.windows(2).all(|w| compare(w[0], w[1]).is_lt()));
        for (i, key) in keys.iter().enumerate().step_by(97) {
            assert_eq!(first.partition_index(key), Ok(i));
            let before = format!("{key}\u{0}");
            assert_eq!(first.partition_index(&before), Err(i + 1));
        }
        assert_eq!(first.partition_index(""), Err(0));
    }

    #[test]
    fn row_keys_are_zero_padded_row_numbers() {
        let table = SyntheticTable::one_partition(123_456);
        assert_eq!(table.row_key(42), "000042");
        assert_eq!(table.row_key(123_455), "123455");
        assert_eq!(table.row_key(7_654_321), "7654321");
    }

    #[test]
    fn a_partition_scope_reads_a_row_key_range() {
        let table = SyntheticTable::one_partition(1_000);
        let range = KeyRange::between(Some("099"), Some("200"));
        let page = table.read(
            ReadScope::Partition {
                partition_key: "huge",
                row_keys: &range,
            },
            1000,
            None,
            1_000_000,
        );
        assert_eq!(page.rows.len(), 100);
        assert_eq!(page.rows[0].row_key, "100");
        assert!(page.continuation.is_none());
    }
}
