//! The Table service: tables, entity queries, single-entity writes and transactions.

pub mod batch;
pub mod entity;
pub mod filter;
pub mod filter_text;
pub mod in_memory;
mod matching;
pub mod query;
#[cfg(test)]
mod unreachable_tests;

use std::sync::Arc;

use reqwest::Method;

use self::batch::{IfMatch, Operation};
use self::entity::Entity;
use self::filter::MAX_COMPARISONS;
use self::query::{Continuation, Page, Query, MAX_PAGE_SIZE};
use super::authorize::Service;
use super::connection_string::StorageAccount;
use super::encoding::{encode_component, entity_path};
use super::error::{describe, describe_entity, ErrorKind, ServiceError, StorageError};
use super::names::{validate_key, validate_table_name, KeyKind};
use super::pipeline::{ClientOptions, Pipeline, Request, Response};
use super::reason::{Missing, Reason};

const ACCEPT_MINIMAL: &str = "application/json;odata=minimalmetadata";

/// How a write treats the properties the entity already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// The entity afterwards has exactly the properties sent.
    Replace,
    /// The properties sent are added to or overwrite the existing ones; others stay.
    Merge,
}

/// A client for the Table service of one account.
#[derive(Clone)]
pub struct TableServiceClient {
    pipeline: Arc<Pipeline>,
}

impl TableServiceClient {
    /// A client for the account's table endpoint.
    pub fn new(account: &StorageAccount, options: ClientOptions) -> Result<Self, StorageError> {
        let endpoint = account.table_endpoint().cloned().ok_or_else(|| {
            StorageError::invalid_request(
                "create client",
                "storage account",
                "the connection string has no table endpoint",
            )
        })?;
        Ok(TableServiceClient {
            pipeline: Arc::new(Pipeline::new(account, endpoint, Service::Table, options)?),
        })
    }

    /// The service's base URL (which account, for telling two clients' storage apart).
    pub fn endpoint(&self) -> &str {
        self.pipeline.endpoint().as_str()
    }

    /// A client for one table; the name is checked here, the table is not contacted.
    pub fn table(&self, name: &str) -> Result<TableClient, StorageError> {
        validate_table_name(name).map_err(|e| {
            StorageError::invalid_request("open table", describe("table", name), e.to_string())
        })?;
        Ok(TableClient {
            pipeline: self.pipeline.clone(),
            name: name.to_string(),
        })
    }

