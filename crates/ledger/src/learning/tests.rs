//! The learning row on the in-memory table: rounds, the cap they set, raises, lowerings.

use super::*;
use tablescan_storage::table::in_memory::{InMemoryTable, Retry};
use tablescan_storage::table::WriteMode;

/// A ledger with scan `s`'s row.
async fn ledger() -> Ledger {
    ledger_on(InMemoryTable::new("ledger")).await
}

/// The same on `table` (a test that makes its requests fail keeps it).
async fn ledger_on(table: InMemoryTable) -> Ledger {
    table.create_if_missing().await.unwrap();
    let ledger = Ledger::in_memory(table);
    let row = ScanRow::new("{}".into(), time::OffsetDateTime::now_utc());
    ledger
        .table()
        .upsert(&row.to_entity("s"), WriteMode::Replace)
        .await
        .unwrap();
    ledger
}

/// The learned cap on scan `s`'s row, as every process reads it.
async fn published(ledger: &Ledger) -> Option<f64> {
    let row = ledger
        .table()
        .get_entity("s", super::super::rows::SCAN_ROW)
        .await;
    ScanRow::from_entity(&row.unwrap().unwrap())
        .unwrap()
        .learned_cap
}

#[tokio::test]
async fn reports_of_a_round_add_up_and_its_close_sets_the_cap_once() {
    let ledger = ledger().await;
    let t = 1_000_000;
    let round = ms(ROUND);
    assert_eq!(
        ledger.report_refusal("s", "p1", 1_000.0, t).await.unwrap(),
        Reported::In(t)
    );
    // Every process sees the round on the scan row.
    let row = ledger
        .table()
        .get_entity("s", super::super::rows::SCAN_ROW)
        .await;
    let row = ScanRow::from_entity(&row.unwrap().unwrap()).unwrap();
    assert_eq!(row.learn_round_ms, t);
    assert_eq!(
        ledger
            .report_refusal("s", "p2", 800.0, t + 500)
            .await
            .unwrap(),
        Reported::In(t)
    );
    assert_eq!(
        ledger
            .report_refusal("s", "p3", 700.0, t + round - 100)
            .await
            .unwrap(),
        Reported::In(t)
    );
    // Not over yet: nothing to close.
    assert_eq!(ledger.close_round("s", t + 1_000).await.unwrap(), None);
    let cap = ledger.close_round("s", t + round + 100).await.unwrap();
    assert_eq!(cap, Some(2_500.0 * LEARNED_SHARE));
    assert_eq!(published(&ledger).await, cap);
    // Closed once.
    assert_eq!(
        ledger.close_round("s", t + round + 200).await.unwrap(),
        None
    );
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!(learning.reporters, 3);
    // A refusal a moment after the round is not a new round...
    assert_eq!(
        ledger
            .report_refusal("s", "p1", 100.0, t + round + 1_000)
            .await
            .unwrap(),
        Reported::Skipped
    );
    // ...a later one is.
    let later = t + ms(BETWEEN_ROUNDS) + 1_000;
    assert_eq!(
        ledger
            .report_refusal("s", "p2", 2_000.0, later)
            .await
            .unwrap(),
        Reported::In(later)
    );
    assert_eq!(
        ledger.close_round("s", later + round).await.unwrap(),
        Some(2_000.0 * LEARNED_SHARE)
    );
}

/// A round on a scan with no cap sets one from its first report on, with the round, on the
/// scan row every process reads: [`LEARNED_SHARE`] of its sum so far, raised by a report that
/// moves it 5% or more (a smaller one is left for the close); the close sets it exactly and
/// makes it final (no longer provisional, its whiles counted from then). A round on a scan
/// that has a cap sets none until it closes.
#[tokio::test]
async fn a_round_sets_the_cap_from_its_first_report_on() {
    let ledger = ledger().await;
    let t = 4_000_000;
    ledger.report_refusal("s", "p1", 1_000.0, t).await.unwrap();
    let opened = ledger.learning("s").await.unwrap().unwrap();
    assert!(opened.provisional && opened.from_round && !opened.closed);
    assert_eq!(
        (opened.cap, opened.cap_at_ms),
        (Some(1_000.0 * LEARNED_SHARE), t)
    );
    assert_eq!(published(&ledger).await, opened.cap);
    ledger
        .report_refusal("s", "p2", 800.0, t + 500)
        .await
        .unwrap();
    let joined = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!(
        (joined.cap, joined.cap_at_ms),
        (Some(1_800.0 * LEARNED_SHARE), t + 500)
    );
    assert_eq!(published(&ledger).await, joined.cap);
    // A part that moves the cap under 5%: counted, not written, the scan row untouched.
    let scan_row_version = || async {
        let row = ledger
            .table()
            .get_entity("s", super::super::rows::SCAN_ROW)
            .await;
        row.unwrap().unwrap().etag
    };
    let before = scan_row_version().await;
    ledger
        .report_refusal("s", "p3", 50.0, t + 600)
        .await
        .unwrap();
    let small = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!((small.sum, small.cap), (1_850.0, joined.cap));
    assert_eq!(scan_row_version().await, before);
    // Not raised while the round is open.
    assert_eq!(
        ledger.raise_learned_cap("s", t + 1_000).await.unwrap(),
        None
    );
    let closed_at = t + ms(ROUND);
    assert_eq!(
        ledger.close_round("s", closed_at).await.unwrap(),
        Some(1_850.0 * LEARNED_SHARE)
    );
    let closed = ledger.learning("s").await.unwrap().unwrap();
    assert!(closed.closed && !closed.provisional && closed.from_round);
    assert_eq!(
        (closed.cap, closed.cap_at_ms),
        (Some(1_850.0 * LEARNED_SHARE), closed_at)
    );
    assert_eq!(published(&ledger).await, closed.cap);
    // A later round, on a scan with a cap: the cap stays until it closes, and a process under
    // the cap does not join it.
    let later = t + ms(BETWEEN_ROUNDS) + 1_000;
    ledger
        .report_refusal("s", "p1", 1_500.0, later)
        .await
        .unwrap();
    let second = ledger.learning("s").await.unwrap().unwrap();
    assert!(!second.provisional);
    assert_eq!(second.cap, closed.cap);
    assert_eq!(published(&ledger).await, closed.cap);
    let under_cap = ledger
        .join_round_setting_cap("s", "p2", |_| 9_999.0, later + 100)
        .await
        .unwrap();
    assert_eq!(under_cap, Reported::Nothing);
    assert_eq!(
        ledger.close_round("s", later + ms(ROUND)).await.unwrap(),
        Some(1_500.0 * LEARNED_SHARE)
    );
}

