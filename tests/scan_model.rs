//! The scan engine against the in-memory model: every row of the scope exactly once, for every
//! strategy, mode and scope, with difficult keys and with the service's short and empty pages.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tablescan::functions::pacing::shape_for_admission;
use tablescan::scan::driver::{run_cutting_pages, run_to_completion, CollectingSink, RunReport};
use tablescan::scan::keys::{KeyRange, Lower, Upper};
use tablescan::scan::model::{nuget_like, rows_in_scope, MemoryReader, MemoryTable, Quirks};
use tablescan::scan::seek;
use tablescan::scan::{
    run_step, Budget, Clock, ReadMode, ScanOptions, SplitPolicy, Strategy as ScanStrategy, WorkItem,
};

/// A clock that moves forward a fixed amount every time it is read, so time budgets trip.
struct TickingClock {
    nanos: AtomicU64,
    tick: Duration,
}

impl Clock for TickingClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(
            self.nanos
                .fetch_add(self.tick.as_nanos() as u64, Ordering::Relaxed),
        )
    }
}

/// Runs a whole scan of `range` on the model, on a clock that never moves.
fn run(reader: &MemoryReader<'_>, range: KeyRange, options: &ScanOptions) -> RunReport {
    let clock = TickingClock {
        nanos: AtomicU64::new(0),
        tick: Duration::ZERO,
    };
    block_on(run_to_completion(
        reader,
        WorkItem::root("s", range, ""),
        options,
        &clock,
        1_000_000,
    ))
    .unwrap()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

/// Characters that break naive scanners: U+FFFF (the published sentinel), U+E000 (sorts after
/// supplementary characters in UTF-16), a supplementary character, and plain letters.
fn key() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'A',
        'B',
        'a',
        '7',
        '\u{FFFF}',
        '\u{E000}',
        '\u{1F600}',
    ]);
    prop::collection::vec(chars, 0..4).prop_map(|cs| cs.into_iter().collect())
}

#[derive(Debug, Clone)]
struct Case {
    rows: Vec<(String, String)>,
    options: ScanOptions,
    quirks: Quirks,
    prefix: Option<String>,
    lower: Option<String>,
    upper: Option<String>,
    tick_ms: u64,
    /// Share of pages the action finishes only partly, as when its step's time runs out.
    cut_percent: u8,
}

fn case() -> impl Strategy<Value = Case> {
    let options = (
        prop::sample::select(vec![ScanStrategy::Prefix, ScanStrategy::Serial]),
        prop::sample::select(vec![ReadMode::Rows, ReadMode::PartitionKeys]),
        prop::sample::select(vec![
            SplitPolicy::AtBudget,
            SplitPolicy::EveryPage,
            SplitPolicy::Dense,
        ]),
        1u16..=5,
        1u32..=4,
        1usize..=9,
        1u32..=3,
        any::<bool>(),
    )
        .prop_map(
            |(
                strategy,
                mode,
                split,
                page_size,
                max_queries,
                fan_out,
                first_step_queries,
                seek_partitions,
            )| {
                ScanOptions {
                    strategy,
                    mode,
                    split,
                    page_size,
                    columns: None,
                    budget: Budget {
                        max_queries,
                        max_duration: Duration::from_millis(50),
                    },
                    fan_out,
                    hand_on_whole: false,
                    first_step_queries,
                    filter: None,
                    split_at_positions: true,
                    seek_partitions,
                }
            },
        );
    let quirks = (0u8..40, 0u8..40, 0u8..40, 0u8..30, any::<u64>()).prop_map(
        |(empty_pages, short_pages, trailing_tokens, busy, seed)| Quirks {
            empty_pages,
            short_pages,
            trailing_tokens,
            busy,
            seed,
            max_scanned: None,
        },
    );
    (
        prop::collection::vec((key(), key()), 0..40),
        options,
        quirks,
        prop::option::of(
            prop::collection::vec(
                prop::sample::select(vec!['A', '\u{FFFF}', '\u{1F600}']),
                0..2,
            )
            .prop_map(|c| c.into_iter().collect::<String>()),
        ),
        prop::option::weighted(0.3, key()),
        prop::option::weighted(0.3, key()),
        prop::sample::select(vec![0u64, 7, 30]),
        prop::sample::select(vec![0u8, 0, 25, 70]),
    )
        .prop_map(
            |(rows, options, quirks, prefix, lower, upper, tick_ms, cut_percent)| Case {
                rows,
                options,
                quirks,
                prefix,
                lower,
                upper,
                tick_ms,
                cut_percent,
            },
        )
}

