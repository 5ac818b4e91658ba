//! The pipeline's retries and its refusal of a header it cannot sign, seen through a table
//! client at an endpoint that refuses connections. Here rather than in the pipeline's own tests
//! so that the pipeline does not import the table client that imports it.

use std::time::Duration;

use crate::retry::RetryPolicy;
use crate::{ClientOptions, StorageAccount};

/// A header value the wire would not carry as signed is refused before anything is sent
/// (the endpoint here answers nothing: a request sent would fail as unreachable).
#[tokio::test]
async fn a_header_that_cannot_be_sent_is_refused_not_dropped() {
    use crate::table::batch::IfMatch;
    use crate::Reason;
    let table = unreachable_tables(Duration::from_secs(60))
        .table("orders")
        .unwrap();
    let error = table
        .delete("p", "r", &IfMatch::Etag("W/\"x\"\nInjected: 1".into()))
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::InvalidRequest, "{error}");
    assert!(error.to_string().contains("if-match"), "{error}");
}

/// Tables at an endpoint that refuses connections, retried up to a hundred times, up to 2 s
/// apart, for at most `max_elapsed`.
fn unreachable_tables(max_elapsed: Duration) -> crate::TableServiceClient {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let account = StorageAccount::from_connection_string(&format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;\
         AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;\
         TableEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    ))
    .unwrap();
    let options = ClientOptions {
        retry: RetryPolicy {
            max_retries: 100,
            base_delay: Duration::from_millis(200),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            max_elapsed,
        },
        ..ClientOptions::default()
    };
    crate::TableServiceClient::new(&account, options).unwrap()
}

/// Retries stop at the caller's deadline, or the policy's time limit, however many the
/// policy's count allows (without either, the calls below take over three minutes).
#[tokio::test]
async fn retries_end_at_the_callers_deadline_or_the_policys_time_limit() {
    use crate::{deadline, Reason};
    let started = std::time::Instant::now();
    let soon = tokio::time::Instant::now() + Duration::from_secs(1);
    let tables = unreachable_tables(Duration::from_secs(3600));
    let error = deadline::within(soon, tables.create_table("orders", true))
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::Unreachable, "{error}");
    // No retry began whose wait ended past the deadline (an attempt may still be on its
    // way as it passes).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let started = std::time::Instant::now();
    let tables = unreachable_tables(Duration::from_secs(1));
    let error = tables.create_table("orders", true).await.unwrap_err();
    assert_eq!(error.reason(), Reason::Unreachable, "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
