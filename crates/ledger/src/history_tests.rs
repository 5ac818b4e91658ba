use proptest::prelude::*;

use super::*;

fn rows(n: u64) -> Sample {
    Sample {
        rows_read: n,
        rows_acted: n,
        throttled: 0,
    }
}

fn total(history: &History) -> Sample {
    let mut sum = Sample::default();
    for s in history.samples() {
        sum.add(*s);
    }
    sum
}

const T0: u64 = 1_764_000_000_000;

#[test]
fn a_minute_is_kept_by_the_second() {
    let mut h = History::default();
    for s in 0..60 {
        h.record(T0 + s * 1000 + 500, rows(s + 1));
    }
    assert_eq!(h.seconds(), 1);
    assert_eq!(h.samples().len(), 60);
    assert_eq!(h.samples()[7].rows_read, 8);
    assert_eq!(h.start_seconds(), T0 / 1000);
}

#[test]
fn an_hour_fits_in_sixty_four_intervals_with_every_row() {
    let mut h = History::default();
    for s in 0..3600 {
        h.record(T0 + s * 1000, rows(10));
    }
    assert!(h.samples().len() <= SAMPLES);
    assert_eq!(h.seconds(), 64);
    assert_eq!(total(&h).rows_read, 36_000);
    // A full interval in the middle holds 64 seconds of rows.
    assert_eq!(h.samples()[10].rows_read, 640);
}

#[test]
fn a_finish_stamped_before_the_first_interval_counts_in_it() {
    let mut h = History::default();
    h.record(T0 + 10_000, rows(5));
    h.record(T0, rows(3));
    assert_eq!(h.samples().len(), 1);
    assert_eq!(h.samples()[0].rows_read, 8);
}

#[test]
fn it_round_trips_through_a_shard_and_bad_text_reads_as_empty() {
    let mut h = History::default();
    h.record(T0, rows(5));
    h.record(
        T0 + 3000,
        Sample {
            rows_read: 7,
            rows_acted: 0,
            throttled: 2,
        },
    );
    let mut e = Entity::new("s", "counter:00");
    h.write_into(&mut e);
    assert_eq!(History::from_entity(&e), h);
    for bad in ["", "h2;0;1;1", "h1;x;1;1", "h1;0;1;1/2/3/4", "h1;0;1;a"] {
        let e = Entity::new("s", "counter:00").with(HISTORY_PROPERTY, Value::String(bad.into()));
        assert_eq!(History::from_entity(&e), History::default(), "{bad}");
    }
    let too_long = format!("h1;0;1;{}", vec!["1"; SAMPLES + 1].join(","));
    let e = Entity::new("s", "c").with(HISTORY_PROPERTY, Value::String(too_long));
    assert_eq!(History::from_entity(&e), History::default());
}

/// A history that parses but cannot be one this code wrote (a damaged shard, or one edited by
/// hand): intervals past the year 36,000, where the sum of two shards would span a vector of
/// trillions of intervals (the process aborts on the allocation) and `first + len` overflows,
/// or numbers whose rows read plus rows acted overflow. Each counts as empty, or shows without
/// a panic, as the module promises.
#[test]
fn a_history_out_of_any_time_reads_as_empty_and_sums_without_a_panic() {
    let shard = |text: &str| {
        let e = Entity::new("s", "c").with(HISTORY_PROPERTY, Value::String(text.into()));
        History::from_entity(&e)
    };
    let mut sane = History::default();
    sane.record(T0, rows(5));
    for far in [
        "h1;40;1000000000000;1".to_string(),
        format!("h1;0;{};1", u64::MAX),
        format!("h1;40;{};1", u64::MAX >> 40),
        format!("h1;1;{};1,1", u64::MAX >> 1),
    ] {
        let damaged = shard(&far);
        assert_eq!(damaged, History::default(), "{far}");
        let mut sum = sane.clone();
        sum.add(damaged);
        assert_eq!(sum, sane, "{far}");
    }
    let big = shard(&format!("h1;0;{};{}/{}", T0 / 1000, u64::MAX, u64::MAX));
    let shown = rate_history(&big, (T0 / 1000) as i64, true).unwrap();
    assert_eq!(shown.entities, vec![u64::MAX]);
}

