//! Helpers shared by the tests that run against Azurite.
//!
//! `scripts/test` starts a private Azurite and passes its connection string in
//! `TABLESCAN_TEST_STORAGE`. Tests fail (not skip) without it: a storage test that silently
//! does nothing would pass for the wrong reason.

#![allow(dead_code)]

pub mod fault_proxy;
pub mod host;
pub mod memory;
pub mod own_queues;
pub mod reset_proxy;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tablescan::storage::retry::RetryPolicy;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::{
    ClientOptions, QueueServiceClient, StorageAccount, TableClient, TableServiceClient,
};

/// The connection string of the Azurite that scripts/test started.
pub fn connection_string() -> String {
    std::env::var("TABLESCAN_TEST_STORAGE").unwrap_or_else(|_| {
        panic!(
            "TABLESCAN_TEST_STORAGE is not set: run the tests with scripts/test, or start Azurite \
             with `scripts/azurite start --free-ports` and export the connection string it prints"
        )
    })
}

pub fn account() -> StorageAccount {
    StorageAccount::from_connection_string(&connection_string())
        .expect("the test connection string parses")
}

/// Client options for tests: quick retries so fault tests do not wait long.
pub fn fast_retry_options() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(10),
            min_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(200),
            max_elapsed: Duration::from_secs(30),
        },
        ..ClientOptions::default()
    }
}

pub fn tables() -> TableServiceClient {
    TableServiceClient::new(&account(), fast_retry_options()).unwrap()
}

pub fn queues() -> QueueServiceClient {
    QueueServiceClient::new(&account(), fast_retry_options()).unwrap()
}

/// A name no other test in this run uses: prefix, process id and a counter.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id())
}

/// Creates a fresh table and returns its client.
pub async fn fresh_table(prefix: &str) -> TableClient {
    let service = tables();
    let name = unique_name(prefix);
    assert!(service.create_table(&name, false).await.unwrap());
    service.table(&name).unwrap()
}

/// Inserts entities, one transaction per partition (at most 100 rows each).
pub async fn load(table: &TableClient, entities: &[Entity]) {
    let mut by_partition: std::collections::BTreeMap<&str, Vec<Operation>> =
        std::collections::BTreeMap::new();
    for e in entities {
        by_partition
            .entry(&e.partition_key)
            .or_default()
            .push(Operation::Insert(e.clone()));
    }
    for operations in by_partition.values() {
        for chunk in operations.chunks(100) {
            table.submit_transaction(chunk).await.unwrap();
        }
    }
}

/// Inserts bare rows with one Int32 property.
pub async fn load_keys(table: &TableClient, rows: &[(String, String)]) {
    let entities: Vec<Entity> = rows
        .iter()
        .map(|(pk, rk)| {
            Entity::new(pk.clone(), rk.clone())
                .with("n", tablescan::storage::table::entity::Value::Int32(1))
        })
        .collect();
    load(table, &entities).await;
}