    /// Creates a table. Returns `false` when it already existed and `exists_ok` is set.
    pub async fn create_table(&self, name: &str, exists_ok: bool) -> Result<bool, StorageError> {
        self.table(name)?;
        let body = serde_json::json!({ "TableName": name })
            .to_string()
            .into_bytes();
        let request = table_request(
            "create table",
            describe("table", name),
            Method::POST,
            "Tables".into(),
        )
        .header("prefer", "return-no-content")
        .body("application/json", body)
        .idempotent(exists_ok);
        match self.pipeline.send(request).await {
            Ok(_) => Ok(true),
            Err(e) if exists_ok && e.reason() == Reason::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes a table and everything in it.
    pub async fn delete_table(&self, name: &str) -> Result<(), StorageError> {
        self.table(name)?;
        let path = format!("Tables('{}')", encode_component(name));
        let request = table_request(
            "delete table",
            describe("table", name),
            Method::DELETE,
            path,
        );
        self.pipeline.send(request).await.map(drop)
    }
}

/// A client for one table.
#[derive(Clone)]
pub struct TableClient {
    pipeline: Arc<Pipeline>,
    name: String,
}

impl TableClient {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn resource(&self) -> String {
        describe("table", &self.name)
    }

    /// The back-off of the table's account, shared by the clients given the same
    /// [`crate::pacing::Governors`].
    pub fn governor(&self) -> Arc<crate::pacing::Governor> {
        self.pipeline.governor("")
    }

    /// Creates this table if it does not exist; returns whether it was created.
    pub async fn create_if_missing(&self) -> Result<bool, StorageError> {
        TableServiceClient {
            pipeline: self.pipeline.clone(),
        }
        .create_table(&self.name, true)
        .await
    }

    /// Reads one page of a query, starting at `continuation` when given.
    ///
    /// The page may be short, or even empty, while the query still has more: only a missing
    /// continuation means the end.
    pub async fn query_page(
        &self,
        query: &Query,
        continuation: Option<&Continuation>,
    ) -> Result<Page, StorageError> {
        const OP: &str = "query entities";
        let refuse = |why: String| Err(StorageError::invalid_request(OP, self.resource(), why));
        let mut request =
            table_request(OP, self.resource(), Method::GET, format!("{}()", self.name));
        if let Some(filter) = &query.filter {
            if filter.comparisons() > MAX_COMPARISONS {
                return refuse(format!(
                    "the filter has {} comparisons; the service allows {MAX_COMPARISONS}",
                    filter.comparisons()
                ));
            }
            request = request.query("$filter", filter.as_str());
        }
        if let Some(select) = &query.select {
            let mut names: Vec<&str> = vec!["PartitionKey", "RowKey"];
            for name in select {
                if let Err(e) = filter::Property::new(name) {
                    return refuse(e.to_string());
                }
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
            request = request.query("$select", names.join(","));
        }
        if let Some(top) = query.top {
            if !(1..=MAX_PAGE_SIZE).contains(&top) {
                return refuse(format!(
                    "the page size must be 1 to {MAX_PAGE_SIZE}, not {top}"
                ));
            }
            request = request
                .query("$top", top.to_string())
                .entities(u64::from(top));
        }
        if let Some(c) = continuation {
            request = request.query("NextPartitionKey", c.next_partition_key.clone());
            if let Some(rk) = &c.next_row_key {
                request = request.query("NextRowKey", rk.clone());
            }
        }
        let response = self.pipeline.send(request).await?;
        let entities = entity::decode_page(&response.body)
            .map_err(|why| StorageError::invalid_response(OP, self.resource(), why))?;
        let continuation = response
            .header("x-ms-continuation-nextpartitionkey")
            .map(|pk| Continuation {
                next_partition_key: pk.to_string(),
                next_row_key: response
                    .header("x-ms-continuation-nextrowkey")
                    .filter(|rk| !rk.is_empty())
                    .map(str::to_string),
            });
        Ok(Page {
            entities,
            continuation,
        })
    }

    /// Reads every page of a query.
    pub async fn query_all(&self, query: &Query) -> Result<Vec<Entity>, StorageError> {
        query::all_pages(|from| async move { self.query_page(query, from.as_ref()).await }).await
    }

    /// Reads one entity by its keys; `None` when it does not exist.
    pub async fn get_entity(
        &self,
        partition_key: &str,
        row_key: &str,
    ) -> Result<Option<Entity>, StorageError> {
        const OP: &str = "get entity";
        let resource = describe_entity(&self.name, partition_key, row_key);
        check_keys(OP, &resource, partition_key, row_key)?;
        let path = entity_path(&self.name, partition_key, row_key);
        let request = table_request(OP, resource.clone(), Method::GET, path);
        let response = match self.pipeline.send(request).await {
            Ok(response) => response,
            Err(e) if matches!(e.reason(), Reason::NotFound(m) if m != Missing::Table) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let object = serde_json::from_slice(&response.body).map_err(|e| {
            StorageError::invalid_response(OP, resource.clone(), format!("not valid JSON: {e}"))
        })?;
        let mut entity = Entity::from_json(object)
            .map_err(|why| StorageError::invalid_response(OP, resource, why))?;
        if entity.etag.is_none() {
            entity.etag = response.header("etag").map(str::to_string);
        }
        Ok(Some(entity))
    }

    /// Inserts an entity that must not exist yet; returns its etag.
    pub async fn insert(&self, entity: &Entity) -> Result<String, StorageError> {
        const OP: &str = "insert entity";
        let resource = describe_entity(&self.name, &entity.partition_key, &entity.row_key);
        check_keys(OP, &resource, &entity.partition_key, &entity.row_key)?;
        let request = table_request(OP, resource, Method::POST, self.name.clone())
            .header("prefer", "return-no-content")
            .body("application/json", entity.to_json().into_bytes());
        let response = self.pipeline.send(request).await?;
        Ok(etag_of(&response))
    }

    /// Creates or overwrites an entity; returns its etag.
    pub async fn upsert(&self, entity: &Entity, mode: WriteMode) -> Result<String, StorageError> {
        self.write(entity, mode, None).await
    }

    /// Overwrites an existing entity under a condition; returns its new etag.
    pub async fn update(
        &self,
        entity: &Entity,
        mode: WriteMode,
        if_match: &IfMatch,
    ) -> Result<String, StorageError> {
        self.write(entity, mode, Some(if_match)).await
    }

    async fn write(
        &self,
        entity: &Entity,
        mode: WriteMode,
        if_match: Option<&IfMatch>,
    ) -> Result<String, StorageError> {
        let op = match (mode, if_match) {
            (WriteMode::Replace, None) => "insert or replace entity",
            (WriteMode::Merge, None) => "insert or merge entity",
            (WriteMode::Replace, Some(_)) => "update entity",
            (WriteMode::Merge, Some(_)) => "merge entity",
        };
        let resource = describe_entity(&self.name, &entity.partition_key, &entity.row_key);
        check_keys(op, &resource, &entity.partition_key, &entity.row_key)?;
        let method = match mode {
            WriteMode::Replace => Method::PUT,
            WriteMode::Merge => merge_method(),
        };
        let path = entity_path(&self.name, &entity.partition_key, &entity.row_key);
        let mut request = table_request(op, resource, method, path)
            .body("application/json", entity.to_json().into_bytes());
        if let Some(condition) = if_match {
            // Repeating a conditional write that was applied fails its own condition.
            request = request
                .header("if-match", condition.header())
                .idempotent(*condition == IfMatch::Any);
        }
        let response = self.pipeline.send(request).await?;
        Ok(etag_of(&response))
    }

    /// Deletes an entity under a condition.
    pub async fn delete(
        &self,
        partition_key: &str,
        row_key: &str,
        if_match: &IfMatch,
    ) -> Result<(), StorageError> {
        const OP: &str = "delete entity";
        let resource = describe_entity(&self.name, partition_key, row_key);
        check_keys(OP, &resource, partition_key, row_key)?;
        let path = entity_path(&self.name, partition_key, row_key);
        let request = table_request(OP, resource, Method::DELETE, path)
            .header("if-match", if_match.header())
            .idempotent(*if_match == IfMatch::Any);
        self.pipeline.send(request).await.map(drop)
    }

    /// Applies up to 100 writes to one partition atomically; returns each operation's etag
    /// (`None` for deletes). On failure nothing was applied and the error names the index of
    /// the operation that failed.
    pub async fn submit_transaction(
        &self,
        operations: &[Operation],
    ) -> Result<Vec<Option<String>>, StorageError> {
        const OP: &str = "submit transaction";
        let resource = self.resource();
        let table_url = self.pipeline.endpoint().join(&self.name);
        let encoded = batch::encode(&table_url, &self.name, operations)
            .map_err(|why| StorageError::invalid_request(OP, resource.clone(), why))?;
        let request = table_request(OP, resource.clone(), Method::POST, "$batch".into())
            .body(encoded.content_type, encoded.body)
            .idempotent(encoded.idempotent)
            .entities(operations.len() as u64);
        let response = self.pipeline.send(request).await?;
        let text = String::from_utf8_lossy(&response.body);
        let parts = batch::parse_response(&text);
        if let Some(failed) = parts.iter().find(|p| !(200..300).contains(&p.status)) {
            let (code, message) = super::pipeline::parse_error_body(failed.body.as_bytes());
            let index = batch::failed_index(&message, failed.content_id);
            let message = message
                .split_once(':')
                .filter(|(n, _)| n.parse::<usize>().is_ok())
                .map_or(message.clone(), |(_, m)| m.to_string());
            let error = ServiceError {
                status: failed.status,
                code,
                message,
                request_id: response.header("x-ms-request-id").map(str::to_string),
            };
            return Err(StorageError::new(
                OP,
                resource,
                ErrorKind::Batch { index, error },
            ));
        }
        if parts.len() != operations.len() {
            return Err(StorageError::invalid_response(
                OP,
                resource,
                format!(
                    "{} operations were sent but {} answers came back",
                    operations.len(),
                    parts.len()
                ),
            ));
        }
        Ok(parts
            .into_iter()
            .zip(operations)
            .map(|(part, op)| match op {
                Operation::Delete { .. } => None,
                _ => part.etag,
            })
            .collect())
    }
}

/// A Table request with the headers every Table operation needs.
fn table_request(
    operation: &'static str,
    resource: String,
    method: Method,
    path: String,
) -> Request {
    Request::new(operation, resource, method, path)
        .header("accept", ACCEPT_MINIMAL)
        .header("dataserviceversion", "3.0;NetFx")
        .header("maxdataserviceversion", "3.0;NetFx")
}

fn merge_method() -> Method {
    Method::from_bytes(b"MERGE").expect("MERGE is a valid method token")
}

fn etag_of(response: &Response) -> String {
    response.header("etag").unwrap_or_default().to_string()
}

fn check_keys(
    op: &'static str,
    resource: &str,
    partition_key: &str,
    row_key: &str,
) -> Result<(), StorageError> {
    validate_key(KeyKind::PartitionKey, partition_key)
        .and_then(|()| validate_key(KeyKind::RowKey, row_key))
        .map_err(|e| StorageError::invalid_request(op, resource, e.to_string()))
}
