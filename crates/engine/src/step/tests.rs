//! Unit tests of `scan::step`: the pipeline of reads and actions, and how the rest of a range
//! is cut.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::cut::subdivide;
use super::*;
use crate::item::ReadRange;
use crate::keys::KeyRange;
use crate::keys::{CutKinds, Lower, Upper};
use crate::model::{MemoryReader, MemoryTable, Quirks};
use crate::reader::PageRequest;
use tablescan_storage::table::query::Page;

/// Reads the model and counts the reads begun.
struct CountingReader<'a> {
    inner: MemoryReader<'a>,
    begun: &'a AtomicUsize,
}

impl TableReader for CountingReader<'_> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        self.begun.fetch_add(1, Ordering::SeqCst);
        self.inner.read_page(request).await
    }
}

/// Finishes with a full page only once the read of the next page has begun: a step that
/// read and acted strictly in turn would wait on itself forever.
struct WaitsForTheNextRead<'a> {
    reads_begun: &'a AtomicUsize,
    full_page: usize,
    pages: Vec<Vec<String>>,
}

impl RowSink for WaitsForTheNextRead<'_> {
    type Error = String;
    async fn accept(&mut self, rows: Vec<Entity>, _: Duration) -> Result<usize, String> {
        let finished = rows.len();
        let this_page = self.pages.len() + 1;
        if rows.len() == self.full_page {
            std::future::poll_fn(|cx| {
                if self.reads_begun.load(Ordering::SeqCst) > this_page {
                    std::task::Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                }
            })
            .await;
        }
        self.pages
            .push(rows.into_iter().map(|e| e.partition_key).collect());
        Ok(finished)
    }
}

