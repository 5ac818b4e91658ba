//! What Azurite really answers, read through `storage::Reason`: every reason a caller acts on,
//! met on the emulator rather than assumed from the documentation's status codes.

mod common;

use std::time::Duration;

use common::{fresh_table, queues, tables, unique_name};
use tablescan::storage::queue::PutOptions;
use tablescan::storage::table::batch::{IfMatch, Operation};
use tablescan::storage::table::entity::Entity;
use tablescan::storage::{
    ClientOptions, Missing, QueueServiceClient, Reason, StorageAccount, TableServiceClient,
};

#[tokio::test]
async fn table_answers_map_to_their_reasons() {
    let missing = tables().table(&unique_name("absent")).unwrap();
    let error = missing.insert(&Entity::new("p", "r")).await.unwrap_err();
    assert_eq!(error.reason(), Reason::NotFound(Missing::Table), "{error}");

    let table = fresh_table("reasons").await;
    let row = Entity::new("p", "r");
    table.insert(&row).await.unwrap();
    let error = table.insert(&row).await.unwrap_err();
    assert_eq!(error.reason(), Reason::AlreadyExists, "{error}");

    let error = table.delete("p", "gone", &IfMatch::Any).await.unwrap_err();
    assert_eq!(error.reason(), Reason::NotFound(Missing::Entity), "{error}");

    let stale = IfMatch::Etag("W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\"".into());
    let error = table.delete("p", "r", &stale).await.unwrap_err();
    assert_eq!(error.reason(), Reason::PreconditionFailed, "{error}");

    // The failed operation of a transaction carries the reason it would have alone.
    let error = table
        .submit_transaction(&[
            Operation::Insert(Entity::new("p", "new")),
            Operation::Insert(row.clone()),
        ])
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::AlreadyExists, "{error}");

    let error = tables()
        .create_table(table.name(), false)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::AlreadyExists, "{error}");
}

#[tokio::test]
async fn queue_answers_map_to_their_reasons() {
    let queue = queues().queue(&unique_name("absent-")).unwrap();
    let error = queue
        .put_message(b"x", &PutOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::NotFound(Missing::Queue), "{error}");

    assert!(queue.create().await.unwrap());
    queue
        .put_message(b"x", &PutOptions::default())
        .await
        .unwrap();
    let received = queue.receive(1, Duration::from_secs(30)).await.unwrap();
    queue
        .delete_message(&received[0].id, &received[0].pop_receipt)
        .await
        .unwrap();
    let error = queue
        .delete_message(&received[0].id, &received[0].pop_receipt)
        .await
        .unwrap_err();
    assert_eq!(
        error.reason(),
        Reason::NotFound(Missing::Message),
        "{error}"
    );
    queue.delete().await.unwrap();
}

/// Azure answers a wrong signature 403 `AuthenticationFailed` (unauthenticated); Azurite's
/// Table service answers 403 `AuthorizationFailure` with "Server failed to authenticate the
/// request" (which Azure uses for a request its rules refuse), and its Queue service
/// `AuthenticationFailed`. Callers ask whether the credentials were refused, which holds for
/// both.
#[tokio::test]
async fn a_wrong_key_is_refused_credentials() {
    let right = common::connection_string();
    let wrong = right
        .split(';')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("AccountKey") => {
                format!("AccountKey={}", "A".repeat(88))
            }
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join(";");
    let account = StorageAccount::from_connection_string(&wrong).unwrap();
    let tables = TableServiceClient::new(&account, ClientOptions::default()).unwrap();
    let error = tables
        .create_table(&unique_name("nokey"), true)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::PermissionDenied, "{error}");
    assert!(error.reason().is_refused_credentials());
    let queues = QueueServiceClient::new(&account, ClientOptions::default()).unwrap();
    let error = queues
        .queue(&unique_name("nokey-"))
        .unwrap()
        .create()
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Reason::Unauthenticated, "{error}");
    assert!(error.reason().is_refused_credentials());
}
