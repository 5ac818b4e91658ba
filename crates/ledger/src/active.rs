//! The scans that may still have work to do. A scan whose messages were all lost has nobody
//! left to notice it: no step runs, and perhaps nobody reads its status. The timer function
//! (`RedriveScans`) looks at every scan listed here, sends its stranded work items again, and
//! takes the scan off the list once it has settled, so the list stays as short as the number
//! of scans in flight however long the ledger's history grows. (A scan is listed by the ledger's
//! own writes, `Ledger::list_active` in `ledger::scans`: its creation, a cancel, a retry.)

use time::{Duration, OffsetDateTime};

use super::ledger::{Ledger, LedgerError, ACTIVE_PARTITION};
use tablescan_storage::table::batch::IfMatch;
use tablescan_storage::table::entity::EdmDateTime;
use tablescan_storage::table::filter::{Comparison, Filter};
use tablescan_storage::table::query::Query;

/// How long an entry whose scan does not exist is kept: far longer than a start takes from
/// writing the entry to recording the scan.
pub const CREATION_GRACE: Duration = Duration::minutes(10);

impl Ledger {
    /// The ids of the scans listed as in flight (in id order, which is no particular order).
    pub async fn active_scans(&self) -> Result<Vec<String>, LedgerError> {
        Ok(self.listings().await?.into_iter().map(|l| l.id).collect())
    }

    /// The entries of the scans listed as in flight, each as read (for [`Ledger::settle`]).
    pub async fn listings(&self) -> Result<Vec<Listing>, LedgerError> {
        let query = Query::filtered(Filter::partition_key(Comparison::Eq, ACTIVE_PARTITION))
            .select(["RowKey", "Timestamp"]);
        match self.table().query_all(&query).await {
            Ok(entries) => Ok(entries
                .into_iter()
                .map(|e| Listing {
                    listed_at: e.timestamp.as_ref().map(EdmDateTime::time),
                    etag: e.etag.unwrap_or_default(),
                    id: e.row_key,
                })
                .collect()),
            // No scan was ever started here.
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes a scan off the list, as its entry was read: it succeeded, failed, was cancelled
    /// or does not exist. `false` when the entry was written again since (a retry, a cancel
    /// or a start listed the scan after the caller read the list and the scan's status): it
    /// stays, and the next sweep looks at the scan again.
    pub async fn settle(&self, listing: &Listing) -> Result<bool, LedgerError> {
        match self
            .table()
            .delete(
                ACTIVE_PARTITION,
                &listing.id,
                &IfMatch::Etag(listing.etag.clone()),
            )
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) if e.reason().is_gone_or_changed() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// A scan's entry in the list of scans in flight, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub id: String,
    etag: String,
    /// When the entry was last written.
    pub listed_at: Option<OffsetDateTime>,
}

impl Listing {
    /// Whether an entry whose scan does not exist may be taken off at `now`: a scan's entry is
    /// written before the scan itself, so a young one may belong to a scan being created.
    pub fn orphaned_at(&self, now: OffsetDateTime) -> bool {
        self.listed_at.is_none_or(|at| now - at >= CREATION_GRACE)
    }
}