/// The most queries one step may make: its query budget, and for a partition-keys scan that
/// seeks, that budget's worth of seeks in each of its pieces (`scan::seek`).
fn query_limit(options: &ScanOptions) -> u32 {
    let budget = options.budget.max_queries;
    if options.mode == ReadMode::PartitionKeys && options.seek_partitions {
        seek::query_limit(budget, options.page_size)
    } else {
        budget
    }
}

/// Every row of `expected` delivered exactly once (rows mode), or every partition of it
/// exactly once (partition-keys mode).
fn each_once(
    mode: ReadMode,
    mut delivered: Vec<(String, String)>,
    expected: &[(String, String)],
) -> Result<(), TestCaseError> {
    match mode {
        ReadMode::Rows => {
            delivered.sort();
            let mut want = expected.to_vec();
            want.sort();
            prop_assert_eq!(delivered, want);
        }
        ReadMode::PartitionKeys => {
            let mut partitions: Vec<String> = delivered.into_iter().map(|(p, _)| p).collect();
            partitions.sort();
            let want: Vec<String> = expected
                .iter()
                .map(|(p, _)| p.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            prop_assert_eq!(partitions, want);
        }
    }
    Ok(())
}

fn scope(case: &Case) -> (KeyRange, String) {
    let prefix = case.prefix.clone().unwrap_or_default();
    let range = KeyRange::with_prefix(&prefix).intersect(&KeyRange::between(
        case.lower.as_deref(),
        case.upper.as_deref(),
    ));
    (range, prefix)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn every_row_in_scope_is_delivered_exactly_once(case in case()) {
        let table = MemoryTable::from_keys(case.rows.iter().map(|(p, r)| (p.as_str(), r.as_str())));
        let reader = MemoryReader::new(&table, case.quirks);
        let (range, prefix) = scope(&case);
        let clock = TickingClock { nanos: AtomicU64::new(0), tick: Duration::from_millis(case.tick_ms) };
        let root = WorkItem::root("scan", range.clone(), prefix);
        let report = block_on(run_cutting_pages(
            &reader, root, &case.options, &clock, 100_000, case.cut_percent, case.quirks.seed,
        ))
        .unwrap();

        let expected = rows_in_scope(&table, &range);
        let delivered: Vec<(String, String)> =
            report.rows.iter().map(|e| (e.partition_key.clone(), e.row_key.clone())).collect();
        each_once(case.options.mode, delivered, &expected)?;
        // Partition counts are exact even though partitions are split across steps.
        let distinct: BTreeSet<&String> = expected.iter().map(|(p, _)| p).collect();
        prop_assert_eq!(report.partitions, distinct.len() as u64);
        // Finite, and every query counted: by the steps, or as the one throttled query of a
        // step that failed before reading anything (and ran again).
        prop_assert_eq!(report.queries as usize + report.failed_attempts as usize, reader.queries());
        prop_assert!(report.most_queries_in_a_step <= query_limit(&case.options));
        // No query without a cursor is issued twice, except that a page cut short makes the
        // step drop the page it was reading meanwhile, which is read again from the cut.
        let fresh: Vec<String> = reader.log().into_iter().filter(|q| !q.ends_with("+cursor") && !q.ends_with(" busy")).collect();
        let unique: BTreeSet<&String> = fresh.iter().collect();
        prop_assert!(
            (fresh.len() - unique.len()) as u64 <= report.pages_cut,
            "{} repeated queries, {} pages cut, in {:?}", fresh.len() - unique.len(), report.pages_cut, fresh
        );
    }
}

/// The share of pages the sink of [`run_sometimes_crowded`] finishes only partly: none in a
/// quarter of the cases, else up to 30%.
fn cut_percent(seed: u64) -> u8 {
    match seed % 4 {
        0 => 0,
        _ => (seed >> 60) as u8 * 2,
    }
}

/// Runs a scan as the handler does when its pace is full here now and then: each step runs with
/// the scan's options, or, admitted crowded (`functions::pacing::shape_for_admission`), splits
/// nothing off, by bit `i` of `crowded` for the `i`-th step (mod 64); a step that hands on
/// whole hands on at most one item, two if its action stopped inside a page. First in, first
/// out; no step fails.
fn run_sometimes_crowded(
    reader: &MemoryReader<'_>,
    root: WorkItem,
    options: &ScanOptions,
    clock: &TickingClock,
    crowded: u64,
) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut pending = std::collections::VecDeque::from([root]);
    let mut steps = 0u64;
    // The sink's generator, carried from step to step so that each cuts its own pages.
    let mut random = crowded | 1;
    while let Some(item) = pending.pop_front() {
        assert!(steps < 100_000, "the scan did not finish");
        let mut step_options = options.clone();
        let this_crowded = crowded >> (steps % 64) & 1 == 1;
        shape_for_admission(&mut step_options, this_crowded);
        // An action that stops inside a page now and then (its deadline, a write error, a
        // pause): the rest of that page's partition and the partitions after it are two items.
        let mut sink = CollectingSink {
            cut_percent: cut_percent(crowded),
            random,
            ..CollectingSink::default()
        };
        let step = block_on(run_step(reader, &item, &step_options, clock, &mut sink)).unwrap();
        random = sink.random;
        let most = if sink.pages_cut > 0 { 2 } else { 1 };
        assert!(
            !step_options.hand_on_whole || step.follow_ups.len() <= most,
            "a crowded step handed on {} items ({} pages cut)",
            step.follow_ups.len(),
            sink.pages_cut
        );
        steps += 1;
        rows.extend(sink.rows.into_iter().map(|e| (e.partition_key, e.row_key)));
        pending.extend(step.follow_ups);
    }
    rows
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Steps of one scan that hand their rest on whole (admitted crowded) beside steps that
    /// split it: still every row in scope once.
    #[test]
    fn steps_admitted_crowded_beside_others_still_deliver_every_row_once(
        case in case(),
        crowded in any::<u64>(),
    ) {
        let table = MemoryTable::from_keys(case.rows.iter().map(|(p, r)| (p.as_str(), r.as_str())));
        let quirks = Quirks { busy: 0, ..case.quirks };
        let reader = MemoryReader::new(&table, quirks);
        let (range, prefix) = scope(&case);
        let clock = TickingClock { nanos: AtomicU64::new(0), tick: Duration::from_millis(case.tick_ms) };
        let root = WorkItem::root("scan", range.clone(), prefix);
        let delivered = run_sometimes_crowded(&reader, root, &case.options, &clock, crowded);
        each_once(case.options.mode, delivered, &rows_in_scope(&table, &range))?;
    }
}

