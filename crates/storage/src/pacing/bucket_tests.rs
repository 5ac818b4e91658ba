//! The bucket's pacing, places given up and stalls, on a paused clock; and every taker's wait
//! against a plain model over random sequences of reservations, give-ups and time.

use super::*;

#[tokio::test(start_paused = true)]
async fn what_a_stall_held_back_is_forfeit_not_let_through_at_once() {
    let bucket = TokenBucket::new(Some(1_000.0));
    let place = bucket.reserve(3_000.0);
    // Nobody looks for two seconds (the process did not run): only 300 ms are credited.
    tokio::time::advance(Duration::from_secs(2)).await;
    let left = bucket.due(place) - tokio::time::Instant::now();
    assert_eq!(left, Duration::from_millis(2_700));
}

/// Places reserved while the bucket had no rate go at once only if they go before a rate is
/// set: those still to go when it is set wait for it, behind the ones that went.
#[tokio::test(start_paused = true)]
async fn a_rate_set_where_there_was_none_holds_back_the_places_not_gone_yet() {
    let bucket = TokenBucket::new(None);
    bucket.take(5_000).await;
    // Three steps reserve their next pages ahead, with no rate: earned at once.
    let ahead: Vec<f64> = (0..3).map(|_| bucket.reserve(1_000.0)).collect();
    assert_eq!(bucket.due(ahead[2]), tokio::time::Instant::now());
    bucket.set_rate(Some(1_000.0));
    // The first page goes after a second at the rate, the third after three.
    let now = tokio::time::Instant::now();
    for (i, place) in ahead.iter().enumerate() {
        let due = bucket.due(*place) - now;
        assert_eq!(due, Duration::from_secs(i as u64 + 1));
    }
    let start = tokio::time::Instant::now();
    bucket.hold(ahead[0], 1_000).earned().await;
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // A rate changed while one was in force charges nothing again.
    bucket.set_rate(Some(2_000.0));
    assert_eq!(
        bucket.due(ahead[1]) - tokio::time::Instant::now(),
        Duration::from_millis(500)
    );
}