/// A process under a round's cap joins that round: its part raises the cap.
#[tokio::test]
async fn a_process_under_a_rounds_cap_joins_the_round() {
    let ledger = ledger().await;
    let t = 4_500_000;
    ledger.report_refusal("s", "p1", 2_000.0, t).await.unwrap();
    let joined = ledger
        .join_round_setting_cap("s", "p2", |_| 1_000.0, t + 1_000)
        .await
        .unwrap();
    assert_eq!(joined, Reported::In(t));
    assert_eq!(published(&ledger).await, Some(3_000.0 * LEARNED_SHARE));
    // It opens none: with no round open, nothing.
    let fresh = ledger_on(InMemoryTable::new("other")).await;
    let nothing = fresh
        .join_round_setting_cap("s", "p2", |_| 1_000.0, t)
        .await
        .unwrap();
    assert_eq!(nothing, Reported::Nothing);
}

/// A lowering while a round sets the cap (the account refused a process under the round's
/// cap) takes the whole step off the round's cap, and the parts reported after it count at
/// that share: a round whose first part was a fraction of the scan (at scale, the opener's
/// alone) is not held to it. The close keeps the share, and the lowering's time.
#[tokio::test]
async fn a_lowering_in_a_round_keeps_its_share_of_the_parts_after_it() {
    let ledger = ledger().await;
    let t = 5_000_000;
    ledger.report_refusal("s", "p1", 4_000.0, t).await.unwrap();
    let cap = 4_000.0 * LEARNED_SHARE;
    // Too soon: the others may not have read the round's cap yet.
    assert_eq!(
        ledger
            .lower_learned_cap("s", t + 1_000, None)
            .await
            .unwrap(),
        None
    );
    let lowered_at = t + ms(LOWER_EVERY);
    let lowered = ledger
        .lower_learned_cap("s", lowered_at, None)
        .await
        .unwrap()
        .unwrap();
    let kept = LOWER * LOWER;
    assert!((lowered - cap * kept).abs() < 1e-6, "{lowered}");
    assert_eq!(published(&ledger).await, Some(lowered));
    ledger
        .report_refusal("s", "p2", 2_000.0, lowered_at + 500)
        .await
        .unwrap();
    let joined = ledger.learning("s").await.unwrap().unwrap();
    let raised = 6_000.0 * LEARNED_SHARE * kept;
    assert_eq!(joined.sum, 6_000.0);
    assert!((joined.cap.unwrap() - raised).abs() < 1e-6, "{joined:?}");
    assert_eq!(published(&ledger).await, joined.cap);
    let closed = ledger.close_round("s", t + ms(ROUND)).await.unwrap();
    assert!((closed.unwrap() - raised).abs() < 1e-6, "{closed:?}");
    let closed = ledger.learning("s").await.unwrap().unwrap();
    assert!(closed.closed && !closed.provisional && !closed.from_round);
    assert_eq!(closed.round_lowerings, 0);
    assert_eq!(
        (closed.cap_at_ms, closed.lowered_at_ms),
        (lowered_at + 500, lowered_at)
    );
    assert_eq!(published(&ledger).await, closed.cap);
}

/// A round over and never closed (every process that ran the scan then left) is closed by the
/// next ask for a raise: its cap is no longer the round's, and raises reach it.
#[tokio::test]
async fn a_round_left_open_is_closed_by_an_ask_for_a_raise() {
    let ledger = ledger().await;
    let t = 5_500_000;
    ledger.report_refusal("s", "p1", 1_000.0, t).await.unwrap();
    let late = t + ms(ROUND) + 60_000;
    assert_eq!(ledger.raise_learned_cap("s", late).await.unwrap(), None);
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert!(learning.closed && !learning.provisional, "{learning:?}");
    assert_eq!(learning.cap, Some(1_000.0 * LEARNED_SHARE));
    assert_eq!(published(&ledger).await, learning.cap);
}

