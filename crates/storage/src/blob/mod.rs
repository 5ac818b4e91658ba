//! Blob operations, for exports and backups: containers, block blobs written whole or in
//! blocks, read whole or by range, listed by prefix a page at a time, deleted. Requests are
//! authorised like every other (Shared Key in the Blob/Queue layout, SAS, or a bearer token).

mod xml;

use std::sync::Arc;

use base64::Engine;
use reqwest::Method;

use crate::authorize::Service;
use crate::connection_string::StorageAccount;
use crate::encoding::encode_component;
use crate::error::{describe, StorageError};
use crate::names::{validate_blob_name, validate_container_name};
use crate::pipeline::{ClientOptions, Pipeline, Request};

pub use xml::BlobItem;

/// The largest body one Put Blob takes at the service version we send (2019-02-02: 256 MiB);
/// [`ContainerClient::upload`] writes larger ones in blocks.
pub const MAX_SINGLE_PUT: usize = 256 * 1024 * 1024;
/// The largest block at that version (100 MiB).
pub const MAX_BLOCK: usize = 100 * 1024 * 1024;
/// At most 50,000 blocks make one blob.
pub const MAX_BLOCKS: usize = 50_000;

/// A client for the Blob service of one account.
#[derive(Clone)]
pub struct BlobServiceClient {
    pipeline: Arc<Pipeline>,
}

impl BlobServiceClient {
    /// A client for the account's blob endpoint.
    pub fn new(account: &StorageAccount, options: ClientOptions) -> Result<Self, StorageError> {
        let endpoint = account.blob_endpoint().cloned().ok_or_else(|| {
            StorageError::invalid_request(
                "create client",
                "storage account",
                "the connection gives no blob endpoint",
            )
        })?;
        Ok(BlobServiceClient {
            pipeline: Arc::new(Pipeline::new(account, endpoint, Service::Blob, options)?),
        })
    }

    /// The service's base URL.
    pub fn endpoint(&self) -> &str {
        self.pipeline.endpoint().as_str()
    }

    /// A client for one container; the name is checked here, the container is not contacted.
    pub fn container(&self, name: &str) -> Result<ContainerClient, StorageError> {
        validate_container_name(name).map_err(|e| {
            StorageError::invalid_request(
                "open container",
                describe("container", name),
                e.to_string(),
            )
        })?;
        Ok(ContainerClient {
            pipeline: self.pipeline.clone(),
            name: name.to_string(),
        })
    }
}

/// How [`ContainerClient::upload`] writes a body: whole up to `single_put_limit`, else in
/// blocks of `block_size`.
#[derive(Debug, Clone, Copy)]
pub struct UploadOptions {
    pub single_put_limit: usize,
    pub block_size: usize,
}

impl Default for UploadOptions {
    /// Whole up to 32 MiB, else 8 MiB blocks: one request for the blobs an export step writes,
    /// and blocks small enough to retry cheaply for anything larger.
    fn default() -> Self {
        UploadOptions {
            single_put_limit: 32 * 1024 * 1024,
            block_size: 8 * 1024 * 1024,
        }
    }
}

/// What a blob's properties say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobProperties {
    pub size: u64,
    pub etag: String,
    pub content_type: Option<String>,
}

/// A client for one container.
#[derive(Clone)]
pub struct ContainerClient {
    pipeline: Arc<Pipeline>,
    name: String,
}

