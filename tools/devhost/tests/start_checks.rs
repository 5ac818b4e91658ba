//! What a start answers when an account a scan would use cannot work, through devhost on
//! Azurite: refused credentials are a 400 naming the setting (never its value) within
//! seconds; an endpoint that does not answer is reported within 10 s; an endpoint the
//! connection string does not give is named with the setting; an app setting of the handler's
//! own with a bad value is named, with that value, by every function.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Starts a scan and returns the status and body of the answer, with how long it took.
async fn start(host: &Host, request: Value) -> (u16, Value, Duration) {
    let began = Instant::now();
    let (status, body) = host.post_scan(&request).await;
    (status, body, began.elapsed())
}

/// A valid base64 key that is not the account's.
const WRONG_KEY: &str = "d3Jvbmcta2V5LWZvci10ZXN0cy13cm9uZy1rZXktZm9yLXRlc3Rz";

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_is_a_400_naming_the_setting_within_seconds() {
    let source = table_with(&rows()[..20]).await;
    let wrong = storage_with(&[("AccountKey", WRONG_KEY)]);
    let host = Host::start(1, &[("WRONG_KEY", wrong.as_str())]);

    let (status, body, took) = start(
        &host,
        json!({"table": source.name(), "connection": "WRONG_KEY", "action": {"type": "count"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "connection", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"WRONG_KEY\""), "{message}");
    assert!(message.contains("refused its credentials"), "{message}");
    assert!(
        !message.contains(WRONG_KEY),
        "the key never shows: {message}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");

    // The same for a copy's target account.
    let (status, body, took) = start(
        &host,
        json!({"table": source.name(), "action": {"type": "copy", "table": unique("never"),
            "connection": "WRONG_KEY"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "action.connection", "{body}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        !host.log().contains(WRONG_KEY),
        "the key never shows in the log"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_does_not_answer_is_reported_within_ten_seconds() {
    // Connections are taken (the kernel accepts them) and never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (_, account) = endpoint("TableEndpoint");
    let hanging = storage_with(&[(
        "TableEndpoint",
        &format!("http://{}{account}", silent.local_addr().unwrap()),
    )]);
    // Nobody listens here: refused at once. (Port 1, not a free port picked now: another
    // test's proxy could take that one before the request, and answer it.)
    let closed = storage_with(&[("TableEndpoint", &format!("http://127.0.0.1:1{account}"))]);
    let host = Host::start(
        1,
        &[("HANGING", hanging.as_str()), ("CLOSED", closed.as_str())],
    );
    for setting in ["HANGING", "CLOSED"] {
        let (status, body, took) = start(
            &host,
            json!({"table": "anything", "connection": setting, "action": {"type": "count"}}),
        )
        .await;
        assert_eq!(status, 503, "{setting}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("{setting:?}")), "{message}");
        assert!(message.contains("did not answer"), "{message}");
        assert!(took < Duration::from_secs(10), "{setting}: {took:?}");
    }
    drop(silent);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_the_setting_does_not_give_is_named_with_the_setting() {
    let source = table_with(&rows()[..20]).await;
    // An account key and a table endpoint, no queue endpoint: the SDKs make one up from the
    // account name, which this machine cannot reach.
    let tables_only = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={}",
        storage_setting("AccountName"),
        storage_setting("AccountKey"),
        storage_setting("TableEndpoint")
    );
    let host = Host::start(1, &[("TABLES_ONLY", tables_only.as_str())]);
    let (status, body, took) = start(
        &host,
        json!({"table": source.name(), "connection": "TABLES_ONLY",
            "action": {"type": "enqueue", "queue": unique("nowhere"), "connection": "TABLES_ONLY"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "action.connection", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"TABLES_ONLY\""), "{message}");
    assert!(message.contains("QueueEndpoint"), "{message}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A count needs only the table endpoint, which the setting gives.
    let (status, body, _) = start(
        &host,
        json!({"table": source.name(), "connection": "TABLES_ONLY", "action": {"type": "count"}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sas_setting_with_a_table_endpoint_only_counts_and_cannot_enqueue() {
    use tablescan::storage::credential::Credential;
    use tablescan::storage::sas::AccountSas;
    use tablescan::storage::StorageAccount;

    let source = table_with(&rows()[..20]).await;
    let account = StorageAccount::from_connection_string(&storage()).unwrap();
    let Credential::SharedKey { account: name, key } = account.credential() else {
        panic!("the test storage uses a key")
    };
    let token = AccountSas {
        permissions: "rwdlacup".into(),
        services: "qt".into(),
        resource_types: "sco".into(),
        expiry: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        protocol: "https,http",
    }
    .sign(name, key);
    let tables_only = format!(
        "TableEndpoint={};SharedAccessSignature={}",
        account.table_endpoint().unwrap(),
        token.query()
    );
    let host = Host::start(1, &[("TABLES_BY_SAS", tables_only.as_str())]);
    // A count needs only the table endpoint.
    let (status, body, _) = start(
        &host,
        json!({"table": source.name(), "connection": "TABLES_BY_SAS", "action": {"type": "count"}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap();
    let done = host.wait(id, Duration::from_secs(120)).await;
    assert_eq!(done["result"]["rows"], 20, "{done}");
    // An enqueue needs a queue endpoint the setting does not give: refused at once, naming both.
    let (status, body, took) = start(
        &host,
        json!({"table": source.name(), "connection": "TABLES_BY_SAS",
            "action": {"type": "enqueue", "queue": unique("nowhere"), "connection": "TABLES_BY_SAS"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "action.connection", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"TABLES_BY_SAS\"") && message.contains("QueueEndpoint"),
        "{message}"
    );
    assert!(
        !message.contains("sig="),
        "no token in the message: {message}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// A bad value in a handler setting is never replaced by the default: the handler starts, logs
/// the setting, and a start (and every other function) answers 500 naming it and its value.
/// (Before: `15s` was not a number, so the handler used 15 s without a word, and the scan ran.)
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_step_setting_is_named_by_every_function() {
    let source = table_with(&rows()[..5]).await;
    let host = Host::start(1, &[("TABLESCAN_STEP_MAX_SECONDS", "15s")]);
    let (status, body, _) = start(
        &host,
        json!({"table": source.name(), "action": {"type": "count"}}),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("TABLESCAN_STEP_MAX_SECONDS") && message.contains("\"15s\""),
        "{body}"
    );
    assert!(message.contains("1 to 300"), "the allowed range: {message}");
    let list = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/api/scans", host.port))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status().as_u16(), 500);
    assert!(list
        .text()
        .await
        .unwrap()
        .contains("TABLESCAN_STEP_MAX_SECONDS"));
    assert!(
        host.log()
            .lines()
            .any(|line| line.contains("TABLESCAN_STEP_MAX_SECONDS") && line.contains("ERROR")),
        "logged as an error at start:\n{}",
        host.log()
    );
}