/// A table of `rows` rows with difficult keys, each with `N` from 0 to 999 spread evenly.
fn numbered_rows(keys: &[(String, String)]) -> MemoryTable {
    MemoryTable::new(keys.iter().enumerate().map(|(i, (p, r))| {
        tablescan::storage::table::entity::Entity::new(p.as_str(), r.as_str()).with(
            "N",
            tablescan::storage::table::entity::Value::Int64(((i * 7919) % 1000) as i64),
        )
    }))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// With a filter the service returns only matching rows, and a request looks at a bounded
    /// number of rows: pages come back short or empty with a continuation. Every matching row
    /// of the scope is still delivered exactly once, steps stay within budget, and no fresh
    /// query is issued twice (beyond pages cut short).
    #[test]
    fn a_filter_delivers_exactly_the_matching_rows_once(
        case in case(),
        more_keys in prop::collection::vec((key(), key()), 0..1500),
        below in prop::sample::select(vec![0i64, 1, 100, 1000]),
        max_scanned in prop::sample::select(vec![1usize, 3, 20, 1000]),
    ) {
        let mut keys = case.rows.clone();
        keys.extend(more_keys);
        let table = numbered_rows(&keys);
        let quirks = Quirks { max_scanned: Some(max_scanned), ..case.quirks };
        let reader = MemoryReader::new(&table, quirks);
        let (range, prefix) = scope(&case);
        let filter = tablescan::storage::table::filter_text::parse_filter(&format!("N lt {below}L")).unwrap();
        let options = ScanOptions { filter: Some(filter.clone()), ..case.options.clone() };
        let clock = TickingClock { nanos: AtomicU64::new(0), tick: Duration::from_millis(case.tick_ms) };
        let root = WorkItem::root("scan", range.clone(), prefix);
        let report = block_on(run_cutting_pages(
            &reader, root, &options, &clock, 1_000_000, case.cut_percent, case.quirks.seed,
        ))
        .unwrap();

        let in_scope: BTreeSet<(String, String)> = rows_in_scope(&table, &range).into_iter().collect();
        let expected: Vec<(String, String)> = table
            .entities()
            .filter(|e| filter.matches(e))
            .map(|e| (e.partition_key.clone(), e.row_key.clone()))
            .filter(|k| in_scope.contains(k))
            .collect();
        let delivered: Vec<(String, String)> =
            report.rows.iter().map(|e| (e.partition_key.clone(), e.row_key.clone())).collect();
        let distinct: BTreeSet<&String> = expected.iter().map(|(p, _)| p).collect();
        match case.options.mode {
            ReadMode::Rows => {
                let mut delivered = delivered;
                delivered.sort();
                let mut want = expected.clone();
                want.sort();
                prop_assert_eq!(delivered, want);
            }
            ReadMode::PartitionKeys => {
                let mut partitions: Vec<&String> = delivered.iter().map(|(p, _)| p).collect();
                partitions.sort();
                prop_assert_eq!(partitions, distinct.iter().copied().collect::<Vec<_>>());
            }
        }
        prop_assert_eq!(report.partitions, distinct.len() as u64);
        prop_assert!(report.most_queries_in_a_step <= query_limit(&case.options));
        let fresh: Vec<String> = reader.log().into_iter().filter(|q| !q.ends_with("+cursor") && !q.ends_with(" busy")).collect();
        let unique: BTreeSet<&String> = fresh.iter().collect();
        let mut seen = BTreeSet::new();
        let repeated: Vec<&String> = fresh.iter().filter(|q| !seen.insert(*q)).collect();
        prop_assert!(
            (fresh.len() - unique.len()) as u64 <= report.pages_cut,
            "repeated {:?} in {:?}", repeated, reader.log()
        );
    }
}

