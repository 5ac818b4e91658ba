//! Connections by identity, end to end: the handler and devhost reach an Azurite that takes
//! OAuth tokens (over HTTPS) with no key in any setting, their tokens coming from a stand-in for
//! the platform's managed identity endpoint (see `common::identity`).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use tablescan::storage::{ClientOptions, TableServiceClient};

mod common;
use common::identity::{IdentityEndpoint, Issuing, OAuthAzurite};
use common::*;

/// The client id of the app's user-assigned identity in these tests.
const APP_IDENTITY: &str = "6a1b2c3d-0000-4000-8000-00000000a99";

/// The settings of an app whose storage is `azurite`, reached by the user-assigned identity
/// [`APP_IDENTITY`] through `identity`: no connection string, no key.
fn identity_settings(azurite: &OAuthAzurite, identity: &IdentityEndpoint) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> = vec![
        // Set empty, so that devhost's environment (the tests' key-based Azurite) does not win.
        ("AzureWebJobsStorage".into(), String::new()),
        (
            "AzureWebJobsStorage__tableServiceUri".into(),
            azurite.table.clone(),
        ),
        (
            "AzureWebJobsStorage__queueServiceUri".into(),
            azurite.queue.clone(),
        ),
        (
            "AzureWebJobsStorage__credential".into(),
            "managedidentity".into(),
        ),
        ("AzureWebJobsStorage__clientId".into(), APP_IDENTITY.into()),
        (
            "TABLESCAN_TRUSTED_CA_FILE".into(),
            azurite.certificates.authority.display().to_string(),
        ),
    ];
    settings.extend(identity.settings().map(|(k, v)| (k.to_string(), v)));
    settings
}

fn borrowed(settings: &[(String, String)]) -> Vec<(&str, &str)> {
    settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// A count and a copy through devhost, on tokens that live 3 seconds while the scans take about
/// 6 and 12 (capped at 160 entities a second): every process refreshes its token several times
/// mid-scan, and nothing fails. Results are read back by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_and_a_copy_run_by_identity_with_tokens_that_expire_mid_scan() {
    let azurite = OAuthAzurite::start();
    let identity = IdentityEndpoint::start(Issuing::default());
    identity.issue_to(
        APP_IDENTITY,
        Issuing {
            lifetime: Duration::from_secs(3),
            ..Issuing::default()
        },
    );
    let tables = TableServiceClient::new(&azurite.key_account(), ClientOptions::default()).unwrap();
    let rows = rows();
    let source_name = unique("src");
    tables.create_table(&source_name, false).await.unwrap();
    let source = tables.table(&source_name).unwrap();
    load(&source, &rows).await;

    let mut settings = identity_settings(&azurite, &identity);
    settings.push(("TABLESCAN_STEP_MAX_QUERIES".into(), "2".into()));
    let host = Host::start(2, &borrowed(&settings));
    let capped = |action: serde_json::Value| json!({ "table": source_name, "pageSize": 25, "maxRowsPerSecond": 160, "action": action });

    let count = host.run(capped(json!({"type": "count"}))).await;
    assert_eq!(count["state"], "succeeded", "{count}\n{}", host.log());
    let partitions: BTreeSet<&str> = rows.iter().map(|e| e.partition_key.as_str()).collect();
    assert_eq!(
        count["result"],
        json!({"rows": rows.len(), "partitions": partitions.len()})
    );

    let copy_name = unique("copy");
    let copy = host
        .run(capped(json!({"type": "copy", "table": copy_name})))
        .await;
    assert_eq!(copy["state"], "succeeded", "{copy}\n{}", host.log());
    assert_same_rows(
        &tables.table(&copy_name).unwrap(),
        &source,
        "the copy made by identity is identical",
    )
    .await;

    let requests = identity.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.client_id.as_deref() == Some(APP_IDENTITY)
                && r.resource.as_deref() == Some("https://storage.azure.com/")),
        "every token was asked for the app's identity and for storage: {requests:?}"
    );
    // Devhost and two handlers, over scans of about 18 s in all with 3-second tokens: each
    // process fetched several.
    assert!(
        requests.len() >= 9,
        "tokens were refreshed mid-scan: {} fetched",
        requests.len()
    );
    // The handlers log every token the service refused (and then replaced): none may be.
    assert!(
        !host.log().contains("refused a token"),
        "no request went out with an expired token:\n{}",
        host.log()
    );
}