impl ContainerClient {
    /// The back-off of the container's account, shared by the clients given the same
    /// [`crate::pacing::Governors`].
    pub fn governor(&self) -> Arc<crate::pacing::Governor> {
        self.pipeline.governor("")
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn container_request(&self, operation: &'static str, method: Method) -> Request {
        Request::new(
            operation,
            describe("container", &self.name),
            method,
            self.name.clone(),
        )
        .query("restype", "container")
    }

    /// A request on blob `blob`, its name checked and encoded segment by segment (a `/` in a
    /// name stays a `/`, as the service's virtual folders expect).
    fn blob_request(
        &self,
        operation: &'static str,
        method: Method,
        blob: &str,
    ) -> Result<Request, StorageError> {
        let resource = describe("blob", &format!("{}/{blob}", self.name));
        validate_blob_name(blob).map_err(|e| {
            StorageError::invalid_request(operation, resource.clone(), e.to_string())
        })?;
        let path = blob
            .split('/')
            .map(encode_component)
            .collect::<Vec<_>>()
            .join("/");
        Ok(Request::new(
            operation,
            resource,
            method,
            format!("{}/{path}", self.name),
        ))
    }

    /// Creates the container; `false` when it existed (with `if_not_exists`), an error otherwise.
    pub async fn create(&self, if_not_exists: bool) -> Result<bool, StorageError> {
        match self
            .pipeline
            .send(self.container_request("create container", Method::PUT))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if if_not_exists && e.reason() == crate::Reason::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the container and every blob in it.
    pub async fn delete(&self) -> Result<(), StorageError> {
        self.pipeline
            .send(self.container_request("delete container", Method::DELETE))
            .await
            .map(drop)
    }

    /// Writes `body` as block blob `blob` in one request (replacing what was there); its etag.
    pub async fn put(
        &self,
        blob: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<String, StorageError> {
        let request = self.blob_request("put blob", Method::PUT, blob)?;
        if body.len() > MAX_SINGLE_PUT {
            return Err(StorageError::invalid_request(
                "put blob",
                request.resource,
                format!(
                    "{} bytes is more than one request takes ({MAX_SINGLE_PUT}); write it in blocks",
                    body.len()
                ),
            ));
        }
        let request = request
            .header("x-ms-blob-type", "BlockBlob")
            .body(content_type, body);
        let response = self.pipeline.send(request).await?;
        Ok(response.header("etag").unwrap_or_default().to_string())
    }

    /// Uploads one block of blob `blob` (not yet part of it: see [`Self::commit_blocks`]).
    pub async fn put_block(
        &self,
        blob: &str,
        block_id: &str,
        body: Vec<u8>,
    ) -> Result<(), StorageError> {
        let request = self
            .blob_request("put block", Method::PUT, blob)?
            .query("comp", "block")
            .query("blockid", block_id)
            .body("application/octet-stream", body);
        self.pipeline.send(request).await.map(drop)
    }

    /// Makes blob `blob` the blocks `block_ids`, in that order; its etag.
    pub async fn commit_blocks(
        &self,
        blob: &str,
        block_ids: &[String],
        content_type: &str,
    ) -> Result<String, StorageError> {
        let request = self.blob_request("put block list", Method::PUT, blob)?;
        let body = xml::block_list_body(block_ids).map_err(|why| {
            StorageError::invalid_request("put block list", request.resource.clone(), why)
        })?;
        let request = request
            .query("comp", "blocklist")
            .header("x-ms-blob-content-type", content_type)
            .body("application/xml", body.into_bytes());
        let response = self.pipeline.send(request).await?;
        Ok(response.header("etag").unwrap_or_default().to_string())
    }

    /// Writes `body` as blob `blob`: in one request when it is small, else in blocks committed
    /// together (a reader never sees a part of it). Writing it again replaces it whole.
    pub async fn upload(
        &self,
        blob: &str,
        body: Vec<u8>,
        content_type: &str,
        options: UploadOptions,
    ) -> Result<String, StorageError> {
        if body.len() <= options.single_put_limit.min(MAX_SINGLE_PUT) {
            return self.put(blob, body, content_type).await;
        }
        let block_size = options.block_size.clamp(1, MAX_BLOCK);
        let blocks = body.len().div_ceil(block_size);
        if blocks > MAX_BLOCKS {
            return Err(StorageError::invalid_request(
                "put block list",
                describe("blob", &format!("{}/{blob}", self.name)),
                format!("{blocks} blocks is more than a blob takes ({MAX_BLOCKS})"),
            ));
        }
        let mut ids = Vec::with_capacity(blocks);
        for (index, chunk) in body.chunks(block_size).enumerate() {
            // Ids of one length for every block of a blob, as the service requires.
            let id = base64::engine::general_purpose::STANDARD.encode(format!("{index:08}"));
            self.put_block(blob, &id, chunk.to_vec()).await?;
            ids.push(id);
        }
        self.commit_blocks(blob, &ids, content_type).await
    }

    /// Reads blob `blob` whole.
    pub async fn get(&self, blob: &str) -> Result<Vec<u8>, StorageError> {
        let request = self.blob_request("get blob", Method::GET, blob)?;
        Ok(self.pipeline.send(request).await?.body)
    }

    /// Reads `length` bytes of blob `blob` from `offset` (fewer at its end).
    pub async fn get_range(
        &self,
        blob: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, StorageError> {
        let request = self.blob_request("get blob", Method::GET, blob)?;
        if length == 0 {
            return Ok(Vec::new());
        }
        let request = request.header(
            "x-ms-range",
            format!("bytes={offset}-{}", offset + length - 1),
        );
        Ok(self.pipeline.send(request).await?.body)
    }

    /// The blob's size, etag and content type.
    pub async fn properties(&self, blob: &str) -> Result<BlobProperties, StorageError> {
        let request = self.blob_request("get blob properties", Method::HEAD, blob)?;
        let resource = request.resource.clone();
        let response = self.pipeline.send(request).await?;
        let size = response
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                StorageError::invalid_response(
                    "get blob properties",
                    resource,
                    "no Content-Length in the answer",
                )
            })?;
        Ok(BlobProperties {
            size,
            etag: response.header("etag").unwrap_or_default().to_string(),
            content_type: response.header("content-type").map(str::to_string),
        })
    }

    /// One page of the blobs whose names start with `prefix`, from `marker` (the previous
    /// page's); the next page's marker, `None` after the last.
    pub async fn list_page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        max_results: u32,
    ) -> Result<(Vec<BlobItem>, Option<String>), StorageError> {
        let mut request = self
            .container_request("list blobs", Method::GET)
            .query("comp", "list")
            .query("maxresults", max_results.clamp(1, 5000).to_string());
        if !prefix.is_empty() {
            request = request.query("prefix", prefix);
        }
        if let Some(marker) = marker {
            request = request.query("marker", marker);
        }
        let resource = request.resource.clone();
        let response = self.pipeline.send(request).await?;
        xml::parse_blob_list(&response.body)
            .map_err(|why| StorageError::invalid_response("list blobs", resource, why))
    }

    /// Every blob whose name starts with `prefix`, in name order.
    pub async fn list_all(&self, prefix: &str) -> Result<Vec<BlobItem>, StorageError> {
        let mut all = Vec::new();
        let mut marker = None;
        loop {
            let (page, next) = self.list_page(prefix, marker.as_deref(), 5000).await?;
            all.extend(page);
            match next {
                Some(next) => marker = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// Deletes blob `blob`.
    pub async fn delete_blob(&self, blob: &str) -> Result<(), StorageError> {
        let request = self.blob_request("delete blob", Method::DELETE, blob)?;
        self.pipeline.send(request).await.map(drop)
    }
}
