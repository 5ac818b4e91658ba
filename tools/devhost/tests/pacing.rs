//! Pacing through devhost on Azurite, three handler instances, the source account behind the
//! test proxy, which counts every entity it lets through (rows returned by queries, operations
//! of transactions) and can limit them with a token bucket that answers 503 Server Busy above
//! its rate, as the service does above its targets.
//!
//! - A count and a copy of 40,000 rows capped at 2,000 entities/s: over every 5-second window
//!   the proxy saw at most 10% over the cap, and on average at least 80% of it.
//! - A count with no cap against an account that takes 3,000 entities/s: exact, no step failed,
//!   and after the first 10 seconds under 5% of the requests refused.
//!
//! Each test prints its windows (as answered, every second). The cap is checked on the entities
//! each request touched, counted when it reached the proxy, as the service counts them: counted
//! when answered, a stall of the emulator would move a second's entities into the next and
//! make a window look fuller than what was sent in it. The capped tests run with the others and
//! check there what load on the machine cannot make true by accident: the scan is exact and no
//! 5-second window is more than 20% over the cap. The bounds (10% over at most, 80% on
//! average) and the busy-account test are measurements that need the machine to themselves;
//! run them one at a time (the `pacing` profile of `.config/nextest.toml`), with
//! `TABLESCAN_PACING_TARGETS=1`: `TABLESCAN_PACING_TARGETS=1 cargo nextest run --profile pacing
//! --release -p devhost --test pacing --run-ignored all --no-capture` (with
//! `TABLESCAN_TEST_STORAGE` set, or through `scripts/test`);
//! `TABLESCAN_PACING_LOG=1` prints the host's log too.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fault_proxy::FaultProxy;
use serde_json::{json, Value};
use tablescan::storage::table::entity::Entity;

const ROWS: usize = 40_000;

/// 400 partitions of 100 rows, with keys spread like hashes (as GUIDs or hashed ids are), so that
/// prefix discovery finds parallel work at once: these tests are about pacing, not about how
/// the work tree unfolds over a skewed key space.
fn source_rows() -> Vec<Entity> {
    rows_spread(ROWS)
}

fn rows_spread(rows: usize) -> Vec<Entity> {
    (0..rows)
        .map(|i| {
            let partition = (i as u64 / 100).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
            Entity::new(format!("{partition:08x}"), format!("r{:03}", i % 100))
        })
        .collect()
}

/// The proxy's counters at one moment: seconds since the scan started, entities let through,
/// requests let through, requests refused.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: f64,
    entities: u64,
    forwarded: u64,
    refused: u64,
}

