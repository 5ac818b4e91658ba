//! The scans that may still have work to do. A scan whose messages were all lost has nobody
//! left to notice it: no step runs, and perhaps nobody reads its status. The timer function
//! (`RedriveScans`) looks at every scan listed here, sends its stranded work items again, and
//! takes the scan off the list once it has settled, so the list stays as short as the number
//! of scans in flight however long the ledger's history grows.

use super::ledger::{Ledger, LedgerError};
use crate::storage::table::batch::IfMatch;
use crate::storage::table::entity::Entity;
use crate::storage::table::filter::{Comparison, Filter};
use crate::storage::table::query::Query;
use crate::storage::table::WriteMode;

/// The ledger partition that lists the scans in flight, one row per scan id.
pub(crate) const ACTIVE_PARTITION: &str = "~active";

impl Ledger {
    /// Lists scan `id` as in flight. Written before the scan itself, so that a scan can never
    /// exist unlisted; a listing whose scan was never created is dropped by the next sweep.
    pub(crate) async fn list_active(&self, id: &str) -> Result<(), LedgerError> {
        self.table()
            .upsert(&Entity::new(ACTIVE_PARTITION, id), WriteMode::Replace)
            .await?;
        Ok(())
    }

    /// The ids of the scans listed as in flight (in id order, which is no particular order).
    pub async fn active_scans(&self) -> Result<Vec<String>, LedgerError> {
        let query = Query::filtered(Filter::partition_key(Comparison::Eq, ACTIVE_PARTITION))
            .select(["RowKey"]);
        match self.table().query_all(&query).await {
            Ok(entries) => Ok(entries.into_iter().map(|e| e.row_key).collect()),
            // No scan was ever started here.
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes scan `id` off the list: it succeeded, failed, was cancelled or does not exist.
    pub async fn settle(&self, id: &str) -> Result<(), LedgerError> {
        match self
            .table()
            .delete(ACTIVE_PARTITION, id, &IfMatch::Any)
            .await
        {
            Err(e) if !e.is_not_found() => Err(e.into()),
            _ => Ok(()),
        }
    }
}