#[test]
fn the_blog_example_yields_the_blog_query_tree() {
    // The ten rows of "How to run a distributed scan of Azure Table Storage", page size 2,
    // splitting after every page as the published implementation does.
    let rows = [
        ("Dashner", "Cleopatra"),
        ("Davis", "Gemma"),
        ("Davis", "Loralee"),
        ("Dodge", "Lowell"),
        ("Hartlage", "Marketta"),
        ("Nuckles", "Timmy"),
        ("Rundle", "Coleen"),
        ("Splawn", "Lise"),
        ("Wedell", "Annabelle"),
        ("Wongus", "Rosenda"),
    ];
    let table = MemoryTable::from_keys(rows);
    let reader = MemoryReader::new(&table, Quirks::default());
    let options = ScanOptions {
        split: SplitPolicy::EveryPage,
        page_size: 2,
        budget: Budget {
            max_queries: 100,
            max_duration: Duration::from_secs(60),
        },
        first_step_queries: 100,
        ..ScanOptions::default()
    };
    let report = run(&reader, KeyRange::all(), &options);
    assert_eq!(
        reader.log(),
        [
            // The first step: four queries find the first-level prefixes D, N and S and read 8 rows.
            "(all)",
            "PartitionKey ge 'E'",
            "PartitionKey ge 'O'",
            "PartitionKey ge 'T'",
            // Then, for each prefix: the rest of the last partition seen, and the rest of the prefix.
            "PartitionKey eq 'Davis' and RowKey gt 'Gemma'",
            "PartitionKey gt 'Davis' and PartitionKey lt 'E'",
            "PartitionKey eq 'Nuckles' and RowKey gt 'Timmy'",
            "PartitionKey gt 'Nuckles' and PartitionKey lt 'O'",
            "PartitionKey eq 'Splawn' and RowKey gt 'Lise'",
            "PartitionKey gt 'Splawn' and PartitionKey lt 'T'",
        ]
    );
    let first_step_rows: Vec<&str> = report.rows[..8]
        .iter()
        .map(|e| e.partition_key.as_str())
        .collect();
    assert_eq!(
        first_step_rows,
        ["Dashner", "Davis", "Hartlage", "Nuckles", "Rundle", "Splawn", "Wedell", "Wongus"]
    );
    let later: Vec<(&str, &str)> = report.rows[8..]
        .iter()
        .map(|e| (e.partition_key.as_str(), e.row_key.as_str()))
        .collect();
    assert_eq!(later, [("Davis", "Loralee"), ("Dodge", "Lowell")]);
    assert_eq!(report.steps, 7);
    assert_eq!(report.longest_chain, 2);
}