/// A report into an open round is asked for what it moved over the seconds its opener's figure
/// counted, whatever seconds its own figure would count; one that opens a round names its own
/// seconds; a report of under an entity a second counts nothing, and one with no figure of its
/// own (a process the account did not refuse) opens nothing.
#[tokio::test]
async fn a_report_into_an_open_round_counts_the_seconds_its_opener_counted() {
    let ledger = ledger().await;
    let t = 2_000_000;
    let own = |rate: f64, counted_to_ms: u64| {
        Some(OwnFigure {
            rate,
            counted_to_ms,
        })
    };
    // Under an entity a second, or no figure of its own: nothing written, no round opened.
    for figure in [own(0.5, t - 4_000), None] {
        let nothing = ledger
            .report_into_round("s", "p0", figure, |_| 9_999.0, t)
            .await
            .unwrap();
        assert_eq!(nothing, Reported::Nothing);
    }
    assert!(ledger.learning("s").await.unwrap().is_none());
    // The opener's figure counts the two seconds to its refusal, 4 s before its report.
    let opened = ledger
        .report_into_round("s", "p1", own(3_000.0, t - 4_000), |_| 9_999.0, t)
        .await
        .unwrap();
    assert_eq!(opened, Reported::In(t));
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!((learning.counted_to(), learning.sum), (t - 4_000, 3_000.0));
    // A later report is asked for the same seconds; its own figure is unused.
    let asked = std::sync::Mutex::new(Vec::new());
    let joined = ledger
        .report_into_round(
            "s",
            "p2",
            own(9_999.0, t + 1_000),
            |to_ms| {
                asked.lock().unwrap().push(to_ms);
                500.0
            },
            t + 2_000,
        )
        .await
        .unwrap();
    assert_eq!(joined, Reported::In(t));
    assert_eq!(*asked.lock().unwrap(), vec![t - 4_000]);
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!((learning.sum, learning.reporters), (3_500.0, 2));
    // A process that moved nothing in those seconds adds nothing, and no name.
    let idle = ledger
        .report_into_round("s", "p3", own(9_999.0, t + 2_000), |_| 0.0, t + 3_000)
        .await
        .unwrap();
    assert_eq!(idle, Reported::Nothing);
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!((learning.sum, learning.reporters), (3_500.0, 2));
    // A figure naming seconds after its report counts to the report.
    let later = t + 60_000;
    ledger
        .report_into_round("s", "p1", own(3_000.0, later + 5_000), |_| 0.0, later)
        .await
        .unwrap();
    assert_eq!(
        ledger.learning("s").await.unwrap().unwrap().counted_to(),
        later
    );
}

#[test]
fn a_round_row_written_before_its_seconds_were_kept_counts_to_its_opening() {
    let learning = Learning {
        round_at_ms: 5_000,
        ..Learning::default()
    };
    assert_eq!(learning.counted_to(), 5_000);
    let row = learning.to_entity("s");
    let mut older = row.clone();
    older.properties.remove("countedTo");
    assert_eq!(Learning::from_entity(&older).counted_to(), 5_000);
}

/// A report's conditional write that the service applied but answered with a 500 is sent
/// again by the storage client's retry policy and meets 412 (the row changed: by itself); the
/// report then reads the row and tries afresh. It counts once, as does a report one pace sends
/// twice in a round; other paces' reports still add.
#[tokio::test]
async fn a_report_sent_again_in_its_round_counts_once() {
    let table = InMemoryTable::new("ledger");
    let ledger = ledger_on(table.clone()).await;
    let t = 1_000_000;
    assert_eq!(
        ledger.report_refusal("s", "p1", 1_000.0, t).await.unwrap(),
        Reported::In(t)
    );
    // The report's read, then its write: applied, answered 500, retried, 412.
    table.lose_answer(2, Retry::Yes);
    assert_eq!(
        ledger
            .report_refusal("s", "p2", 500.0, t + 10)
            .await
            .unwrap(),
        Reported::In(t)
    );
    assert_eq!(
        ledger
            .report_refusal("s", "p1", 1_000.0, t + 20)
            .await
            .unwrap(),
        Reported::In(t)
    );
    // A name that merely begins another's is another's.
    assert_eq!(
        ledger
            .report_refusal("s", "p", 250.0, t + 30)
            .await
            .unwrap(),
        Reported::In(t)
    );
    // A pace's holder name as the handler makes it (a UUID and a number), listed hashed.
    let holder = "3f2b8c1d9e4a4b7f8c6d5e4f3a2b1c0d.7";
    ledger
        .report_refusal("s", holder, 100.0, t + 40)
        .await
        .unwrap();
    ledger
        .report_refusal("s", holder, 100.0, t + 50)
        .await
        .unwrap();
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!((learning.sum, learning.reporters), (1_850.0, 4));
    assert_eq!(learning.reported_by.split(',').count(), 4);
    assert!(
        learning.reported_by.len() < 3 * 4 + 16 + 4,
        "{}",
        learning.reported_by
    );
    assert_eq!(
        ledger.close_round("s", t + ms(ROUND)).await.unwrap(),
        Some(1_850.0 * LEARNED_SHARE)
    );
    // Emptied with the round's close.
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!(learning.reported_by, "");
    // The next round counts the same process afresh.
    let later = t + ms(BETWEEN_ROUNDS) + 1_000;
    assert_eq!(
        ledger
            .report_refusal("s", "p1", 2_000.0, later)
            .await
            .unwrap(),
        Reported::In(later)
    );
    let learning = ledger.learning("s").await.unwrap().unwrap();
    assert_eq!((learning.sum, learning.reporters), (2_000.0, 1));
}

