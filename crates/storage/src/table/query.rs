//! One query over a table: its filter, projection and page size, and the continuation that
//! resumes it.

use serde::{Deserialize, Serialize};

use super::entity::Entity;
use super::filter::Filter;

/// The service returns at most this many entities per page.
pub const MAX_PAGE_SIZE: u16 = 1000;

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Which entities; `None` reads all.
    pub filter: Option<Filter>,
    /// Which properties; `None` reads all. PartitionKey and RowKey are always added.
    pub select: Option<Vec<String>>,
    /// Entities per page, 1 to 1000; `None` lets the service choose (1000).
    pub top: Option<u16>,
}

impl Query {
    /// All entities that match `filter`.
    pub fn filtered(filter: Filter) -> Self {
        Query {
            filter: Some(filter),
            ..Query::default()
        }
    }

    /// Sets the page size.
    pub fn top(mut self, top: u16) -> Self {
        self.top = Some(top);
        self
    }

    /// Sets the projection.
    pub fn select(mut self, properties: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.select = Some(properties.into_iter().map(Into::into).collect());
        self
    }
}

/// Where the next page of a query starts. The values are opaque tokens of the service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Continuation {
    #[serde(rename = "npk")]
    pub next_partition_key: String,
    /// Absent when the service sent only a partition token: then none must be sent back.
    #[serde(rename = "nrk", default, skip_serializing_if = "Option::is_none")]
    pub next_row_key: Option<String>,
}

/// One page of results.
#[derive(Debug, Clone)]
pub struct Page {
    pub entities: Vec<Entity>,
    /// `Some` when the query has more: possibly even when this page is short or empty.
    pub continuation: Option<Continuation>,
}

/// Reads every page of a query, each from where the last ended, and returns all entities:
/// `page` reads one page starting at the continuation it is given.
pub async fn all_pages<F, Fut>(mut page: F) -> Result<Vec<Entity>, crate::StorageError>
where
    F: FnMut(Option<Continuation>) -> Fut,
    Fut: std::future::Future<Output = Result<Page, crate::StorageError>>,
{
    let mut entities = Vec::new();
    let mut continuation = None;
    loop {
        let next = page(continuation.take()).await?;
        entities.extend(next.entities);
        match next.continuation {
            Some(more) => continuation = Some(more),
            None => return Ok(entities),
        }
    }
}