#[test]
fn keys_with_u_ffff_are_neither_lost_nor_looped_on() {
    // The published scanner's failing cases: A, A+U+FFFF, AB (the middle one was lost) and
    // A+U+FFFF+A, A+U+FFFF+B with page size 1 (read again forever).
    for keys in [
        vec!["A", "A\u{FFFF}", "AB"],
        vec!["A\u{FFFF}A", "A\u{FFFF}B"],
        vec!["A\u{FFFF}", "A\u{FFFF}B", "C"],
        vec!["\u{FFFF}", "\u{FFFF}\u{FFFF}", ""],
    ] {
        let table = MemoryTable::from_keys(keys.iter().map(|k| (*k, "r")));
        for split in [SplitPolicy::EveryPage, SplitPolicy::AtBudget] {
            let reader = MemoryReader::new(&table, Quirks::default());
            let options = ScanOptions {
                split,
                page_size: 1,
                budget: Budget {
                    max_queries: 1,
                    max_duration: Duration::from_secs(1),
                },
                ..ScanOptions::default()
            };
            let report = run(&reader, KeyRange::all(), &options);
            let mut got: Vec<&str> = report
                .rows
                .iter()
                .map(|e| e.partition_key.as_str())
                .collect();
            got.sort();
            let mut want = keys.clone();
            want.sort();
            assert_eq!(got, want, "{keys:?} {split:?}");
        }
    }
}

#[test]
fn a_huge_partition_is_split_by_row_key_and_no_step_exceeds_its_budget() {
    let rows: Vec<(String, String)> = (0..20_000)
        .map(|i| ("big".to_string(), format!("{:08}", i * 7919 % 1_000_003)))
        .collect();
    let table = MemoryTable::from_keys(rows.iter().map(|(p, r)| (p.as_str(), r.as_str())));
    let reader = MemoryReader::new(&table, Quirks::default());
    let options = ScanOptions {
        page_size: 100,
        budget: Budget {
            max_queries: 5,
            max_duration: Duration::from_secs(60),
        },
        ..ScanOptions::default()
    };
    let report = run(&reader, KeyRange::all(), &options);
    assert_eq!(report.rows.len(), 20_000);
    assert!(report.most_queries_in_a_step <= 5);
    // Serially, 200 pages at 5 per step would be a chain of 40 steps; split by RowKey prefix
    // the chain is much shorter because ranges of the partition are read side by side.
    assert!(
        report.longest_chain < 20,
        "longest chain {}",
        report.longest_chain
    );
    let serial = ScanOptions {
        strategy: ScanStrategy::Serial,
        ..options.clone()
    };
    let reader = MemoryReader::new(&table, Quirks::default());
    let baseline = run(&reader, KeyRange::all(), &serial);
    assert_eq!(baseline.longest_chain, 40);
    assert_eq!(baseline.rows.len(), 20_000);
}