#[test]
fn a_round_lowers_a_cap_only_when_the_scan_pressed_on_it_and_never_far_below_its_peak() {
    // First round: what the scan moved, less the margin.
    assert_eq!(next_cap(None, 0.0, 2_000.0), 2_000.0 * LEARNED_SHARE);
    // Moving at its cap when refused: lowered to what it moved.
    assert_eq!(
        next_cap(Some(2_000.0), 2_000.0, 1_800.0),
        1_800.0 * LEARNED_SHARE
    );
    // Well under its cap: the refusal was not its volume; the cap stays.
    assert_eq!(next_cap(Some(2_000.0), 2_000.0, 1_000.0), 2_000.0);
    // Never under a quarter of the highest cap learned, nor above the largest cap.
    assert_eq!(next_cap(Some(600.0), 4_000.0, 500.0), 1_000.0);
    assert_eq!(next_cap(None, 0.0, 1e12), MOST_CAP);
    assert_eq!(next_cap(None, 0.0, 0.0), LEAST_CAP);
}

/// Scan `s` learned a cap from one report of `rate` at `t`; when its round closed.
async fn learned_at(ledger: &Ledger, t: u64, rate: f64) -> u64 {
    ledger.report_refusal("s", "p1", rate, t).await.unwrap();
    let closed = t + ms(ROUND);
    ledger.close_round("s", closed).await.unwrap();
    closed
}

/// Scan `s`'s slices, all held until `until_ms`, report `rate` entities a second in all,
/// as their holders' renewals write it.
async fn scan_moves(ledger: &Ledger, rate: f64, until_ms: u64) {
    use tablescan_pace::{SliceRow, SliceStore, SLICES};
    let stored = ledger.read_all("s").await.unwrap();
    let rows: Vec<SliceRow> = (0..SLICES)
        .map(|index| {
            let row = stored.iter().find(|r| r.index == index).cloned();
            let row = row.unwrap_or_else(|| SliceRow::unwritten(index));
            row.held("p", until_ms, rate / f64::from(SLICES))
        })
        .collect();
    ledger.write("s", &rows).await.unwrap();
}

#[test]
fn a_raise_needs_the_scan_to_use_most_of_its_cap() {
    // Binding: raised by RAISE.
    assert_eq!(raised_cap(1_000.0, 950.0), Some(1_000.0 * RAISE));
    assert_eq!(
        raised_cap(1_000.0, 1_000.0 * BINDING),
        Some(1_000.0 * RAISE)
    );
    // Something else holds the scan back (the account answers slower, the back-offs): a
    // higher cap would hold nothing back.
    assert_eq!(raised_cap(1_000.0, 600.0), None);
    assert_eq!(raised_cap(1_000.0, f64::NAN), None);
    assert_eq!(raised_cap(MOST_CAP, MOST_CAP), None);
}

#[tokio::test]
async fn a_quiet_cap_the_scan_moves_well_under_is_not_raised() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 3_000_000, 10_000.0).await;
    let cap = 10_000.0 * LEARNED_SHARE;
    let quiet = ms(QUIET);
    // Quiet for a long while, every process using its own share, but the scan as a whole
    // moves half its cap: something else limits it.
    let mut at = closed;
    for _ in 0..20 {
        at += quiet;
        scan_moves(&ledger, cap * 0.5, at + 5_000).await;
        assert_eq!(ledger.raise_learned_cap("s", at).await.unwrap(), None);
    }
    assert_eq!(published(&ledger).await, Some(cap));
    let looked = ledger.learning("s").await.unwrap().unwrap().looked_at_ms;
    assert_eq!(looked, at);
    // Binding from now: a look LOOK_AGAIN after the last reads it first, and the next,
    // LOOK_AGAIN after that, raises (two binding reads).
    let look = ms(LOOK_AGAIN);
    scan_moves(&ledger, cap, at + 3 * look).await;
    assert!(asked_until(&ledger, at + 2 * look).await.is_some());
}

/// Asks for a raise of scan `s` as processes do, up to `due`, when its quiet while ends:
/// nothing a millisecond before the first look may come ([`LOOK_AGAIN`] before `due`), nothing
/// at that first look nor while it holds the next off; what the ask at `due` returns.
async fn asked_until(ledger: &Ledger, due: u64) -> Option<f64> {
    let look = ms(LOOK_AGAIN);
    for at in [due - look - 1, due - look, due - 1] {
        let asked = ledger.raise_learned_cap("s", at).await.unwrap();
        assert_eq!(asked, None, "asked {} ms before it was due", due - at);
    }
    ledger.raise_learned_cap("s", due).await.unwrap()
}

/// One read of the slices over [`BINDING`] of the cap, the read before it under, raises
/// nothing: the reports are noisy, and a cap over what the account takes drifted up on
/// single reads (a paused-clock run of the handler's processes reached 10,132 on an account
/// taking 8,000).
#[tokio::test]
async fn a_raise_takes_two_binding_reads_of_the_slices() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 3_500_000, 10_000.0).await;
    let cap = 10_000.0 * LEARNED_SHARE;
    let look = ms(LOOK_AGAIN);
    let mut at = closed + ms(quiet_for(cap, 0));
    // Reads alternating just over and well under BINDING: never two over in a row.
    for i in 0..20 {
        let rate = if i % 2 == 0 { cap * 0.95 } else { cap * 0.85 };
        scan_moves(&ledger, rate, at + look).await;
        assert_eq!(
            ledger.raise_learned_cap("s", at).await.unwrap(),
            None,
            "{i}"
        );
        at += look;
    }
    assert_eq!(published(&ledger).await, Some(cap));
    // Two over in a row: raised.
    scan_moves(&ledger, cap * 0.95, at + 2 * look).await;
    assert_eq!(ledger.raise_learned_cap("s", at).await.unwrap(), None);
    let raised = ledger.raise_learned_cap("s", at + look).await.unwrap();
    assert_eq!(raised, Some(cap * RAISE));
}