struct Frozen;
impl Clock for Frozen {
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

fn range(lower: &str, upper: Option<&str>) -> ReadRange {
    ReadRange::Range {
        partition_keys: KeyRange::between(None, upper).intersect(&KeyRange {
            lower: Lower::Included(lower.to_string()),
            upper: Upper::Unbounded,
        }),
        prefix: String::new(),
        cursor: None,
        last_partition: None,
    }
}

fn lowers(pieces: &[ReadRange]) -> Vec<String> {
    pieces
        .iter()
        .map(|piece| match piece {
            ReadRange::Range { partition_keys, .. } => match &partition_keys.lower {
                Lower::Included(key) => key.clone(),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn the_rest_is_cut_among_the_kinds_of_character_the_step_saw() {
    let upper = CutKinds::after_prefix("", ["AWSSDK.Core", "Akka.Remote"]);
    let pieces = subdivide(range("B", None), 8, upper);
    assert_eq!(lowers(&pieces), ["B", "F", "I", "L", "O", "R", "U", "X"]);
    // Nothing seen: cuts over every digit and letter, as before the kinds were looked at.
    let pieces = subdivide(range("B", None), 4, CutKinds::default());
    assert_eq!(lowers(&pieces), ["B", "O", "b", "n"]);
    // The pieces cover the range exactly: each ends where the next begins.
    let pieces = subdivide(range("B", Some("n")), 8, upper);
    for pair in pieces.windows(2) {
        let (
            ReadRange::Range {
                partition_keys: a, ..
            },
            ReadRange::Range {
                partition_keys: b, ..
            },
        ) = (&pair[0], &pair[1])
        else {
            panic!("ranges expected");
        };
        let Lower::Included(next) = &b.lower else {
            panic!("pieces start at a key");
        };
        assert_eq!(a.upper, Upper::Excluded(next.clone()));
    }
    let ReadRange::Range {
        partition_keys: last,
        ..
    } = pieces.last().unwrap()
    else {
        panic!("ranges expected");
    };
    assert_eq!(last.upper, Upper::Excluded("n".into()));
}

#[tokio::test]
async fn the_action_works_on_a_page_while_the_next_is_read_and_pages_stay_in_order() {
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let table = MemoryTable::from_keys(keys.iter().map(|k| (k.as_str(), "r")));
    let reads_begun = AtomicUsize::new(0);
    let reader = CountingReader {
        inner: MemoryReader::new(&table, Quirks::default()),
        begun: &reads_begun,
    };
    let mut sink = WaitsForTheNextRead {
        reads_begun: &reads_begun,
        full_page: 3,
        pages: Vec::new(),
    };
    let options = ScanOptions {
        page_size: 3,
        first_step_queries: 20,
        ..ScanOptions::default()
    };
    let item = WorkItem::root("s", KeyRange::all(), "");
    let report = tokio::time::timeout(
        Duration::from_secs(10),
        run_step(&reader, &item, &options, &Frozen, &mut sink),
    )
    .await
    .expect("reads overlap the action: the step must not wait on itself")
    .unwrap();
    assert_eq!(report.queries, 4);
    assert!(report.follow_ups.is_empty());
    let delivered: Vec<String> = sink.pages.concat();
    assert_eq!(delivered, keys, "every row once, in the order read");
    assert_eq!(sink.pages.len(), 4);
}

/// Reads the model and notes, for each request, whether it was marked the step's last.
struct NotesLast<'a> {
    inner: MemoryReader<'a>,
    marks: std::sync::Mutex<Vec<bool>>,
}

impl TableReader for NotesLast<'_> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        self.marks.lock().unwrap().push(request.last);
        self.inner.read_page(request).await
    }
}

/// Takes every row.
struct TakesAll;
impl RowSink for TakesAll {
    type Error = String;
    async fn accept(&mut self, rows: Vec<Entity>, _: Duration) -> Result<usize, String> {
        Ok(rows.len())
    }
}

#[tokio::test]
async fn only_the_page_that_spends_the_query_budget_is_marked_last() {
    // A paced reader reserves the next page's share while a page is on its way; after the
    // budget's last page it must not, or the place is earned and forfeit at the step's end.
    let keys: Vec<String> = (0..30).map(|i| format!("k{i:02}")).collect();
    let table = MemoryTable::from_keys(keys.iter().map(|k| (k.as_str(), "r")));
    for (budget, expected) in [
        (4, vec![false, false, false, true]),
        (1, vec![true]),
        // The range ends before the budget: no page is the budget's last.
        (20, vec![false; 10]),
    ] {
        let reader = NotesLast {
            inner: MemoryReader::new(&table, Quirks::default()),
            marks: Default::default(),
        };
        let options = ScanOptions {
            page_size: 3,
            first_step_queries: budget,
            budget: crate::budget::Budget {
                max_queries: budget,
                ..Default::default()
            },
            ..ScanOptions::default()
        };
        let item = WorkItem::root("s", KeyRange::all(), "");
        let report = run_step(&reader, &item, &options, &Frozen, &mut TakesAll)
            .await
            .unwrap();
        let marks = reader.marks.into_inner().unwrap();
        assert_eq!(marks, expected, "a budget of {budget} queries");
        assert_eq!(report.queries as usize, marks.len());
    }
}

/// A sink that fails on its second page.
struct FailsSecond(usize);
impl RowSink for FailsSecond {
    type Error = String;
    async fn accept(&mut self, rows: Vec<Entity>, _: Duration) -> Result<usize, String> {
        self.0 += 1;
        if self.0 == 2 {
            Err("target refused".into())
        } else {
            Ok(rows.len())
        }
    }
}

#[tokio::test]
async fn an_action_failure_fails_the_step_even_while_a_read_was_in_flight() {
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let table = MemoryTable::from_keys(keys.iter().map(|k| (k.as_str(), "r")));
    let reader = MemoryReader::new(&table, Quirks::default());
    let options = ScanOptions {
        page_size: 3,
        ..ScanOptions::default()
    };
    let item = WorkItem::root("s", KeyRange::all(), "");
    let failed = run_step(&reader, &item, &options, &Frozen, &mut FailsSecond(0)).await;
    assert!(
        matches!(&failed, Err(StepError::Action(why)) if why == "target refused"),
        "{failed:?}"
    );
}

fn partition(lower: Lower) -> ReadRange {
    ReadRange::Partition {
        partition_key: "p".into(),
        row_keys: KeyRange {
            lower,
            upper: Upper::Unbounded,
        },
        prefix: String::new(),
        cursor: None,
        unstarted: false,
    }
}

#[test]
fn a_rest_that_cannot_be_cut_among_the_kinds_seen_is_handed_on_whole() {
    // After `9` no digit is left: whole, for the step that reads it to cut among what it finds.
    let digits = CutKinds::after_prefix("", ["0x", "17", "9z"]);
    assert_eq!(subdivide(range(":", None), 4, digits).len(), 1);
    // Hexadecimal keys (digits and a-f past the prefix): after `9` come `a` to `f`, so the
    // rest is cut among them (among all 26 letters, at `g`, `n` and `t`, past every key).
    let hex = CutKinds::after_prefix("", ["0a", "17", "9f", "2b", "3c", "4d", "5e", "60"]);
    let cut: Vec<Lower> = subdivide(range(":", None), 4, hex)
        .into_iter()
        .map(|piece| match piece {
            ReadRange::Range { partition_keys, .. } => partition_keys.lower,
            ReadRange::Partition { .. } => unreachable!("a range is cut into ranges"),
        })
        .collect();
    let at = |key: &str| Lower::Included(key.to_string());
    assert_eq!(cut, [at(":"), at("b"), at("d"), at("e")]);
    // A first character beyond every cut point, or none after the prefix: whole.
    let upper = CutKinds::after_prefix("", ["Z"]);
    assert_eq!(subdivide(range("{", None), 8, upper).len(), 1);
    assert_eq!(subdivide(range("\u{1F600}", None), 8, upper).len(), 1);
    let whole = ReadRange::Range {
        partition_keys: KeyRange {
            lower: Lower::Excluded("B".into()),
            upper: Upper::Unbounded,
        },
        prefix: String::new(),
        cursor: None,
        last_partition: None,
    };
    assert_eq!(subdivide(whole.clone(), 8, upper), vec![whole]);
}

#[test]
fn a_partitions_rest_is_cut_on_rowkey_from_its_own_lower_bound() {
    let lower = CutKinds::after_prefix("", ["2024-01", "2024-02"]);
    let pieces = subdivide(partition(Lower::Included("3".into())), 4, lower);
    let bounds: Vec<(Lower, Upper)> = pieces
        .iter()
        .map(|piece| match piece {
            ReadRange::Partition {
                partition_key,
                row_keys,
                unstarted,
                ..
            } => {
                assert_eq!(partition_key, "p");
                assert!(!unstarted);
                (row_keys.lower.clone(), row_keys.upper.clone())
            }
            other => panic!("a partition piece expected, got {other:?}"),
        })
        .collect();
    assert_eq!(bounds[0].0, Lower::Included("3".into()));
    assert_eq!(
        bounds
            .iter()
            .map(|(_, upper)| upper.clone())
            .collect::<Vec<_>>(),
        [
            Upper::Excluded("5".into()),
            Upper::Excluded("7".into()),
            Upper::Excluded("8".into()),
            Upper::Unbounded
        ]
    );
}

/// The figures of `CutKinds`'s documentation and of docs/scan.md: the benchmark's table, the
/// rest after the first step (every key from `B` on) cut the old way and among the kinds seen.
#[test]
fn cuts_among_the_kinds_seen_spread_the_benchmark_table_more_evenly() {
    let rows = crate::model::nuget_like(100_000, 5);
    let sizes = |pieces: &[ReadRange]| -> Vec<usize> {
        pieces
            .iter()
            .map(|piece| match piece {
                ReadRange::Range { partition_keys, .. } => rows
                    .iter()
                    .filter(|e| partition_keys.contains(&e.partition_key))
                    .count(),
                other => panic!("a range expected, got {other:?}"),
            })
            .collect()
    };
    let seen = CutKinds::after_prefix("", ["AWSSDK.Core", "Akka.Remote"]);
    let pieces = ScanOptions::default().fan_out;
    let before = sizes(&subdivide(range("B", None), pieces, CutKinds::default()));
    let after = sizes(&subdivide(range("B", None), pieces, seen));
    assert_eq!(before, [45_961, 33_822, 4_631, 0]);
    assert_eq!(after, [22_500, 23_461, 19_025, 19_428]);
}

/// Runs one step of a whole-table scan of `table` with `options`, split or handed on whole.
async fn one_step(table: &MemoryTable, options: &ScanOptions) -> StepReport {
    let reader = MemoryReader::new(table, Quirks::default());
    let item = WorkItem::root("s", KeyRange::all(), "");
    run_step(&reader, &item, options, &Frozen, &mut TakesAll)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_step_that_hands_on_whole_leaves_one_item_where_a_splitting_one_leaves_several() {
    // 400 partitions of 5 rows: a partition-keys step seeks, a rows step pages; both stop on
    // their query budget well before the table's end.
    let keys: Vec<(String, String)> = (0..400)
        .flat_map(|p| (0..5).map(move |r| (format!("p{p:03}"), format!("r{r}"))))
        .collect();
    let table = MemoryTable::from_keys(keys.iter().map(|(p, r)| (p.as_str(), r.as_str())));
    for mode in [ReadMode::PartitionKeys, ReadMode::Rows] {
        let splitting = ScanOptions {
            mode,
            page_size: 10,
            first_step_queries: 3,
            ..ScanOptions::default()
        };
        let whole = ScanOptions {
            fan_out: 1,
            hand_on_whole: true,
            ..splitting.clone()
        };
        let split = one_step(&table, &splitting).await;
        let handed = one_step(&table, &whole).await;
        assert!(
            split.follow_ups.len() > 1,
            "{mode:?}: a splitting step cuts pieces off ({} items)",
            split.follow_ups.len()
        );
        assert_eq!(
            handed.follow_ups.len(),
            1,
            "{mode:?}: what a step that hands on whole did not read is one item"
        );
        assert!(
            handed.rows_delivered > 0,
            "{mode:?}: it read before it stopped"
        );
    }
}