#[test]
fn partitions_only_mode_skips_the_rest_of_each_partition() {
    let mut rows = Vec::new();
    for p in 0..50 {
        for r in 0..(if p == 7 { 5000 } else { 3 }) {
            rows.push((format!("p{p:02}"), format!("r{r:05}")));
        }
    }
    let table = MemoryTable::from_keys(rows.iter().map(|(p, r)| (p.as_str(), r.as_str())));
    let reader = MemoryReader::new(&table, Quirks::default());
    let options = ScanOptions {
        mode: ReadMode::PartitionKeys,
        page_size: 10,
        ..ScanOptions::default()
    };
    let report = run(&reader, KeyRange::all(), &options);
    assert_eq!(report.rows.len(), 50);
    // Reading every row would look at over 5,000 rows in over 500 pages of 10; skipping and
    // seeking looks at about one row per partition, a query each.
    assert!(
        reader.scanned() < 100,
        "{} rows looked at",
        reader.scanned()
    );
    assert!(report.queries < 100, "{} queries", report.queries);
}

/// Runs a partition-keys scan of `table` with pages of 1,000 and the default budget; the rows
/// looked at and the queries made per partition found, and the most queries of a step.
fn keys_scan_costs(table: &MemoryTable, seek_partitions: bool) -> (f64, f64, u32) {
    let reader = MemoryReader::new(table, Quirks::default());
    let options = ScanOptions {
        mode: ReadMode::PartitionKeys,
        seek_partitions,
        ..ScanOptions::default()
    };
    let report = run(&reader, KeyRange::all(), &options);
    let partitions: BTreeSet<&str> = table.entities().map(|e| e.partition_key.as_str()).collect();
    assert_eq!(report.rows.len(), partitions.len(), "every partition once");
    assert_eq!(report.partitions, partitions.len() as u64);
    let found = partitions.len() as f64;
    (
        reader.scanned() as f64 / found,
        report.queries as f64 / found,
        report.most_queries_in_a_step,
    )
}

#[test]
fn partition_keys_seek_through_large_partitions_and_page_through_small_ones() {
    let shaped = |partitions: u64, rows: u64| {
        MemoryTable::new((0..partitions * rows).map(|i| {
            let p = (i / rows).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            tablescan::storage::table::entity::Entity::new(
                format!("{p:016x}"),
                format!("{:06}", i % rows),
            )
        }))
    };
    // 300-row partitions: about one row looked at per partition, where pages looked at all.
    let large = shaped(200, 300);
    let (scanned, queries, most) = keys_scan_costs(&large, true);
    assert!(scanned <= 1.5, "{scanned} rows looked at per partition");
    assert!(queries <= 1.5, "{queries} queries per partition");
    assert!(most <= seek::query_limit(20, 1000));
    let (old_scanned, _, _) = keys_scan_costs(&large, false);
    assert!(old_scanned > 100.0, "{old_scanned}");
    // One-row partitions: still pages of 1,000, with a few small queries more per step (a
    // probe of 2 rows, then pages of 16 and 128 before full pages).
    let small = shaped(200_000, 1);
    let (scanned, queries, _) = keys_scan_costs(&small, true);
    let (_, old_queries, _) = keys_scan_costs(&small, false);
    assert!(scanned <= 1.01, "{scanned} rows looked at per partition");
    assert!(
        queries <= old_queries * 1.3,
        "{} queries per 1,000 rows, {} before",
        queries * 1000.0,
        old_queries * 1000.0
    );
    // Mixed: runs of one-row partitions between large ones.
    let mixed = MemoryTable::new((0..40_000u64).map(|i| {
        let (p, r) = if (i / 10_000) % 2 == 0 {
            (i, 0)
        } else {
            (i / 500 * 500, i % 500)
        };
        tablescan::storage::table::entity::Entity::new(format!("{p:08}"), format!("{r:04}"))
    }));
    let (scanned, _, _) = keys_scan_costs(&mixed, true);
    assert!(scanned <= 1.5, "{scanned} rows looked at per partition");
}

#[test]
fn nuget_like_scans_issue_close_to_the_serial_number_of_queries() {
    let rows = 200_000;
    let table = MemoryTable::new(nuget_like(rows, 7));
    let reader = MemoryReader::new(&table, Quirks::default());
    let report = run(&reader, KeyRange::all(), &ScanOptions::default());
    assert_eq!(report.rows.len(), rows);
    let serial_pages = rows.div_ceil(1000) as f64;
    let ratio = report.queries as f64 / serial_pages;
    assert!(
        ratio <= 1.15,
        "{} queries for {serial_pages} serial pages: ratio {ratio:.3}",
        report.queries
    );
}