/// Starts the scan, samples the proxy every 250 ms until it ends, and returns its final status
/// with the samples.
async fn observe(host: &Host, proxy: &FaultProxy, request: Value) -> (Value, Vec<Sample>) {
    let injected = proxy.injected.clone();
    let started = Instant::now();
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = {
        let samples = samples.clone();
        tokio::spawn(async move {
            loop {
                samples.lock().unwrap().push(Sample {
                    at: started.elapsed().as_secs_f64(),
                    entities: injected.entities.load(Ordering::Relaxed),
                    forwarded: injected.forwarded.load(Ordering::Relaxed),
                    refused: injected.throttled.load(Ordering::Relaxed),
                });
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let id = host.start_scan(request).await;
    let status = host.wait(&id, Duration::from_secs(600)).await;
    sampler.abort();
    let mut samples = samples.lock().unwrap().clone();
    samples.push(Sample {
        at: started.elapsed().as_secs_f64(),
        entities: proxy.injected.entities.load(Ordering::Relaxed),
        forwarded: proxy.injected.forwarded.load(Ordering::Relaxed),
        refused: proxy.injected.throttled.load(Ordering::Relaxed),
    });
    (status, samples)
}

/// Entities per second over every 5-second window (sliding by one sample), with its start.
fn windows(samples: &[Sample]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for (i, first) in samples.iter().enumerate() {
        if let Some(last) = samples[i..].iter().find(|s| s.at - first.at >= 5.0) {
            out.push((
                first.at,
                (last.entities - first.entities) as f64 / (last.at - first.at),
            ));
        }
    }
    out
}

/// The average rate from the first entity moved to the last.
fn average(samples: &[Sample]) -> f64 {
    let total = samples.last().map_or(0, |s| s.entities);
    let first = samples.iter().find(|s| s.entities > 0);
    let last = samples.iter().find(|s| s.entities == total);
    match (first, last) {
        (Some(first), Some(last)) if last.at > first.at => {
            (total - first.entities) as f64 / (last.at - first.at)
        }
        _ => 0.0,
    }
}

/// The most entities per second over any 5-second window, and the average from the first to the
/// last, counted when each request reached the proxy: when the service would count it.
fn by_arrival(proxy: &FaultProxy) -> (f64, f64) {
    let mut arrivals = proxy.injected.arrivals.lock().unwrap().clone();
    arrivals.sort_by_key(|(at, _)| *at);
    let (Some(first), Some(last)) = (arrivals.first(), arrivals.last()) else {
        return (0.0, 0.0);
    };
    let (first, last) = (first.0, last.0);
    let window = Duration::from_secs(5);
    let mut most = 0u64;
    let mut from = first;
    while from + window <= last {
        let within: u64 = arrivals
            .iter()
            .filter(|(at, _)| *at >= from && *at < from + window)
            .map(|(_, n)| n)
            .sum();
        most = most.max(within);
        from += Duration::from_millis(100);
    }
    let total: u64 = arrivals.iter().map(|(_, n)| n).sum();
    let span = (last - first).as_secs_f64().max(1e-3);
    (most as f64 / window.as_secs_f64(), total as f64 / span)
}

fn print_windows(what: &str, samples: &[Sample]) {
    println!("{what}: entities/s over 5-second windows, every second");
    for (at, rate) in windows(samples).iter().step_by(4) {
        println!("  from {at:5.1} s: {rate:7.0}");
    }
    let seconds: Vec<String> = samples
        .chunks(4)
        .zip(samples.iter().skip(4).step_by(4))
        .map(|(chunk, next)| format!("{}", next.entities - chunk[0].entities))
        .collect();
    println!("{what}: entities in each second: {}", seconds.join(" "));
    let refused: Vec<String> = samples
        .chunks(4)
        .zip(samples.iter().skip(4).step_by(4))
        .map(|(chunk, next)| format!("{}", next.refused - chunk[0].refused))
        .collect();
    println!(
        "{what}: requests refused in each second: {}",
        refused.join(" ")
    );
}

async fn capped(action: Value, entities: u64) {
    const CAP: f64 = 2_000.0;
    let source = table_with(&source_rows()).await;
    let (origin, account) = endpoint("TableEndpoint");
    let proxy = FaultProxy::start(origin).await;
    let counted = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let host = Host::start(3, &[("COUNTED_STORAGE", counted.as_str())]);
    let mut request = json!({
        "table": source.name(), "connection": "COUNTED_STORAGE",
        "maxRowsPerSecond": CAP as u64, "action": action,
    });
    if request["action"]["type"] == "copy" {
        request["action"]["connection"] = json!("COUNTED_STORAGE");
    }
    let (status, samples) = observe(&host, &proxy, request.clone()).await;
    let what = format!("{} capped at {CAP}", request["action"]["type"]);
    if std::env::var_os("TABLESCAN_PACING_LOG").is_some() {
        println!("{}", host.log());
    }
    print_windows(&what, &samples);
    let (most, average) = by_arrival(&proxy);
    println!(
        "{what}: {} entities; most in a 5-second window {most:.0}/s ({:.0}% of the cap); \
         average {average:.0}/s ({:.0}%); status pace {}",
        samples.last().map_or(0, |s| s.entities),
        most / CAP * 100.0,
        average / CAP * 100.0,
        status["spec"]["maxRowsPerSecond"],
    );
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["progress"]["rowsActed"], ROWS as u64, "{status}");
    assert_eq!(status["progress"]["stepsFailed"], 0, "{status}");
    assert!(
        samples.last().map_or(0, |s| s.entities) >= entities,
        "the proxy saw too few entities"
    );
    // Alone on the machine, 10% over at most (the bound; each process holds every
    // second within 10% of its part since the window of the last second, and measured 100-106%
    // over 5 s); among the other tests, whose load can delay a request between its admission
    // and its arrival at the proxy, 20%: a guard against pacing coming undone, which load cannot
    // trip by accident.
    let targets = std::env::var_os("TABLESCAN_PACING_TARGETS").is_some();
    let bound = if targets { 1.1 } else { 1.2 };
    assert!(
        most <= CAP * bound,
        "{what}: {most:.0}/s in a 5-second window"
    );
    if targets {
        assert!(average >= CAP * 0.8, "{what}: {average:.0}/s on average");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_count_holds_its_cap_across_three_instances() {
    capped(json!({"type": "count"}), ROWS as u64).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_holds_its_cap_counting_rows_read_and_written() {
    let target = unique("paced");
    capped(json!({"type": "copy", "table": target}), 2 * ROWS as u64).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement that needs the machine to itself: run with --run-ignored all --no-capture"]
async fn an_uncapped_count_backs_off_on_an_account_that_is_busy() {
    const ENTITIES_PER_SECOND: f64 = 3_000.0;
    // Thirty seconds' worth, so that twenty come after the first ten.
    const BUSY_ROWS: usize = 90_000;
    let source = table_with(&rows_spread(BUSY_ROWS)).await;
    let (origin, account) = endpoint("TableEndpoint");
    let proxy = FaultProxy::start(origin).await;
    proxy.set_rate_limit(Some(ENTITIES_PER_SECOND));
    let limited = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let host = Host::start(3, &[("LIMITED_STORAGE", limited.as_str())]);
    let (status, samples) = observe(
        &host,
        &proxy,
        json!({
            "table": source.name(), "connection": "LIMITED_STORAGE",
            "maxRowsPerSecond": "unlimited", "action": {"type": "count"},
        }),
    )
    .await;
    if std::env::var_os("TABLESCAN_PACING_LOG").is_some() {
        println!("{}", host.log());
    }
    print_windows("uncapped count, account at 3,000/s", &samples);
    let last = *samples.last().unwrap();
    let at_10 = *samples.iter().find(|s| s.at >= 10.0).unwrap_or(&last);
    let later_requests = (last.forwarded - at_10.forwarded) + (last.refused - at_10.refused);
    let later_refused = last.refused - at_10.refused;
    let share = later_refused as f64 / later_requests.max(1) as f64;
    println!(
        "{BUSY_ROWS} rows in {:.0} s ({:.0} entities/s on average); {} requests let through, {} \
         refused; after the first 10 s {later_refused} of {later_requests} refused ({:.1}%); \
         status requestsThrottled {}",
        last.at,
        average(&samples),
        last.forwarded,
        last.refused,
        share * 100.0,
        status["progress"]["requestsThrottled"],
    );
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"]["rows"], BUSY_ROWS as u64, "{status}");
    assert_eq!(status["progress"]["stepsFailed"], 0, "{status}");
    assert!(
        share < 0.05,
        "{:.1}% of requests refused after the first 10 s",
        share * 100.0
    );
}
