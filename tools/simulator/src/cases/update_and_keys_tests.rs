//! The update and partition-keys cases: they parse, their bounds, and what their scans do on
//! small synthetic tables (every PartitionKey found exactly once by seeking; every row updated
//! once).

use super::*;
use tablescan::scan::keys::compare;

fn params(args: &[&str]) -> Params {
    crate::params::parse(args).expect("valid parameters")
}

fn case(name: &str, rows: Option<u64>) -> Case {
    Case {
        rows,
        ..Case::parse(name).unwrap()
    }
}

/// Entities the scan's queries returned, all steps together.
fn entities_read(outcome: &Outcome) -> u64 {
    outcome.stats.rows_per_window.iter().sum()
}

#[test]
fn update_and_partition_keys_cases_parse() {
    let update = Case::parse("update-35m").unwrap();
    assert!(update.action == Action::Update && update.rows == Some(35_000_000));
    assert!(!update.within);
    let keys = Case::parse("partition-keys-5m-partition").unwrap();
    assert!(keys.action == Action::PartitionKeys && keys.rows.is_none());
    assert_eq!(
        Case::parse("partition-keys-350m").unwrap().rows,
        Some(350_000_000)
    );
    assert!(Case::parse("partition-35m").unwrap_err().contains("action"));
    assert!(Case::parse("update-1m").unwrap_err().contains("size"));
    assert!(keys.check(DesignName::Published).is_err());
}

#[test]
fn an_update_is_bound_like_a_delete_and_partition_keys_by_their_queue() {
    let size = TableSize {
        rows: 100_000,
        largest: 100,
        partitions: 10_000,
    };
    let p = params(&[]);
    // Read and written in the source account: 200,000 entities at 20,000/s.
    let update = bound(&case("update-3.5m", None), size, &p);
    assert_eq!(update.by, "source account");
    assert!((update.seconds - 10.0).abs() < 1e-9, "{update:?}");
    let capped = bound(
        &case("update-3.5m", None),
        size,
        &params(&["--cap", "5000"]),
    );
    assert_eq!(capped.by, "cap");
    assert!((capped.seconds - 40.0).abs() < 1e-9, "{capped:?}");
    // One partition of 5,000 rows read and written at 2,000 entities/s.
    let one = TableSize {
        rows: 5_000,
        largest: 5_000,
        partitions: 1,
    };
    let hot = bound(&case("update-5m-partition", None), one, &p);
    assert_eq!(hot.by, "largest partition");
    assert!((hot.seconds - 5.0).abs() < 1e-9, "{hot:?}");
    // 10,000 messages on one queue at 2,000/s; 20,000 entities (a seek and a put per
    // partition) at 20,000/s.
    let keys = bound(&case("partition-keys-3.5m", None), size, &p);
    assert_eq!(keys.by, "output queue");
    assert!((keys.seconds - 5.0).abs() < 1e-9, "{keys:?}");
    let slow = bound(
        &case("partition-keys-3.5m", None),
        size,
        &params(&["--cap", "1000"]),
    );
    assert_eq!(slow.by, "cap");
    assert!((slow.seconds - 10.0).abs() < 1e-9, "{slow:?}");
    // One partition: two rows at most are read of it, whatever its size.
    let seek = bound(&case("partition-keys-5m-partition", None), one, &p);
    assert_eq!(seek.by, "largest partition");
    assert!((seek.seconds - 0.001).abs() < 1e-12, "{seek:?}");
}

/// The sorted PartitionKeys a partition-keys scan of `table` put on its queue, with the scan.
fn keys_found(table: SyntheticTable) -> (Vec<String>, Vec<String>, Outcome) {
    keys_found_with(table, params(&["--status-poll-s", "0"]))
}

fn keys_found_with(table: SyntheticTable, p: Params) -> (Vec<String>, Vec<String>, Outcome) {
    let mut expected: Vec<String> = (0..table.partitions())
        .map(|i| table.key(i).to_string())
        .collect();
    expected.sort_by(|a, b| compare(a, b));
    let outcome =
        run_collecting_keys(&case("partition-keys-3.5m", None), &p, table).expect("simulated");
    let mut found = outcome.stats.partition_keys.clone().expect("collected");
    found.sort_by(|a, b| compare(a, b));
    (found, expected, outcome)
}

#[test]
fn partition_keys_on_a_slow_queue_are_put_exactly_once_at_its_pace() {
    // A queue of 100 messages a second: its puts wait in its backlog, slow puts cut each
    // instance's back-off of the queue (`pacing::queue::put_answered`), and the steps follow.
    // (It ran 2.25 times its bound when written: the pace of a queue this slow is not tuned.)
    let mut p = params(&["--status-poll-s", "0"]);
    p.queue_messages_per_second = 100.0;
    let (found, expected, outcome) = keys_found_with(SyntheticTable::nuget_like(20_000, 7), p);
    assert_eq!(outcome.stats.failed_for_good, 0);
    assert!(found == expected, "other keys than the table's");
    assert_eq!(outcome.bound.by, "output queue");
    assert_eq!(outcome.stats.rows_acted, expected.len() as u64);
}

#[test]
fn partition_keys_are_found_exactly_once_on_small_and_large_partitions() {
    // About 3.4 rows a partition (the catalog's shape), about 170, and one of 100,000 rows.
    let tables = [
        SyntheticTable::nuget_like(30_000, 7),
        SyntheticTable::nuget_ids(100_000, 7, 50),
        SyntheticTable::one_partition(100_000),
    ];
    for table in tables {
        let shape = format!("{table:?}");
        let (found, expected, outcome) = keys_found(table);
        assert_eq!(outcome.stats.failed_for_good, 0, "{shape}");
        assert_eq!(found.len(), expected.len(), "{shape}");
        assert!(found == expected, "{shape}: other keys than the table's");
        assert_eq!(outcome.stats.rows_acted, expected.len() as u64, "{shape}");
        // Seeking: past the first two rows, no partition is read.
        let read = entities_read(&outcome);
        assert!(
            read <= 2 * expected.len() as u64 + 50,
            "{shape}: {read} read"
        );
    }
}

#[test]
fn seeking_through_large_partitions_costs_about_a_query_and_an_entity_each() {
    let (found, _, outcome) = keys_found(SyntheticTable::nuget_ids(100_000, 7, 50));
    let partitions = found.len() as f64;
    let read = entities_read(&outcome) as f64;
    let queries = outcome.stats.queries as f64;
    assert!(read / partitions < 1.3, "{read} entities, {partitions}");
    assert!(
        queries / partitions < 1.3,
        "{queries} queries, {partitions}"
    );
    assert!(
        queries / partitions > 0.9,
        "{queries} queries, {partitions}"
    );
}

#[test]
fn an_update_writes_each_row_it_reads_once() {
    let p = params(&["--status-poll-s", "0"]);
    for rows in [Some(60_000), None] {
        let update = case("update-3.5m", rows);
        let table = match rows {
            Some(rows) => SyntheticTable::nuget_ids(rows, 3, 4),
            None => SyntheticTable::one_partition(20_000),
        };
        let expected = table.rows();
        let outcome = run_on(&update, DesignName::Tablescan, &p, table, None).unwrap();
        let s = &outcome.stats;
        assert_eq!(s.failed_for_good, 0);
        assert_eq!(entities_read(&outcome), expected, "{rows:?}");
        assert_eq!(s.rows_written, expected, "{rows:?}");
        assert_eq!(s.rows_acted, expected, "{rows:?}");
        // Merges of a partition's rows, at most 100 a transaction.
        assert!(s.writes >= expected.div_ceil(100), "{}", s.writes);
    }
}
