//! Retries against Azurite through a proxy that injects failures.

mod common;

use std::time::{Duration, Instant};

use common::fault_proxy::{Fault, FaultProxy};
use common::{fast_retry_options, fresh_table, unique_name};
use tablescan::storage::connection_string::{EMULATOR_ACCOUNT, EMULATOR_KEY};
use tablescan::storage::table::entity::Entity;
use tablescan::storage::table::query::Query;
use tablescan::storage::{
    ErrorKind, QueueServiceClient, StorageAccount, TableClient, TableServiceClient,
};

/// A client for `table` whose requests go to `address` (a proxy in front of Azurite).
fn table_at(
    address: std::net::SocketAddr,
    table: &str,
    options: tablescan::storage::ClientOptions,
) -> TableClient {
    let account = StorageAccount::from_connection_string(&format!(
        "AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};TableEndpoint=http://{address}/{EMULATOR_ACCOUNT}"
    ))
    .unwrap();
    TableServiceClient::new(&account, options)
        .unwrap()
        .table(table)
        .unwrap()
}

/// A table client that reaches the table through a new fault proxy.
async fn through_proxy(table: &TableClient) -> (FaultProxy, TableClient) {
    let endpoint = common::account().table_endpoint().unwrap().to_string();
    let origin = endpoint
        .trim_end_matches(&format!("/{EMULATOR_ACCOUNT}"))
        .to_string();
    let proxy = FaultProxy::start(origin).await;
    let client = table_at(proxy.address, table.name(), fast_retry_options());
    (proxy, client)
}

#[tokio::test]
async fn a_503_is_retried_until_the_query_succeeds() {
    let table = fresh_table("retry").await;
    table.insert(&Entity::new("p", "r")).await.unwrap();
    let (proxy, client) = through_proxy(&table).await;
    proxy.plan([
        Fault::Status(503, "ServerBusy"),
        Fault::Status(503, "ServerBusy"),
    ]);
    let rows = client.query_all(&Query::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        proxy.seen().len(),
        3,
        "two failed attempts and one that got through"
    );
}

#[tokio::test]
async fn inserts_are_retried_on_503_but_not_on_408() {
    let table = fresh_table("retrypost").await;
    let (proxy, client) = through_proxy(&table).await;
    proxy.plan([Fault::Status(503, "ServerBusy")]);
    client.insert(&Entity::new("p", "1")).await.unwrap();
    assert_eq!(proxy.seen().len(), 2);

    // A 408 may come after the service applied the insert: repeating it is not safe.
    proxy.plan([Fault::Status(408, "OperationTimedOut")]);
    let err = client.insert(&Entity::new("p", "2")).await.unwrap_err();
    assert_eq!(err.status(), Some(408));
    assert!(err.is_transient(), "{err}");
    assert_eq!(proxy.seen().len(), 3);
}

#[tokio::test]
async fn permanent_errors_are_not_retried() {
    let table = fresh_table("noretry").await;
    table.insert(&Entity::new("p", "r")).await.unwrap();
    let (proxy, client) = through_proxy(&table).await;
    let err = client.insert(&Entity::new("p", "r")).await.unwrap_err();
    assert_eq!(err.status(), Some(409));
    assert!(!err.is_transient());
    assert_eq!(proxy.seen().len(), 1);
}

#[tokio::test]
async fn retries_stop_after_the_policy_limit_with_a_transient_error() {
    let table = fresh_table("giveup").await;
    let (proxy, client) = through_proxy(&table).await;
    proxy.plan(std::iter::repeat_n(Fault::Status(500, "InternalError"), 10));
    let err = client
        .query_page(&Query::default(), None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(500));
    assert!(err.is_transient());
    assert_eq!(proxy.seen().len(), 5, "one attempt and four retries");
    assert!(err.to_string().contains("InternalError"), "{err}");
}