/// A refusal of a scan pressing on its cap lowers it and holds raises off for a quiet while;
/// after that, a binding cap is raised again (no ceiling: see the module's note).
#[tokio::test]
async fn a_lowered_cap_waits_a_quiet_while_then_is_raised_while_it_binds() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 4_000_000, 10_000.0).await;
    let learned = 10_000.0 * LEARNED_SHARE;
    let refused = closed + ms(LOWER_EVERY);
    assert_eq!(
        ledger.lower_learned_cap("s", refused, None).await.unwrap(),
        Some(learned * LOWER * LOWER)
    );
    let lowered = learned * LOWER * LOWER;
    let quiet = refused + ms(QUIET);
    scan_moves(&ledger, lowered, quiet + 5_000).await;
    assert_eq!(asked_until(&ledger, quiet).await, Some(lowered * RAISE));
    assert_eq!(published(&ledger).await, Some(lowered * RAISE));
}

#[tokio::test]
async fn a_cap_that_held_quietly_is_raised_at_most_once_a_quiet_while() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 5_000_000, 1_000.0).await;
    let cap = 1_000.0 * LEARNED_SHARE;
    // A small cap: its quiet while is the time to move a hundred pages, not QUIET.
    let quiet = ms(quiet_for(cap, 0));
    assert_eq!(quiet, (QUIET_ENTITIES / cap * 1_000.0) as u64);
    assert!(quiet > ms(QUIET));
    // The scan moves all of its cap.
    scan_moves(&ledger, cap, closed + quiet + 5_000).await;
    assert_eq!(
        ledger
            .raise_learned_cap("s", closed + ms(QUIET))
            .await
            .unwrap(),
        None
    );
    let raised = asked_until(&ledger, closed + quiet).await.unwrap();
    assert!((raised - cap * RAISE).abs() < 1e-6, "{raised}");
    assert_eq!(published(&ledger).await, Some(raised));
    assert_eq!(
        ledger
            .raise_learned_cap("s", closed + quiet + 10)
            .await
            .unwrap(),
        None
    );
}

#[test]
fn the_quiet_while_is_a_hundred_pages_at_least_twenty_seconds_doubled_per_failed_raise() {
    assert_eq!(quiet_for(20_000.0, 0), QUIET);
    assert_eq!(quiet_for(2_500.0, 0), Duration::from_secs(40));
    assert_eq!(quiet_for(2_500.0, 1), Duration::from_secs(80));
    assert_eq!(quiet_for(20_000.0, 2), QUIET * 4);
    // No more than MOST_FAILED_RAISES doublings; nonsense caps take QUIET.
    assert_eq!(quiet_for(20_000.0, 50), QUIET * 8);
    assert_eq!(quiet_for(0.0, 0), QUIET);
    assert_eq!(quiet_for(f64::NAN, 1), QUIET * 2);
}

/// Scan `s`, moving all of its cap `cap`, is not raised a millisecond before `quiet` after
/// `from` and is raised then ([`asked_until`]); that time.
async fn raised_after(ledger: &Ledger, cap: f64, from: u64, quiet: u64) -> u64 {
    scan_moves(ledger, cap, from + quiet + 60_000).await;
    let at = from + quiet;
    assert!(asked_until(ledger, at).await.is_some());
    at
}

/// A raise a lowering follows doubles the quiet while before the next raise, up to
/// MOST_FAILED_RAISES times; a raise that holds until the next takes one doubling back.
#[tokio::test]
async fn raises_a_lowering_follows_come_seldom_and_raises_that_hold_as_often_as_before() {
    let ledger = ledger().await;
    let mut at = learned_at(&ledger, 9_000_000, 40_000.0).await;
    let failed = |ledger: &Ledger| {
        let ledger = ledger.clone();
        async move { ledger.learning("s").await.unwrap().unwrap().failed_raises }
    };
    // Raised, then refused, again and again: each cycle waits twice as long, up to 8 times.
    for round in 0..5u32 {
        let cap = ledger.learning("s").await.unwrap().unwrap().cap.unwrap();
        let quiet = ms(quiet_for(cap, round.min(MOST_FAILED_RAISES)));
        at = raised_after(&ledger, cap, at, quiet).await;
        at += ms(LOWER_EVERY);
        assert!(ledger
            .lower_learned_cap("s", at, None)
            .await
            .unwrap()
            .is_some());
        assert_eq!(failed(&ledger).await, (round + 1).min(MOST_FAILED_RAISES));
        if round == 0 {
            // A second lowering after the same raise counts it once.
            at += ms(LOWER_EVERY);
            ledger.lower_learned_cap("s", at, None).await.unwrap();
            assert_eq!(failed(&ledger).await, 1);
        }
    }
    // The first raise after a lowering waits its quiet while and keeps the count (it has not
    // held yet); each raise after one that held waits a doubling less and takes it back.
    for expected in (0..=MOST_FAILED_RAISES).rev() {
        let learning = ledger.learning("s").await.unwrap().unwrap();
        let cap = learning.cap.unwrap();
        let held = learning.raised_at_ms > learning.lowered_at_ms;
        let doublings = learning.failed_raises - u32::from(held);
        let quiet = ms(quiet_for(cap, doublings));
        at = raised_after(&ledger, cap, at, quiet).await;
        assert_eq!(failed(&ledger).await, expected);
    }
    // A lowering that comes more than a quiet while after the raise does not count it.
    at += 2 * ms(quiet_for(
        ledger.learning("s").await.unwrap().unwrap().cap.unwrap(),
        0,
    ));
    assert!(ledger
        .lower_learned_cap("s", at, None)
        .await
        .unwrap()
        .is_some());
    assert_eq!(failed(&ledger).await, 0);
}

