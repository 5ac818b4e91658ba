//! When a process asks for a raise of its scan's learned cap, on a paused clock and the
//! in-memory ledger.

use super::super::tests::{ledger_with_scan_row, record};
use super::super::{LeaseClock, ScanPace};
use super::*;
use tablescan_ledger::Ledger;
use tablescan_storage::pacing::Governor;

/// A process of a scan that learned a cap a while ago, its steps reading through `source`: its
/// refresher, not running (the test drives it).
async fn refresher_of_learned_scan(source: &Arc<Governor>) -> (Refresher, Ledger, String) {
    let scan = record("scan-raise", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let clock = LeaseClock::new(tablescan_pace::TokioClock);
    // Learned a minute ago: quiet for longer than QUIET.
    let then = clock.now_ms() - 60_000;
    ledger
        .report_refusal(&scan.id, "p1", 10_000.0, then)
        .await
        .unwrap();
    let cap = ledger
        .close_round(&scan.id, then + ROUND.as_millis() as u64)
        .await
        .unwrap();
    let pace = Arc::new(ScanPace::new(&ledger, "p".into(), &clock, &scan));
    pace.watch(source);
    pace.learned(cap);
    (Refresher::new(pace, Scans::default()), ledger, scan.id)
}

/// `source`'s target answering `answers` requests in `quick`, then `slow` ones in `took`.
fn answered(source: &Governor, quick: usize, slow: usize, took: Duration) {
    for _ in 0..quick {
        source.answered_in(Duration::from_millis(10), 1_000);
    }
    for _ in 0..slow {
        source.answered_in(took, 1_000);
    }
}

/// While the account answers the process much slower than it did (it queues, as it does before
/// it refuses), the process asks no raise; once it answers quickly again, it does.
#[tokio::test(start_paused = true)]
async fn a_process_its_account_answers_slowly_asks_no_raise() {
    let source = Arc::new(Governor::default());
    let (mut refresher, ledger, scan) = refresher_of_learned_scan(&source).await;
    answered(&source, 5, 10, Duration::from_millis(400));
    assert!(source.answers_slowly());
    refresher.raise(Instant::now()).await;
    assert_eq!(refresher.raise_tried, None, "asked while answered slowly");
    let learning = ledger.learning(&scan).await.unwrap().unwrap();
    assert_eq!(learning.looked_at_ms, 0, "the ledger was asked");

    // Quick again: asked (the scan's slices report nothing moved, so the ledger looks and
    // finds the cap not binding).
    answered(&source, 20, 0, Duration::ZERO);
    assert!(!source.answers_slowly());
    refresher.raise(Instant::now()).await;
    assert!(refresher.raise_tried.is_some());
    let learning = ledger.learning(&scan).await.unwrap().unwrap();
    assert!(learning.looked_at_ms > 0, "the ledger was not asked");
}

/// A process that uses little of its share lowers nothing on one refusal (one slow request, or
/// a fault, is no ceiling), but does when the account refuses it again within
/// [`REFUSED_AGAIN_WITHIN`]; refused again only later, it lowers nothing either.
#[tokio::test(start_paused = true)]
async fn a_process_refused_again_soon_lowers_the_cap_whatever_share_it_uses() {
    for (apart, lowers) in [
        (REFUSED_AGAIN_WITHIN - Duration::from_secs(1), true),
        (REFUSED_AGAIN_WITHIN + Duration::from_secs(1), false),
    ] {
        let source = Arc::new(Governor::default());
        let (mut refresher, ledger, scan) = refresher_of_learned_scan(&source).await;
        let cap = ledger.learning(&scan).await.unwrap().unwrap().cap;
        let now_ms = || refresher.pace.clock.now_ms();
        assert!(!refresher.pressing(Instant::now()), "it moves nothing");
        let at = now_ms();
        refresher.lower_if_pressing(1, 0, Instant::now(), at).await;
        assert_eq!(refresher.lower_tried, None, "lowered on one refusal");
        tokio::time::advance(apart).await;
        let at = refresher.pace.clock.now_ms();
        refresher.lower_if_pressing(2, 1, Instant::now(), at).await;
        let after = ledger.learning(&scan).await.unwrap().unwrap().cap;
        assert_eq!(
            after < cap,
            lowers,
            "refused {apart:?} apart: {cap:?} -> {after:?}"
        );
    }
}

/// A process whose steps the share holds back wants more slices only while it uses a good part
/// of what it is granted: steps that reserve half a second of the share per page and get back
/// a few rows (small partitions) wait on the bucket all the time, and more slices would not
/// make them move more (a simulated capped count on Flex kept two slices for 4% of their worth).
#[tokio::test(start_paused = true)]
async fn a_process_held_back_but_using_little_of_its_share_wants_no_more() {
    let source = Arc::new(Governor::default());
    let (mut refresher, _ledger, _scan) = refresher_of_learned_scan(&source).await;
    refresher.pace.share.set_rate(Some(1_000.0));
    let share = refresher.pace.clone();
    // A reservation far over what the bucket earns in the test: its taker waits throughout.
    let taker = tokio::spawn(async move { share.share.take(100_000).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for (moved_in_two_seconds, wants_more) in [(100, false), (1_800, true)] {
        let start = refresher.pace.moved.load(Ordering::Relaxed);
        refresher.note_moved(Instant::now());
        tokio::time::sleep(RATE_SPAN).await;
        refresher
            .pace
            .moved
            .store(start + moved_in_two_seconds, Ordering::Relaxed);
        let now = Instant::now();
        refresher.note_moved(now);
        assert!(refresher
            .pace
            .share
            .held_since(now - Duration::from_secs(1)));
        let demand = refresher.demand(now);
        assert_eq!(
            demand.wants_more, wants_more,
            "moved {moved_in_two_seconds} in 2 s: {demand:?}"
        );
    }
    taker.abort();
}

/// A process with no grant (no slice yet, or its leases lapsed) whose steps the share holds
/// wants more, though it moved nothing: the bucket keeps a rate of 0 as a tiny one, and half of
/// that is no bar.
#[tokio::test(start_paused = true)]
async fn a_process_held_back_with_no_grant_wants_more() {
    let source = Arc::new(Governor::default());
    let (mut refresher, _ledger, _scan) = refresher_of_learned_scan(&source).await;
    refresher.pace.share.set_rate(Some(0.0));
    let share = refresher.pace.clone();
    let taker = tokio::spawn(async move { share.share.take(1).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let now = Instant::now();
    refresher.note_moved(now);
    let demand = refresher.demand(now);
    assert!(demand.wants_more, "{demand:?}");
    taker.abort();
}

/// A refusal met under a learned cap the process adopted a moment ago, the cap just set in the
/// ledger, spends no try (the ledger would decline it so soon, and the next try would come
/// `LOWER_EVERY` later): refused again once the process has run under the cap for `SEEN_FOR`,
/// it lowers the cap at once.
#[tokio::test(start_paused = true)]
async fn a_refusal_under_a_cap_just_adopted_spends_no_try() {
    let scan = record("scan-adopted", None);
    let ledger = ledger_with_scan_row(&scan.id).await;
    let clock = LeaseClock::new(tablescan_pace::TokioClock);
    let now_ms = clock.now_ms();
    ledger
        .report_refusal(&scan.id, "p1", 3_000.0, now_ms - ROUND.as_millis() as u64)
        .await
        .unwrap();
    let cap = ledger.close_round(&scan.id, now_ms).await.unwrap();
    let source = Arc::new(Governor::default());
    let pace = Arc::new(ScanPace::new(&ledger, "p".into(), &clock, &scan));
    pace.watch(&source);
    pace.learned(cap);
    let mut refresher = Refresher::new(pace, Scans::default());
    // Refused twice within the first second under it (refused again soon: it would try).
    refresher
        .lower_if_pressing(1, 0, Instant::now(), clock.now_ms())
        .await;
    tokio::time::advance(Duration::from_millis(500)).await;
    refresher
        .lower_if_pressing(2, 1, Instant::now(), clock.now_ms())
        .await;
    assert_eq!(
        refresher.lower_tried, None,
        "tried under a cap just adopted"
    );
    tokio::time::advance(SEEN_FOR).await;
    refresher
        .lower_if_pressing(3, 2, Instant::now(), clock.now_ms())
        .await;
    let after = ledger.learning(&scan.id).await.unwrap().unwrap().cap;
    assert!(after < cap, "{cap:?} -> {after:?}");
}

/// As a learned cap takes over, a process whose steps are running (none waiting to start, none
/// held by the share's bucket yet: their next pages were reserved before the cap came) wants
/// slices at once: it has none, and its steps can read nothing until it holds one.
#[tokio::test(start_paused = true)]
async fn a_process_running_steps_with_no_slice_wants_one() {
    let source = Arc::new(Governor::default());
    let (refresher, _ledger, _scan) = refresher_of_learned_scan(&source).await;
    assert_eq!(refresher.pace.slices().map(|s| s.usable()), Some(0));
    let now = Instant::now();
    assert!(!refresher.demand(now).wants_more, "no step: no want");
    refresher.pace.lock().running = 2;
    assert!(
        refresher.demand(now).wants_more,
        "steps running with no grant"
    );
    // With a slice, running steps alone are no want (held back by its grant, they would be).
    let slices = refresher.pace.slices().unwrap();
    slices
        .tick(tablescan_pace::Demand::judged(true, false, 0.0, 0.0))
        .await;
    assert!(slices.usable() > 0, "no slice taken");
    refresher.set_rate(&slices);
    assert!(
        !refresher.demand(now).wants_more,
        "steps running within a grant"
    );
}
