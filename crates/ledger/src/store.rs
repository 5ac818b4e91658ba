//! Where the ledger keeps its rows: a table of a storage account, or a table in memory that
//! answers the same calls with the service's semantics. The ledger is written once against
//! this interface, so the claim, lease and finish races run as unit tests on the in-memory
//! table (with its clock moved on demand), and the ledger benchmark runs without storage.
//!
//! An enum rather than a trait object: two implementations, both known here, and no boxed
//! futures on the path of every ledger request.

use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::in_memory::InMemoryTable;
use tablescan_storage::table::query::{all_pages, Continuation, Page, Query};
use tablescan_storage::table::WriteMode;
use tablescan_storage::{StorageError, TableClient};

/// The ledger's table.
#[derive(Clone)]
pub enum LedgerTable {
    Storage(TableClient),
    Memory(InMemoryTable),
}

/// Calls `$call` with the same arguments on whichever table this is.
macro_rules! on_table {
    ($self:ident . $call:ident ( $($arg:expr),* )) => {
        match $self {
            LedgerTable::Storage(table) => table.$call($($arg),*).await,
            LedgerTable::Memory(table) => table.$call($($arg),*).await,
        }
    };
}

impl LedgerTable {
    pub fn name(&self) -> &str {
        match self {
            LedgerTable::Storage(table) => table.name(),
            LedgerTable::Memory(table) => table.name(),
        }
    }

    pub async fn create_if_missing(&self) -> Result<bool, StorageError> {
        on_table!(self.create_if_missing())
    }

    pub async fn get_entity(
        &self,
        partition_key: &str,
        row_key: &str,
    ) -> Result<Option<Entity>, StorageError> {
        on_table!(self.get_entity(partition_key, row_key))
    }

    /// Inserts `entity`; refused (409, already exists) if its row is there.
    pub async fn insert(&self, entity: &Entity) -> Result<String, StorageError> {
        on_table!(self.insert(entity))
    }

    pub async fn upsert(&self, entity: &Entity, mode: WriteMode) -> Result<String, StorageError> {
        on_table!(self.upsert(entity, mode))
    }

    pub async fn update(
        &self,
        entity: &Entity,
        mode: WriteMode,
        if_match: &IfMatch,
    ) -> Result<String, StorageError> {
        on_table!(self.update(entity, mode, if_match))
    }

    pub async fn delete(
        &self,
        partition_key: &str,
        row_key: &str,
        if_match: &IfMatch,
    ) -> Result<(), StorageError> {
        on_table!(self.delete(partition_key, row_key, if_match))
    }

    pub async fn submit_transaction(
        &self,
        operations: &[Operation],
    ) -> Result<Vec<Option<String>>, StorageError> {
        on_table!(self.submit_transaction(operations))
    }

    pub async fn query_page(
        &self,
        query: &Query,
        continuation: Option<&Continuation>,
    ) -> Result<Page, StorageError> {
        on_table!(self.query_page(query, continuation))
    }

    /// Every page of a query.
    pub async fn query_all(&self, query: &Query) -> Result<Vec<Entity>, StorageError> {
        all_pages(|from| async move { self.query_page(query, from.as_ref()).await }).await
    }
}
