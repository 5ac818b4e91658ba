//! What the ledger keeps of an export: the `blob:<item>` rows its steps' finishes recorded
//! (read a page at a time to write the manifest's parts), and the marks on the scan row of its
//! manifest written or failing. The forms of these are in `exports`.

use time::OffsetDateTime;

use super::exports::{BlobEntry, BLOBS_PER_PART};
use super::ledger::{Ledger, LedgerError, ScanRecord};
use super::rows::{self, SCAN_ROW};
use tablescan_storage::table::batch::IfMatch;
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::query::{Continuation, Query};
use tablescan_storage::table::WriteMode;

impl Ledger {
    /// One page of the blobs recorded for scan `scan` (at most [`BLOBS_PER_PART`]), from
    /// `from` (the previous page's continuation); the next page's, `None` after the last.
    pub async fn recorded_blobs(
        &self,
        scan: &str,
        from: Option<&Continuation>,
    ) -> Result<(Vec<BlobEntry>, Option<Continuation>), LedgerError> {
        let query = Query::filtered(rows::rows_of(scan, rows::blob_range()))
            .select(["name", "rows", "bytes", "sha256"])
            .top(BLOBS_PER_PART as u16);
        let page = self.table().query_page(&query, from).await?;
        let entries = page
            .entities
            .iter()
            .map(|e| {
                BlobEntry::from_entity(e).ok_or_else(|| {
                    LedgerError::Corrupt(
                        format!("scan {scan}"),
                        format!("{} is not a blob record", e.row_key),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((entries, page.continuation))
    }

    /// Records that writing scan `scan`'s manifest failed at `now` (its record `record` as
    /// read before the attempt); gives up, failing the scan, once attempts have failed for
    /// `give_up_after`. Returns whether it gave up.
    pub async fn note_manifest_failure(
        &self,
        record: &ScanRecord,
        error: &str,
        now: OffsetDateTime,
        give_up_after: time::Duration,
    ) -> Result<bool, LedgerError> {
        let merge = record
            .manifest_trouble
            .failed_attempt(&record.id, error, now, give_up_after);
        let gave_up = merge.properties.contains_key("manifestGaveUpAt");
        self.table()
            .update(&merge, WriteMode::Merge, &IfMatch::Any)
            .await?;
        Ok(gave_up)
    }

    /// Lets scan `scan`'s manifest be tried again after the scan gave up on it (a retry).
    pub async fn clear_manifest_trouble(
        &self,
        scan: &str,
        now: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        self.table()
            .update(
                &rows::ManifestTrouble::cleared(scan, now),
                WriteMode::Merge,
                &IfMatch::Any,
            )
            .await?;
        Ok(())
    }

    /// Records that scan `scan`'s manifest was written.
    pub async fn mark_manifest_written(
        &self,
        scan: &str,
        at: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        let row = Entity::new(scan, SCAN_ROW).with("manifestWrittenAt", rows::date_value(at));
        self.table()
            .update(&row, WriteMode::Merge, &IfMatch::Any)
            .await?;
        Ok(())
    }
}