#[test]
fn a_row_without_the_raise_fields_reads_as_no_raise_and_a_huge_count_as_the_most() {
    let old = Learning::from_entity(&Entity::new("s", LEARN_ROW).with("cap", Value::Double(900.0)));
    assert_eq!((old.raised_at_ms, old.failed_raises), (0, 0));
    let huge = Learning::from_entity(
        &Entity::new("s", LEARN_ROW).with("failedRaises", Value::Int64(i64::MAX)),
    );
    assert_eq!(huge.failed_raises, MOST_FAILED_RAISES);
    // Written before looks kept their reads: a look with no read (its next look raises nothing).
    let looked =
        Learning::from_entity(&Entity::new("s", LEARN_ROW).with("lookedAt", Value::Int64(5)));
    assert_eq!((looked.looked_at_ms, looked.looked_rate), (5, 0.0));
}

/// A look that found the cap not binding holds the next look off by LOOK_AGAIN, not by the
/// quiet while the failed raises doubled.
#[tokio::test]
async fn a_look_at_a_cap_not_binding_holds_the_next_off_by_a_look_alone() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 11_000_000, 40_000.0).await;
    let cap = 40_000.0 * LEARNED_SHARE;
    let mut at = closed + ms(quiet_for(cap, 0));
    // A raise, then a lowering: one failed raise.
    scan_moves(&ledger, cap, at + 5_000).await;
    let raised = asked_until(&ledger, at).await.unwrap();
    at += ms(LOWER_EVERY);
    let lowered = ledger
        .lower_learned_cap("s", at, None)
        .await
        .unwrap()
        .unwrap();
    assert!(lowered < raised);
    let changed = at;
    // Looked at after its doubled quiet while, the scan moving half the cap: not binding.
    at = changed + ms(quiet_for(lowered, 1));
    scan_moves(&ledger, lowered * 0.5, at + 5_000).await;
    assert_eq!(ledger.raise_learned_cap("s", at).await.unwrap(), None);
    // Binding from then: read first LOOK_AGAIN later, raised at the look after that, not a
    // doubled quiet while later.
    let look = ms(LOOK_AGAIN);
    scan_moves(&ledger, lowered, at + 3 * look).await;
    assert!(asked_until(&ledger, at + 2 * look).await.is_some());
}

/// A cap learned from a round summing 4,000 entities/s is refused: a lowering asked by a process
/// that names that cap as the one it ran under, or not, is declined until `every` after the cap
/// was set, then lowers it to [`LOWER`] squared of it (the first lowering after a round) and
/// publishes that, and is declined again right after. The ledger and the time of the lowering.
async fn lowered_once_a_while(names_the_cap: bool, every: u64) -> (Ledger, u64) {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 7_000_000, 4_000.0).await;
    let learned = 4_000.0 * LEARNED_SHARE;
    let seen = names_the_cap.then_some(learned);
    let lower = |at| ledger.lower_learned_cap("s", at, seen);
    // Too soon after the cap was set: the refusal may come from before every process had it.
    assert_eq!(lower(closed + every - 1).await.unwrap(), None);
    let lowered = lower(closed + every).await.unwrap().unwrap();
    assert!(
        (lowered - learned * LOWER * LOWER).abs() < 1e-6,
        "{lowered}"
    );
    assert_eq!(published(&ledger).await, Some(lowered));
    assert_eq!(lower(closed + every + 10).await.unwrap(), None);
    (ledger, closed + every)
}

#[tokio::test]
async fn a_process_refused_under_the_cap_in_force_lowers_it_sooner() {
    let seen_every = ms(LOWER_SEEN_EVERY);
    assert!(seen_every < ms(LOWER_EVERY));
    // Refused under another cap (one before this, or none yet seen): not news of this one.
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 7_000_000, 4_000.0).await;
    let other = 4_000.0 * LEARNED_SHARE * 1.5;
    for seen in [None, Some(other)] {
        let lowered = ledger.lower_learned_cap("s", closed + seen_every, seen);
        assert_eq!(lowered.await.unwrap(), None, "{seen:?}");
    }
    // Under this very cap: its short while, not the long one.
    let (ledger, lowered_at) = lowered_once_a_while(true, seen_every).await;
    // Under the lowered cap, its short while later: not news of it (the others may not have
    // read it yet, and run at the cap before); the long while, as for any refusal.
    let lowered = ledger.learning("s").await.unwrap().unwrap().cap;
    let again = |at| ledger.lower_learned_cap("s", at, lowered);
    assert_eq!(again(lowered_at + seen_every).await.unwrap(), None);
    assert!(again(lowered_at + ms(LOWER_EVERY)).await.unwrap().is_some());
}

#[tokio::test]
async fn a_refusal_at_the_learned_cap_lowers_it_at_most_once_a_while_and_not_far_below_its_peak() {
    // No learned cap yet: nothing to lower (a round learns one).
    let fresh = ledger().await;
    assert_eq!(fresh.lower_learned_cap("s", 1, None).await.unwrap(), None);
    let every = ms(LOWER_EVERY);
    let (ledger, mut at) = lowered_once_a_while(false, every).await;
    let learned = 4_000.0 * LEARNED_SHARE;
    // Refusals that keep coming (an account failing a share of requests whatever the rate)
    // stop at a quarter of the highest cap learned.
    for _ in 0..40 {
        at += every;
        ledger.lower_learned_cap("s", at, None).await.unwrap();
    }
    let cap = ledger.learning("s").await.unwrap().unwrap().cap.unwrap();
    assert!((cap - learned * LEAST_OF_PEAK).abs() < 1e-6, "{cap}");
    // Refused at the floor, the cap is not raised a quiet while later: the quiet while
    // counts from the last refusal.
    assert_eq!(ledger.raise_learned_cap("s", at + 1).await.unwrap(), None);
}

