//! A compact synthetic table: partitions with a row count each, RowKeys generated as
//! zero-padded row numbers. 35 million rows take a few tens of MB instead of gigabytes.

use tablescan::scan::keys::{compare, KeyRange, Lower, Upper};
use tablescan::scan::reader::ReadScope;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Continuation;

pub struct SyntheticTable {
    /// PartitionKeys in the service's order.
    keys: Vec<String>,
    /// Rows in each partition.
    counts: Vec<u32>,
    /// Rows before each partition (prefix sums), for partition-server ranges.
    before: Vec<u64>,
    width: usize,
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
        Self::new(nuget_partitions(rows, seed, Versions::Catalog))
    }

    /// The catalog shape with `factor` times the versions per package id (ids of the catalog
    /// table taken `factor` at a time into one partition): about 13.6 rows per partition for 4.
    pub fn nuget_ids(rows: u64, seed: u64, factor: usize) -> Self {
        use tablescan::scan::model::{nuget_partitions, Versions};
        let partitions = nuget_partitions(rows, seed, Versions::Catalog)
            .chunks(factor.max(1))
            .map(|ids| (ids[0].0.clone(), ids.iter().map(|id| id.1).sum()))
            .collect();
        Self::new(partitions)
    }

    /// The PartitionKey of partition `index`.
    pub fn key(&self, index: usize) -> &str {
        &self.keys[index]
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
        Self::new(vec![("huge".to_string(), rows as u32)])
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
        let (keys, counts) = partitions.into_iter().unzip();
        SyntheticTable {
            keys,
            counts,
            before,
            width,
        }
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
        let mut digits = [b'0'; 16];
        let mut start = digits.len();
        let mut n = row;
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let start = start.min(digits.len() - self.width.min(digits.len()));
        out.push_str(std::str::from_utf8(&digits[start..]).expect("ASCII digits"));
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

    fn partition_index(&self, key: &str) -> Result<usize, usize> {
        self.keys.binary_search_by(|k| compare(k, key))
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
            Some(range) => range.below_upper(&self.keys[p]),
            None => Some(p) == single,
        };
        let row_end = self.row_end(&start);
        let below_rk = |p: usize, r: u32| single != Some(p) || r < row_end;
        let start_global = if p < self.keys.len() {
            self.before[p] + u64::from(r)
        } else {
            0
        };
        let boundary = (start_global / server_range_rows + 1) * server_range_rows;
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
                        next_partition_key: self.keys[p].clone(),
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
            rows.push(Entity::new(self.keys[p].clone(), self.row_key(r)));
            return;
        };
        entity.partition_key.clear();
        entity.partition_key.push_str(&self.keys[p]);
        entity.row_key.clear();
        self.write_row_key(r, &mut entity.row_key);
        entity.timestamp = None;
        entity.etag = None;
        entity.properties.clear();
    }
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