/// A source reached by an identity whose tokens are for another audience: the start is
/// refused at once with a message naming the connection and what to check, after a token or
/// two, not a retry loop. An identity the endpoint does not know is refused the same way, with
/// the endpoint's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_another_audience_is_a_clear_refusal_naming_the_connection() {
    let azurite = OAuthAzurite::start();
    let identity = IdentityEndpoint::start(Issuing::default());
    identity.issue_to(APP_IDENTITY, Issuing::default());
    const OTHER: &str = "0f0f0f0f-1111-4222-8333-444444444444";
    identity.issue_to(
        OTHER,
        Issuing {
            audience: "https://management.azure.com/".into(),
            ..Issuing::default()
        },
    );
    let tables = TableServiceClient::new(&azurite.key_account(), ClientOptions::default()).unwrap();
    let source = unique("src");
    tables.create_table(&source, false).await.unwrap();

    let mut settings = identity_settings(&azurite, &identity);
    for (name, value) in [
        ("SOURCE__tableServiceUri", azurite.table.clone()),
        ("SOURCE__clientId", OTHER.to_string()),
        ("NOBODY__tableServiceUri", azurite.table.clone()),
        ("NOBODY__clientId", "no-such-identity".to_string()),
    ] {
        settings.push((name.into(), value));
    }
    let host = Host::start(1, &borrowed(&settings));
    let (status, answer) = host
        .post_scan(&json!({"table": source, "connection": "SOURCE", "action": {"type": "count"}}))
        .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    for part in [
        "\"SOURCE\"",
        "refused its credentials",
        "Invalid token audience",
        OTHER,
        "Storage Table Data",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let for_other = identity
        .requests()
        .iter()
        .filter(|r| r.client_id.as_deref() == Some(OTHER))
        .count();
    assert!(
        (1..=2).contains(&for_other),
        "one token, and one more after the refusal: {for_other}"
    );

    let (status, answer) = host
        .post_scan(&json!({"table": source, "connection": "NOBODY", "action": {"type": "count"}}))
        .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    for part in [
        "\"NOBODY\"",
        "no token",
        "client id no-such-identity",
        "status 400: No user-assigned identity",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert!(!message.contains(&identity.header), "{message}");
}

/// Where no managed identity exists (a developer's machine), an app registration's secret
/// reaches storage (tables and blobs): `C__tenantId`, `C__clientId`, `C__clientSecret`, the authority from
/// `AZURE_AUTHORITY_HOST`. A wrong secret is a permanent error with the authority's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_registrations_secret_reaches_storage_without_a_managed_identity() {
    let azurite = OAuthAzurite::start();
    let authority = IdentityEndpoint::start(Issuing::default());
    authority.register("dev-app", "the-secret");
    let settings = |secret: &'static str| {
        let values: Vec<(String, String)> = vec![
            ("DEV__tableServiceUri".into(), azurite.table.clone()),
            ("DEV__blobServiceUri".into(), azurite.blob.clone()),
            ("DEV__tenantId".into(), "contoso.onmicrosoft.com".into()),
            ("DEV__clientId".into(), "dev-app".into()),
            ("DEV__clientSecret".into(), secret.into()),
            ("AZURE_AUTHORITY_HOST".into(), authority.authority()),
            (
                "TABLESCAN_TRUSTED_CA_FILE".into(),
                azurite.certificates.authority.display().to_string(),
            ),
        ];
        move |name: &str| {
            values
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    };
    // One registry for both: the wrong secret must not be served the right one's token.
    let tokens = tablescan::storage::token::TokenCredentials::default();
    let account =
        tablescan::storage::connection::resolve("DEV", &settings("the-secret"), &tokens).unwrap();
    let tables = TableServiceClient::new(&account, ClientOptions::default()).unwrap();
    let name = unique("dev");
    tables.create_table(&name, false).await.unwrap();
    let table = tables.table(&name).unwrap();
    load(&table, &rows()[..50]).await;
    let everything = tablescan::storage::table::query::Query::default();
    assert_eq!(table.query_all(&everything).await.unwrap().len(), 50);
    let requests = authority.requests();
    assert_eq!(
        requests.len(),
        1,
        "one token for every request: {requests:?}"
    );
    assert_eq!(
        requests[0].tenant.as_deref(),
        Some("contoso.onmicrosoft.com")
    );
    assert_eq!(requests[0].form["grant_type"], "client_credentials");

    let wrong =
        tablescan::storage::connection::resolve("DEV", &settings("not-the-secret"), &tokens)
            .unwrap();
    let tables = TableServiceClient::new(&wrong, ClientOptions::default()).unwrap();
    let error = tables
        .table(&name)
        .unwrap()
        .query_all(&everything)
        .await
        .unwrap_err();
    let message = error.to_string();
    assert_eq!(
        error.reason(),
        tablescan::storage::Reason::Unauthenticated,
        "{message}"
    );
    assert!(!error.is_transient(), "{message}");
    for part in [
        "dev-app",
        "contoso.onmicrosoft.com",
        "status 401",
        "AADSTS7000215",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert!(!message.contains("not-the-secret"), "{message}");
}