#[test]
fn continuation_items_respect_lower_bounds_in_scope() {
    // A scope that starts inside a prefix: bounds are exclusive.
    let table = MemoryTable::from_keys([("a", "1"), ("ab", "1"), ("abc", "1"), ("b", "1")]);
    let reader = MemoryReader::new(&table, Quirks::default());
    let range = KeyRange {
        lower: Lower::Excluded("ab".into()),
        upper: Upper::Excluded("b".into()),
    };
    let report = run(
        &reader,
        range,
        &ScanOptions {
            page_size: 1,
            ..ScanOptions::default()
        },
    );
    let got: Vec<&str> = report
        .rows
        .iter()
        .map(|e| e.partition_key.as_str())
        .collect();
    assert_eq!(got, ["abc"]);
}

/// The tables a partition-keys scan must find every partition of once: partitions of one row,
/// of 10,000 rows, and a mix of both with partitions of 25 rows between.
fn keys_table(shape: u8) -> MemoryTable {
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut partition = |name: String, rows: u32| {
        for r in 0..rows {
            keys.push((name.clone(), format!("{r:05}")));
        }
    };
    match shape {
        0 => (0..3_000).for_each(|p| partition(format!("one{p:04}"), 1)),
        1 => (0..3).for_each(|p| partition(format!("big{p}"), 10_000)),
        _ => {
            (0..500).for_each(|p| partition(format!("a{p:03}"), 1));
            partition("b".into(), 10_000);
            (0..200).for_each(|p| partition(format!("c{p:03}"), 25));
            partition("d\u{FFFF}".into(), 10_000);
            (0..500).for_each(|p| partition(format!("e{p:03}\u{1F600}"), 1));
        }
    }
    MemoryTable::from_keys(keys.iter().map(|(p, r)| (p.as_str(), r.as_str())))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Partition keys by seeking: every partition found once and counted once, in tables of
    /// one-row partitions, of 10,000-row partitions and of both, with the model's empty and
    /// short pages, trailing tokens, refusals and pages the action cuts short; every step within
    /// its budget.
    #[test]
    fn partition_keys_are_found_once_in_tables_of_every_shape(
        shape in 0u8..3,
        page_size in prop::sample::select(vec![1u16, 7, 100, 1000]),
        max_queries in 1u32..=20,
        tick_ms in prop::sample::select(vec![0u64, 7, 30]),
        cut_percent in prop::sample::select(vec![0u8, 25]),
        quirks in (0u8..40, 0u8..40, 0u8..40, 0u8..20, any::<u64>()),
    ) {
        let table = keys_table(shape);
        let (empty_pages, short_pages, trailing_tokens, busy, seed) = quirks;
        let quirks = Quirks { empty_pages, short_pages, trailing_tokens, busy, seed, max_scanned: None };
        let reader = MemoryReader::new(&table, quirks);
        let options = ScanOptions {
            mode: ReadMode::PartitionKeys,
            page_size,
            budget: Budget { max_queries, max_duration: Duration::from_millis(50) },
            ..ScanOptions::default()
        };
        let clock = TickingClock { nanos: AtomicU64::new(0), tick: Duration::from_millis(tick_ms) };
        let root = WorkItem::root("keys", KeyRange::all(), "");
        let report = block_on(run_cutting_pages(
            &reader, root, &options, &clock, 1_000_000, cut_percent, seed,
        ))
        .unwrap();
        let want: BTreeSet<&str> = table.entities().map(|e| e.partition_key.as_str()).collect();
        let mut found: Vec<&str> = report.rows.iter().map(|e| e.partition_key.as_str()).collect();
        found.sort();
        let distinct: BTreeSet<&str> = found.iter().copied().collect();
        prop_assert_eq!(found.len(), distinct.len(), "a partition found twice");
        prop_assert_eq!(distinct, want.clone());
        prop_assert_eq!(report.partitions, want.len() as u64);
        prop_assert!(report.most_queries_in_a_step <= query_limit(&options));
    }
}
