//! A scan that puts messages on a queue is paced by the queue as by its source: the messages
//! charge the queue's back-off and the scan's share, and once the queue refuses, the scan's
//! slots and pages here follow the rate it allows.

use super::tests::{ledger, record};
use super::*;

#[tokio::test(start_paused = true)]
async fn a_refused_queue_holds_the_scans_slots_and_pages_to_its_rate() {
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let source = Arc::new(Governor::default());
    let queue = Arc::new(Governor::default());
    let scan = record("keys", None);
    let step = pacing
        .admit(&ledger, &scan, source.clone(), Duration::ZERO)
        .await
        .unwrap();
    // Nothing limits an uncapped scan whose source and queue never refused.
    assert_eq!(step.page_size(1000), 1000);
    step.before_put(400, &queue).await.unwrap();
    assert_eq!(step.page_size(1000), 1000);
    // The queue refuses a put (the pipeline cuts its back-off): half of the 1,000/s a first
    // refusal cuts from at least.
    queue.throttled();
    let rate = queue.rate().expect("cut");
    assert!((rate - 500.0).abs() < 1e-6, "{rate}");
    // Half a second of the queue's rate for the one step running.
    assert_eq!(step.page_size(1000), 250);
    // Slots for the queue's rate, one more than it needs (`ScanPace::slots`): no more steps.
    let slots = (rate / STEP_RATE).ceil() as usize + 1;
    let mut steps = vec![step];
    for _ in 1..slots {
        let more = pacing.admit(&ledger, &scan, source.clone(), Duration::ZERO);
        steps.push(more.await.expect("room for the queue's rate"));
    }
    let refused = pacing
        .admit(&ledger, &scan, source.clone(), Duration::ZERO)
        .await;
    assert!(refused.is_err(), "a step beyond the queue's rate ran");
    // And the messages wait for the queue's rate: 500 more at 500/s.
    let start = Instant::now();
    steps[0].before_put(250, &queue).await.unwrap();
    steps[1].before_put(250, &queue).await.unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(400), "{took:?}");
}
