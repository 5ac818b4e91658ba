//! What the scan engine needs from a table: one page of a key range.

use std::future::Future;

use super::keys::{partition_filter, range_filter, KeyRange};
use tablescan_storage::table::filter::Filter;
use tablescan_storage::table::query::{Continuation, Page, Query};
use tablescan_storage::{StorageError, TableClient};

/// The keys one query covers.
#[derive(Debug, Clone, Copy)]
pub enum ReadScope<'a> {
    /// Rows whose PartitionKey lies in the range.
    Range(&'a KeyRange),
    /// Rows of one partition whose RowKey lies in the range.
    Partition {
        partition_key: &'a str,
        row_keys: &'a KeyRange,
    },
}

/// One page request.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest<'a> {
    pub scope: ReadScope<'a>,
    /// Rows per page, 1 to 1000.
    pub top: u16,
    /// Properties besides the keys; `None` for all of them, an empty list for keys only.
    pub columns: Option<&'a [String]>,
    /// Where a query already under way resumes.
    pub cursor: Option<&'a Continuation>,
    /// The scan's own condition on rows, if any, applied by the service together with the keys
    /// (a page may then come back short or empty, with a continuation, where few rows match).
    pub filter: Option<&'a Filter>,
    /// The query budget of the step (or of its piece, for pieces read side by side) ends with
    /// this page: no page of it follows (a paced reader then reserves no share for one).
    pub last: bool,
}

/// A table the scan engine can read, one page at a time. Pages come back in key order; a page
/// may be short, or empty, and still have a continuation.
pub trait TableReader: Sync {
    fn read_page(
        &self,
        request: &PageRequest<'_>,
    ) -> impl Future<Output = Result<Page, StorageError>> + Send;
}

impl TableReader for TableClient {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        let filter = match request.scope {
            ReadScope::Range(range) => range_filter(range),
            ReadScope::Partition {
                partition_key,
                row_keys,
            } => Some(partition_filter(partition_key, row_keys)),
        };
        let filter = match (filter, request.filter) {
            (Some(keys), Some(rows)) => Some(keys.and(rows.clone())),
            (keys, rows) => keys.or_else(|| rows.cloned()),
        };
        let query = Query {
            filter,
            select: request.columns.map(<[String]>::to_vec),
            top: Some(request.top),
        };
        self.query_page(&query, request.cursor).await
    }
}
