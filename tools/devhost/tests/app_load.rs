//! The application load (tests/common/app_load.rs) and the test proxy's counters for it, on
//! Azurite behind the proxy limited to 1,000 entities/s: the load alone at 300 requests a second
//! is never refused and every request counts as one entity; with another client flooding the
//! account above the limit it is refused, and the proxy counts its refusals apart from the
//! flood's, matching what each client saw. Nothing here needs devhost; the load lives beside
//! devhost's tests because the pacing tests use it.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::app_load::{AppLoad, Sent};
use common::*;
use fault_proxy::FaultProxy;
use tablescan::storage::retry::RetryPolicy;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Query;
use tablescan::storage::{ClientOptions, StorageAccount, TableServiceClient};

const LIMIT: f64 = 1_000.0;
const APP_PER_SECOND: f64 = 300.0;
/// Rows each of the flood's queries returns: at 20 queries a second, 4,000 entities a second.
const FLOOD_PAGE: u16 = 200;

/// What the flooding client sent and how the proxy answered it.
#[derive(Debug, Default)]
struct Flood {
    queries: u64,
    refused: u64,
    failed: u64,
    rows: u64,
}

/// Queries `table` through `connection` for a page of [`FLOOD_PAGE`] rows every 50 ms for
/// `how_long`, never retrying: a client that pushes the account above its limit.
async fn flood(connection: String, table: String, how_long: Duration) -> Flood {
    let options = ClientOptions {
        retry: RetryPolicy::none(),
        ..ClientOptions::default()
    };
    let account = StorageAccount::from_connection_string(&connection).unwrap();
    let client = TableServiceClient::new(&account, options)
        .unwrap()
        .table(&table)
        .unwrap();
    let query = Query::default().top(FLOOD_PAGE);
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    let ends = Instant::now() + how_long;
    let mut flood = Flood::default();
    while Instant::now() < ends {
        ticks.tick().await;
        flood.queries += 1;
        match client.query_page(&query, None).await {
            Ok(page) => flood.rows += page.entities.len() as u64,
            Err(e) if e.status() == Some(503) => flood.refused += 1,
            Err(_) => flood.failed += 1,
        }
    }
    flood
}

fn per_second(what: &str, sent: &Sent) -> String {
    let each: Vec<String> = sent
        .seconds
        .iter()
        .map(|s| format!("{}/{}", s.sent, s.refused))
        .collect();
    format!("{what}: sent/refused each second: {}", each.join(" "))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_application_load_is_refused_only_beside_a_flood_and_counted_apart_from_it() {
    let (origin, account) = endpoint("TableEndpoint");
    let proxy = FaultProxy::start(origin).await;
    proxy.set_rate_limit(Some(LIMIT));
    let proxied = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", proxy.address),
    )]);
    let app = unique("app");
    proxy.mark_table(Some(&app));
    let counter = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);

    // Alone, at 30% of the limit.
    let load = AppLoad::start(&proxied, &app, APP_PER_SECOND).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let alone = load.stop().await;
    println!("{}", per_second("alone", &alone));
    let total = alone.total();
    assert_eq!((total.refused, total.failed), (0, 0), "{alone:?}");
    assert!(
        total.sent as f64 >= APP_PER_SECOND * 5.0 * 0.8,
        "the load sent {} requests in 5 s at {APP_PER_SECOND}/s",
        total.sent
    );
    // Evenly spaced: no second holds more than its share and the tenth of a second that a
    // late sender may make up for.
    for second in &alone.seconds {
        assert!(
            second.sent as f64 <= APP_PER_SECOND * 1.1 + 1.0,
            "a burst: {alone:?}"
        );
    }
    let injected = &proxy.injected;
    assert_eq!(counter(&injected.marked_forwarded), total.sent);
    assert_eq!(counter(&injected.forwarded), total.sent, "only the app ran");
    assert_eq!(
        counter(&injected.marked_entities),
        total.sent,
        "one entity per request"
    );
    assert_eq!(counter(&injected.throttled), 0);

    // Beside a client that asks for four times the limit.
    let rows: Vec<Entity> = (0..FLOOD_PAGE)
        .map(|i| Entity::new("flood", format!("r{i:04}")))
        .collect();
    let flooded = table_with(&rows).await;
    let flooding = tokio::spawn(flood(
        proxied.clone(),
        flooded.name().to_string(),
        Duration::from_secs(4),
    ));
    let load = AppLoad::start(&proxied, &app, APP_PER_SECOND).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let beside = load.stop().await;
    let flood = flooding.await.unwrap();
    println!("{}", per_second("beside a flood", &beside));
    println!("flood: {flood:?}; proxy: {}", injected.summary());
    let app_total = beside.total();
    assert_eq!(app_total.failed, 0, "{beside:?}");
    assert_eq!(flood.failed, 0, "{flood:?}");
    assert!(
        app_total.refused > 0,
        "the app was never refused: {beside:?}"
    );
    assert!(flood.refused > 0, "the flood was never refused: {flood:?}");
    // The proxy's counts of the app's requests are the app's own, and the rest the flood's.
    assert_eq!(counter(&injected.marked_throttled), app_total.refused);
    assert_eq!(
        counter(&injected.marked_forwarded),
        total.sent + app_total.sent - app_total.refused
    );
    assert_eq!(
        counter(&injected.marked_entities),
        counter(&injected.marked_forwarded)
    );
    assert_eq!(
        counter(&injected.throttled) - counter(&injected.marked_throttled),
        flood.refused
    );
    assert_eq!(
        counter(&injected.entities) - counter(&injected.marked_entities),
        flood.rows
    );
}
