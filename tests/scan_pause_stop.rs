//! A step of a paused scan stops at its next page whatever the pages hold: its sink (the
//! handler's, `functions::step::ActionSink`) finishes only the first row of each page from the
//! pause on, which stops a step at a page of many rows; pages of one row (a partition-keys
//! scan over large partitions delivers one row a page, as does a sparse filter or a page size
//! of 1) stop it because the sink says it is stopping. What it did not read is handed on, so
//! the scan, run to its end, still reads every row once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use tablescan::scan::driver::CollectingSink;
use tablescan::scan::item::WorkItem;
use tablescan::scan::keys::KeyRange;
use tablescan::scan::model::{MemoryReader, MemoryTable, Quirks};
use tablescan::scan::step::ReadMode;
use tablescan::scan::{run_step, Clock, RowSink, ScanOptions};
use tablescan::storage::table::entity::Entity;

struct Frozen;
impl Clock for Frozen {
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// As the handler's sink when its scan is paused before its second page: from then on each
/// page is cut to its first row.
#[derive(Default)]
struct PausedAfterFirstPage {
    pages: usize,
    rows: Vec<Entity>,
}

impl RowSink for PausedAfterFirstPage {
    type Error = Infallible;

    async fn accept(&mut self, mut rows: Vec<Entity>, _: Duration) -> Result<usize, Infallible> {
        self.pages += 1;
        if self.pages > 1 {
            rows.truncate(1);
        }
        let finished = rows.len();
        self.rows.extend(rows);
        Ok(finished)
    }

    fn stopping(&self) -> bool {
        self.pages > 1
    }
}

/// Runs `root` with the paused sink, then its follow-ups (and theirs) to the end with a plain
/// one; the rows the paused step delivered, every row delivered, and the partitions counted.
async fn paused_then_resumed(
    table: &MemoryTable,
    options: &ScanOptions,
) -> (Vec<Entity>, Vec<Entity>, u64) {
    let reader = MemoryReader::new(table, Quirks::default());
    let root = WorkItem::root("s", KeyRange::all(), "");
    let mut paused = PausedAfterFirstPage::default();
    let report = run_step(&reader, &root, options, &Frozen, &mut paused)
        .await
        .unwrap();
    let mut all = paused.rows.clone();
    let mut partitions = report.partitions_started;
    let mut queue: VecDeque<WorkItem> = report.follow_ups.into();
    let mut steps = 0;
    while let Some(item) = queue.pop_front() {
        let mut sink = CollectingSink::default();
        let report = run_step(&reader, &item, options, &Frozen, &mut sink)
            .await
            .unwrap();
        all.extend(sink.rows);
        partitions += report.partitions_started;
        queue.extend(report.follow_ups);
        steps += 1;
        assert!(steps < 10_000, "the scan does not end");
    }
    (paused.rows, all, partitions)
}

fn keys(rows: &[Entity]) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = rows
        .iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_paused_step_reading_pages_of_one_row_stops_at_its_next_page() {
    let names: Vec<String> = (0..12).map(|i| format!("k{i:02}")).collect();
    let table = MemoryTable::from_keys(names.iter().map(|k| (k.as_str(), "r")));
    let options = ScanOptions {
        page_size: 1,
        first_step_queries: 20,
        ..ScanOptions::default()
    };
    let (paused, all, partitions) = paused_then_resumed(&table, &options).await;
    assert_eq!(partitions, 12);
    assert_eq!(
        paused.len(),
        2,
        "the page in hand at the pause, and the next"
    );
    assert_eq!(all.len(), 12, "every row once");
    let expected: Vec<(String, String)> = names.iter().map(|k| (k.clone(), "r".into())).collect();
    assert_eq!(keys(&all), expected);
}

#[tokio::test]
async fn a_paused_partition_keys_step_over_large_partitions_stops_at_its_next_page() {
    let rows: Vec<(String, String)> = (0..6)
        .flat_map(|p| (0..40).map(move |r| (format!("p{p}"), format!("r{r:02}"))))
        .collect();
    let table = MemoryTable::from_keys(rows.iter().map(|(p, r)| (p.as_str(), r.as_str())));
    let options = ScanOptions {
        page_size: 10,
        mode: ReadMode::PartitionKeys,
        first_step_queries: 40,
        ..ScanOptions::default()
    };
    let (paused, all, partitions) = paused_then_resumed(&table, &options).await;
    assert_eq!(partitions, 6, "each partition counted once");
    assert!(
        paused.len() <= 2,
        "the page in hand at the pause, and the next: {:?}",
        keys(&paused)
    );
    let partitions: Vec<(String, String)> = keys(&all);
    let expected: Vec<(String, String)> = (0..6)
        .map(|p| (format!("p{p}"), "r00".to_string()))
        .collect();
    assert_eq!(
        partitions, expected,
        "every partition once, by its first row"
    );
}