/// Makes the `n`th request from now fail; the number of the request that fails.
fn fail_request(table: &InMemoryTable, n: u64) -> u64 {
    table.fail_request(n);
    table.requests() + n
}

/// Spends on reads a failure (request number `due`) that the change it was meant for did not
/// reach, having made fewer requests.
async fn spend_failure(table: &InMemoryTable, ledger: &Ledger, due: u64) {
    while table.requests() < due {
        let _ = ledger.learning("s").await;
    }
}

/// Whether the cap every process reads with the scan is the one the learning row last set.
async fn agree(ledger: &Ledger) -> bool {
    let learned = ledger.learning("s").await.unwrap().and_then(|l| l.cap);
    published(ledger).await == learned
}

/// A close, a raise and a lowering, each with its `fail_at`-th request failing (a crash or an
/// outage at that point: before, between or after its writes), then tried again: the scan row
/// never says another cap than the learning row, so every process runs at the cap learned
/// (were the learning row written alone, it would say the change was made, and nothing would
/// publish it until the next one).
#[tokio::test]
async fn a_failure_at_any_request_of_a_change_leaves_every_process_reading_the_learned_cap() {
    for fail_at in 1..=5 {
        let table = InMemoryTable::new("ledger");
        let ledger = ledger_on(table.clone()).await;
        let t = 9_000_000;
        ledger.report_refusal("s", "p1", 10_000.0, t).await.unwrap();
        let closed = t + ms(ROUND);
        let due = fail_request(&table, fail_at);
        let _ = ledger.close_round("s", closed).await;
        spend_failure(&table, &ledger, due).await;
        assert!(agree(&ledger).await, "close, request {fail_at} failed");
        ledger.close_round("s", closed).await.unwrap();
        assert!(agree(&ledger).await, "close tried again after {fail_at}");
        let learned = 10_000.0 * LEARNED_SHARE;
        assert_eq!(published(&ledger).await, Some(learned));

        let mut at = closed + ms(QUIET);
        scan_moves(&ledger, learned, at + 5_000).await;
        // The first of the two binding reads a raise takes.
        let first_look = at - ms(LOOK_AGAIN);
        assert_eq!(
            ledger.raise_learned_cap("s", first_look).await.unwrap(),
            None
        );
        let due = fail_request(&table, fail_at);
        let _ = ledger.raise_learned_cap("s", at).await;
        spend_failure(&table, &ledger, due).await;
        assert!(agree(&ledger).await, "raise, request {fail_at} failed");
        // Tried again by the next process to ask (a failed read of the slices counts as a
        // cap not binding: two more looks, LOOK_AGAIN apart).
        for _ in 0..4 {
            if published(&ledger).await != Some(learned) {
                break;
            }
            ledger.raise_learned_cap("s", at).await.unwrap();
            assert!(agree(&ledger).await, "raise tried again after {fail_at}");
            at += ms(LOOK_AGAIN);
            scan_moves(&ledger, learned, at + 5_000).await;
        }
        let raised = learned * RAISE;
        assert_eq!(published(&ledger).await, Some(raised));

        let lowered_at = at + ms(LOWER_EVERY);
        let due = fail_request(&table, fail_at);
        let _ = ledger.lower_learned_cap("s", lowered_at, None).await;
        spend_failure(&table, &ledger, due).await;
        assert!(agree(&ledger).await, "lowering, request {fail_at} failed");
        // Tried again by the next process refused (a failure after the claim leaves the cap
        // as it was until a lowering is due again).
        let mut again_at = lowered_at;
        for _ in 0..3 {
            if published(&ledger).await != Some(raised) {
                break;
            }
            ledger.lower_learned_cap("s", again_at, None).await.unwrap();
            assert!(agree(&ledger).await, "lowering tried again after {fail_at}");
            again_at += ms(LOWER_EVERY);
        }
        // The slices' reports lapsed: lowered from the cap.
        assert_eq!(published(&ledger).await, Some(raised * LOWER));
    }
}

#[test]
fn a_lowering_takes_the_cap_under_what_the_scan_moved() {
    // Moved less than its cap: lowered under what it moved, not under the cap it never reached.
    assert_eq!(lowered_cap(3_000.0, 2_800.0, 3_000.0), 2_800.0 * LOWER);
    // Moved its cap (or more, between reports): under the cap.
    assert_eq!(lowered_cap(3_000.0, 3_300.0, 3_000.0), 3_000.0 * LOWER);
    // What it moved unknown (no slice reported, or they could not be read): under the cap.
    assert_eq!(lowered_cap(3_000.0, 0.0, 3_000.0), 3_000.0 * LOWER);
    assert_eq!(lowered_cap(3_000.0, f64::NAN, 3_000.0), 3_000.0 * LOWER);
    // Never under LOWER squared of the cap in one lowering (a scan near its end moves little
    // whatever its cap), nor under a quarter of the highest cap learned.
    assert_eq!(
        lowered_cap(3_000.0, 200.0, 3_000.0),
        3_000.0 * LOWER * LOWER
    );
    assert_eq!(lowered_cap(1_000.0, 100.0, 8_000.0), 2_000.0);
}

