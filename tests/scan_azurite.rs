//! The scan engine against a real Azurite, through the storage client, with difficult keys:
//! every strategy, mode and scope reads every row of its scope exactly once.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::fresh_table;
use tablescan::scan::driver::run_to_completion;
use tablescan::scan::keys::{compare, KeyRange};
use tablescan::scan::model::{rows_in_scope, MemoryTable};
use tablescan::scan::{
    Budget, ReadMode, ScanOptions, SplitPolicy, Strategy, SystemClock, WorkItem,
};

/// A few hundred keys over an alphabet with the empty key, U+FFFF, U+E000 and a supplementary
/// character, plus a 1 KiB key.
fn difficult_rows() -> Vec<(String, String)> {
    let alphabet = ["", "A", "B", "\u{FFFF}", "\u{E000}", "\u{1F600}"];
    let mut keys = BTreeSet::new();
    for a in alphabet {
        for b in alphabet {
            for c in ["", "A", "\u{FFFF}"] {
                keys.insert(format!("{a}{b}{c}"));
            }
        }
    }
    let mut rows = Vec::new();
    for (i, pk) in keys.iter().enumerate() {
        for rk in alphabet.iter().take(1 + i % alphabet.len()) {
            rows.push((pk.clone(), rk.to_string()));
        }
    }
    rows.push(("\u{FFFF}".repeat(512), "\u{1F600}".repeat(256)));
    rows
}

#[tokio::test]
async fn every_strategy_reads_every_row_of_its_scope_once_on_azurite() {
    let table = fresh_table("scan").await;
    let rows = difficult_rows();
    common::load_keys(&table, &rows).await;
    let model = MemoryTable::from_keys(rows.iter().map(|(p, r)| (p.as_str(), r.as_str())));
    assert!(model.len() > 250, "{} rows", model.len());

    let scopes = [
        (KeyRange::all(), String::new()),
        (KeyRange::with_prefix("A"), "A".to_string()),
        (KeyRange::with_prefix("\u{FFFF}"), "\u{FFFF}".to_string()),
        (KeyRange::with_prefix("\u{1F600}"), "\u{1F600}".to_string()),
        (
            KeyRange::between(Some("A\u{FFFF}"), Some("\u{E000}")),
            String::new(),
        ),
    ];
    let clock = SystemClock::default();
    for (range, prefix) in scopes {
        let expected = rows_in_scope(&model, &range);
        for (strategy, mode, split, page_size) in [
            (Strategy::Prefix, ReadMode::Rows, SplitPolicy::AtBudget, 7),
            (Strategy::Prefix, ReadMode::Rows, SplitPolicy::EveryPage, 3),
            (Strategy::Serial, ReadMode::Rows, SplitPolicy::AtBudget, 50),
            (
                Strategy::Prefix,
                ReadMode::PartitionKeys,
                SplitPolicy::AtBudget,
                4,
            ),
        ] {
            let options = ScanOptions {
                strategy,
                mode,
                split,
                page_size,
                columns: None,
                budget: Budget {
                    max_queries: 2,
                    max_duration: Duration::from_secs(30),
                },
                fan_out: if split == SplitPolicy::EveryPage {
                    1
                } else {
                    ScanOptions::default().fan_out
                },
                hand_on_whole: false,
                first_step_queries: 1,
                filter: None,
                split_at_positions: true,
                seek_partitions: true,
            };
            let root = WorkItem::root("azurite", range.clone(), prefix.clone());
            let report = run_to_completion(&table, root, &options, &clock, 10_000)
                .await
                .unwrap();
            let context = format!("{range:?} {strategy:?} {mode:?} {split:?}");
            match mode {
                ReadMode::Rows => {
                    let mut got: Vec<(String, String)> = report
                        .rows
                        .iter()
                        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
                        .collect();
                    got.sort_by(|a, b| compare(&a.0, &b.0).then_with(|| compare(&a.1, &b.1)));
                    assert_eq!(got.len(), expected.len(), "{context}");
                    assert_eq!(got, expected, "{context}");
                }
                ReadMode::PartitionKeys => {
                    let got: Vec<&str> = report
                        .rows
                        .iter()
                        .map(|e| e.partition_key.as_str())
                        .collect();
                    let unique: BTreeSet<&str> = got.iter().copied().collect();
                    assert_eq!(unique.len(), got.len(), "each partition once: {context}");
                    let want: BTreeSet<&str> = expected.iter().map(|(p, _)| p.as_str()).collect();
                    assert_eq!(unique, want, "{context}");
                }
            }
            // A partition-keys scan seeks: its steps make up to a budget's worth of seeks in
            // each of their pieces (`scan::seek`).
            let limit = match mode {
                ReadMode::Rows => 2,
                ReadMode::PartitionKeys => tablescan::scan::seek::query_limit(2, page_size),
            };
            assert!(report.most_queries_in_a_step <= limit, "{context}");
            let partitions: BTreeSet<&str> = expected.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(report.partitions, partitions.len() as u64, "{context}");
        }
    }
}