#[tokio::test]
async fn retry_after_sets_a_floor_on_the_delay() {
    let table = fresh_table("after").await;
    let (proxy, client) = through_proxy(&table).await;
    let mut options = fast_retry_options();
    options.retry.max_backoff = Duration::from_secs(5);
    let patient = table_at(proxy.address, client.name(), options);
    proxy.plan([Fault::StatusWithRetryAfter(503, "ServerBusy", 1)]);
    let started = Instant::now();
    patient.query_page(&Query::default(), None).await.unwrap();
    // A lower bound only: the client waited at least as long as the service asked.
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_transient_transport_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let account = StorageAccount::from_connection_string(&format!(
        "AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};QueueEndpoint=http://127.0.0.1:{port}/{EMULATOR_ACCOUNT}"
    ))
    .unwrap();
    let queue = QueueServiceClient::new(&account, fast_retry_options())
        .unwrap()
        .queue(&unique_name("gone-"))
        .unwrap();
    let err = queue.create().await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Transport {
                maybe_sent: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert!(!err.to_string().contains(EMULATOR_KEY));
}

/// A table client that reaches Azurite through a proxy dropping the first `drops` connections.
async fn through_reset_proxy(
    table: &TableClient,
    drops: usize,
) -> (common::reset_proxy::ResetProxy, TableClient) {
    let endpoint = common::account().table_endpoint().unwrap().to_string();
    let authority = endpoint
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let upstream = authority.parse().unwrap();
    let proxy = common::reset_proxy::ResetProxy::start(upstream, drops).await;
    let client = table_at(proxy.address, table.name(), fast_retry_options());
    (proxy, client)
}

#[tokio::test]
async fn a_dropped_connection_is_retried_for_a_query() {
    let table = fresh_table("reset").await;
    table.insert(&Entity::new("p", "r")).await.unwrap();
    let (proxy, client) = through_reset_proxy(&table, 2).await;
    let rows = client.query_all(&Query::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        proxy.connections(),
        3,
        "two dropped connections, then one that answered"
    );
}

#[tokio::test]
async fn a_dropped_connection_is_not_retried_for_an_insert() {
    // The insert may have been applied before the connection broke: repeating it could fail
    // with EntityAlreadyExists or double an effect, so the error goes to the caller.
    let table = fresh_table("resetpost").await;
    let (proxy, client) = through_reset_proxy(&table, 1).await;
    let err = client.insert(&Entity::new("p", "r")).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Transport {
                maybe_sent: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(proxy.connections(), 1);
}

/// The proxy's rate limit stands for an account's target: a client reading faster than it is
/// answered 503 Server Busy, and what gets through stays within the bucket (one second's worth
/// to start with, plus the rate, plus at most one page of debt).
#[tokio::test]
async fn the_proxy_rate_limit_answers_busy_above_its_entities_per_second() {
    let table = fresh_table("ratelimit").await;
    let rows: Vec<Entity> = (0..100)
        .map(|i| Entity::new("p", format!("r{i:03}")))
        .collect();
    common::load(&table, &rows).await;
    let (proxy, _) = through_proxy(&table).await;
    let no_retries = tablescan::storage::ClientOptions {
        retry: tablescan::storage::retry::RetryPolicy {
            max_retries: 0,
            ..tablescan::storage::retry::RetryPolicy::default()
        },
        ..tablescan::storage::ClientOptions::default()
    };
    let client = table_at(proxy.address, table.name(), no_retries);
    const RATE: f64 = 300.0;
    proxy.set_rate_limit(Some(RATE));
    let started = Instant::now();
    let (mut pages, mut busy) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(2) {
        match client.query_page(&Query::default().top(100), None).await {
            Ok(page) => {
                assert_eq!(page.entities.len(), 100);
                pages += 1;
            }
            Err(e) => {
                assert_eq!((e.status(), e.code()), (Some(503), Some("ServerBusy")));
                busy += 1;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let forwarded = proxy
        .injected
        .entities
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(forwarded, pages * 100);
    assert!(
        forwarded as f64 <= RATE * (1.0 + elapsed) + 100.0,
        "{forwarded} entities in {elapsed:.1} s at {RATE}/s"
    );
    assert!(busy > 0, "a client this fast must have been throttled");
    assert_eq!(
        proxy
            .injected
            .throttled
            .load(std::sync::atomic::Ordering::Relaxed),
        busy
    );
    proxy.set_rate_limit(None);
    for _ in 0..20 {
        client
            .query_page(&Query::default().top(100), None)
            .await
            .unwrap();
    }
}