#[tokio::test]
async fn a_refusal_of_a_scan_moving_under_its_learned_cap_lowers_it_under_what_it_moves() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 7_000_000, 4_000.0).await;
    let ledger = &ledger;
    let lower = |at| async move {
        let lowered = ledger.lower_learned_cap("s", at, None).await.unwrap();
        let lowered = lowered.expect("lowered");
        assert_eq!(published(ledger).await, Some(lowered));
        lowered
    };
    // The first refusal after the round: the whole step, whatever the scan moved (the
    // round's sample of what the account served was high).
    let first = closed + ms(LOWER_EVERY);
    let learned = 4_000.0 * LEARNED_SHARE;
    scan_moves(ledger, learned - 10.0, first + 5_000).await;
    let lowered = lower(first).await;
    assert!(
        (lowered - learned * LOWER * LOWER).abs() < 1e-6,
        "{lowered}"
    );
    // Then the scan moves 95% of that: the account (beside an application) holds it there;
    // refused again, the cap goes under what it moves, not under the cap.
    let second = first + ms(LOWER_EVERY);
    let moved = lowered * 0.95;
    scan_moves(ledger, moved, second + 5_000).await;
    let lowered = lower(second).await;
    assert!((lowered - moved * LOWER).abs() < 1e-6, "{lowered}");
}

#[test]
fn the_first_lowering_after_a_round_takes_the_whole_step_above_the_floors() {
    assert_eq!(lowered_round_cap(3_000.0, 3_000.0), 3_000.0 * LOWER * LOWER);
    // Never under a quarter of the highest cap learned, nor the least cap.
    assert_eq!(lowered_round_cap(1_000.0, 3_800.0), 950.0);
    assert_eq!(lowered_round_cap(110.0, 110.0), 100.0);
}

/// A round's list of reporters stops growing at what a string property bears: a report past
/// it counts unlisted. Names that are long or hold a comma are listed by their hash.
#[test]
fn a_full_list_of_reporters_takes_no_more_names() {
    let mut learning = Learning {
        reported_by: "a".repeat(10),
        ..Learning::default()
    };
    assert_eq!(learning.reported_with("p1"), "aaaaaaaaaa,p1");
    learning.reported_by = "a".repeat(MOST_REPORTED_CHARS - 2);
    assert_eq!(learning.reported_with("p1"), learning.reported_by);
    assert_eq!(Learning::default().reported_with("p1"), "p1");
    let hashed = reporter_mark("x,y");
    assert_eq!(hashed.len(), 16);
    assert!(hashed.chars().all(|c| c.is_ascii_hexdigit()), "{hashed}");
    assert_ne!(reporter_mark("x,z"), hashed);
}

/// A first lowering after a round whose `fail_at`-th request fails (after its claim, between
/// its reads, at its write) leaves the round's cap in force, and the lowering that comes next
/// still takes the whole step: the claim moved the cap's time, not what set the cap.
#[tokio::test]
async fn a_round_cap_whose_first_lowering_failed_still_loses_the_whole_step() {
    for fail_at in 1..=4 {
        let table = InMemoryTable::new("ledger");
        let ledger = ledger_on(table.clone()).await;
        let closed = learned_at(&ledger, 9_000_000, 10_000.0).await;
        let learned = 10_000.0 * LEARNED_SHARE;
        let mut at = closed + ms(LOWER_EVERY);
        scan_moves(&ledger, learned, at + 60_000).await;
        let due = fail_request(&table, fail_at);
        let _ = ledger.lower_learned_cap("s", at, None).await;
        spend_failure(&table, &ledger, due).await;
        for _ in 0..3 {
            if published(&ledger).await != Some(learned) {
                break;
            }
            at += ms(LOWER_EVERY);
            ledger.lower_learned_cap("s", at, None).await.unwrap();
        }
        let cap = published(&ledger).await.unwrap();
        assert!(
            (cap - learned * LOWER * LOWER).abs() < 1e-6,
            "request {fail_at} failed: {cap}"
        );
    }
}

/// A round that keeps the cap (the scan moved well under it when refused) sampled nothing
/// new: the next lowering is the gentle one, under what the scan moved.
#[tokio::test]
async fn a_round_that_keeps_the_cap_leaves_the_next_lowering_gentle() {
    let ledger = ledger().await;
    let closed = learned_at(&ledger, 9_000_000, 10_000.0).await;
    let first = closed + ms(LOWER_EVERY);
    scan_moves(&ledger, 9_000.0, first + 5_000).await;
    let lowered = ledger.lower_learned_cap("s", first, None).await.unwrap();
    let learned = 10_000.0 * LEARNED_SHARE;
    assert_eq!(lowered, Some(learned * LOWER * LOWER));
    // A process that had not read the cap reports a refusal at 3,000: a round that keeps it.
    let t = first + ms(BETWEEN_ROUNDS);
    ledger.report_refusal("s", "p2", 3_000.0, t).await.unwrap();
    let round_closed = t + ms(ROUND);
    ledger.close_round("s", round_closed).await.unwrap();
    assert_eq!(published(&ledger).await, Some(learned * LOWER * LOWER));
    let next = round_closed + ms(LOWER_EVERY);
    let moved = learned * LOWER * LOWER * 0.95;
    scan_moves(&ledger, moved, next + 5_000).await;
    let lowered = ledger.lower_learned_cap("s", next, None).await.unwrap();
    let lowered = lowered.expect("lowered");
    assert!((lowered - moved * LOWER).abs() < 1e-6, "{lowered}");
}
