//! What a process moved, read back over windows: between counts, around its start, and before
//! a refusal named on another clock.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How long the histories here keep counts.
const KEEP: Duration = Duration::from_secs(16);

/// A history started at `start`, with `counts` (ms after the start, running total) taken.
fn history(start: Instant, counts: &[(u64, u64)]) -> MovedHistory {
    let mut history = MovedHistory::new(start, KEEP);
    for &(at, moved) in counts {
        history.note(start + ms(at), moved);
    }
    history
}

#[test]
fn what_moved_by_a_time_is_read_between_the_counts_around_it() {
    let start = Instant::now();
    let h = history(start, &[(100, 100), (200, 300), (300, 300)]);
    assert_eq!(h.moved_by(start), Some(0.0));
    // Between the start and the first count, and between counts: in proportion to the time.
    assert_eq!(h.moved_by(start + ms(50)), Some(50.0));
    assert_eq!(h.moved_by(start + ms(150)), Some(200.0));
    assert_eq!(h.moved_by(start + ms(250)), Some(300.0));
    // After the last count: the last count.
    assert_eq!(h.moved_by(start + ms(5_000)), Some(300.0));
    assert!(h.moved_lately());
    assert!(!history(start, &[(100, 0), (200, 0)]).moved_lately());
}

#[test]
fn before_the_oldest_count_kept_the_total_is_not_known() {
    let start = Instant::now();
    let mut h = MovedHistory::new(start, KEEP);
    // A count every second for longer than it keeps: 1,000 entities a second.
    let seconds = KEEP.as_secs() + 5;
    for s in 1..=seconds {
        h.note(start + Duration::from_secs(s), s * 1_000);
    }
    assert!(h.counts.front().unwrap().1 > 1_000, "nothing was dropped");
    // Not 0 (which would count every dropped second as moved in a window), nor the oldest kept
    // (which, as a window's end, would count them all as moved in it): not known.
    assert_eq!(h.moved_by(start + Duration::from_secs(1)), None);
    assert_eq!(
        h.served_over(start, start + Duration::from_secs(2)),
        0.0,
        "seconds older than the counts kept"
    );
    // Within the counts kept: known.
    let end = start + Duration::from_secs(seconds);
    assert_eq!(h.served_before(end), 1_000.0);
    assert!(h.moved_lately());
}

#[test]
fn a_window_holding_the_start_counts_a_seconds_burst_more_time() {
    let start = Instant::now();
    // 4,000 entities in the first second: an idle account's burst and its rate.
    let h = history(start, &[(500, 2_500), (1_000, 4_000)]);
    // From the start to 1 s, over 1 s and the burst's second: 2,000 a second.
    assert_eq!(h.served_before(start + ms(1_000)), 2_000.0);
    assert_eq!(h.served_over(start, start + ms(1_000)), 2_000.0);
    // A window begun later: its own time.
    let h = history(start, &[(1_000, 4_000), (3_000, 8_000), (5_000, 12_000)]);
    assert_eq!(h.served_before(start + ms(5_000)), 2_000.0);
    // Ended at the start: nothing.
    assert_eq!(h.served_over(start, start), 0.0);
}

/// A refusal whose two seconds begin within two seconds of the start: the figure is what moved
/// since the start over that time and a second more, if less than the window's own. Only the
/// refused process's own figure: the seconds a round counts, read by a process that joins it,
/// are its own.
#[test]
fn a_refusal_near_the_start_counts_from_it_if_less() {
    let start = Instant::now();
    // An account taking 2,000 a second with a second's worth in hand, spent over the first two
    // seconds while the process ramped (2,500, then 3,500, then 2,000): 8,000 over 3 s and 1 s,
    // where the window from 1 s alone says 2,750 a second.
    let h = history(start, &[(1_000, 2_500), (2_000, 6_000), (3_000, 8_000)]);
    assert_eq!(h.served_before(start + ms(3_000)), 2_000.0);
    assert_eq!(h.served_over(start + ms(1_000), start + ms(3_000)), 2_750.0);
    // The window beginning two seconds after the start still counts from it; a moment later,
    // not.
    let h = history(
        start,
        &[
            (1_000, 2_000),
            (2_000, 4_000),
            (4_000, 10_000),
            (5_000, 13_000),
        ],
    );
    assert_eq!(h.served_before(start + ms(4_000)), 2_000.0);
    assert_eq!(h.served_before(start + ms(4_500)), 3_000.0);
    // A process that stood idle in the window served nothing there, whatever it moved before.
    let h = history(start, &[(1_000, 5_000), (2_000, 5_000), (3_000, 5_000)]);
    assert_eq!(h.served_before(start + ms(3_000)), 0.0);
    // A process that started a second before the window at a steady 2,000 a second (on a busy
    // account: no burst) reads 2,000 there as a joiner, not 6,000 over 4 s.
    let h = history(start, &[(1_000, 2_000), (2_000, 4_000), (3_000, 6_000)]);
    let now = start + ms(3_000);
    assert_eq!(h.served_to(1_000_000, now, 1_000_000), 2_000.0);
}

#[test]
fn the_rate_is_over_the_last_two_seconds_and_a_second_at_least() {
    let start = Instant::now();
    assert_eq!(MovedHistory::new(start, KEEP).rate(), 0.0);
    // 600 entities in the first half second: over a second, not half.
    let h = history(start, &[(500, 600)]);
    assert_eq!(h.rate(), 600.0);
    // Later: over the two seconds to the last count.
    let h = history(start, &[(1_000, 1_000), (2_000, 2_000), (3_000, 5_000)]);
    assert_eq!(h.rate(), 2_000.0);
}

#[test]
fn the_seconds_to_a_time_named_on_the_ledgers_clock() {
    let start = Instant::now();
    // 1,000 entities a second for 10 s, then 5,000 a second for 2 s.
    let mut counts: Vec<(u64, u64)> = (1..=10).map(|s| (s * 1_000, s * 1_000)).collect();
    counts.extend([(11_000, 15_000), (12_000, 20_000)]);
    let h = history(start, &counts);
    let now = start + ms(12_000);
    let now_ms = 1_000_000;
    // To 3 s ago (9 s): the two seconds before, not the last two.
    assert_eq!(h.served_to(now_ms - 3_000, now, now_ms), 1_000.0);
    assert_eq!(h.served_to(now_ms, now, now_ms), 5_000.0);
    assert_eq!(h.served_before(now), 5_000.0);
    // Seconds this clock puts later than now (a clock a moment behind the opener's): those to
    // now.
    assert_eq!(h.served_to(now_ms + 500, now, now_ms), 5_000.0);
    // Seconds before this process started: nothing it moved came in them.
    assert_eq!(h.served_to(now_ms - 12_500, now, now_ms), 0.0);
}