#[test]
fn the_status_form_counts_writes_for_actions_that_write() {
    let mut h = History::default();
    h.record(T0 + 2000, rows(10));
    let shown = rate_history(&h, (T0 / 1000) as i64, true).unwrap();
    assert_eq!(shown.offset_seconds, 2);
    assert_eq!(shown.entities, vec![20]);
    let shown = rate_history(&h, (T0 / 1000) as i64, false).unwrap();
    assert_eq!(shown.entities, vec![10]);
    assert!(rate_history(&History::default(), 0, true).is_none());
}

/// The property stays small: 4 KB with every number at its largest, under 1 KB at the counts
/// of a 35-million-row scan over an hour (some 40,000 rows per shard and 64 s interval).
#[test]
fn a_full_history_is_a_few_kilobytes_at_most() {
    let text_of = |history: &History| {
        let mut e = Entity::new("s", "c");
        history.write_into(&mut e);
        match e.properties.get(HISTORY_PROPERTY) {
            Some(Value::String(text)) => text.len(),
            _ => 0,
        }
    };
    let big = Sample {
        rows_read: u64::MAX / 2,
        rows_acted: u64::MAX / 2,
        throttled: u64::MAX / 2,
    };
    let mut largest = History::default();
    let mut typical = History::default();
    for s in 0..3600u64 {
        largest.record(T0 + s * 1000, big);
        typical.record(T0 + s * 1000, rows(625));
    }
    assert_eq!(largest.samples().len(), SAMPLES - 7);
    assert!(text_of(&largest) <= 4096, "{}", text_of(&largest));
    assert!(text_of(&typical) < 1024, "{}", text_of(&typical));
}

#[test]
fn the_recent_rate_is_of_the_last_intervals_up_to_now() {
    let shown = RateHistory {
        bucket_seconds: 1,
        offset_seconds: 0,
        rows_read: vec![100; 30],
        entities: vec![100; 30],
        requests_throttled: vec![0; 30],
    };
    // Ten seconds of 100 rows each, read 30 s after the start.
    assert_eq!(shown.recent_rows_per_second(30.0, 10.0), Some(100.0));
    // Nothing finished in the last 10 s of a scan read 60 s after its start.
    assert_eq!(shown.recent_rows_per_second(60.0, 10.0), Some(0.0));
    // A scan 6 s old whose first step finished a second ago: its rows over those 6 s, not
    // over the second.
    let young = RateHistory {
        bucket_seconds: 1,
        offset_seconds: 5,
        rows_read: vec![600],
        entities: vec![600],
        requests_throttled: vec![0],
    };
    assert_eq!(young.recent_rows_per_second(6.0, 10.0), Some(100.0));
    assert_eq!(young.recent_rows_per_second(0.0, 10.0), None);
}

proptest! {
    /// However finishes fall over shards and time, the sum of the shards' histories holds
    /// every row and throttled request, in at most SAMPLES intervals, and its text fits well
    /// within a property.
    #[test]
    fn shards_sum_to_every_finish_within_the_bound(
        mut finishes in prop::collection::vec((0u8..16, 0u64..200_000_000, 0u64..5000, 0u64..3), 1..300)
    ) {
        // Finishes come in about the order of their times (a clock a little behind is the
        // test above).
        finishes.sort_by_key(|f| f.1);
        let mut shards = vec![History::default(); 16];
        let mut expected = Sample::default();
        for (shard, at, n, throttled) in &finishes {
            let sample = Sample { rows_read: *n, rows_acted: *n / 2, throttled: *throttled };
            shards[*shard as usize].record(T0 + at, sample);
            expected.add(sample);
        }
        let mut sum = History::default();
        for shard in &shards {
            prop_assert!(shard.samples().len() <= SAMPLES);
            let mut e = Entity::new("s", "c");
            shard.write_into(&mut e);
            let read = History::from_entity(&e);
            prop_assert_eq!(&read, shard);
            sum.add(read);
        }
        prop_assert!(sum.samples().len() <= SAMPLES);
        prop_assert_eq!(total(&sum), expected);
        // The first interval holds the first finish that counted anything (a finish of no
        // rows and no throttling leaves no trace).
        let counted = |f: &&(u8, u64, u64, u64)| f.2 > 0 || f.3 > 0;
        match finishes.iter().filter(counted).map(|f| (T0 + f.1) / 1000).min() {
            Some(first) => {
                prop_assert!(sum.start_seconds() <= first);
                prop_assert!(sum.start_seconds() + sum.seconds() > first);
            }
            None => prop_assert!(sum.samples().is_empty()),
        }
    }
}
