//! How a scan behaves against an account that takes a limited number of entities per second:
//! a count of 40,000 rows, three handler instances under devhost, the source behind the test
//! proxy's rate limit (a token bucket of 3,000 entities per second answering 503 Server Busy
//! above it, as the service does above its targets). A measurement for the pacing work
//! (issue 15), opt-in:
//!
//! `cargo nextest run -p devhost --test pacing --run-ignored all --no-capture`
//! (with `TABLESCAN_TEST_STORAGE` set, or through `scripts/test`).
//!
//! It prints, per 5-second window, the entities the proxy let through and the requests it
//! refused, and at the end the share of requests refused after the first 10 seconds. It
//! asserts what holds today: the count is exact and no step failed for good.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use fault_proxy::FaultProxy;
use serde_json::json;
use tablescan::storage::table::entity::Entity;

const ROWS: usize = 40_000;
const ENTITIES_PER_SECOND: f64 = 3_000.0;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement for issue 15 (pacing): run it with --run-ignored all --no-capture"]
async fn a_count_against_a_rate_limited_account() {
    let rows: Vec<Entity> = (0..ROWS)
        .map(|i| Entity::new(format!("p{:04}", i / 100), format!("r{:03}", i % 100)))
        .collect();
    let source = table_with(&rows).await;
    let (origin, account) = endpoint("TableEndpoint");
    let proxy = FaultProxy::start(origin).await;
    proxy.set_rate_limit(Some(ENTITIES_PER_SECOND));
    let limited = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let host = Host::start(3, &[("LIMITED_STORAGE", limited.as_str())]);
    let started = Instant::now();
    let id = host
        .start_scan(json!({
            "table": source.name(), "connection": "LIMITED_STORAGE",
            "action": {"type": "count"},
        }))
        .await;

    // Sample the proxy's counters every second until the scan ends.
    let sample = || {
        (
            proxy.injected.entities.load(Ordering::Relaxed),
            proxy.injected.forwarded.load(Ordering::Relaxed),
            proxy.injected.throttled.load(Ordering::Relaxed),
        )
    };
    let mut samples = vec![(0.0, sample())];
    let status = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push((started.elapsed().as_secs_f64(), sample()));
        let status = host.status(&id).await;
        let state = status["state"].as_str().unwrap_or("").to_string();
        if ["succeeded", "failed", "cancelled"].contains(&state.as_str()) {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the count did not end in 10 minutes: {status}"
        );
    };

    println!("window (s) | entities/s let through | requests let through | refused (503)");
    for window in samples.chunks(5).filter(|w| w.len() > 1) {
        let ((t0, (e0, f0, r0)), (t1, (e1, f1, r1))) = (window[0], window[window.len() - 1]);
        println!(
            "{t0:5.0}-{t1:<5.0} | {:>8.0} | {:>6} | {:>6}",
            (e1 - e0) as f64 / (t1 - t0),
            f1 - f0,
            r1 - r0
        );
    }
    let (_, (_, f10, r10)) = samples
        .iter()
        .find(|(t, _)| *t >= 10.0)
        .copied()
        .unwrap_or(samples[samples.len() - 1]);
    let (elapsed, (entities, forwarded, refused)) = samples[samples.len() - 1];
    let later = (refused - r10) as f64 / ((forwarded - f10) + (refused - r10)).max(1) as f64;
    println!(
        "{ROWS} rows in {elapsed:.0} s ({:.0} rows/s against a limit of {ENTITIES_PER_SECOND}); \
         {forwarded} requests let through ({entities} entities), {refused} refused; \
         after the first 10 s {:.1}% of requests refused; status: requestsThrottled {}, \
         attemptsFailed {}",
        ROWS as f64 / elapsed,
        later * 100.0,
        status["progress"]["requestsThrottled"],
        status["progress"]["attemptsFailed"],
    );
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"]["rows"], ROWS as u64, "{status}");
    assert_eq!(status["progress"]["stepsFailed"], 0, "{status}");
}