#[tokio::test(start_paused = true)]
async fn a_place_released_after_it_was_earned_is_forfeit_and_before_it_goes_back() {
    let bucket = TokenBucket::new(Some(1_000.0));
    let early = bucket.reserve(500.0);
    let due = bucket.due(early);
    assert_eq!(
        due - tokio::time::Instant::now(),
        Duration::from_millis(500)
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    // Earned a while ago: given up, it does not let the next taker go early.
    bucket.release(early, 500);
    let start = tokio::time::Instant::now();
    bucket.take(1_000).await;
    assert!(
        start.elapsed() >= Duration::from_millis(999),
        "{:?}",
        start.elapsed()
    );
    // Not earned yet: given back, the taker behind it goes that much sooner.
    let ahead = bucket.reserve(1_000.0);
    assert!(bucket.due(ahead) > tokio::time::Instant::now());
    bucket.release(ahead, 1_000);
    let start = tokio::time::Instant::now();
    bucket.take(500).await;
    assert!(
        start.elapsed() <= Duration::from_millis(501),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_place_given_up_behind_a_waiting_taker_goes_to_those_behind_it_only() {
    let bucket = TokenBucket::new(Some(1_000.0));
    let ahead = bucket.reserve(1_000.0);
    let given_up = bucket.reserve(2_000.0);
    let behind = bucket.reserve(500.0);
    bucket.release(given_up, 2_000);
    let now = tokio::time::Instant::now();
    // The taker ahead still waits its whole second; the one behind only for the two places
    // around the gap: 1,500 entities.
    assert_eq!(bucket.due(ahead) - now, Duration::from_secs(1));
    assert_eq!(bucket.due(behind) - now, Duration::from_millis(1_500));
    let start = tokio::time::Instant::now();
    bucket.wait(behind).await;
    assert_eq!(start.elapsed(), Duration::from_millis(1_500));
    // Nothing left over: the next taker waits for its own entities only.
    let start = tokio::time::Instant::now();
    bucket.take(100).await;
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_take_given_up_gives_its_place_back() {
    let bucket = TokenBucket::new(Some(1_000.0));
    // 10 s of entities, given up after 2 s.
    let gave_up = tokio::time::timeout(Duration::from_secs(2), bucket.take(10_000)).await;
    assert!(gave_up.is_err());
    let start = tokio::time::Instant::now();
    bucket.take(100).await;
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    // So does a place reserved ahead whose wait never started, behind another taker.
    let ahead = bucket.reserve(1_000.0);
    drop(bucket.hold(bucket.reserve(5_000.0), 5_000));
    let start = tokio::time::Instant::now();
    bucket.wait(ahead).await;
    bucket.take(100).await;
    assert_eq!(start.elapsed(), Duration::from_millis(1_100));
}

#[tokio::test(start_paused = true)]
async fn takers_are_paced_to_the_rate_with_no_burst() {
    let bucket = TokenBucket::new(Some(1_000.0));
    let start = tokio::time::Instant::now();
    for _ in 0..10 {
        bucket.take(500).await;
    }
    // 5,000 entities at 1,000/s: the last reservation is paid at 5 s, the first at 0.5 s.
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_rate_lowered_while_takers_wait_holds_them_back() {
    let bucket = std::sync::Arc::new(TokenBucket::new(Some(1_000.0)));
    let start = tokio::time::Instant::now();
    let waiting = {
        let bucket = bucket.clone();
        tokio::spawn(async move { bucket.take(2_000).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // 1,000 of the 2,000 earned; the other 1,000 now at 250/s.
    bucket.set_rate(Some(250.0));
    waiting.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_rate_of_nothing_holds_takers_until_it_rises() {
    // A process whose share of a cap falls to nothing: its takers wait (they used to panic
    // on the infinite wait) and go once a share comes back.
    let bucket = std::sync::Arc::new(TokenBucket::new(Some(0.0)));
    let start = tokio::time::Instant::now();
    let waiting = {
        let bucket = bucket.clone();
        tokio::spawn(async move { bucket.take(100).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!waiting.is_finished());
    bucket.set_rate(Some(100.0));
    waiting.await.unwrap();
    assert!(
        start.elapsed() <= Duration::from_millis(4_300),
        "{:?}",
        start.elapsed()
    );
}
#[tokio::test(start_paused = true)]
async fn unlimited_never_waits_and_a_new_rate_applies_to_later_takers() {
    let bucket = TokenBucket::new(None);
    let start = tokio::time::Instant::now();
    bucket.take(1_000_000).await;
    assert_eq!(start.elapsed(), Duration::ZERO);
    bucket.set_rate(Some(100.0));
    bucket.take(100).await;
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    bucket.set_rate(Some(1_000.0));
    bucket.take(100).await;
    assert_eq!(start.elapsed(), Duration::from_millis(1_100));
}

#[tokio::test(start_paused = true)]
async fn entities_given_back_shorten_the_wait_of_later_takers() {
    let bucket = TokenBucket::new(Some(1_000.0));
    let start = tokio::time::Instant::now();
    // A page of 1,000 reserved, 200 of it used: the next taker waits for 200 + its 300.
    bucket.reserve(1_000.0);
    bucket.give_back(800);
    assert_eq!(bucket.backlog(), Duration::from_millis(200));
    bucket.take(300).await;
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_remainder_too_small_to_wait_for_does_not_spin() {
    // Rates and amounts whose sums do not come out even in binary.
    let bucket = TokenBucket::new(Some(333.333_333_3));
    for n in [1u64, 7, 13, 1000, 3] {
        for _ in 0..50 {
            bucket.take(n).await;
        }
        bucket.set_rate(Some(0.1 + n as f64 / 3.0));
    }
    assert!(bucket.backlog() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn concurrent_takers_share_the_rate() {
    let bucket = std::sync::Arc::new(TokenBucket::new(Some(2_000.0)));
    let start = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let bucket = bucket.clone();
            tokio::spawn(async move {
                for _ in 0..5 {
                    bucket.take(250).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // 8 x 5 x 250 = 10,000 entities at 2,000/s.
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

/// What the bucket should do, kept plainly: each reservation's entities not yet earned, in
/// order; the rate earns them front to back, and entities given back (a short page) are earned
/// the same way at once; one given up owes nothing any more (what of it was earned is forfeit),
/// and given up again changes nothing; credit with nothing left to earn is lost; no rate earns
/// everything, and a rate set after none owes again, whole, what was reserved with no rate and
/// not given up (nothing here goes: the model only asks when each place is due); a look more
/// than 300 ms after the last earns 300 ms (a stall's time is forfeit).
#[derive(Debug, Clone)]
enum Op {
    Reserve(u16),
    GiveUp(usize),
    GiveBack(u16),
    SetRate(Option<u16>),
    Advance(u16),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (1u16..3_000).prop_map(Op::Reserve),
        2 => any::<usize>().prop_map(Op::GiveUp),
        1 => (1u16..2_000).prop_map(Op::GiveBack),
        1 => proptest::option::weighted(0.8, 100u16..5_000).prop_map(Op::SetRate),
        3 => (1u16..2_000).prop_map(Op::Advance),
    ]
}

/// The model's reservations: place, entities, entities not yet earned, given up, reserved
/// with no rate since the last rate.
#[derive(Debug, Clone, Copy)]
struct Entry {
    place: f64,
    entities: u64,
    unearned: f64,
    given_up: bool,
    unpaid: bool,
}

/// Earns `credit` entities front to back over what is still owed.
fn earn(model: &mut [Entry], mut credit: f64) {
    for entry in model.iter_mut().filter(|e| !e.given_up) {
        let paid = entry.unearned.min(credit);
        entry.unearned -= paid;
        credit -= paid;
    }
}

async fn check(ops: Vec<Op>) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut rate = Some(1_000.0);
    let bucket = TokenBucket::new(rate);
    let mut model: Vec<Entry> = Vec::new();
    for op in ops {
        match op {
            Op::Reserve(n) => {
                let place = bucket.reserve(f64::from(n));
                model.push(Entry {
                    place,
                    entities: u64::from(n),
                    unearned: f64::from(n),
                    given_up: false,
                    unpaid: rate.is_none(),
                });
            }
            Op::GiveUp(i) if !model.is_empty() => {
                let at = i % model.len();
                let entry = &mut model[at];
                bucket.release(entry.place, entry.entities);
                entry.unearned = 0.0;
                entry.given_up = true;
            }
            Op::GiveUp(_) => {}
            Op::GiveBack(n) => {
                bucket.give_back(u64::from(n));
                earn(&mut model, f64::from(n));
            }
            Op::SetRate(new) => {
                let was_none = rate.is_none();
                rate = new.map(f64::from);
                bucket.set_rate(rate);
                for entry in &mut model {
                    if was_none && rate.is_some() && entry.unpaid && !entry.given_up {
                        entry.unearned = entry.entities as f64;
                    }
                    if rate.is_some() {
                        entry.unpaid = false;
                    }
                }
            }
            Op::Advance(ms) => {
                tokio::time::advance(Duration::from_millis(u64::from(ms))).await;
                if let Some(rate) = rate {
                    earn(&mut model, f64::from(ms.min(300)) / 1_000.0 * rate);
                }
            }
        }
        if rate.is_none() {
            earn(&mut model, f64::INFINITY);
        }
        let now = tokio::time::Instant::now();
        let mut owed = 0.0;
        for entry in &model {
            owed += entry.unearned;
            if entry.given_up {
                continue;
            }
            let expected = match rate {
                Some(rate) if owed > 1e-3 => (owed / rate).min(3_600.0),
                _ => 0.0,
            };
            let due = (bucket.due(entry.place) - now).as_secs_f64();
            proptest::prop_assert!(
                (due - expected).abs() <= 0.001,
                "place {}: due in {due} s, {owed} owed up to it",
                entry.place
            );
        }
    }
    Ok(())
}

proptest::proptest! {
    #[test]
    fn every_taker_waits_for_what_is_owed_ahead_of_it_and_no_more(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(check(ops))?;
    }
}
