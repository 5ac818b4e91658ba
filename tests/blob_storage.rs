//! The Blob operations against Azurite: containers, whole and block uploads, ranges, listing
//! by prefix across pages, deletes, and what a missing container or blob answers.

mod common;

use common::*;
use tablescan::storage::blob::{BlobServiceClient, UploadOptions};
use tablescan::storage::{Missing, Reason};

fn blobs() -> BlobServiceClient {
    BlobServiceClient::new(&account(), fast_retry_options()).unwrap()
}

fn container_name() -> String {
    unique_name("c").to_ascii_lowercase()
}

#[tokio::test]
async fn blobs_round_trip_whole_in_blocks_and_by_range() {
    let container = blobs().container(&container_name()).unwrap();
    assert!(container.create(true).await.unwrap(), "created");
    assert!(!container.create(true).await.unwrap(), "existed");
    let error = container.create(false).await.unwrap_err();
    assert_eq!(error.reason(), Reason::AlreadyExists, "{error}");

    // Whole, with a name that needs encoding and a virtual folder.
    let name = "export/2026-11-25/part 0001 & ü.ndjson";
    let body = b"{\"PartitionKey\":\"a\"}\n".repeat(1000);
    let etag = container
        .put(name, body.clone(), "application/x-ndjson")
        .await
        .unwrap();
    assert!(!etag.is_empty());
    assert_eq!(container.get(name).await.unwrap(), body);
    let properties = container.properties(name).await.unwrap();
    assert_eq!(properties.size, body.len() as u64);
    assert_eq!(
        properties.content_type.as_deref(),
        Some("application/x-ndjson")
    );
    assert_eq!(
        container.get_range(name, 20, 10).await.unwrap(),
        &body[20..30]
    );
    assert_eq!(
        container
            .get_range(name, body.len() as u64 - 5, 100)
            .await
            .unwrap(),
        &body[body.len() - 5..],
        "a range past the end gives what there is"
    );

    // In blocks: 100 KiB in 7 KiB blocks (15 blocks), committed together.
    let large: Vec<u8> = (0..100 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let options = UploadOptions {
        single_put_limit: 1024,
        block_size: 7 * 1024,
    };
    container
        .upload(
            "blocks/large.bin",
            large.clone(),
            "application/octet-stream",
            options,
        )
        .await
        .unwrap();
    assert_eq!(container.get("blocks/large.bin").await.unwrap(), large);
    // Written again (a step that ran twice): replaced whole, not appended.
    container
        .upload(
            "blocks/large.bin",
            large[..30_000].to_vec(),
            "application/octet-stream",
            options,
        )
        .await
        .unwrap();
    assert_eq!(
        container.get("blocks/large.bin").await.unwrap(),
        &large[..30_000]
    );

    container.delete_blob(name).await.unwrap();
    let error = container.get(name).await.unwrap_err();
    assert_eq!(error.reason(), Reason::NotFound(Missing::Blob), "{error}");
    container.delete().await.unwrap();
}

#[tokio::test]
async fn listings_follow_their_prefix_across_pages() {
    let container = blobs().container(&container_name()).unwrap();
    container.create(false).await.unwrap();
    for i in 0..7 {
        container
            .put(
                &format!("a/{i:02}"),
                vec![i as u8; i + 1],
                "application/octet-stream",
            )
            .await
            .unwrap();
    }
    container
        .put("b/other", vec![1], "text/plain")
        .await
        .unwrap();

    let mut names = Vec::new();
    let mut marker: Option<String> = None;
    let mut pages = 0;
    loop {
        let (page, next) = container
            .list_page("a/", marker.as_deref(), 3)
            .await
            .unwrap();
        assert!(page.len() <= 3);
        names.extend(page.iter().map(|b| (b.name.clone(), b.size)));
        pages += 1;
        match next {
            Some(next) => marker = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3, "7 blobs, 3 a page");
    let expected: Vec<(String, u64)> = (0..7)
        .map(|i| (format!("a/{i:02}"), i as u64 + 1))
        .collect();
    assert_eq!(names, expected);
    assert_eq!(container.list_all("").await.unwrap().len(), 8);
    container.delete().await.unwrap();

    let gone = blobs().container(&container_name()).unwrap();
    let error = gone.list_all("").await.unwrap_err();
    assert_eq!(
        error.reason(),
        Reason::NotFound(Missing::Container),
        "{error}"
    );
}

#[test]
fn names_the_service_refuses_are_refused_before_sending() {
    let service = blobs();
    for bad in ["ab", "Upper", "a--b", "-ab", "with_underscore"] {
        let error = service.container(bad).err().expect(bad);
        assert_eq!(error.reason(), Reason::InvalidRequest, "{bad}: {error}");
    }
}

/// An account SAS for the Blob service authorises blob requests (the token in every URL), and
/// a read-only one is refused a write with the service's answer.
#[tokio::test]
async fn an_account_sas_authorises_blob_requests() {
    use tablescan::storage::credential::Credential;
    use tablescan::storage::sas::AccountSas;
    use tablescan::storage::StorageAccount;
    let key_account = account();
    let Credential::SharedKey { account: name, key } = key_account.credential() else {
        panic!("a key account")
    };
    let by_sas = |permissions: &str| {
        let token = AccountSas {
            permissions: permissions.into(),
            services: "b".into(),
            resource_types: "sco".into(),
            expiry: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
            protocol: "https,http",
        }
        .sign(name, key);
        let text = format!(
            "BlobEndpoint={};SharedAccessSignature={}",
            key_account.blob_endpoint().unwrap(),
            token.query()
        );
        BlobServiceClient::new(
            &StorageAccount::from_connection_string(&text).unwrap(),
            fast_retry_options(),
        )
        .unwrap()
    };
    let container_name = container_name();
    let full = by_sas("rwdlacup").container(&container_name).unwrap();
    full.create(false).await.unwrap();
    full.put("x", b"by sas".to_vec(), "text/plain")
        .await
        .unwrap();
    let reader = by_sas("rl").container(&container_name).unwrap();
    assert_eq!(reader.get("x").await.unwrap(), b"by sas");
    let error = reader.put("y", vec![1], "text/plain").await.unwrap_err();
    assert!(error.reason().is_refused_credentials(), "{error}");
    full.delete().await.unwrap();
}
